"""aider: plain text, no stream, no session id; it can exit 0 after a failed API call (a false success)."""

from __future__ import annotations

from collections.abc import Sequence

from paella_tui.supervisor.profiles.stream import DecodedStats, one_line

TRANSIENT = ("rate limited you", "servers are down or overloaded", "litellm.RateLimitError")


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 with one of aider's API-failure messages in the output tail."""
    if exit_code != 0:
        return None
    for line in reversed(tail):
        folded = line.casefold()
        if any(pattern.casefold() in folded for pattern in TRANSIENT):
            return f"exit 0, but aider's API call failed: {one_line(line)}"
    return None
