"""How an attempt ended, as the run records it: the exit as an :class:`AgentExited` event (this
attempt's output lines only, the profile's reading of a false success), and the attempt a crash
of paella left undecided, found again in the run's state by a resume."""

from __future__ import annotations

from paella_tui.supervisor.agent.agent_process import ExitInfo
from paella_tui.supervisor.agent.profiles.registry import Profile
from paella_tui.supervisor.agent.profiles.stream import DecodedStats
from paella_tui.supervisor.run.events import AgentExited
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.state import RunState

ATTEMPT_MARKER = "── paella: attempt "
"""The display tail runs across attempts; this line separates them."""
TAIL_LINES = 40


def attempt_marker(attempt: int) -> bytes:
    """The line fed to the display tail before attempt ``attempt``'s output."""
    return f"\n{ATTEMPT_MARKER}{attempt} ──\n".encode()


def exited_event(
    info: ExitInfo,
    *,
    attempt: int,
    profile: Profile | None,
    stats: DecodedStats | None,
    stopped_by_user: bool,
) -> AgentExited:
    """The exit of attempt ``attempt``; ``stats`` is what its decoded stream said (None: the
    output was not a stream)."""
    tail = list(info.tail)
    marks = [i for i, line in enumerate(tail) if line.startswith(ATTEMPT_MARKER)]
    if marks:
        tail = tail[marks[-1] + 1 :]
    tail = tail[-TAIL_LINES:]
    false_success = None
    if profile is not None and not stopped_by_user:
        false_success = profile.false_success(tail, info.exit_code, stats or DecodedStats())
    return AgentExited(
        attempt=attempt,
        exit_code=info.exit_code,
        signal=info.signal,
        tail=tuple(tail),
        false_success=false_success,
        exit_meaning=profile.exit_meaning(info.exit_code) if profile else None,
        usage=stats.usage() if stats is not None else None,
        signals=tuple(stats.notes) if stats is not None else None,
        leftovers=tuple(f"{p.pid} {p.name} {' '.join(p.cmdline)[:200]}" for p in info.leftovers),
        stopped_by_user=stopped_by_user,
    )


def lost_attempt(state: RunState, attempt: int) -> AgentExited | None:
    """The attempt a crash of paella left undecided (its agent was running, or its recovery was
    being asked), as an exit to recover from; None when its end was decided. From the run's
    state: its newest attempt start, exit, recovery asked or chosen (:class:`Turn`)."""
    turn = state.turn
    if turn is None or turn.kind not in ("agent-started", "recovery-needed"):
        return None
    attempt = turn.attempt or attempt
    tail: tuple[str, ...] = ()
    if turn.kind == "recovery-needed":
        tail = turn.tail
        how = f"{turn.how or 'the attempt ended'}; paella was stopped before a choice"
    else:
        how = f"paella itself stopped while attempt {attempt} ran (its agent was stopped)"
    # No exit of its own was seen: the sentence stands where the exit would be described.
    return AgentExited(attempt=attempt, exit_code=None, signal=None, tail=tail, false_success=how)


def stopped_on_words(view: RunView) -> str | None:
    """Why the run stopped last time, when it was a far reset or a permanent failure (the
    resume's handoff says so); None otherwise."""
    stop = view.run_state.stop
    if stop is not None and (stop.until or stop.reason.startswith("permanent failure")):
        return stop.reason
    return None
