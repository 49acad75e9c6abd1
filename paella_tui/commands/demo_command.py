"""``paella demo``: the whole story on a built-in scenario, with nothing to set up.

It builds the demo repository (:mod:`paella_tui.demo.scenario`) in a fresh temporary folder or
``--dir``, starts a supervised run of it, and plays it: in the TUI on a terminal, where the
person makes the recovery choice; or ``--headless``, where ``--on-death rollback`` makes it and a
line of narration introduces each act. At the end it says where the repository is and which
commands to try in it. The exit status is the run's: 0 when done.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.commands.context import warn
from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.run.events import AgentExited, CheckpointTaken, Event, RolledBack
from paella_tui.supervisor.run.runs import Run

if TYPE_CHECKING:
    from paella_tui.supervisor.run.state import RunState

EXIT_INTERRUPTED = 130


@dataclass
class Act:
    """A line of narration, said once, just before (or after) the first event it is about."""

    text: str
    fires: Callable[[Event, int], bool]
    """Given an event and how many attempts have ended so far: is this the act's moment?"""
    after: bool = False
    """Say it after the event's own line (when the event closes the act before it)."""


ACTS = (
    Act(
        "Act 2: the agent breaks an old invariant while fixing episode 3 — watch for the regression.",
        lambda e, _: isinstance(e, CheckpointTaken) and e.record_.episode == 2,
        after=True,
    ),
    Act(
        "Act 3: a rate limit (429). That is a transient failure: paella waits out a short backoff "
        "and retries from the current state, with a handoff.",
        lambda e, ended: isinstance(e, AgentExited) and ended == 0,
    ),
    Act(
        "Act 4: the agent crashes. Recovery: a gate regressed, so the default is to roll back to the "
        "last green checkpoint, salvaging the current state first (--on-death rollback takes it).",
        lambda e, ended: isinstance(e, AgentExited) and ended == 1,
    ),
    Act(
        "Act 5: the resumed agent reads the handoff and finishes episodes 3 and 4. Done is what the "
        "gates say, not the agent.",
        lambda e, _: isinstance(e, RolledBack),
        after=True,
    ),
)
OPENING = (
    "Act 1: the agent builds episodes 1 and 2 — watch the gates turn green and paella "
    "checkpoint each episode."
)


@dataclass
class Narrator:
    """Wraps the headless printer: each act's line of narration, in its place in the story."""

    emit: Callable[[Event, RunState | None], None]
    say: Callable[[str], None]
    _pending: list[Act] = field(init=False, default_factory=lambda: list(ACTS))
    _ended: int = field(init=False, default=0)

    def __call__(self, event: Event, state: RunState | None = None) -> None:
        """Print ``event`` (through the wrapped printer) with any act it begins or ends."""
        due = [act for act in self._pending if act.fires(event, self._ended)]
        for act in due:
            self._pending.remove(act)
        for act in due:
            if not act.after:
                self.say(act.text)
        self.emit(event, state)
        for act in due:
            if act.after:
                self.say(act.text)
        if isinstance(event, AgentExited):
            self._ended += 1


def _narrate(text: str) -> None:
    print(f"\n▶ {text}\n", flush=True)


