"""The rules that read an agent's failure: words, status codes in context, permanent kinds,
resets of any distance, the agents' own back-off, and what the profiles show and count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paella_tui.supervisor.agent.failure_words import (
    TRANSIENT_STATUS,
    find_permanent,
    find_transient,
    word_regex,
)
from paella_tui.supervisor.agent.profiles.registry import PROFILES
from paella_tui.supervisor.agent.reset_times import parse_reset_time
from paella_tui.supervisor.agent.retry import classify, read_failure, retry_wait
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited, Usage

CONTRACT = RetryConfig().transient
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def exited(*lines: str, code: int = 1, signals: bool = False) -> AgentExited:
    return AgentExited(
        attempt=1,
        exit_code=code,
        signal=None,
        tail=lines,
        signals=lines if signals else None,
    )


# --- words, not substrings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [
        ("rate limit", "Error: rate limit exceeded", True),
        ("rate limit", "Rate limited by the provider", True),
        ("rate limit", '{"type":"rate_limit_error"}', True),
        ("rate limit", "the rate-limit was hit", True),
        ("rate limit", "we celebrate limits", False),
        ("rate limit", "accurate limitations", False),
        ("overloaded", "overloaded_error", True),
        ("overloaded", "nonoverloaded path", False),
        ("usage limit", "usage_limit_reached", True),
        ("usage limit", "usage limitation docs", False),
        ("Too Many Requests", "429 Too Many Requests", True),
    ],
)
def test_patterns_match_as_words(pattern: str, text: str, found: bool) -> None:
    assert bool(word_regex(pattern).search(text)) is found


@pytest.mark.parametrize(
    "text",
    [
        "API Error: 429 {...}",
        "exceeded retry limit, last status: 429 Too Many Requests",
        '{"code": 429, "status": "RESOURCE_EXHAUSTED"}',
        '"api_error_status":429',
        "HTTP error: 429",
        "statusCode: 429",
        "429 Too Many Requests",
        "Error 429",
    ],
)
def test_a_number_pattern_is_a_status_code_where_the_text_uses_it_as_one(text: str) -> None:
    assert word_regex("429").search(text)


@pytest.mark.parametrize(
    "text",
    [
        'File "app.py", line 429, in main',
        "collected 429 items",
        "429 tests passed",
        "listening on port 4290",
        "request took 429ms",
        "invoice 14290 paid",
        "version 0.429.1",
        "at chunk.js:429:18",
    ],
)
def test_a_number_pattern_is_not_a_line_number_or_a_count(text: str) -> None:
    assert not word_regex("429").search(text)


@given(st.integers(min_value=1, max_value=99999))
def test_no_traceback_line_is_ever_a_limit(line: int) -> None:
    tail = (
        "Traceback (most recent call last):",
        f'  File "x.py", line {line}, in f',
        "KeyError: 1",
    )
    assert find_transient(tail, CONTRACT) is None
    assert classify(exited(*tail), all_gates_green=False, transient=CONTRACT) == "crash"


@given(st.sampled_from(sorted(TRANSIENT_STATUS)))
def test_every_transient_status_after_api_error_is_transient(code: int) -> None:
    found = find_transient((f"API Error: {code} something went wrong",), ())
    assert found is not None and found.pattern == str(code)


def test_the_matched_pattern_and_its_line_are_named() -> None:
    tail = ("working", "API Error: 529 overloaded", "bye")
    found = find_transient(tail, CONTRACT)
    assert found is not None
    assert (found.pattern, found.line) == ("overloaded", "API Error: 529 overloaded")
    assert found.describe() == "'overloaded' in: API Error: 529 overloaded"


# --- permanent failures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("exceeded retry limit, last status: 401 Unauthorized, request id: x", "auth"),
        ('API Error: 401 {"type":"authentication_error"}', "auth"),
        ("Invalid API key · Please run /login", "auth"),
        ("Not logged in · Please run /login", "auth"),
        ('"message": "API key not valid. Please pass a valid API key."', "auth"),
        ("unexpected status 403 Forbidden: access denied", "auth"),
        ("Credit balance too low · Add funds", "billing"),
        ("Your credit balance is too low to access the Anthropic API.", "billing"),
        ('{"error":{"code":"insufficient_quota"}}', "billing"),
        ("403 Forbidden: Usage not included in your plan", "billing"),
        ("* Quota exceeded for metric: x, limit: 0, model: gemini-3.1-pro", "quota"),
        ("TerminalQuotaError: You have exhausted your daily quota on this model.", "quota"),
        ("Error: Session not found: ses_abc", "session-missing"),
        ("No conversation found with session ID: 4f1c", "session-missing"),
    ],
)
def test_permanent_failures_by_kind(line: str, kind: str) -> None:
    found = find_permanent(("some output", line))
    assert found is not None and found.kind == kind
    assert classify(exited(line), all_gates_green=False, transient=CONTRACT) == "permanent"


def test_permanent_words_beat_transient_ones() -> None:
    line = "exceeded retry limit, last status: 401 Unauthorized"
    reading = read_failure((line, "Reconnecting... 5/5 (429 Too Many Requests)"), CONTRACT)
    assert reading.permanent is not None and reading.transient is None


def test_a_terminal_quota_with_a_reset_time_is_a_long_wait_not_permanent() -> None:
    line = "TerminalQuotaError: You have exhausted your capacity. Your quota will reset after 2h36m24s."
    assert find_permanent((line,)) is None
    assert classify(exited(line), all_gates_green=False, transient=("exhausted your",)) == (
        "transient"
    )


def test_quota_limits_above_zero_are_not_permanent() -> None:
    assert find_permanent(("Quota exceeded for metric: x, limit: 5, model: m",)) is None
    assert find_permanent(("limit: 0.5 requests per second",)) is None


def test_a_missing_session_is_permanent_even_on_exit_0() -> None:
    ended = exited("Error: Session not found", code=0, signals=True)
    assert classify(ended, all_gates_green=False, transient=CONTRACT) == "permanent"
    # ... unless the gates say the work is done.
    assert classify(ended, all_gates_green=True, transient=CONTRACT) == "done"
    # A plain-text tail on exit 0 may be the model's own words: a claim, judged by the gates.
    said = exited("I fixed the 'Session not found' error in login.py", code=0)
    assert classify(said, all_gates_green=False, transient=CONTRACT) == "claimed-done"


def test_what_the_model_wrote_is_not_the_agent_failing() -> None:
    # The tail holds the model's reply about 401 handling; the agent's own signals are clean.
    ended = AgentExited(
        attempt=1,
        exit_code=1,
        signal=None,
        tail=("I made the handler return 401 Unauthorized on a rate limit.",),
        signals=("Error: process exited",),
    )
    assert classify(ended, all_gates_green=False, transient=CONTRACT) == "crash"


# --- resets of any distance, and the agents' own back-off -------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Usage limit reached. Resets in 10 days.", NOW + timedelta(days=10)),
        (
            "You've hit your usage limit. Try again at Sep 13th, 2026 10:04 PM.",
            datetime(2026, 9, 13, 22, 4, tzinfo=UTC),
        ),
        (
            "You've hit your limit - resets Feb 7, 11am (Asia/Seoul)",
            datetime(2027, 2, 7, 2, 0, tzinfo=UTC),
        ),
        (
            "You've hit your session limit · resets 9:20pm (Europe/Moscow)",
            datetime(2026, 3, 2, 18, 20, tzinfo=UTC),
        ),
    ],
)
def test_resets_of_any_distance_are_read(text: str, expected: datetime) -> None:
    assert parse_reset_time(text, now=NOW, local_tz=UTC) == expected


def test_a_far_reset_is_the_wait_and_says_until_when() -> None:
    wait = retry_wait(1, RetryConfig(), ("Resets in 10 days",), now=NOW, local_tz=UTC)
    assert wait.until == NOW + timedelta(days=10)
    assert wait.seconds > RetryConfig().max_wait
    assert wait.when == "Thu 12 Mar 12:00 local time"


@pytest.mark.parametrize(
    "line",
    ["Retry in 0.4 seconds.", "Retrying in 2.0 seconds...", "Retry in 0.7087802705903429 seconds."],
)
def test_aiders_own_back_off_is_not_a_reset(line: str) -> None:
    aider = PROFILES["aider"]
    assert parse_reset_time(line, now=NOW, own_backoff=aider.own_backoff) is None


def test_a_providers_retry_hint_still_is() -> None:
    line = "Please try again in 5.289s. Visit https://console.groq.com"
    assert parse_reset_time(line, now=NOW) == NOW + timedelta(seconds=5.289)


# --- aider: a false success only when no answer followed --------------------------------------


def test_aider_false_success_only_without_an_answer_after_the_failure() -> None:
    aider = PROFILES["aider"]
    stats = aider.new_decoder().stats
    failed = (
        "litellm.RateLimitError: AnthropicException - rate_limit_error",
        "The API provider has rate limited you. Try again later or check your quotas.",
        "Retrying in 0.2 seconds...",
    )
    assert aider.false_success(failed, 0, stats) is not None
    answered = (
        *failed,
        "Here is the change.",
        "Applied edit to src/a.py",
        "Tokens: 14k sent, 1.1k received.",
    )
    assert aider.false_success(answered, 0, stats) is None
    assert aider.false_success(failed, 1, stats) is None  # not exit 0: a plain failure


# --- what the profiles show and count ---------------------------------------------------------


def _shown(agent: str, *records: str) -> tuple[list[str], object]:
    decoder = PROFILES[agent].new_decoder()
    lines = decoder.feed(("\n".join(records) + "\n").encode())
    return [line.text for line in lines], decoder.stats


def test_codex_reconnecting_is_news_not_an_error() -> None:
    shown, stats = _shown("codex", '{"type":"error","message":"Reconnecting... 2/5"}')
    assert shown == ["↻ Reconnecting... 2/5"]
    assert not stats.is_error  # type: ignore[attr-defined]


def test_claude_turn_limit_reads_as_words() -> None:
    shown, _ = _shown(
        "claude",
        '{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":41,"session_id":"s"}',
    )
    assert shown == ["✗ error: the turn limit (--max-turns) was reached after 41 turns"]


def test_gemini_tool_calls_show_their_directory_and_request() -> None:
    shown, _ = _shown(
        "gemini",
        '{"type":"tool_use","tool_name":"list_directory","parameters":{"dir_path":"src"}}',
        '{"type":"tool_use","tool_name":"google_web_search","parameters":{"request":"pytest xdist"}}',
    )
    assert shown == ["● list_directory src", "● google_web_search pytest xdist"]


def test_claude_counts_cached_input_apart() -> None:
    _, stats = _shown(
        "claude",
        '{"type":"result","is_error":false,"num_turns":2,"usage":{"input_tokens":18,'
        '"cache_read_input_tokens":74000,"cache_creation_input_tokens":860,"output_tokens":600}}',
    )
    usage = stats.usage()  # type: ignore[attr-defined]
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (18, 74860, 600)
    assert usage.describe() == "2 turns, 75.5k tokens (18 in + 74.9k cached, 600 out)"


def test_usage_means_the_same_across_agents() -> None:
    _, codex = _shown(
        "codex",
        '{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":800,"output_tokens":5}}',
    )
    _, opencode = _shown(
        "opencode",
        '{"type":"step_finish","part":{"tokens":{"input":200,"output":5,"reasoning":0,'
        '"cache":{"read":800,"write":0}},"cost":0}}',
    )
    expected = Usage(turns=1, input_tokens=200, output_tokens=5, cached_input_tokens=800)
    assert codex.usage() == expected  # type: ignore[attr-defined]
    assert opencode.usage() == Usage(  # type: ignore[attr-defined]
        turns=1, input_tokens=200, output_tokens=5, cost_usd=0.0, cached_input_tokens=800
    )


def test_opencode_limit_only_in_its_error_log_is_a_false_success() -> None:
    opencode = PROFILES["opencode"]
    decoder = opencode.new_decoder()
    decoder.feed(
        b"INFO  2026-05-01T10:00:00 +1ms service=session prompt\n"
        b"ERROR 2026-05-01T10:00:02 +2ms service=llm error=Rate limit exceeded (429)\n"
    )
    reason = opencode.false_success((), 0, decoder.stats)
    assert reason is not None and "opencode logged an error" in reason
    quiet = opencode.new_decoder()
    quiet.feed(b"ERROR 2026-05-01T10:00:02 +2ms service=file.watcher error=ENOSPC\n")
    assert opencode.false_success((), 0, quiet.stats) is None
