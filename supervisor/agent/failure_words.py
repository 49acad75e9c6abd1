"""What an agent's failure says, read as words (SPEC 9): transient, permanent, or neither.

Patterns match as whole words, case-insensitively: ``rate limit`` matches "Rate limited",
"rate_limit_error" and "rate-limit", never "celebrate limits". A pattern of digits is an HTTP
status code and matches only where the text uses it as one ("API Error: 429", "last status: 401
Unauthorized", ``"code": 503``, "429 Too Many Requests"), never "line 429" in a traceback.

Permanent failures are those no wait fixes: authentication (401/403, "invalid API key", "not
logged in"), billing ("credit balance is too low", 402, "insufficient_quota"), a quota of zero
or one the agent itself calls terminal (Gemini's ``TerminalQuotaError`` with no reset time), and
a session that does not exist (resuming it again cannot work; a fresh start can). They are
looked for before the transient words: "exceeded retry limit, last status: 401 Unauthorized" is
an expired login, not a limit that passes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from typing import Literal

PermanentKind = Literal["auth", "billing", "quota", "session-missing"]

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
"""HTTP statuses that pass with time: throttled, overloaded, a server's bad moment."""
PERMANENT_STATUS: dict[int, PermanentKind] = {401: "auth", 403: "auth", 402: "billing"}
"""HTTP statuses no wait fixes."""

_EDGE_BEFORE = r"(?<![A-Za-z0-9])"
_EDGE_AFTER = r"(?![A-Za-z0-9])"
# Words that introduce a status code: "status 429", "API Error: 529", "HTTP error: 502",
# `"code":429`, `"api_error_status":429`, "statusCode: 503", "Error 429". A line number, a
# count or a port never follows one of these.
_STATUS_LEAD = (
    r"(?:status(?:[ _-]?code)?|statuscode|code|http(?:/[\d.]+)?(?:\s+error)?|"
    r"api[ _]error(?:[ _]status)?|error(?:[ _]code)?)"
)
_REASONS = "|".join(
    sorted({re.escape(s.phrase) for s in HTTPStatus if s.value >= 400}, key=len, reverse=True)
)


def _status_regex(code: str) -> re.Pattern[str]:
    """``code`` used as an HTTP status: after a status word, or before its reason phrase."""
    return re.compile(
        rf"{_EDGE_BEFORE}{_STATUS_LEAD}[\"']?\s*[:=]?\s*[(\[]?\s*{code}{_EDGE_AFTER}"
        rf"|{_EDGE_BEFORE}{code}\s*[:\-]?\s*(?:{_REASONS}|RESOURCE_EXHAUSTED|overloaded)\b",
        re.IGNORECASE,
    )


@lru_cache(maxsize=512)
def word_regex(pattern: str) -> re.Pattern[str]:
    """The regex a contract or profile pattern stands for (see the module docstring)."""
    text = pattern.strip()
    if text.isdigit():
        return _status_regex(text)
    words = [re.escape(w) for w in re.split(r"[\s_\-]+", text) if w]
    # Words may be joined by spaces, underscores or hyphens; the last may take a plain ending
    # ("rate limit" -> "rate limited", "overload" -> "overloaded").
    body = r"[\s_\-]+".join(words)
    ending = r"(?:s|es|d|ed|ing)?" if words and words[-1][-1:].isalpha() else ""
    return re.compile(rf"{_EDGE_BEFORE}{body}{ending}{_EDGE_AFTER}", re.IGNORECASE)


@dataclass(frozen=True)
class Matched:
    """A pattern found in the output, and the line it was found in (as shown to people)."""

    pattern: str
    line: str

    def describe(self) -> str:
        """``"429" in: API Error: 429 {...}``."""
        return f"{self.pattern!r} in: {_short(self.line)}"


@dataclass(frozen=True)
class Permanent:
    """A failure no wait fixes: what kind, the words that say so, and what a person can do."""

    kind: PermanentKind
    matched: Matched

    @property
    def advice(self) -> str:
        """What to do about it, in one line."""
        return _ADVICE[self.kind]


_ADVICE: dict[PermanentKind, str] = {
    "auth": "log the agent in again (or fix its API key), then `paella resume`",
    "billing": "fix the account's billing or plan, then `paella resume`",
    "quota": "this quota does not come back by waiting: change the model, plan or key, then `paella resume`",
    "session-missing": "the agent's session is gone: paella starts it afresh with the handoff",
}

