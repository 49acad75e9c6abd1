"""Ledger records as one human-readable line each, for ``paella log`` and headless output.

Records of events the run loop emits are read back into those events and said by the one
:func:`~paella_tui.event_text.describe` the headless printer uses, so ``paella log`` reads like
``paella run --headless``; the rest (checkpoints, rollbacks, salvage, steps, records that keep
less than their event knew) have their own small function here, one per kind, in a table.
Records that are samples (agent stats, a gate starting) are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

from paella_tui.event_text import describe as describe_event
from paella_tui.event_text import frozen_note
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    BreakPoint,
    EvaluationStarted,
    Event,
    GateFinished,
    GateResult,
    GateStatus,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RetryScheduled,
    RunDone,
    RunStopped,
    Usage,
    WatchPaused,
)

_SKIP_FIELDS = {"t", "kind"}
_SAMPLES = {"agent-stats", "gate-started"}
"""Kinds with no line: samples whose outcome has its own record."""
_PLAIN_EVENTS: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        AgentStarted,
        EvaluationStarted,
        RetryScheduled,
        RecoveryChosen,
        HandoffWritten,
        RunDone,
        RunStopped,
        Notice,
        WatchPaused,
    )
    if cls.kind is not None
}
"""Events whose record is their fields: rebuilt as they were and said as the printer says them."""


def event_line(record: dict[str, Any]) -> str | None:
    """The headless printer's line for the event this record holds, None if it holds none."""
    kind = str(record.get("kind"))
    special = _EVENT_RECORDS.get(kind)
    if special is not None:
        return special(record)
    cls = _PLAIN_EVENTS.get(kind)
    if cls is None:
        return None
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    try:
        event = cls(**{k: v for k, v in record.items() if k in names})
    except (TypeError, ValueError, KeyError):
        return None  # a record from another version: the generic line says it
    return describe_event(event)


def _gate_finished(record: dict[str, Any]) -> str | None:
    status = str(record.get("status") or "error")
    result = GateResult(
        gate=str(record.get("gate", "")),
        status=cast(GateStatus, status),
        tree=str(record.get("tree") or ""),
        duration_s=float(record.get("duration_s") or 0.0),
        exit_code=record.get("exit_code"),
        message=str(record.get("message") or ""),
        cached=bool(record.get("cached")),
        failed_tests=tuple(record.get("failed_tests") or ()),
    )
    return describe_event(GateFinished(result=result, stale=bool(record.get("stale"))))


def _evaluation_finished(record: dict[str, Any]) -> str:
    # The record keeps the names of the green and red gates, not the results.
    green, red = record.get("green") or [], record.get("red") or []
    if record.get("stale"):
        return "  gates: no verdict, the tree changed while they ran (judged again)"
    failing = f"; red: {', '.join(red)}" if red else ""
    total = len(green) + len(red)
    return (
        f"  gates {len(green)}/{total} green, {record.get('complete_episodes', 0)} "
        f"episode(s) complete{failing}{frozen_note(record.get('frozen') or ())}"
    )


def _recovery_needed(record: dict[str, Any]) -> str:
    # The record keeps the base's number and the tail, not the facts.
    base = record.get("base")
    lines = [
        f"✗ recovery needed: {_how_and_attempt(record)}; last good state: "
        + (f"checkpoint {base}" if base is not None else "none")
    ]
    if record.get("regressions"):
        lines.append(f"  regressions: {', '.join(record['regressions'])}")
    lines += [f"  │ {line}" for line in (record.get("tail") or [])[-3:]]
    return "\n".join(lines)


_EVENT_RECORDS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "gate-finished": _gate_finished,
    "evaluation-finished": _evaluation_finished,
    "recovery-needed": _recovery_needed,
}
"""Event records rebuilt by hand: the gate's result, or said from what the record keeps."""


def _short(value: object) -> str:
    if isinstance(value, str) and len(value) == 40 and all(c in "0123456789abcdef" for c in value):
        return value[:10]
    return str(value)


def describe(record: dict[str, Any]) -> str | None:
    """The line (or lines) saying what a ledger record means; None for a sample not worth one."""
    kind = str(record.get("kind", "?"))
    if kind in _SAMPLES or (kind == "gate-finished" and record.get("cached")):
        return None  # a cached verdict is counted by its evaluation's summary line
    own = _RECORD_LINES.get(kind)
    if own is not None:
        return own(record)
    line = event_line(record)
    if line is not None:
        return line
    fields = ", ".join(f"{k}={_short(v)}" for k, v in record.items() if k not in _SKIP_FIELDS)
    return f"{kind} {fields}".strip()


def _run_started(r: dict[str, Any]) -> str:
    what = "manual run" if r.get("manual") else "run"
    contract = r.get("contract") or {}
    sha = (
        f", contract sha256 {contract['sha256'][:12]}"
        if contract.get("sha256")
        else ", no contract"
    )
    where = f"{r.get('branch') or 'detached'} @ {_short(r.get('head'))}"
    return f"{what} {r.get('run_id')} started on {where}{sha}"


