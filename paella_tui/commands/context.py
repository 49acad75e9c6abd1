"""What every command starts from: the workspace, its newest run, and the warnings a person must see first."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.judge.byproducts import snapshotter_for
from paella_tui.supervisor.run.integrity import check_run
from paella_tui.supervisor.run.run_lock import holder
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.run.state_store import StateStore
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.contract.model import Contract


def warn(message: str) -> None:
    """Print a warning a person must act on, to stderr."""
    print(f"paella: warning: {message}", file=sys.stderr)


def command_found(argv: tuple[str, ...], root: object) -> bool:
    """Whether the command ``argv[0]`` can be found (on PATH, or as a path from ``root``)."""
    first = argv[0]
    if "/" in first:
        return shutil.which(first, path=str(root)) is not None or shutil.which(first) is not None
    return shutil.which(first) is not None


def use_color() -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


@dataclass
class Context:
    """The workspace and its run store, opened from the current folder."""

    workspace: Workspace
    store: RunStore

    @classmethod
    def open(cls) -> Context:
        """Find the workspace from the current folder (exit 3 if there is none)."""
        workspace = Workspace.find()
        return cls(workspace, RunStore(workspace))

    def contract(self) -> Contract:
        """The live ``paella.toml`` of the workspace (exit 2 with every problem if it is broken)."""
        # Imported here, as below: a command that never reads a contract (a checkpoint of a
        # manual run) does not pay for the reader's start-up (issue 17).
        from paella_tui.supervisor.contract.loader import load_contract
        from paella_tui.supervisor.contract.model import CONTRACT_FILE

        return load_contract(
            self.workspace.root / CONTRACT_FILE, default_name=self.workspace.root.name
        )

    def current_run(self, *, required: bool = True, restore: bool = False) -> Run | None:
        """The newest run, after warning about anything it left unfinished."""
        run = self.store.current()
        if run is None:
            if required:
                raise UsageError(
                    f"no run yet in {self.workspace.root}",
                    hint="start one with `paella run`, or take a checkpoint with `paella checkpoint`.",
                )
            return None
        self.report(run, restore=restore)
        return run

    def run_for_writing(self, reason: str) -> Run:
        """The newest run, or a manual run opened to hold ``reason`` when there is none."""
        run = self.store.current_or_manual(reason)
        self.report(run, restore=True)
        return run

    def report(self, run: Run, *, restore: bool = False) -> None:
        """Warn about state that was tampered with (restoring it from the mirror when asked),
        a skipped ledger line, or an interrupted rollback of ``run``."""
        if self.store.restored:
            warn(f"history: {self.store.restored}")
        # Restoring is safe whenever no supervisor is writing this run's state.
        findings = check_run(run, restore=restore or holder(self.workspace) is None)
        for finding in findings:
            warn(f"history: {finding}")
        folded = StateStore(run.ledger.path).load()
        for line in folded.said:
            if "hash chain" not in line:  # said above, as history drift
                warn(line)
        if folded.state.pending_rollback is not None:
            from paella_tui.supervisor.store.rollback import interrupted_rollback

            pending = interrupted_rollback(run)
            if pending is not None:
                warn(pending.advice())

    def snapshotter(self, run: Run | None) -> Snapshotter:
        """A snapshotter with the size cap of the run's frozen contract (or the default)."""
        return snapshotter_for(self.workspace, run.load_contract() if run is not None else None)
