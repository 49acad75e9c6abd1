"""``paella status`` (text, ``--json``, ``--watch``, ``--tmux``) and ``paella log [-f]``, read from disk."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from paella_tui.commands.context import Context
from paella_tui.commands.tmux_line import tmux_line
from paella_tui.schemas import SCHEMA_VERSION
from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run

if TYPE_CHECKING:
    import argparse  # the parser's namespace: `paella status` may be read without argparse

_GATE_MARK = {
    "pass": "✓",
    "flaky": "✓",
    "fail": "✗",
    "timeout": "✗",
    "error": "✗",
    "running": "●",
    "pending": "◌",
    "stale": "◌",
}


def _agent_line(agent: dict[str, Any]) -> str:
    if agent["pid"] is None:
        return "agent: not started"
    if agent["alive"]:
        alive = "alive"
    elif agent["signal"] is not None:
        alive = f"ended by signal {agent['signal']}"
    elif agent["exit_code"] is not None:
        alive = f"ended with exit {agent['exit_code']}"
    else:
        alive = "not running (no end was recorded)"
    return f"agent: pid {agent['pid']}, attempt {agent['attempt']}, {alive}"


def _text(status: dict[str, Any]) -> str:
    lines = [f"run {status['run_id']} · {status['state']}" + ("  ✓ done" if status["done"] else "")]
    agent = status["agent"]
    lines.append(_agent_line(agent))
    usage = Usage.from_record(agent.get("usage"))
    if not usage.empty:
        lines.append(f"agent reported: {usage.describe()}")
    if agent.get("session_id"):
        lines.append(f"agent session: {agent['session_id']}")
    retry = status.get("retry")
    if retry and isinstance(retry.get("until"), int | float):
        at = time.strftime("%a %d %b %H:%M", time.localtime(retry["until"]))
        lines.append(f"next attempt not before {at}: {retry.get('reason')}")
    sup = status.get("supervisor") or {}
    if status["state"] == "dead" and sup.get("pid"):
        alive = "still runs, unsupervised" if agent["alive"] else "is gone too"
        lines.append(
            f"⚠ the paella that supervised this run (pid {sup['pid']}) is gone; the agent {alive}."
            " `paella resume` stops any leftover and continues the run."
        )
    if status["contract"]["changed"]:
        lines.append("⚠ paella.toml changed since the run started; the run keeps the frozen copy")
    if status["episodes"]:
        lines.append("episodes:")
        for e in status["episodes"]:
            mark = "✓" if e["complete"] else ("●" if e["n"] == status["current_episode"] else "◌")
            where = f" (checkpoint {e['checkpoint']})" if e["checkpoint"] else ""
            lines.append(f"  {mark} {e['n']}. {e['name']}{where}")
    if status["gates"]:
        lines.append("gates:")
        for g in status["gates"]:
            mark = _GATE_MARK.get(g["status"], "?")
            extra = (
                " ⚠ REGRESSED (was green)"
                if g["regressed"]
                else (" (was green)" if g["ever_green"] else "")
            )
            took = f" {g['duration_s']:.1f}s" if g.get("duration_s") is not None else ""
            lines.append(f"  {mark} {g['name']}: {g['status']}{took}{extra}")
    green = status["last_green_checkpoint"]
    lines.append(
        f"checkpoints: {len(status['checkpoints'])}, salvage: {len(status['salvage'])}, "
        f"last green: {green if green is not None else 'none yet'}"
    )
    for d in status["drift"][-5:]:
        lines.append(f"⚠ {d['kind']}: {d['message']}")
    lines += _regression_lines(status)
    return "\n".join(lines)


def _regression_lines(status: dict[str, Any]) -> list[str]:
    lines = []
    for r in status.get("regressions", ()):
        if r.get("broke_at"):
            lines.append(
                f"⚠ {r['gate']} {r['broke_at']['headline']}: `paella diff step:{r['broke_at']['step']}`"
            )
        elif r.get("bisect") == "running":
            lines.append(f"◌ {r['gate']}: finding the step where it broke")
        elif r.get("message"):
            lines.append(f"◌ {r['message']}")
    return lines


def _wait_for_first_run(ctx: Context) -> Run:
    """Block until a run exists (``--watch`` and ``-f`` may be laid out in panes first)."""
    print(f"waiting for a run in {ctx.workspace.root} (start one with `paella run`)…", flush=True)
    while True:
        run = ctx.store.current()
        if run is not None:
            ctx.report(run)
            return run
        time.sleep(1.0)


def status(args: argparse.Namespace) -> int:
    """Print the newest run's state; with --watch, again every 2 seconds."""
    ctx = Context.open()
    if args.tmux:
        run = ctx.store.current()
        view = RunView.load(run, verify_mirror=False) if run else None
        print(tmux_line(view.to_json() if view else None))
        return 0
    run = ctx.current_run(required=not args.json and not args.watch)
    if run is None and args.watch:
        run = _wait_for_first_run(ctx)
    if run is None:
        print(json.dumps(None))
        return 0
    while True:
        data = RunView.load(run).to_json()
        if args.json:
            print(
                json.dumps({"schema_version": SCHEMA_VERSION, **data}, indent=2, ensure_ascii=False)
            )
        else:
            if args.watch:
                print("\x1b[H\x1b[2J", end="")
            print(_text(data))
        if not args.watch:
            return 0
        time.sleep(2.0)
        run = ctx.store.current() or run


def log(args: argparse.Namespace) -> int:
    """Print the ledger of the newest run; with -f, keep printing new records."""
    from paella_tui.ledger_text import timestamped  # only `log` formats records

    ctx = Context.open()
    run = ctx.current_run(required=not args.follow)
    if run is None:
        run = _wait_for_first_run(ctx)
    shown = 0
    while True:
        records = run.ledger.read().records
        for record in records[shown:]:
            line = timestamped(record)
            if line is not None:
                print(line, flush=True)
        shown = len(records)
        if not args.follow:
            return 0
        time.sleep(0.5)
