"""Recovery (SPEC 9): the facts of an attempt that ended without the run being done, the decision
asked through the :class:`~paella_tui.supervisor.run.decisions.DecisionChannel`, the rollback it
may call for, and the handoff written for the next attempt (or a person)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.breaks import BreakTracker
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.run.decisions import Decision, DecisionChannel
from paella_tui.supervisor.run.events import (
    AgentExited,
    Ending,
    EvaluationFinished,
    Event,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RecoveryFacts,
    RecoveryNeeded,
    RolledBack,
)
from paella_tui.supervisor.run.handoff import (
    handoff_inputs_from_view,
    render_handoff,
    write_handoff,
)
from paella_tui.supervisor.run.integrity import ensure_snapshot
from paella_tui.supervisor.run.recovery_facts import JudgedTree, recovery_facts
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.run.state import RunState
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter
from paella_tui.supervisor.store.tree_diff import changes_between


class Recovery:
    """The run loop's recovery desk: asks, rolls back, writes the handoff."""

    def __init__(
        self,
        *,
        run: Run,
        contract: Contract,
        snapshotter: SequencedSnapshotter,
        evaluator: Evaluator,
        breaks: BreakTracker,
        decisions: DecisionChannel,
        emit: Callable[[Event], None],
        run_state: Callable[[], RunState],
    ) -> None:
        self.run_ = run
        self.contract = contract
        self.snapshotter = snapshotter
        self.evaluator = evaluator
        self.breaks = breaks
        self.decisions = decisions
        self.emit = emit
        self.run_state = run_state
        """The run's state now (its regressions are the one rule's)."""
        self.start_tree: str | None = None
        """The tree the run started on (changes are counted from it before any checkpoint)."""
        self.evaluating_tree: str | None = None
        """The tree the final evaluation judges, once it is snapshotted (None before: a pass on
        an older tree may still run then, and the facts snapshot the tree themselves)."""
        self.protected_note: str | None = None
        """Said once after how the next attempt ended: protected files changed."""
        self.auto_recoveries = 0

    async def ask(
        self, ending: Ending, exited: AgentExited, finished: EvaluationFinished | None
    ) -> Decision:
        """The facts out, the decision in (and recorded). The handoff is written once the
        decision is known: once per death (the loop writes it)."""
        facts = await asyncio.to_thread(self.facts, ending, exited, finished)
        self.emit(RecoveryNeeded(facts=facts))
        decision = await self.decisions.receive(facts)
        if decision.by == "policy":
            self.auto_recoveries += 1
            if self.auto_recoveries > self.contract.retry.max_attempts:
                self.emit(
                    Notice(
                        message=f"{self.auto_recoveries - 1} automatic recoveries already: "
                        "stopping instead",
                        level="warning",
                    )
                )
                decision = Decision("stop", by="policy (limit)")
        target = decision.target or (self.evaluator.base if decision.choice == "rollback" else None)
        self.emit(
            RecoveryChosen(
                choice=decision.choice, target=target.name if target else None, by=decision.by
            )
        )
        return decision

    def facts(
        self, ending: Ending, exited: AgentExited, finished: EvaluationFinished | None
    ) -> RecoveryFacts:
        """The facts of SPEC 9; without a finished final evaluation, the newest known results."""
        if finished is not None:
            judged = JudgedTree(finished.tree, finished.results, final=True)
        else:
            # Without a verdict yet, the tree the final evaluation is judging is the one to
            # describe (a snapshot of our own would cost as much again).
            tree = self.evaluating_tree or self.snapshot_tree()
            judged = JudgedTree(tree, tuple(self.evaluator.latest.values()), final=False)
        base = self.evaluator.base
        note, self.protected_note = self.protected_note, None
        return recovery_facts(
            ending=ending,
            exited=exited,
            judged=judged,
            base=base,
            since=base.tree if base else (self.start_tree or judged.tree),
            regressed=self.run_state().regressed,
            workspace=self.run_.workspace,
            breaks=self.breaks,
            note=note,
        )

    async def roll_back_or_say(self, target: SnapshotRecord | None) -> None:
        """Roll back to ``target`` and judge the restored tree; without one, say so."""
        if target is None:
            self.emit(
                Notice(
                    message="no green checkpoint to roll back to: continuing from the current state",
                    level="warning",
                )
            )
            return
        await self.roll_back(target)
        # Judge the restored tree (its results are cached) so the handoff tells the next
        # attempt the truth about what is green now.
        await self.evaluator.evaluate("after the rollback")

    async def roll_back(self, target: SnapshotRecord) -> None:
        """Restore ``target`` (salvaging the tree first); the base follows."""
        # The watcher sees the restored files and queues an evaluation; the restored tree's
        # results are cached, so it re-runs nothing. A snapshot deleted or pruned in the
        # repository comes back from the mirror first.
        await asyncio.to_thread(ensure_snapshot, self.run_, target.ref, target.commit)
        result = await asyncio.to_thread(rollback, self.run_, target, snapshotter=self.snapshotter)
        restored = (
            target if target.kind == "checkpoints" and isinstance(target.episode, int) else None
        )
        if target.kind == "steps":
            # A step is no checkpoint: the base it came after stays the last green checkpoint.
            restored = self.evaluator.base
        self.evaluator.set_base(restored, restart_history=True)
        self.breaks.rolled_back()
        self.emit(RolledBack(target=target, salvage=result.salvage))

    async def write_handoff(self, *, ending: str) -> Path:
        """Write the handoff (the attempt ended ``ending``, in words); its path."""
        text = await asyncio.to_thread(self._render_handoff, ending)
        path = write_handoff(self.run_.dir, text)
        self.emit(HandoffWritten(path=str(path), size=len(text.encode())))
        return path

    def _render_handoff(self, ending: str) -> str:
        view = RunView.load(self.run_)
        base = self.evaluator.base
        now_tree = self.snapshot_tree()
        since = base.tree if base else (self.start_tree or now_tree)
        changes = [
            (c.path, c.added or 0, c.removed or 0)
            for c in changes_between(self.run_.workspace, since, now_tree)
        ]
        return render_handoff(handoff_inputs_from_view(view, changes=changes, ending=ending))

    def snapshot_tree(self) -> str:
        """The tree of the work tree now (a snapshot, under the snapshotter's lock)."""
        return self.snapshotter.take_locked().tree
