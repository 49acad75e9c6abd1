"""The run loop's drift checks (SPEC 8): path drift of each verdict's tree in the background,
history drift and the run's integrity after each attempt, a stalled agent, a claimed done, and
protected files changed under green gates. Each finding is emitted as a ``DriftDetected``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.drift import DriftTracker
from paella_tui.supervisor.run.events import DriftDetected, EvaluationFinished, Event
from paella_tui.supervisor.run.integrity import check_run
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord


class DriftChecks:
    """Judges drift for a run loop; knows the run's start tree once :meth:`start` was called."""

    def __init__(self, *, run: Run, contract: Contract, emit: Callable[[Event], None]) -> None:
        self.run_ = run
        self.contract = contract
        self.emit = emit
        self.tracker: DriftTracker | None = None
        self.background: set[asyncio.Task[None]] = set()
        """The path-drift checks still running (cancelled when the loop ends)."""
        self._reported: set[str] = set()

    def start(self, start_tree: str, contract_sha256: str) -> None:
        """Judge drift against ``start_tree`` (the tree the run started on) from now on."""
        self.tracker = DriftTracker(
            workspace=self.run_.workspace,
            contract=self.contract,
            start_tree=start_tree,
            contract_sha256=contract_sha256,
        )

    def observe(self, event: Event) -> None:
        """A verdict's tree is checked for path drift (git diff-tree: in a thread, reported when
        it answers)."""
        if isinstance(event, EvaluationFinished) and not event.stale and self.tracker is not None:
            task = asyncio.get_running_loop().create_task(self._check_tree(event.tree))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _check_tree(self, tree: str) -> None:
        assert self.tracker is not None
        try:
            found = await asyncio.to_thread(self.tracker.check_tree, tree)
        except GitError:
            # The tree or the start tree is gone: something pruned the repository's objects under
            # paella (an agent's `git gc --prune=now`). The integrity check after the attempt says
            # so as history drift and restores what the mirror holds; this tree's path drift
            # cannot be known, and the next verdict's tree is checked again.
            return
        for drift in found:
            self.emit(drift)

    async def settled(self) -> None:
        """Wait for the path-drift checks of the evaluations so far."""
        while pending := [task for task in self.background if not task.done()]:
            await asyncio.wait(pending)

    async def integrity(self) -> None:
        """``history`` drift for state changed outside paella (refs, ledger, frozen contract),
        restored from the mirror where it can be; each finding is said once."""
        for finding in await asyncio.to_thread(check_run, self.run_, restore=True):
            if finding not in self._reported:
                self._reported.add(finding)
                self.emit(DriftDetected(drift="history", message=finding))

    async def history(self, base: SnapshotRecord | None) -> None:
        """The run's integrity, then history drift since the base's head."""
        assert self.tracker is not None
        await self.integrity()
        head = base.head if base else None
        for drift in await asyncio.to_thread(self.tracker.check_history, head):
            self.emit(drift)

    def claimed_done(self, exit_code: int | None, red: list[str]) -> None:
        """The agent exited 0 (claiming done) with gates red."""
        assert self.tracker is not None
        for drift in self.tracker.check_claimed_done(exit_code, red):
            self.emit(drift)

    def stall(self, last_activity: float, now: float) -> None:
        """The agent did nothing for longer than the contract allows."""
        if self.tracker is not None:
            for drift in self.tracker.check_stall(last_activity, now):
                self.emit(drift)

    async def protected_paths(self, tree: str) -> list[str]:
        """Protected paths whose content on ``tree`` differs from their frozen content."""
        assert self.tracker is not None
        return await asyncio.to_thread(self.tracker.protected_changes, tree)

    async def protected(self, tree: str) -> str | None:
        """Protected files differ on ``tree`` from their frozen content: said as drift; the note
        for the recovery screen, or None when none did."""
        touched = await self.protected_paths(tree)
        if not touched:
            return None
        # The judge is the contract as frozen: green gates over edited tests or an edited
        # contract prove nothing until a person accepts or reverts the change.
        self.emit(
            DriftDetected(
                drift="protected",
                message=(
                    f"not done: {some_paths(touched)} differ from their frozen content (the "
                    "gates judged that, not the change), and the contract protects them. A "
                    "person decides: accept or revert them in the TUI (`paella resume`), or "
                    "revert them and resume."
                ),
            )
        )
        # Said on the recovery screen: revert (roll back) or accept (continue).
        return f"protected files changed: {some_paths(touched)}"


def some_paths(paths: list[str]) -> str:
    """The first three paths, and how many more."""
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