def _demo_dir(requested: str | None) -> Path:
    """A fresh temporary folder, or ``--dir``: new, empty, or an earlier demo (rebuilt)."""
    from paella_tui.demo.scenario import is_demo

    if requested is None:
        return Path(tempfile.mkdtemp(prefix="paella-demo-")).resolve()
    root = Path(requested).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise UsageError(f"--dir {requested}: not a folder", hint="name a new or empty folder.")
    if root.is_dir() and any(root.iterdir()):
        if not is_demo(root):
            raise UsageError(
                f"--dir {requested}: the folder is not empty, and not an earlier paella demo",
                hint="name a new or empty folder, or leave out --dir for a temporary one. "
                "Nothing was changed.",
            )
        # An earlier demo (its .git holds the marker): everything in it was made by the demo.
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        print(f"paella demo: rebuilding the earlier demo in {root}", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    return root


def _use_tui(args: argparse.Namespace) -> bool:
    if args.headless:
        return False
    if all(os.isatty(fd) for fd in (0, 1, 2)):
        return True
    warn("not a terminal: playing the demo headless (say --headless to silence this)")
    return False


def _play_headless(run: Run) -> int:
    from paella_tui.headless import printer
    from paella_tui.supervisor.run.decisions import policy
    from paella_tui.supervisor.run.run_loop import RunLoop, install_signal_handlers

    contract = run.load_contract()
    assert contract is not None
    narrator = Narrator(emit=printer(), say=_narrate)

    async def main() -> int:
        loop = RunLoop(run=run, contract=contract, emit=narrator, decide=policy("rollback"))
        install_signal_handlers(asyncio.get_running_loop(), loop)
        code = await loop.run()
        if loop.stop_reason and "SIGINT" in loop.stop_reason:
            return EXIT_INTERRUPTED
        return code

    _narrate(OPENING)
    return asyncio.run(main())


def _play_tui(run: Run) -> int:
    # Textual is imported here only: `paella --help` and headless demos never load it.
    from paella_tui.app import PaellaApp, run_app

    contract = run.load_contract()
    assert contract is not None
    app = PaellaApp(run=run, contract=contract, resume=False, on_death="ask")
    return asyncio.run(run_app(app))


def _epilogue(run: Run, code: int) -> str:
    """Where the demo repository is, and the commands worth trying in it."""
    from paella_tui.supervisor.store.checkpoints import records

    root = run.workspace.root
    checkpoints = records(run, "checkpoints")
    salvage = records(run, "salvage")
    verdict = "done: every gate is green" if code == 0 else "not done"
    lines = [
        "",
        f"The demo run is {verdict}. Its repository stays in {root}; look around in it:",
        f"  cd {shlex.quote(str(root))}",
        "  paella status                 the run's state, read from disk",
        "  paella checkpoints            the green checkpoints"
        + (" and the salvage snapshot" if salvage else ""),
        "  paella log                    the whole story, from the ledger",
    ]
    if checkpoints:
        n = next((c.n for c in checkpoints if c.episode == 2), checkpoints[0].n)
        lines.append(f"  paella diff {n:<18}what changed since checkpoint {n}")
    if salvage:
        name = salvage[-1].name
        lines.append(
            f"  paella rollback {name:<14}undo the rollback: the state the crashed attempt left"
        )
    if code != 0:
        lines.append("  paella resume                 continue the run where it stopped")
    lines.append(f"(paella demo --dir {shlex.quote(str(root))} plays it again there.)")
    return "\n".join(lines)


def demo(args: argparse.Namespace) -> int:
    """Build the demo repository, play the supervised run in it, then say where to look."""
    from paella_tui.demo import scenario
    from paella_tui.supervisor.contract.loader import load_contract
    from paella_tui.supervisor.contract.model import CONTRACT_FILE
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    tui = _use_tui(args)
    root = _demo_dir(args.dir)
    scenario.build(root, fast=args.fast)
    workspace = Workspace.find(root)
    contract = load_contract(root / CONTRACT_FILE, default_name=root.name)
    run = RunStore(workspace).create(contract, manual=False)
    # The agent inherits paella's environment: this is how it learns its pace and memory file.
    os.environ.update(scenario.agent_env(root, fast=args.fast))
    if not tui:
        print(
            "paella demo: a scripted agent builds a small event ledger, held to a contract of "
            f"{len(contract.episodes)} episodes and {len(contract.gates)} gates. "
            "No API key, no network.\n"
            f"  repository: {root}\n"
            f"  paella: run {run.run_id} (ledger: {run.ledger.path})",
            flush=True,
        )
    code = _play_tui(run) if tui else _play_headless(run)
    print(_epilogue(run, code), flush=True)
    sys.stdout.flush()
    return code