def _checkpoint(r: dict[str, Any]) -> str:
    episode = r.get("episode")
    if isinstance(episode, int):
        label = r.get("label") or f"episode {episode}"
    else:
        label = f"manual: {r.get('label')}" if r.get("label") else "manual"
    green = ", ".join(r.get("gates_green") or ()) or "-"
    left = f", {len(r['skipped_files'])} file(s) left out" if r.get("skipped_files") else ""
    return f"checkpoint {r.get('n')} ({label}) {_short(r.get('commit'))}, green: {green}{left}"


_RECORD_LINES: dict[str, Callable[[dict[str, Any]], str]] = {
    "run-tree": lambda r: f"  the run starts on tree {_short(r.get('tree'))}",
    "run-started": _run_started,
    "checkpoint": _checkpoint,
    "salvage": lambda r: (
        f"salvage:{r.get('n')} saved {_short(r.get('commit'))} before {r.get('reason', '')}"
    ),
    "rollback-intent": lambda r: (
        f"rollback to {r.get('target')} begins (state before saved as salvage:{r.get('salvage')})"
    ),
    "rollback-done": lambda r: (
        f"rollback to {r.get('target')} done: {r.get('changed_files', 0)} path(s) restored"
    ),
    "rollback-failed": lambda r: (
        f"ROLLBACK FAILED at {r.get('step')}: {r.get('error')} (state before: "
        f"{r.get('salvage_ref')})"
    ),
    "agent-exited": lambda r: _agent_exited(r),
    "agent-session": lambda r: f"agent session {r.get('session_id')} (attempt {r.get('attempt')})",
    "step": lambda r: _step(r),
    "bisect-started": lambda r: f"bisect of {r.get('gate')} started over {r.get('steps')} step(s)",
    "bisect-probe": lambda r: f"bisect {r.get('gate')} on step {r.get('step')}: {r.get('status')}",
    "bisect": lambda r: _bisect(r),
    "steps-pruned": lambda r: (
        f"{r.get('refs')} step ref(s) pruned ([steps] keep passed; checkpoints kept)"
    ),
    "drift": lambda r: f"⚠ drift {r.get('drift')}: {r.get('message', '')}",
}
"""Records said from their own fields (before the event table: ``agent-exited`` and ``drift``
keep less than their events, and the rest have no event)."""


def _step(r: dict[str, Any]) -> str:
    files = [f.get("path", "") for f in r.get("files") or () if isinstance(f, dict)]
    total = int(r.get("files_total") or len(files))
    if not r.get("parent_tree"):
        return f"step {r.get('n')}: the tree the run started on {_short(r.get('tree'))}"
    names = ", ".join(files[:3]) + (f" and {total - 3} more" if total > 3 else "")
    return f"step {r.get('n')}: {names or 'no files'}, +{r.get('added', 0)} −{r.get('removed', 0)}"


def _bisect(r: dict[str, Any]) -> str:
    point = BreakPoint.from_json(r)
    runs = f"{point.runs} gate run(s)"
    if point.verdict == "found":
        before = f"; just before: step:{r['before_break']}" if r.get("before_break") else ""
        return f"⚠ {point.gate} {point.headline()} ({runs}){before}"
    return f"bisect {point.gate}: {point.message or point.verdict} ({runs})"


def _agent_exited(r: dict[str, Any]) -> str:
    exited = AgentExited(
        attempt=int(r.get("attempt") or 0),
        exit_code=r.get("exit_code"),
        signal=r.get("signal"),
        false_success=r.get("false_success"),
        exit_meaning=r.get("exit_meaning"),
    )
    how = "stopped by you" if r.get("stopped_by_user") else exited.describe()
    line = f"agent attempt {exited.attempt} ended: {how}"
    if r.get("usage"):
        line += f"; it reported {Usage.from_record(r['usage']).describe()}"
    if r.get("leftovers"):
        line += f"; {len(r['leftovers'])} leftover process(es) stopped"
    return line


def timestamped(record: dict[str, Any]) -> str | None:
    """The record's line with its UTC time in front (``HH:MM:SS``), continuation lines indented
    under it; None for a record with no line."""
    line = describe(record)
    if line is None:
        return None
    t = str(record.get("t", ""))
    clock = t[11:19] if len(t) >= 19 else t
    pad = " " * (len(clock) + 2)
    return "\n".join(
        f"{clock}  {part}" if i == 0 else f"{pad}{part}" for i, part in enumerate(line.split("\n"))
    )


def _how_and_attempt(record: dict[str, Any]) -> str:
    """How a recovery's attempt ended and which attempt (recorded apart since issue 14)."""
    how, attempt = record.get("how", ""), record.get("attempt")
    return f"{how}, attempt {attempt}" if attempt is not None else str(how)
