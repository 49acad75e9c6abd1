"""Reset times the agents print: "resets 9:20pm (Europe/Moscow)", "try again at Sep 13th, 2026
10:04 PM", "Your quota will reset after 2h36m24s", "Please retry in 34.9s", "Resets in 10 days",
an HTTP ``Retry-After``, Claude Code's ``limit reached|EPOCH`` (SPEC 9).

Any distance ahead is honoured (a weekly limit is a week away); a time in the past is not a reset.
What a client says about its own back-off ("Retrying in 2.0 seconds...", aider's "Retry in 0.4
seconds.") is not the provider's reset and is left out (`own_backoff`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

OWN_BACKOFF: tuple[str, ...] = (r"\bretrying in\b[^\n]*", r"\bretrying with backoff\b[^\n]*")
"""A client announcing its own next try: never the provider's reset."""

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
class Reset:
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


def _clock_reset(match: re.Match[str], now: datetime, local_tz: tzinfo | None) -> Reset | None:
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
    return Reset(at.astimezone(UTC), match.end(), zone if zone_name else None, zone_name)


def _after(seconds: float, now: datetime, end: int) -> Reset | None:
    if not 0 < seconds < 10 * 365 * 86400:
        return None
    return Reset(now + timedelta(seconds=seconds), end, None, None)


def _candidates(text: str, now: datetime, local_tz: tzinfo | None) -> Iterator[Reset | None]:
    for match in _CLOCK.finditer(text):
        yield _clock_reset(match, now, local_tz)
    for match in _EPOCH.finditer(text):
        epoch = int(match["epoch"])
        if len(match["epoch"]) == 13:
            epoch //= 1000
        try:
            yield Reset(datetime.fromtimestamp(epoch, UTC), match.end(), None, None)
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
        yield Reset(at.astimezone(UTC), match.end(), None, None)


def _blank(text: str, own_backoff: Sequence[str]) -> str:
    """``text`` with the client's own back-off notices blanked out (same length, same offsets)."""
    for pattern in (*OWN_BACKOFF, *own_backoff):
        text = re.sub(pattern, lambda m: " " * len(m.group(0)), text, flags=re.IGNORECASE)
    return text


def find_reset(
    text: str, now: datetime, local_tz: tzinfo | None = None, own_backoff: Sequence[str] = ()
) -> Reset | None:
    """The reset printed last (the newest message wins), if it is ahead of ``now``."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    text = _blank(text, own_backoff)
    found = [r for r in _candidates(text, now, local_tz) if r is not None and now < r.at]
    return max(found, key=lambda r: r.end) if found else None


def parse_reset_time(
    text: str, *, now: datetime, local_tz: tzinfo | None = None, own_backoff: Sequence[str] = ()
) -> datetime | None:
    """The reset time the agent printed in ``text`` (UTC), or None when there is none to trust.

    A time of day without a date is the next such time after ``now``, in the zone the agent named
    or else in ``local_tz`` (default: the system's local time). Resets in the past are ignored.
    """
    reset = find_reset(text, now, local_tz, own_backoff)
    return reset.at if reset else None


def describe_reset(reset: Reset, now: datetime, local_tz: tzinfo | None) -> str:
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
