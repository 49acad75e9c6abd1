"""How an attempt ended, and when to try again (SPEC 9).

`classify` names the ending from the exit, the gates and the output tail. For a transient
failure, `retry_wait` decides how long to wait: until the reset time the agent printed when one
can be read from its output (Claude Code, Codex CLI, Gemini CLI, an HTTP ``Retry-After``),
otherwise the contract's backoff, doubled per failure and capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from paella_tui.supervisor.contract import RetryConfig
from paella_tui.supervisor.durations import format_duration
from paella_tui.supervisor.events import AgentExited, Ending

RESET_MARGIN_S = 5.0
"""Seconds added after a parsed reset time, so the next attempt does not arrive a moment early."""

MAX_RESET_AHEAD = timedelta(days=7)
"""A reset further away than this is taken for a misreading and ignored."""


def matched_pattern(tail: Sequence[str], transient: Sequence[str]) -> str | None:
    """The first transient pattern (in contract order) found in the tail, case-insensitively."""
    text = "\n".join(tail).casefold()
    for pattern in transient:
        if pattern and pattern.casefold() in text:
            return pattern
    return None


def classify(exited: AgentExited, *, all_gates_green: bool, transient: Sequence[str]) -> Ending:
    """Name how an attempt ended: done, claimed-done, stopped, transient, signal or crash.

    A false success (exit 0 while the agent's own stream reported an error) is judged as the
    failed exit it is, unless every gate is green: done is the gates' call, and waiting hours
    for a usage limit to reset would serve nobody when the work is already proved.
    """
    clean_exit = exited.exit_code == 0 and exited.signal is None
    if clean_exit and all_gates_green:
        return "done"
    # A stop the user asked for is not a claim of success, even when the agent exits 0 on SIGTERM.
    if exited.stopped_by_user:
        return "stopped"
    if clean_exit and not exited.false_success:
        return "claimed-done"
    if matched_pattern(exited.evidence(), transient) is not None:
        return "transient"
    if exited.signal is not None:
        return "signal"
    return "crash"


def backoff_delay(failures: int, cfg: RetryConfig) -> float:
    """The blind wait after the ``failures``-th transient failure: backoff doubled each time, capped."""
    doublings = min(max(failures, 1) - 1, 64)
    return float(min(cfg.backoff * 2**doublings, cfg.max_backoff))


# --- reset times the agents print ------------------------------------------------------------

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

# "resets 3pm", "resets at 10pm (America/New_York)", "resets Oct 9 at 10am (Europe/Paris)",
# "Try again at 3:28 PM.", "Try again at Jan 2nd, 2026 3:28 PM."
_CLOCK = re.compile(
    r"\b(?:resets?|try\s+again|retry)(?:\s+at)?\s+"
    r"(?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?,?\s+(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\b\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z][A-Za-z0-9_+\-/]{0,63})\)|\s*(?P<abbr>UTC|GMT)\b)?",
    re.IGNORECASE,
)

# Claude Code's machine-readable form: "Claude AI usage limit reached|1767225600".
_EPOCH = re.compile(r"limit[^\n|]{0,80}\|\s*(?P<epoch>\d{13}|\d{10})(?!\d)", re.IGNORECASE)

_UNIT = (
    r"(?:days?|d|hours?|hrs?|hr|h|milliseconds?|ms|minutes?|mins?|min|m|seconds?|secs?|sec|s)"
    r"(?![a-z])"
)
_PART = re.compile(rf"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>{_UNIT})", re.IGNORECASE)
_SPAN = rf"\d+(?:\.\d+)?\s*{_UNIT}(?:\s*,?\s*(?:and\s+)?\d+(?:\.\d+)?\s*{_UNIT})*"

# "try again in 2 days 3 hours", "Please retry in 12.5s", "Your quota will reset after 1h49m8s."
_RELATIVE = re.compile(
    rf"\b(?:try\s+again|retry|resets?|wait)\s+(?:in|after)\s+(?P<span>{_SPAN})", re.IGNORECASE
)
# Google's RetryInfo: retryDelay: "38s" (also as JSON, "retryDelay": "38s").
_RETRY_DELAY = re.compile(
    r"\bretry_?delay\"?\s*[:=]\s*\"?(?P<secs>\d+(?:\.\d+)?)s\b", re.IGNORECASE
)
# HTTP: "Retry-After: 120" or "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT".
_RETRY_AFTER = re.compile(
    r"\bretry-after\s*:\s*(?:(?P<secs>\d+(?:\.\d+)?)(?![\d:])|(?P<date>[A-Za-z]{3},[^\n]{10,40}?GMT))",
    re.IGNORECASE,
)

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True)
class _Reset:
    """A reset time found in the output: when, where in the text, and the zone it was given in."""

    at: datetime
    end: int
    zone: tzinfo | None
    """The zone the agent named, or None (local time, an epoch, or a relative time)."""
    zone_name: str | None


def _unit_seconds(unit: str) -> float:
    unit = unit.lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return _UNIT_SECONDS["ms"]
    return _UNIT_SECONDS[unit[0]]


def _span_seconds(span: str) -> float:
    return sum(float(m["n"]) * _unit_seconds(m["unit"]) for m in _PART.finditer(span))


def _wall(day: date, hour: int, minute: int, zone: tzinfo | None) -> datetime:
    """A wall-clock time on ``day`` in ``zone``; None means the system's local time (with its DST)."""
    naive = datetime(day.year, day.month, day.day, hour, minute)
    return naive.astimezone() if zone is None else naive.replace(tzinfo=zone)


def _clock_reset(match: re.Match[str], now: datetime, local_tz: tzinfo | None) -> _Reset | None:
    hour, minute, ampm = int(match["hour"]), int(match["minute"] or 0), match["ampm"]
    if ampm is None and match["minute"] is None:
        return None  # "resets 5" is a count, not a time
    if ampm is not None:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm.lower().startswith("p") else 0)
    if hour > 23 or minute > 59:
        return None
    zone: tzinfo | None = local_tz
    zone_name: str | None = None
    if match["zone"] or match["abbr"]:
        zone_name = match["zone"] or "UTC"
        try:
            zone = ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            return None  # a time in a zone we cannot place is no better than no time
    here = now.astimezone(zone) if zone is not None else now.astimezone()
    try:
        if match["mon"]:
            month = _MONTHS.index(match["mon"][:3].lower()) + 1
            day = date(int(match["year"]) if match["year"] else here.year, month, int(match["day"]))
            at = _wall(day, hour, minute, zone)
            if at <= now and not match["year"]:
                at = _wall(day.replace(year=day.year + 1), hour, minute, zone)
        else:
            at = _wall(here.date(), hour, minute, zone)
            if at <= now:
                at = _wall(here.date() + timedelta(days=1), hour, minute, zone)
    except (ValueError, OverflowError):
        return None
    return _Reset(at.astimezone(UTC), match.end(), zone if zone_name else None, zone_name)


