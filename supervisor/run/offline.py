"""What a person can do to a run with no run loop alive (after a stop, or from the command line):
judge every gate once, take a manual checkpoint, roll back. The engine makes and records the
events; the caller shows them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.byproducts import snapshotter_for
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.judge.frozen import FrozenFiles, GateFolder
from paella_tui.supervisor.run.events import CheckpointTaken, EvaluationFinished, Event, RolledBack
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, take_checkpoint
from paella_tui.supervisor.store.rollback import rollback


async def judging_evaluator(
    run_: Run, contract: Contract, emit: Callable[[Event], None], view: RunView | None
) -> Evaluator:
    """An evaluator that judges the tree for a person (``paella gates``, ``g`` with no agent):
    it takes no checkpoint, and what counts as "was green" starts at the last rollback, so a
    gate green only on abandoned work is no regression. For a run with a contract it judges as
    the run does: protected files at their frozen content (a tree where the agent edited a
    check to pass is judged with the check as frozen), since its verdict goes into the run's
    ledger and from there into ``status`` and the TUI."""
    evaluator = Evaluator(
        run=run_,
        contract=contract,
        emit=emit,
        snapshotter=snapshotter_for(run_.workspace, contract),
        base=view.last_green_checkpoint if view is not None else None,
        checkpoints=False,
    )
    if view is not None:
        # The run's folded state (no ledger read): its latest verdicts, and "was green" as the
        # state's rule has it, which starts again at the last rollback.
        evaluator.adopt(view.run_state, with_base=False)
        folder = await asyncio.to_thread(_gate_folder, run_, contract, view)
        if folder is not None:
            evaluator.judge_frozen(folder)
    return evaluator


def _gate_folder(run_: Run, contract: Contract, view: RunView) -> GateFolder | None:
    """Where a run's gates run, protected files frozen; None for a run with no contract (a
    manual run) or none started yet (no start tree: nothing is frozen)."""
    if view.contract is None:
        return None
    frozen = FrozenFiles.of_state(run_, contract, view.run_state)
    return None if frozen is None else GateFolder(frozen, links=contract.steps.link)


async def judge_once(
    run_: Run, contract: Contract, emit: Callable[[Event], None], view: RunView | None
) -> EvaluationFinished:
    """Every gate once on the tree as it is, each event recorded in the run's ledger, then
    handed to ``emit``."""

    def record(event: Event) -> None:
        if event.kind is not None:
            run_.ledger.append_soon(event.kind, **event.record())
        emit(event)

    evaluator = await judging_evaluator(run_, contract, record, view)
    try:
        return await evaluator.evaluate("g", force=True)
    finally:
        await evaluator.close()


def checkpoint_now(run_: Run, contract: Contract | None) -> CheckpointTaken:
    """A manual checkpoint with no gates judged (so none claimed green), recorded. Blocks."""
    record = take_checkpoint(
        run_, snapshotter_for(run_.workspace, contract), episode="manual", label="manual checkpoint"
    )
    return CheckpointTaken(record_=record)


def roll_back_now(run_: Run, contract: Contract | None, target: SnapshotRecord) -> RolledBack:
    """The engine's rollback to ``target``, salvaging the tree first, recorded. Blocks."""
    result = rollback(run_, target, snapshotter=snapshotter_for(run_.workspace, contract))
    return RolledBack(target=target, salvage=result.salvage)


def tree_now(run_: Run, why: str = "a snapshot for the diff") -> str:
    """The tree of the workspace now: a snapshot under paella's lock, with the run's contract's
    exclusions (blocking git: from asyncio, call it in a thread)."""
    snapshotter = snapshotter_for(run_.workspace, run_.load_contract())
    return snapshotter.take_locked(why).tree
