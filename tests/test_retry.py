"""The governed retry (SPEC 9): how an attempt ended, the backoff, and the reset times agents print."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from paella_tui.supervisor.agent.retry import (
    RESET_MARGIN_S,
    Wait,
    backoff_delay,
    classify,
    matched_pattern,
    parse_reset_time,
    retry_wait,
)
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited

TRANSIENT = ("rate limit", "429", "overloaded", "usage limit")
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")
# Thursday 15 January 2026, 4pm in New York (21:00 UTC, 22:00 in Paris, 06:00 the 16th in Tokyo).
NOW = datetime(2026, 1, 15, 16, 0, tzinfo=NEW_YORK).astimezone(UTC)


def exited(
    exit_code: int | None = 1,
    sig: int | None = None,
    tail: tuple[str, ...] = (),
    *,
    stopped_by_user: bool = False,
) -> AgentExited:
    return AgentExited(
        attempt=1, exit_code=exit_code, signal=sig, tail=tail, stopped_by_user=stopped_by_user
    )


def utc(
    year: int, month: int, day: int, hour: int, minute: int, *, tz: ZoneInfo | None = None
) -> datetime:
    """A wall-clock time in ``tz`` (default UTC) as an aware UTC datetime."""
    return datetime(year, month, day, hour, minute, tzinfo=tz or UTC).astimezone(UTC)


def astuple(wait: Wait) -> tuple[float, str]:
    return wait.seconds, wait.reason


def parse(text: str) -> datetime | None:
    return parse_reset_time(text, now=NOW, local_tz=NEW_YORK)


# --- classify ---------------------------------------------------------------------------------


def test_exit_zero_with_every_gate_green_is_done() -> None:
    assert classify(exited(0), all_gates_green=True, transient=TRANSIENT) == "done"


def test_exit_zero_with_red_gates_is_claimed_done() -> None:
    assert classify(exited(0), all_gates_green=False, transient=TRANSIENT) == "claimed-done"


def test_done_is_what_the_gates_say_even_after_a_stop() -> None:
    ending = classify(exited(0, stopped_by_user=True), all_gates_green=True, transient=TRANSIENT)
    assert ending == "done"


@pytest.mark.parametrize(
    ("code", "sig", "tail"),
    [
        (0, None, ()),  # an agent that exits 0 on SIGTERM claimed nothing
        (None, signal.SIGTERM, ()),
        (1, None, ("Error: rate limit exceeded",)),  # the user's choice beats the pattern
    ],
)
def test_a_stop_by_the_user_is_stopped(
    code: int | None, sig: int | None, tail: tuple[str, ...]
) -> None:
    ending = classify(
        exited(code, sig, tail, stopped_by_user=True), all_gates_green=False, transient=TRANSIENT
    )
    assert ending == "stopped"


@pytest.mark.parametrize(
    ("code", "sig", "line"),
    [
        (1, None, "API Error: 429 Too Many Requests"),
        (1, None, "Claude AI usage limit reached|1768525200"),
        (2, None, "the model is OVERLOADED, try later"),  # case-insensitive
        (None, signal.SIGKILL, "Rate Limit hit"),  # a signal with a pattern is transient too
    ],
)
def test_a_failure_with_a_transient_pattern_in_the_tail_is_transient(
    code: int | None, sig: int | None, line: str
) -> None:
    tail = ("working on src/ledger.py", line, "exiting")
    assert classify(exited(code, sig, tail), all_gates_green=False, transient=TRANSIENT) == (
        "transient"
    )


def test_a_signal_without_a_pattern_is_signal() -> None:
    ending = classify(
        exited(None, signal.SIGSEGV, ("Segmentation fault",)),
        all_gates_green=False,
        transient=TRANSIENT,
    )
    assert ending == "signal"


def test_a_non_zero_exit_without_a_pattern_is_a_crash() -> None:
    tail = ("Traceback (most recent call last):", "KeyError: 'event_id'")
    assert classify(exited(1, None, tail), all_gates_green=False, transient=TRANSIENT) == "crash"
    assert classify(exited(None, None), all_gates_green=False, transient=TRANSIENT) == "crash"


def test_without_contract_patterns_the_shared_limit_wording_still_counts() -> None:
    # The wording families every agent shares ("Too Many Requests", a 429 used as a status)
    # are known without the contract listing them; a traceback is still a crash.
    tail = ("429 Too Many Requests",)
    assert classify(exited(1, None, tail), all_gates_green=False, transient=()) == "transient"
    tail = ('File "app.py", line 429, in main', "ValueError: bad input")
    assert classify(exited(1, None, tail), all_gates_green=False, transient=()) == "crash"


def test_matched_pattern_names_the_pattern_as_the_contract_wrote_it() -> None:
    tail = ("ok", "HTTP 429: Rate Limit exceeded")
    assert matched_pattern(tail, TRANSIENT) == "rate limit"
    assert matched_pattern(tail, ("429", "rate limit")) == "429"
    assert matched_pattern(("all good",), TRANSIENT) is None
    assert matched_pattern((), TRANSIENT) is None


# --- backoff ----------------------------------------------------------------------------------


def test_backoff_doubles_per_failure_and_stops_at_the_cap() -> None:
    cfg = RetryConfig(backoff=30.0, max_backoff=900.0)
    waits = [backoff_delay(n, cfg) for n in range(1, 8)]
    assert waits == [30.0, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0]


def test_backoff_is_defined_for_odd_failure_counts() -> None:
    cfg = RetryConfig(backoff=10.0, max_backoff=60.0)
    assert backoff_delay(0, cfg) == 10.0
    assert backoff_delay(10_000, cfg) == 60.0


# --- reset times: Claude Code ---------------------------------------------------------------


def test_claude_epoch_after_a_pipe() -> None:
    reset = utc(2026, 1, 15, 23, 0)
    text = f"Claude AI usage limit reached|{int(reset.timestamp())}"
    assert parse(text) == reset


def test_claude_time_of_day_without_a_zone_is_local_and_rolls_to_tomorrow() -> None:
    # 3pm seen at 4pm is tomorrow's 3pm.
    assert parse("5-hour limit reached ∙ resets 3pm") == utc(2026, 1, 16, 15, 0, tz=NEW_YORK)
    assert parse("5-hour limit reached ∙ resets 5pm") == utc(2026, 1, 15, 17, 0, tz=NEW_YORK)


def test_claude_time_with_minutes_and_a_zone() -> None:
    # 22:00 in Paris now, so 3:50pm Paris is tomorrow.
    assert parse("resets 3:50pm (Europe/Paris)") == utc(2026, 1, 16, 15, 50, tz=PARIS)
    assert parse("resets 11:30pm (Europe/Paris)") == utc(2026, 1, 15, 23, 30, tz=PARIS)


def test_claude_resets_at_a_time_in_a_named_zone() -> None:
    assert parse("resets at 10pm (America/New_York)") == utc(2026, 1, 15, 22, 0, tz=NEW_YORK)


def test_a_named_zone_rolls_over_on_its_own_date() -> None:
    # 06:00 on the 16th in Tokyo: 11pm Tokyo is later that same Tokyo day.
    tokyo = ZoneInfo("Asia/Tokyo")
    assert parse("Opus limit reached ∙ resets 11pm (Asia/Tokyo)") == utc(
        2026, 1, 16, 23, 0, tz=tokyo
    )


def test_a_named_zone_keeps_its_summer_time() -> None:
    now = utc(2026, 7, 1, 10, 0)
    reset = parse_reset_time("resets 3:50pm (Europe/Paris)", now=now, local_tz=NEW_YORK)
    assert reset == utc(2026, 7, 1, 13, 50)  # CEST is UTC+2


def test_claude_weekly_reset_with_a_date() -> None:
    text = "Weekly limit reached ∙ resets Jan 17 at 10am (America/New_York)"
    assert parse(text) == utc(2026, 1, 17, 10, 0, tz=NEW_YORK)


# --- reset times: Codex CLI -----------------------------------------------------------------


def test_codex_try_again_at_a_local_time() -> None:
    text = (
        "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), "
        "or try again at 5:28 PM."
    )
    assert parse(text) == utc(2026, 1, 15, 17, 28, tz=NEW_YORK)
    assert parse("You've hit your usage limit. Try again at 3:28 PM.") == utc(
        2026, 1, 16, 15, 28, tz=NEW_YORK
    )


def test_codex_try_again_at_a_date_and_time() -> None:
    text = "You've hit your usage limit. Try again at Jan 17th, 2026 9:05 AM."
    assert parse(text) == utc(2026, 1, 17, 9, 5, tz=NEW_YORK)


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("You've hit your usage limit. Try again in 2 days 3 hours", timedelta(days=2, hours=3)),
        ("try again in 45 minutes", timedelta(minutes=45)),
        ("Try again in 1 day, 2 hours and 5 minutes.", timedelta(days=1, hours=2, minutes=5)),
        ("Limit reached: try again in 3h 54m", timedelta(hours=3, minutes=54)),
    ],
)
def test_codex_relative_try_again(text: str, delta: timedelta) -> None:
    assert parse(text) == NOW + delta


# --- reset times: Gemini CLI and HTTP ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("Your quota will reset after 1h49m8s.", timedelta(hours=1, minutes=49, seconds=8)),
        ("Quota exceeded for metric. Please retry in 12.5s.", timedelta(seconds=12.5)),
        ('      retryDelay: "38s"', timedelta(seconds=38)),
        (
            '{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "38s"}',
            timedelta(seconds=38),
        ),
        ("Retry-After: 120", timedelta(seconds=120)),
    ],
)
def test_gemini_and_http_delays(text: str, delta: timedelta) -> None:
    assert parse(text) == NOW + delta


def test_http_retry_after_as_a_date() -> None:
    assert parse("Retry-After: Thu, 15 Jan 2026 22:30:00 GMT") == utc(2026, 1, 15, 22, 30)


def test_utc_named_after_the_time() -> None:
    assert parse("resets 10:30 UTC") == utc(2026, 1, 16, 10, 30)


# --- reset times: what is not trusted -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "all 42 tests passed",
        "Error: 429 Too Many Requests",  # transient, but no time in it
        "resets 5 times",  # a count, not a time
        "resets 13pm",
        "resets 3:75pm",
        "resets 3pm (Mars/Olympus_Mons)",  # a zone we cannot place
        "Claude AI usage limit reached|1000000000",  # 2001: in the past
        "You've hit your usage limit. Try again at Jan 2nd, 2026 3:28 PM.",  # in the past
        "Retry-After: 0",
        "Retry-After: Mon, 01 Jan 2024 00:00:00 GMT",
        "| id | 1768525200 |",  # a number after a pipe, no limit in sight
    ],
)
def test_garbage_and_untrusted_resets_give_none(text: str) -> None:
    assert parse(text) is None


def test_the_newest_reset_in_the_output_wins() -> None:
    text = "resets 5pm\n... more work ...\nRetry-After: 120"
    assert parse(text) == NOW + timedelta(seconds=120)
    text = "Retry-After: 120\nresets 5pm"
    assert parse(text) == utc(2026, 1, 15, 17, 0, tz=NEW_YORK)


def test_without_local_tz_a_time_is_the_systems_local_time() -> None:
    reset = parse_reset_time("resets 5:15pm", now=NOW)
    assert reset is not None
    local = reset.astimezone()
    assert (local.hour, local.minute) == (17, 15)
    assert timedelta(0) < reset - NOW <= timedelta(days=1)


# --- retry_wait -------------------------------------------------------------------------------


def test_retry_wait_prefers_the_printed_reset_over_the_backoff() -> None:
    cfg = RetryConfig(backoff=30.0, max_backoff=900.0)
    tail = ("working", "5-hour limit reached ∙ resets 11:30pm (Europe/Paris)")
    wait, reason = astuple(retry_wait(1, cfg, tail, now=NOW, local_tz=NEW_YORK))
    assert wait == pytest.approx(90 * 60 + RESET_MARGIN_S)
    assert reason == "until 23:30 Europe/Paris, when the agent said its limit resets"


def test_retry_wait_honours_a_reset_shorter_than_the_backoff() -> None:
    cfg = RetryConfig(backoff=300.0, max_backoff=900.0)
    wait, reason = astuple(
        retry_wait(3, cfg, ("Please retry in 12.5s.",), now=NOW, local_tz=NEW_YORK)
    )
    assert wait == pytest.approx(12.5 + RESET_MARGIN_S)
    assert reason.startswith("until 16:00 local time")


def test_retry_wait_names_a_local_reset_and_its_day() -> None:
    cfg = RetryConfig()
    reason = retry_wait(1, cfg, ("Try again at 5:28 PM.",), now=NOW, local_tz=NEW_YORK).reason
    assert reason.startswith("until 17:28 local time")
    reason = retry_wait(1, cfg, ("Try again at 3:28 PM.",), now=NOW, local_tz=NEW_YORK).reason
    assert reason.startswith("until Fri 16 Jan 15:28 local time")


def test_retry_wait_falls_back_to_the_backoff() -> None:
    cfg = RetryConfig(backoff=30.0, max_backoff=900.0)
    tail = ("API Error: 429 Too Many Requests",)
    assert astuple(retry_wait(1, cfg, tail, now=NOW)) == (
        30.0,
        "backoff 30s (1st transient failure)",
    )
    assert astuple(retry_wait(2, cfg, tail, now=NOW)) == (
        60.0,
        "backoff 1m (2nd transient failure)",
    )
    assert astuple(retry_wait(3, cfg, tail, now=NOW)) == (
        120.0,
        "backoff 2m (3rd transient failure)",
    )
    assert astuple(retry_wait(7, cfg, tail, now=NOW)) == (
        900.0,
        "backoff 15m (7th transient failure)",
    )