# Wording families no wait fixes, by kind. Each is a regex over one line.
_PERMANENT: tuple[tuple[PermanentKind, str, str], ...] = (
    ("session-missing", "session not found", r"\bsession not found\b"),
    ("session-missing", "no conversation found", r"\bno conversation found with session id\b"),
    ("session-missing", "no rollout found", r"\bno rollout found for (?:thread|conversation) id\b"),
    (
        "session-missing",
        "session does not exist",
        r"\bsession\b[^\n]{0,40}\b(?:does not|doesn't) exist\b",
    ),
    ("auth", "unauthorized", r"\bunauthori[sz]ed\b"),
    (
        "auth",
        "invalid api key",
        r"\binvalid[ _]?(?:x-)?api[ _-]?key\b|\bapi[ _]key[ _]invalid\b|\bapi key not valid\b",
    ),
    ("auth", "authentication error", r"\bauthentication[ _](?:error|failed)\b"),
    ("auth", "not logged in", r"\bnot logged in\b|\bplease run /login\b"),
    (
        "auth",
        "oauth token expired",
        r"\boauth token (?:has )?expired\b|\btoken (?:has )?expired\b.{0,40}\blog ?in\b",
    ),
    ("auth", "permission_error", r"\bpermission_error\b"),
    ("billing", "credit balance too low", r"\bcredit balance (?:is )?too low\b"),
    ("billing", "insufficient_quota", r"\binsufficient[ _]quota\b"),
    ("billing", "billing hard limit", r"\bbilling hard limit\b"),
    ("billing", "not included in your plan", r"\bnot included in your plan\b"),
    ("billing", "payment required", r"\bpayment required\b"),
    ("quota", "limit: 0", r"\blimit:\s*0(?![\d.])"),
)
_PERMANENT_RE = tuple((kind, name, re.compile(rx, re.IGNORECASE)) for kind, name, rx in _PERMANENT)

# Terminal quotas: the agent gave up on the quota. Permanent unless it said when it comes back
# ("Your quota will reset after 2h36m24s"): that is a long wait, honoured as one.
_TERMINAL_QUOTA = re.compile(r"\bTerminalQuotaError\b", re.IGNORECASE)
_QUOTA_RESET = re.compile(r"\bquota will reset\b|\bresets? (?:at|in|after)\b", re.IGNORECASE)

TRANSIENT_WORDS: tuple[str, ...] = (
    "rate limit",
    "usage limit",
    "session limit",
    "weekly limit",
    "too many requests",
    "overloaded",
    "resource exhausted",
    "temporarily unavailable",
    "high demand",
    "no capacity available",
    "capacity exhausted",
    "quota exceeded",
    "exceeded your current quota",
    "exhausted your capacity",
    "hit your limit",
)
"""Wording families every agent's limits share (added to the contract's and the profile's)."""

# "You've hit your session limit", "You've hit your weekly limit", "You have hit your limit".
_HIT_LIMIT = re.compile(r"\bhit your (?:[a-z\-]+ )?limit\b", re.IGNORECASE)


def _lines(evidence: Iterable[str]) -> list[str]:
    return [line for line in evidence if line and line.strip()]


def find_permanent(evidence: Sequence[str]) -> Permanent | None:
    """The newest line that says the failure is permanent, or None."""
    lines = _lines(evidence)
    terminal_reset = any(_QUOTA_RESET.search(line) for line in lines)
    for line in reversed(lines):
        for kind, name, regex in _PERMANENT_RE:
            if regex.search(line):
                return Permanent(kind, Matched(name, line))
        for code, kind in PERMANENT_STATUS.items():
            if _status_regex(str(code)).search(line):
                return Permanent(kind, Matched(str(code), line))
        if _TERMINAL_QUOTA.search(line) and not terminal_reset:
            return Permanent("quota", Matched("TerminalQuotaError", line))
    return None


def find_transient(evidence: Sequence[str], patterns: Sequence[str]) -> Matched | None:
    """The first pattern (in the order given, then the shared families) found in the output,
    with the newest line it was found in; None when no pattern is there."""
    lines = _lines(evidence)
    for pattern in (*patterns, *TRANSIENT_WORDS):
        if not pattern or not pattern.strip():
            continue
        regex = _HIT_LIMIT if pattern == "hit your limit" else word_regex(pattern)
        for line in reversed(lines):
            if regex.search(line):
                return Matched(pattern, line)
    for code in sorted(TRANSIENT_STATUS):
        regex = _status_regex(str(code))
        for line in reversed(lines):
            if regex.search(line):
                return Matched(str(code), line)
    return None


def _short(line: str, limit: int = 160) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
