"""What the run does after a failure the agent named: wait and try again (a transient failure),
stop until a far reset, or stop for a permanent failure, each with the words that say why."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from paella_tui.supervisor.agent.failure_words import Permanent
from paella_tui.supervisor.agent.profiles.registry import Profile
from paella_tui.supervisor.agent.retry import RESET_MARGIN_S, read_failure, retry_wait
from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited, RetryScheduled


@dataclass(frozen=True)
class FarReset:
    """The agent's limit resets further away than ``[retry] max_wait``: the run stops."""

    reason: str
    resume_after: float
    """When ``paella resume`` may try again (the reset, plus a margin)."""


def plan_retry(
    exited: AgentExited,
    *,
    failures: int,
    cfg: RetryConfig,
    transient: Sequence[str],
    profile: Profile | None,
) -> RetryScheduled | FarReset:
    """The wait before the next attempt after the ``failures``-th transient failure, or the stop
    when the reset is too far away (a weekly limit: waiting here for days helps nobody)."""
    wait = retry_wait(
        failures,
        cfg,
        exited.evidence(),
        now=datetime.now(UTC),
        own_backoff=profile.own_backoff if profile else (),
    )
    matched = read_failure(exited.evidence(), transient).transient
    said = f"; matched {matched.describe()}" if matched else ""
    if wait.until is not None and wait.seconds > cfg.max_wait:
        reason = (
            f"the agent's limit resets {wait.when} "
            f"({format_duration(wait.seconds)} away, more than [retry] max_wait): "
            "run `paella resume` after then (`--now` to try sooner)" + said
        )
        return FarReset(reason=reason, resume_after=wait.until.timestamp() + RESET_MARGIN_S)
    return RetryScheduled(
        attempt=exited.attempt,
        failures=failures,
        wait_s=wait.seconds,
        resume_at=time.time() + wait.seconds,
        reason=wait.reason + said,
        pattern=matched.pattern if matched else None,
        line=matched.line if matched else None,
    )


def resume_wait(until: float, why: str, *, attempt: int, failures: int) -> RetryScheduled:
    """A resume's wait before its first attempt, until ``until`` (the agent's reset)."""
    return RetryScheduled(
        attempt=attempt,
        failures=failures,
        wait_s=max(0.0, until - time.time()),
        resume_at=until,
        reason=f"until {datetime.fromtimestamp(until).astimezone():%a %d %b %H:%M} local time, {why}",
    )


def permanent_reason(exited: AgentExited, transient: Sequence[str]) -> str:
    """Why a permanent failure stops the run, and what to do."""
    permanent = permanent_failure(exited, transient)
    return (
        f"permanent failure ({permanent.kind}), not retried: "
        f"{permanent.matched.describe()}; {permanent.advice}"
    )


def transient_ending(exited: AgentExited, transient: Sequence[str]) -> str:
    """The handoff's words for a transient failure the next attempt follows."""
    matched = read_failure(exited.evidence(), transient).matched
    return f"transient failure: {exited.describe()}" + (
        f" (matched {matched.describe()})" if matched else ""
    )


def permanent_failure(exited: AgentExited, transient: Sequence[str]) -> Permanent:
    """The permanent failure the agent named (the ending said there is one)."""
    permanent = read_failure(exited.evidence(), transient).permanent
    assert permanent is not None
    return permanent
