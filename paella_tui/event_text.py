"""One line (or a few) per engine event, in words: what ``paella run --headless`` prints and
``paella log`` reads back from the ledger. :func:`describe` looks the event's type up in a table
of small functions, one per type; an event with no entry (a stats sample) has no line."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    BisectFinished,
    BisectStarted,
    CheckpointTaken,
    DriftDetected,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    GateFinished,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RecoveryNeeded,
    RetryScheduled,
    RolledBack,
    RunDone,
    RunStopped,
    WatchPaused,
)

E = TypeVar("E", bound=Event)
_LINES: dict[type[Event], Callable[[Any], str | None]] = {}


def _says(cls: type[E]) -> Callable[[Callable[[E], str | None]], Callable[[E], str | None]]:
    """Register the line of events of type ``cls``."""

    def register(line: Callable[[E], str | None]) -> Callable[[E], str | None]:
        _LINES[cls] = line
        return line

    return register


def frozen_note(paths: Sequence[str]) -> str:
    """`` (judged with tests/x.py as frozen, not as the workspace has it)`` when paths were."""
    if not paths:
        return ""
    shown = ", ".join(str(p) for p in paths[:3]) + (
        f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    )
    return f" (judged with {shown} as frozen, not as the workspace has it)"


def describe(event: Event) -> str | None:
    """The line for ``event``, or None for events not worth a line (stats samples)."""
    line = _LINES.get(type(event))
    return line(event) if line is not None else None


@_says(AgentStarted)
def _agent_started(event: AgentStarted) -> str:
    how = "resumed" if event.resumed else "started"
    argv = shlex.join(event.argv)[:160]
    return f"● agent {how}: attempt {event.attempt}, pid {event.pid}: {argv}"


@_says(AgentExited)
def _agent_exited(event: AgentExited) -> str:
    who = " (stopped by you)" if event.stopped_by_user else ""
    mark = "■" if event.exit_code == 0 and not event.false_success else "✗"
    lines = [f"{mark} agent ended: {event.describe()}{who}, attempt {event.attempt}"]
    if event.usage is not None and not event.usage.empty:
        lines.append(f"  agent reported: {event.usage.describe()}")
    if event.leftovers:
        lines.append(
            f"  stopped {len(event.leftovers)} leftover process(es): " + "; ".join(event.leftovers)
        )
    lines.extend(f"  │ {line}" for line in event.tail[-5:])
    return "\n".join(lines)


@_says(AgentSession)
def _agent_session(event: AgentSession) -> str:
    return f"  agent session {event.session_id} (a resume continues it)"


@_says(EvaluationStarted)
def _evaluation_started(event: EvaluationStarted) -> str:
    return f"◌ gates: judging tree {event.tree[:10]} ({event.reason})"


@_says(GateFinished)
def _gate_finished(event: GateFinished) -> str | None:
    r = event.result
    if r.cached:
        return None  # judged before on this very tree: the evaluation's summary counts it
    mark = "✓" if r.green else ("◌" if event.stale else "✗")
    extra = " (stale: the tree changed while it ran)" if event.stale else ""
    why = f": {r.message}" if r.message else ""
    failing = ""
    if r.failed_tests and not event.stale:
        more = f", … {len(r.failed_tests) - 3} more" if len(r.failed_tests) > 3 else ""
        failing = f"; failing: {', '.join(r.failed_tests[:3])}{more}"
    return f"{mark} gate {r.gate}: {r.status} in {r.duration_s:.1f}s{extra}{why}{failing}"


@_says(EvaluationFinished)
def _evaluation_finished(event: EvaluationFinished) -> str:
    green = sum(r.green for r in event.results)
    stale = " (stale)" if event.stale else ""
    episodes = f"{event.complete_episodes} episode(s) complete"
    return (
        f"  gates {green}/{len(event.results)} green, {episodes}{stale}{frozen_note(event.frozen)}"
    )


@_says(CheckpointTaken)
def _checkpoint(event: CheckpointTaken) -> str:
    c = event.record_
    green = ", ".join(c.gates_green) or "-"
    return f"✓ checkpoint {c.n} ({c.label}) {c.commit[:10]}, green: {green}"


@_says(DriftDetected)
def _drift(event: DriftDetected) -> str:
    return f"⚠ drift {event.drift}: {event.message}"


@_says(WatchPaused)
def _watch_paused(event: WatchPaused) -> str:
    return f"⚠ watching paused: {event.reason}"


@_says(RetryScheduled)
def _retry(event: RetryScheduled) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(event.resume_at))
    return (
        f"◌ transient failure {event.failures}: retrying in {format_duration(event.wait_s)} "
        f"at {at} ({event.reason})"
    )


@_says(RecoveryNeeded)
def _recovery_needed(event: RecoveryNeeded) -> str:
    f = event.facts
    base = (
        f"checkpoint {f.base.n} ({', '.join(f.base.gates_green) or 'no gate'} green)"
        if f.base
        else "none"
    )
    lines = [f"✗ recovery needed: {f.how_and_attempt}; last good state: {base}"]
    if f.regressions:
        lines.append(f"  regressions: {', '.join(f.regressions)}")
    lines.append(
        f"  changed since: {len(f.changed_files)} file(s), +{f.lines_added} -{f.lines_removed}"
    )
    if not f.gates_final:
        lines.append("  gates still running on the final tree: the newest known results are shown")
    lines.extend(f"  {b.gate} {b.headline()}" for b in f.breaks)
    if f.before_break is not None:
        lines.append(f"  just before the break: {f.before_break.name}")
    return "\n".join(lines)


@_says(BisectStarted)
def _bisect_started(event: BisectStarted) -> str:
    return f"◌ bisect: finding the step where {event.gate} broke ({event.steps} steps)"


@_says(BisectFinished)
def _bisect_finished(event: BisectFinished) -> str:
    p = event.point
    runs = f"{p.runs} gate run(s)"
    if p.verdict == "found":
        line = f"⚠ {p.gate} {p.headline()} ({runs}): `paella diff step:{p.step}`"
    else:
        line = f"◌ bisect {p.gate}: {p.message} ({runs})"
    if event.before_break is not None:
        line += f"\n  just before the break: {event.before_break.name}"
    return line


@_says(RecoveryChosen)
def _recovery_chosen(event: RecoveryChosen) -> str:
    target = f" to {event.target}" if event.target else ""
    return f"→ recovery: {event.choice}{target} ({event.by})"


@_says(RolledBack)
def _rolled_back(event: RolledBack) -> str:
    salvage = event.salvage
    return (
        f"✓ rolled back to {event.target.name}; the state before is {salvage.name} "
        f"({salvage.ref}): `paella rollback {salvage.name}` undoes it"
    )


@_says(HandoffWritten)
def _handoff(event: HandoffWritten) -> str:
    return f"  handoff written: {event.path} ({event.size:,} bytes)"


@_says(RunDone)
def _done(event: RunDone) -> str:
    return f"✓ DONE: every gate is green on the final tree ({', '.join(event.gates)})"


@_says(RunStopped)
def _stopped(event: RunStopped) -> str:
    return f"■ run stopped, not done: {event.reason}"


@_says(Notice)
def _notice(event: Notice) -> str:
    mark = {"info": " ", "warning": "⚠", "error": "✗"}[event.level]
    return f"{mark} {event.message}"
