"""The headless consumer of the run loop: one plain, timestamped line per event.

For CI logs, pipes and ``NO_COLOR`` terminals; the TUI consumes the same event stream.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import TextIO

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
    GateStarted,
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


def describe_event(event: Event) -> str | None:
    """The line for ``event``, or None for events not worth a line (stats samples)."""
    if isinstance(event, AgentStarted):
        how = "resumed" if event.resumed else "started"
        return f"● agent {how}: attempt {event.attempt}, pid {event.pid}: {shlex.join(event.argv)[:160]}"
    if isinstance(event, AgentExited):
        who = " (stopped by you)" if event.stopped_by_user else ""
        mark = "■" if event.exit_code == 0 and not event.false_success else "✗"
        lines = [f"{mark} agent ended: {event.describe()}{who}, attempt {event.attempt}"]
        if event.usage is not None and not event.usage.empty:
            lines.append(f"  agent reported: {event.usage.describe()}")
        if event.leftovers:
            lines.append(
                f"  stopped {len(event.leftovers)} leftover process(es): "
                + "; ".join(event.leftovers)
            )
        lines.extend(f"  │ {line}" for line in event.tail[-5:])
        return "\n".join(lines)
    if isinstance(event, AgentSession):
        return f"  agent session {event.session_id} (a resume continues it)"
    if isinstance(event, EvaluationStarted):
        return f"◌ gates: judging tree {event.tree[:10]} ({event.reason})"
    if isinstance(event, GateStarted):
        return None
    if isinstance(event, GateFinished):
        r = event.result
        if r.cached:
            return None  # judged before on this very tree: the evaluation's summary counts it
        mark = "✓" if r.green else ("◌" if event.stale else "✗")
        extra = " (stale: the tree changed while it ran)" if event.stale else ""
        cached = " (cached)" if r.cached else ""
        why = f": {r.message}" if r.message else ""
        failing = ""
        if r.failed_tests and not event.stale:
            more = f", … {len(r.failed_tests) - 3} more" if len(r.failed_tests) > 3 else ""
            failing = f"; failing: {', '.join(r.failed_tests[:3])}{more}"
        return (
            f"{mark} gate {r.gate}: {r.status} in {r.duration_s:.1f}s{cached}{extra}{why}{failing}"
        )
    if isinstance(event, EvaluationFinished):
        green = sum(r.green for r in event.results)
        stale = " (stale)" if event.stale else ""
        return f"  gates {green}/{len(event.results)} green, {event.complete_episodes} episode(s) complete{stale}"
    if isinstance(event, CheckpointTaken):
        c = event.record_
        return f"✓ checkpoint {c.n} ({c.label}) {c.commit[:10]}, green: {', '.join(c.gates_green) or '-'}"
    if isinstance(event, DriftDetected):
        return f"⚠ drift {event.drift}: {event.message}"
    if isinstance(event, WatchPaused):
        return f"⚠ watching paused: {event.reason}"
    if isinstance(event, RetryScheduled):
        return (
            f"◌ transient failure {event.failures}: retrying in {format_duration(event.wait_s)} "
            f"at {time.strftime('%H:%M:%S', time.localtime(event.resume_at))} ({event.reason})"
        )
    if isinstance(event, RecoveryNeeded):
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
            lines.append(
                "  gates still running on the final tree: the newest known results are shown"
            )
        lines.extend(f"  {b.gate} {b.headline()}" for b in f.breaks)
        if f.before_break is not None:
            lines.append(f"  just before the break: {f.before_break.name}")
        return "\n".join(lines)
    if isinstance(event, BisectStarted):
        return f"◌ bisect: finding the step where {event.gate} broke ({event.steps} steps)"
    if isinstance(event, BisectFinished):
        p = event.point
        runs = f"{p.runs} gate run(s)"
        if p.verdict == "found":
            line = f"⚠ {p.gate} {p.headline()} ({runs}): `paella diff step:{p.step}`"
        else:
            line = f"◌ bisect {p.gate}: {p.message} ({runs})"
        if event.before_break is not None:
            line += f"\n  just before the break: {event.before_break.name}"
        return line
    if isinstance(event, RecoveryChosen):
        target = f" to {event.target}" if event.target else ""
        return f"→ recovery: {event.choice}{target} ({event.by})"
    if isinstance(event, RolledBack):
        return (
            f"✓ rolled back to {event.target.name}; the state before is {event.salvage.name} "
            f"({event.salvage.ref}): `paella rollback {event.salvage.name}` undoes it"
        )
    if isinstance(event, HandoffWritten):
        return f"  handoff written: {event.path} ({event.size:,} bytes)"
    if isinstance(event, RunDone):
        return f"✓ DONE: every gate is green on the final tree ({', '.join(event.gates)})"
    if isinstance(event, RunStopped):
        return f"■ run stopped, not done: {event.reason}"
    if isinstance(event, Notice):
        mark = {"info": " ", "warning": "⚠", "error": "✗"}[event.level]
        return f"{mark} {event.message}"
    return None


def printer(stream: TextIO | None = None) -> Callable[[Event], None]:
    """An event consumer that prints each event's line with its local time."""

    closed = False

    def emit(event: Event) -> None:
        nonlocal closed
        line = describe_event(event)
        if line is None or closed:
            return
        out = stream or sys.stdout
        clock = time.strftime("%H:%M:%S", time.localtime(event.at))
        try:
            print(
                "\n".join(
                    f"{clock}  {part}" if i == 0 else f"          {part}"
                    for i, part in enumerate(line.split("\n"))
                ),
                file=out,
                flush=True,
            )
        except (BrokenPipeError, ValueError):
            # Whoever read the lines went away (`| head`): the run goes on, supervised and
            # recorded in the ledger; only the printing stops.
            closed = True
            silence_stdout()

    return emit


def silence_stdout() -> None:
    """Point stdout at /dev/null, so a closed pipe fails no later write (nor the exit flush)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
