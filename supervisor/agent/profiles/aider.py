"""aider: plain text, no stream, no session id; it can exit 0 after a failed API call (a false success).

aider retries a failed API call by itself ("Retrying in 2.0 seconds..."; older versions "Retry
in 0.4 seconds."): those are its own back-off, not the provider's reset time. An API failure
it printed is a false success only when no answer followed it: the model's reply ends with
aider's accounting line ("Tokens: 4.2k sent, 310 received. Cost: ..."), an applied edit or a
commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from paella_tui.supervisor.agent.failure_words import word_regex
from paella_tui.supervisor.agent.profiles.stream import DecodedStats, one_line

TRANSIENT = ("rate limited you", "servers are down or overloaded", "litellm.RateLimitError")
OWN_BACKOFF = (r"\bretry(?:ing)? in \d+(?:\.\d+)? seconds?\b\.*",)
"""aider's own back-off notices (a regex each), left out of the reset times."""

_FAILURE = re.compile(
    r"rate limited you|servers are down or overloaded|litellm\.\w+Error|"
    r"API provider (?:timed out|was unable)|"
    + "|".join(word_regex(p).pattern for p in ("overloaded", "rate limit")),
    re.IGNORECASE,
)
_ANSWER = re.compile(
    r"^\s*(?:Tokens: .*\bsent\b|Applied edit to |Commit [0-9a-f]{7,}\b|Add .* to the chat\?)",
    re.IGNORECASE,
)


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 with an API failure in the tail that no answer followed."""
    if exit_code != 0:
        return None
    for line in reversed(tail):
        if _ANSWER.search(line):
            return None  # the model answered after the last failure (aider retried past it)
        if _FAILURE.search(line):
            return f"exit 0, but aider's API call failed: {one_line(line)}"
    return None


CHECKED_VERSIONS = ("0.40.0", "0.86.1")
"""The versions this profile was checked against (tests/corpus and the stand-ins)."""