def _after(seconds: float, now: datetime, end: int) -> _Reset | None:
    if not 0 < seconds <= MAX_RESET_AHEAD.total_seconds():
        return None
    return _Reset(now + timedelta(seconds=seconds), end, None, None)


def _candidates(text: str, now: datetime, local_tz: tzinfo | None) -> Iterator[_Reset | None]:
    for match in _CLOCK.finditer(text):
        yield _clock_reset(match, now, local_tz)
    for match in _EPOCH.finditer(text):
        epoch = int(match["epoch"])
        if len(match["epoch"]) == 13:
            epoch //= 1000
        try:
            yield _Reset(datetime.fromtimestamp(epoch, UTC), match.end(), None, None)
        except (OverflowError, OSError, ValueError):
            continue
    for match in _RELATIVE.finditer(text):
        yield _after(_span_seconds(match["span"]), now, match.end())
    for match in _RETRY_DELAY.finditer(text):
        yield _after(float(match["secs"]), now, match.end())
    for match in _RETRY_AFTER.finditer(text):
        if match["secs"] is not None:
            yield _after(float(match["secs"]), now, match.end())
            continue
        try:
            at = parsedate_to_datetime(match["date"])
        except (TypeError, ValueError):
            continue
        yield _Reset(at.astimezone(UTC), match.end(), None, None)


def _find_reset(text: str, now: datetime, local_tz: tzinfo | None) -> _Reset | None:
    """The reset printed last (the newest message wins), if it is ahead and within a week."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    found = [
        r
        for r in _candidates(text, now, local_tz)
        if r is not None and now < r.at <= now + MAX_RESET_AHEAD
    ]
    return max(found, key=lambda r: r.end) if found else None


def parse_reset_time(
    text: str, *, now: datetime, local_tz: tzinfo | None = None
) -> datetime | None:
    """The reset time the agent printed in ``text`` (UTC), or None when there is none to trust.

    A time of day without a date is the next such time after ``now``, in the zone the agent named
    or else in ``local_tz`` (default: the system's local time). Resets in the past or more than
    a week ahead are ignored.
    """
    reset = _find_reset(text, now, local_tz)
    return reset.at if reset else None


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _describe_reset(reset: _Reset, now: datetime, local_tz: tzinfo | None) -> str:
    """``15:50 Europe/Paris``, ``15:28 local time``, ``Tue 02 Jan 15:28 local time``."""
    if reset.zone is not None:
        shown, where = reset.at.astimezone(reset.zone), reset.zone_name
        today = now.astimezone(reset.zone).date()
    else:
        zone = local_tz
        shown = reset.at.astimezone(zone) if zone else reset.at.astimezone()
        today = (now.astimezone(zone) if zone else now.astimezone()).date()
        where = "local time"
    when = f"{shown:%H:%M}" if shown.date() == today else f"{shown:%a %d %b %H:%M}"
    return f"{when} {where}"


def retry_wait(
    failures: int,
    cfg: RetryConfig,
    tail: Sequence[str],
    *,
    now: datetime,
    local_tz: tzinfo | None = None,
) -> tuple[float, str]:
    """Seconds to wait before the next attempt, and why in words: a printed reset beats the backoff."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    reset = _find_reset("\n".join(tail), now, local_tz)
    if reset is not None:
        wait = (reset.at - now).total_seconds() + RESET_MARGIN_S
        when = _describe_reset(reset, now, local_tz)
        return wait, f"until {when}, when the agent said its limit resets"
    delay = backoff_delay(failures, cfg)
    return (
        delay,
        f"backoff {format_duration(delay)} ({_ordinal(max(failures, 1))} transient failure)",
    )
