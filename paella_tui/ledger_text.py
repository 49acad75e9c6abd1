"""Ledger records as one human-readable line each, for ``paella log`` and headless output."""

from __future__ import annotations

from typing import Any

from paella_tui.supervisor.events import AgentExited, BreakPoint, Usage

_SKIP_FIELDS = {"t", "kind"}


def _short(value: object) -> str:
    if isinstance(value, str) and len(value) == 40 and all(c in "0123456789abcdef" for c in value):
        return value[:10]
    return str(value)


def describe(record: dict[str, Any]) -> str:
    """One line saying what a ledger record means."""
    kind = record.get("kind", "?")
    r = record
    if kind == "run-started":
        what = "manual run" if r.get("manual") else "run"
        contract = r.get("contract") or {}
        sha = (
            f", contract sha256 {contract['sha256'][:12]}"
            if contract.get("sha256")
            else ", no contract"
        )
        return f"{what} {r.get('run_id')} started on {r.get('branch') or 'detached'} @ {_short(r.get('head'))}{sha}"
    if kind == "checkpoint":
        episode = r.get("episode")
        if isinstance(episode, int):
            label = r.get("label") or f"episode {episode}"
        else:
            label = f"manual: {r.get('label')}" if r.get("label") else "manual"
        green = ", ".join(r.get("gates_green") or ()) or "-"
        left = f", {len(r['skipped_files'])} file(s) left out" if r.get("skipped_files") else ""
        return f"checkpoint {r.get('n')} ({label}) {_short(r.get('commit'))}, green: {green}{left}"
    if kind == "salvage":
        return f"salvage:{r.get('n')} saved {_short(r.get('commit'))} before {r.get('reason', '')}"
    if kind == "rollback-intent":
        return f"rollback to {r.get('target')} begins (state before saved as salvage:{r.get('salvage')})"
    if kind == "rollback-done":
        return f"rollback to {r.get('target')} done: {r.get('changed_files', 0)} path(s) restored"
    if kind == "rollback-failed":
        return f"ROLLBACK FAILED at {r.get('step')}: {r.get('error')} (state before: {r.get('salvage_ref')})"
    if kind == "agent-exited":
        return _agent_exited(r)
    if kind == "agent-session":
        return f"agent session {r.get('session_id')} (attempt {r.get('attempt')})"
    if kind == "step":
        return _step(r)
    if kind == "bisect-started":
        return f"bisect of {r.get('gate')} started over {r.get('steps')} step(s)"
    if kind == "bisect-probe":
        return f"bisect {r.get('gate')} on step {r.get('step')}: {r.get('status')}"
    if kind == "bisect":
        return _bisect(r)
    if kind == "steps-pruned":
        return f"{r.get('refs')} step ref(s) pruned ([steps] keep passed; checkpoints kept)"
    if kind == "drift":
        return f"⚠ drift {r.get('drift')}: {r.get('message', '')}"
    fields = ", ".join(f"{k}={_short(v)}" for k, v in r.items() if k not in _SKIP_FIELDS)
    return f"{kind} {fields}".strip()


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


def timestamped(record: dict[str, Any]) -> str:
    """The record's line with its UTC time in front (``HH:MM:SS``)."""
    t = str(record.get("t", ""))
    clock = t[11:19] if len(t) >= 19 else t
    return f"{clock}  {describe(record)}"
