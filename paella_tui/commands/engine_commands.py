"""``paella run``, ``resume``, ``gates`` and ``handoff``: the commands that drive the engine."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.commands.context import Context, command_found, warn
from paella_tui.schemas import SCHEMA_VERSION
from paella_tui.supervisor.base.errors import UsageError, WorkspaceError
from paella_tui.supervisor.contract.validation import prompt_file_problem
from paella_tui.supervisor.run.integrity import frozen_contract
from paella_tui.supervisor.run.run_lock import run_lock
from paella_tui.supervisor.run.run_view import RunView, process_alive
from paella_tui.supervisor.run.runs import Run

if TYPE_CHECKING:
    from paella_tui.supervisor.run.decisions import OnDeath
    from paella_tui.supervisor.run.events import Event


def _refuse_if_supervised(run: Run | None) -> None:
    if run is None:
        return
    # The newest run-started or resumed record's paella, as the run's state keeps it.
    view = RunView.load(run)
    pid = view.run_state.supervisor_pid
    alive = bool(pid) and pid != os.getpid() and process_alive(pid, None)
    if alive and view.state() in ("running", "retry-wait", "recovering"):
        raise WorkspaceError(
            f"run {run.run_id} is already supervised by paella pid {pid}",
            hint="watch it with `paella status --watch`, or stop that paella first.",
        )


def _use_tui(args: argparse.Namespace) -> bool:
    """The TUI unless ``--headless``; without a terminal, headless with a one-line notice."""
    if args.headless:
        return False
    if all(os.isatty(fd) for fd in (0, 1, 2)):
        return True
    warn("not a terminal: running headless (say --headless to silence this)")
    return False


_ON_DEATH: dict[str, OnDeath] = {word: word for word in ("ask", "rollback", "continue", "stop")}


def _on_death(args: argparse.Namespace, *, tui: bool) -> OnDeath:
    on_death = args.on_death or ("ask" if tui else "stop")
    if on_death == "ask" and not tui:
        raise UsageError(
            "--on-death ask needs the TUI", hint="headless, choose rollback, continue or stop."
        )
    return _ON_DEATH[on_death]  # argparse's choices are these words


def _supervise(
    run: Run, *, resume: bool, on_death: OnDeath, tui: bool = False, not_before: float | None = None
) -> int:
    from paella_tui.supervisor.run.decisions import policy
    from paella_tui.supervisor.run.run_loop import RunLoop, install_signal_handlers

    contract = run.load_contract()
    frozen = frozen_contract(run)
    if contract is None and frozen.findings:
        raise WorkspaceError(
            frozen.findings[0],
            hint="start a new run with `paella run` (it freezes paella.toml again).",
        )
    if contract is None:
        raise UsageError(
            f"run {run.run_id} has no frozen contract (a manual run)",
            hint="start one with `paella run`.",
        )
    if tui:
        # Textual is imported here only: `paella --help` and headless runs never load it.
        from paella_tui.app import PaellaApp, run_app

        app = PaellaApp(
            run=run, contract=contract, resume=resume, on_death=on_death, not_before=not_before
        )
        return asyncio.run(run_app(app))

    from paella_tui.headless import printer

    async def main() -> int:
        loop = RunLoop(
            run=run,
            contract=contract,
            emit=printer(),
            decide=policy(on_death),
            resume=resume,
            not_before=not_before,
        )
        install_signal_handlers(asyncio.get_running_loop(), loop)
        code = await loop.run()
        if loop.stop_reason and "SIGINT" in loop.stop_reason:
            return 130
        return code

    print(
        f"paella: run {run.run_id} in {run.workspace.root} (ledger: {run.ledger.path})", flush=True
    )
    return asyncio.run(main())


def run(args: argparse.Namespace) -> int:
    """Start a supervised run of the contract."""
    ctx = Context.open()
    ctx.workspace.require_quiet("start a run")
    contract = ctx.contract()
    if not command_found(contract.run.agent, ctx.workspace.root):
        raise UsageError(
            f"the agent command {contract.run.agent[0]!r} is not found on PATH",
            hint="install it, or fix `agent` in paella.toml (`paella check` shows the command). "
            "Nothing was started.",
        )
    if contract.run.prompt_file:
        unreadable = prompt_file_problem(contract.run.prompt_file, ctx.workspace.root)
        if unreadable:
            raise UsageError(
                unreadable, hint="fix prompt_file in paella.toml. Nothing was started."
            )
    tui = _use_tui(args)
    on_death = _on_death(args, tui=tui)
    with run_lock(ctx.workspace, what="paella run"):
        _refuse_if_supervised(ctx.store.current())
        run_ = ctx.store.create(contract, manual=False)
        return _supervise(run_, resume=False, on_death=on_death, tui=tui)


def resume(args: argparse.Namespace) -> int:
    """Continue the newest run (after a death, a stop, or a crash of paella itself)."""
    ctx = Context.open()
    ctx.workspace.require_quiet("resume a run")
    run_ = ctx.current_run()
    assert run_ is not None
    tui = _use_tui(args)
    on_death = _on_death(args, tui=tui)
    with run_lock(ctx.workspace, what="paella resume", run_id=run_.run_id):
        _refuse_if_supervised(run_)
        if RunView.load(run_).state() == "done":
            print(
                f"run {run_.run_id} is already done: every gate was green. "
                "Start a new one with `paella run`."
            )
            return 0
        not_before = _limit_reset(run_, now=getattr(args, "now", False))
        if not_before is not None and not_before < 0:
            return 1
        run_.ledger.append("resumed", paella_pid=os.getpid())
        return _supervise(run_, resume=True, on_death=on_death, tui=tui, not_before=not_before)


def _limit_reset(run_: Run, *, now: bool) -> float | None:
    """When the run stopped on the agent's far limit reset: the time to wait for (a wait within
    `[retry] max_wait`), -1 after refusing (further away), None when there is nothing to wait
    for or `--now` says not to."""
    retry = RunView.load(run_).retry()
    until = retry.get("until") if retry else None
    if now or not isinstance(until, int | float) or until <= time.time():
        return None
    contract = RunView.load(run_).contract
    max_wait = contract.retry.max_wait if contract is not None else 0.0
    when = datetime.fromtimestamp(until).astimezone()
    if until - time.time() > max_wait:
        print(
            f"paella: the agent's limit resets {when:%a %d %b %H:%M} local time: resume after "
            "then, or now anyway with `paella resume --now`",
            file=sys.stderr,
        )
        return -1.0
    print(f"paella: waiting until {when:%H:%M} local time, when the agent's limit resets")
    return float(until)


def gates(args: argparse.Namespace) -> int:
    """Evaluate every gate once on the current tree and print the results (exit 1 if any is red)."""
    from paella_tui.headless import describe_event

    ctx = Context.open()
    # A judgement, not a change: no checkpoint, and no run opened for it. With a run, its
    # ledger records the verdict (the TUI and `status` then show the tree as it is), so it is
    # judged as the run judges: by the run's contract as frozen, protected files at their frozen
    # content (never by a paella.toml or a check the agent may have edited). Without one, by
    # the workspace's paella.toml, the gates running in a throwaway folder removed afterwards.
    current = ctx.store.current()
    if current is not None:
        ctx.report(current)
    run_ = current or Run(ctx.workspace, f"gates-{os.getpid()}-{secrets.token_hex(2)}")
    view = RunView.load(run_) if current is not None else None
    contract = view.contract if view is not None and view.contract is not None else ctx.contract()

    def emit(event: Event) -> None:
        if event.kind is not None and current is not None:
            run_.ledger.append(event.kind, **event.record())
        if not args.json:
            line = describe_event(event)
            if line is not None:
                print(line, flush=True)

    async def main() -> int:
        from paella_tui.supervisor.run.offline import judging_evaluator

        evaluator = await judging_evaluator(run_, contract, emit, view)
        try:
            finished = await evaluator.evaluate("paella gates", force=True)
        finally:
            await evaluator.close()
            if current is None:
                shutil.rmtree(run_.dir, ignore_errors=True)
        if args.json:
            print(
                json.dumps(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "tree": finished.tree,
                        "stale": finished.stale,
                        "complete_episodes": finished.complete_episodes,
                        "frozen": list(finished.frozen),
                        "gates": [
                            {
                                "name": r.gate,
                                "status": r.status,
                                "duration_s": round(r.duration_s, 3),
                                "exit_code": r.exit_code,
                                # Without a run the logs went with the throwaway folder.
                                "log": r.log_path if current is not None else None,
                                "failed_tests": list(r.failed_tests),
                                "message": r.message,
                            }
                            for r in finished.results
                        ],
                    },
                    indent=2,
                )
            )
        return (
            0
            if finished.results and all(r.green for r in finished.results) and not finished.stale
            else 1
        )

    return asyncio.run(main())


def handoff(args: argparse.Namespace) -> int:
    """Write the newest run's handoff (to ``handoff.md`` and ``-o FILE``); print it without ``-o``."""
    from paella_tui.supervisor.base.files import write_atomic
    from paella_tui.supervisor.run.handoff import (
        handoff_inputs_from_view,
        render_handoff,
        write_handoff,
    )
    from paella_tui.supervisor.store.tree_diff import changes_between

    ctx = Context.open()
    out_problem = _output_problem(args.output) if args.output else None
    if out_problem:
        raise UsageError(
            f"-o {args.output}: {out_problem}", hint="name a file. Nothing was written."
        )
    run_ = ctx.current_run()
    assert run_ is not None
    view = RunView.load(run_)
    if view.contract is None:
        raise UsageError(
            f"run {run_.run_id} has no contract (a manual run): there is nothing to hand off"
        )
    snapshotter = ctx.snapshotter(run_)
    now = snapshotter.take_locked().tree
    base = view.last_green_checkpoint
    start = next((r["tree"] for r in view.of_kind("run-tree")), None)
    since = base.tree if base else (start or now)
    changes = [
        (c.path, c.added or 0, c.removed or 0) for c in changes_between(ctx.workspace, since, now)
    ]
    text = render_handoff(handoff_inputs_from_view(view, changes=changes))
    path = write_handoff(run_.dir, text)
    if args.output:
        out = Path(args.output)
        write_atomic(out, text)
        print(f"✓ handoff written to {out} (and {path})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _output_problem(output: str) -> str | None:
    """Why ``-o FILE`` cannot be written (a folder, a missing or unwritable folder), or None."""
    path = Path(output)
    if output.endswith("/") or path.is_dir():
        return "is a folder"
    parent = path.parent
    if not parent.is_dir():
        return f"its folder {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"its folder {parent} is not writable"
    if path.exists() and not path.is_file():
        return "is not a regular file"
    return None
