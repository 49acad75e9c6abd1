"""How an attempt ended, and when to try again (SPEC 9).

`read_failure` reads what the agent said about its failure (`failure_words`): permanent (no wait
fixes it), transient (a limit or an overload that passes), or neither; with the words and the
line that say so. `classify` names the ending from that, the exit and the gates. For a
transient failure, `retry_wait` decides how long to wait: until the reset time the agent
printed (`reset_times`), otherwise the contract's backoff, doubled per failure and capped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from paella_tui.supervisor.agent.failure_words import (
    Matched,
    Permanent,
    find_permanent,
    find_transient,
)
from paella_tui.supervisor.agent.reset_times import describe_reset, find_reset, parse_reset_time
from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited, Ending

__all__ = [
    "RESET_MARGIN_S",
    "FailureReading",
    "Wait",
    "backoff_delay",
    "classify",
    "matched_pattern",
    "parse_reset_time",
    "read_failure",
    "retry_wait",
]

RESET_MARGIN_S = 5.0
"""Seconds added after a parsed reset time, so the next attempt does not arrive a moment early."""


@dataclass(frozen=True)
class FailureReading:
    """What the output says about a failure: permanent, transient (and why), or neither."""

    permanent: Permanent | None = None
    transient: Matched | None = None

    @property
    def matched(self) -> Matched | None:
        """The words that decided it, and their line."""
        return self.permanent.matched if self.permanent else self.transient


def read_failure(evidence: Sequence[str], transient: Sequence[str]) -> FailureReading:
    """Permanent words win over transient ones ("exceeded retry limit, last status: 401")."""
    permanent = find_permanent(evidence)
    if permanent is not None:
        return FailureReading(permanent=permanent)
    return FailureReading(transient=find_transient(evidence, transient))


def matched_pattern(tail: Sequence[str], transient: Sequence[str]) -> str | None:
    """The first transient pattern (in contract order, then the shared families) found, as words."""
    found = find_transient(tail, transient)
    return found.pattern if found else None


def classify(exited: AgentExited, *, all_gates_green: bool, transient: Sequence[str]) -> Ending:
    """Name how an attempt ended: done, claimed-done, stopped, permanent, transient, signal or crash.

    A false success (exit 0 while the agent's own stream reported an error) is judged as the
    failed exit it is, unless every gate is green: done is the gates' call, and waiting hours
    for a usage limit to reset would serve nobody when the work is already proved. A missing
    session is permanent even on exit 0 (opencode exits 0 after "Session not found").
    """
    clean_exit = exited.exit_code == 0 and exited.signal is None
    if clean_exit and all_gates_green:
        return "done"
    # A stop the user asked for is not a claim of success, even when the agent exits 0 on SIGTERM.
    if exited.stopped_by_user:
        return "stopped"
    reading = read_failure(exited.evidence(), transient)
    # On exit 0 only the agent's own words about itself (a decoded stream's errors and stderr)
    # can say its session was missing; a plain-text tail also holds the model's reply.
    missing_session = (
        reading.permanent is not None
        and reading.permanent.kind == "session-missing"
        and exited.signals is not None
    )
    if reading.permanent is not None and (
        not clean_exit or exited.false_success or missing_session
    ):
        return "permanent"
    if clean_exit and not exited.false_success:
        return "claimed-done"
    if reading.transient is not None:
        return "transient"
    if exited.signal is not None:
        return "signal"
    return "crash"


def backoff_delay(failures: int, cfg: RetryConfig) -> float:
    """The blind wait after the ``failures``-th transient failure: backoff doubled each time, capped."""
    doublings = min(max(failures, 1) - 1, 64)
    return float(min(cfg.backoff * 2**doublings, cfg.max_backoff))


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class Wait:
    """How long to wait before the next attempt, why in words, and the reset it waits for."""

    seconds: float
    reason: str
    until: datetime | None = None
    """The reset time the agent printed (UTC), or None for a blind backoff."""
    when: str | None = None
    """That reset as people read it: ``21:20 Europe/Moscow``, ``Sat 07 Feb 11:00 Asia/Seoul``."""


def retry_wait(
    failures: int,
    cfg: RetryConfig,
    tail: Sequence[str],
    *,
    now: datetime,
    local_tz: tzinfo | None = None,
    own_backoff: Sequence[str] = (),
) -> Wait:
    """The wait before the next attempt: a printed reset (of any distance) beats the backoff."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    reset = find_reset("\n".join(tail), now, local_tz, own_backoff)
    if reset is not None:
        wait = (reset.at - now).total_seconds() + RESET_MARGIN_S
        when = describe_reset(reset, now, local_tz)
        return Wait(wait, f"until {when}, when the agent said its limit resets", reset.at, when)
    delay = backoff_delay(failures, cfg)
    return Wait(
        delay, f"backoff {format_duration(delay)} ({_ordinal(max(failures, 1))} transient failure)"
    )
