"""Where it broke, during a run: steps kept at every settle, a bisect started at every regression.

The run loop owns one :class:`BreakTracker` and tells it three things: the workspace settled,
an event happened (an evaluation started on a tree, a gate regressed), a rollback restored a
target. The tracker keeps the steps (:mod:`paella_tui.supervisor.store.steps`), runs a bisect in the
background for each regressed gate (:mod:`paella_tui.supervisor.judge.bisect`), and holds what they
found for the recovery facts: where each gate broke, and the last step before the break where
every gate green at the base still passes. Its events go through the loop's ``emit``, so the
ledger, the TUI and ``paella status`` hear the same thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.bisect import Bisection, known_results, last_good_step

# The folds live apart, so that ``paella status`` reads verdicts without the bisect machinery;
# re-exported here for the modules that import them from this one.
from paella_tui.supervisor.judge.break_points import breaks_of as breaks_of
from paella_tui.supervisor.judge.break_points import since_rollback as since_rollback
from paella_tui.supervisor.run.events import (
    BisectFinished,
    BisectStarted,
    BreakPoint,
    DriftDetected,
    EvaluationStarted,
    Event,
    Notice,
)
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.run.state import RunState
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import (
    TAIL_LINES,
    StepKeeper,
    StepRecord,
    prune_expired,
    steps_of,
)

if TYPE_CHECKING:
    from paella_tui.supervisor.judge.frozen import FrozenFiles

log = logging.getLogger(__name__)


class BreakTracker:
    """Keeps a run's steps and finds where regressed gates broke, in the background."""

    def __init__(
        self,
        *,
        run: Run,
        contract: Contract,
        snapshotter: Snapshotter,
        emit: Callable[[Event], None],
        tail: Callable[[int], Sequence[str]],
        attempt: Callable[[], int],
        base: Callable[[], SnapshotRecord | None],
        busy: Callable[[], bool] = lambda: True,
        state: RunState | None = None,
    ) -> None:
        """``busy`` says whether the gates are being judged (a settle then needs a snapshot of
        its own); ``state`` is the run's state as the caller folded it (folded here when None):
        where the bisects found each gate broke, and the newest step, without reading the
        ledger."""
        self._run = run
        self._contract = contract
        self._emit = emit
        self._base = base
        self._busy = busy
        if state is None:
            from paella_tui.supervisor.run.state_store import StateStore

            state = StateStore(run.ledger.path).load().state
        self.steps = StepKeeper(
            run,
            snapshotter,
            emit=emit,
            tail=lambda: tail(TAIL_LINES),
            attempt=attempt,
            newest=state.steps.newest,
        )
        self.breaks: dict[str, BreakPoint] = {
            g: p for g, p in state.breaks.items() if p.verdict != "running"
        }
        """Where each gate broke, as the bisects found (since the last rollback)."""
        self.before_break: SnapshotRecord | None = None
        """The last step before the first break where every gate green at the base passes."""
        self.files: FrozenFiles | None = None
        """The run's protected files as frozen (set once the start tree is known): the bisects
        judge each step with them, as the run's gates do."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._tree: str | None = None
        self._slots: asyncio.Semaphore | None = None

    # -- what the loop tells it ---------------------------------------------------------------

    def start(self, start_tree: str) -> None:
        """The run (or a resume) started on ``start_tree``: keep it as step 0 if there is none,
        and prune the steps of runs that ended longer ago than they are kept."""
        if self.steps.last is None:
            self.steps.note(start_tree)
        store_task = asyncio.get_running_loop().create_task(self._prune(), name="paella-prune")
        self._tasks["\0prune"] = store_task

    def settled(self) -> None:
        """The workspace settled after a change: keep it as a step.

        When no evaluation runs, the one this settle starts snapshots the tree at once and
        :meth:`observe` keeps it: one snapshot serves both. While the gates run, the evaluation
        waits, so the step takes a snapshot of its own (no settled change is lost to the queue).
        """
        if self._busy():
            self.steps.request()

    def observe(self, event: Event) -> None:
        """Follow the run: evaluated trees become steps, regressions start bisects."""
        if isinstance(event, EvaluationStarted):
            self._tree = event.tree
            self.steps.note(event.tree)
        elif isinstance(event, DriftDetected) and event.drift == "regression" and event.gate:
            self.bisect(event.gate, self._tree)

    def rolled_back(self) -> None:
        """A rollback restarted the history: what was found about the abandoned work is void."""
        for name, task in list(self._tasks.items()):
            if not name.startswith("\0"):
                task.cancel()
        self.breaks = {}
        self.before_break = None

    def bisect(self, gate: str, tree: str | None) -> None:
        """Start finding where ``gate`` broke (once at a time per gate)."""
        running = self._tasks.get(gate)
        if running is not None and not running.done():
            return
        self._tasks[gate] = asyncio.get_running_loop().create_task(
            self._bisect(gate, tree), name=f"paella-bisect-{gate}"
        )

    async def idle(self) -> None:
        """Wait for the steps requested and the bisects running (tests, ``paella bisect``)."""
        await self.steps.idle()
        while pending := [t for t in self._tasks.values() if not t.done()]:
            await asyncio.wait(pending)

    async def close(self) -> None:
        """Keep the steps requested; stop the bisects (their gates are killed)."""
        with contextlib.suppress(Exception):
            await self.steps.close()
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def facts(
        self, regressions: Sequence[str]
    ) -> tuple[tuple[BreakPoint, ...], SnapshotRecord | None]:
        """What the recovery facts say of the regressions: their breaks, and the step before."""
        breaks = tuple(self.breaks[g] for g in regressions if g in self.breaks)
        return breaks, self.before_break if breaks else None

    # -- the work -----------------------------------------------------------------------------

    async def _prune(self) -> None:
        from paella_tui.supervisor.run.runs import RunStore

        try:
            await asyncio.to_thread(
                prune_expired, RunStore(self._run.workspace), skip=self._run.run_id
            )
        except Exception as exc:  # pruning is housekeeping: never the run's problem
            log.warning("pruning old steps failed: %s", exc)

    async def _bisect(self, gate_name: str, tree: str | None) -> None:
        await self.steps.idle()
        try:
            gate = self._contract.gate(gate_name)
        except KeyError:
            return
        records = since_rollback(
            await asyncio.to_thread(lambda: list(self._run.ledger.read().records))
        )
        steps = steps_of(records)
        self._emit(BisectStarted(gate=gate_name, tree=tree, steps=len(steps)))
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._contract.gates_config.jobs)
        search = Bisection(
            run=self._run,
            gate=gate,
            steps=steps,
            known=known_results(records, gate, frozen=gate, files=self.files),
            links=self._contract.steps.link,
            slots=self._slots,
            record=self._record_probe,
            bad_tree=tree,
            files=self.files,
        )
        try:
            point = await search.find()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("a bisect failed")
            point = BreakPoint(gate=gate_name, verdict="error", message=f"the bisect failed: {exc}")
        self.breaks[gate_name] = point
        before = await self._before_break(steps, records)
        self.before_break = before.as_target() if before is not None else None
        self._emit(BisectFinished(point=point, before_break=self.before_break))
        if point.verdict == "flaky":
            self._emit(Notice(message=point.message, level="warning"))

    async def _before_break(
        self, steps: list[StepRecord], records: list[dict[str, Any]]
    ) -> StepRecord | None:
        base = self._base()
        names = base.gates_green if base is not None else ()
        gates = [g for g in self._contract.gates if g.name in names]
        if not gates:
            return None
        # Read again: the bisect's own probes answer most of this without another run.
        records = since_rollback(
            await asyncio.to_thread(lambda: list(self._run.ledger.read().records))
        )
        known = {g.name: known_results(records, g, frozen=g, files=self.files) for g in gates}
        try:
            return await last_good_step(
                self._run,
                gates,
                steps,
                list(self.breaks.values()),
                known=known,
                links=self._contract.steps.link,
                slots=self._slots,
                record=self._record_probe,
                files=self.files,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("judging the steps before the break failed")
            return None

    def _record_probe(self, fields: dict[str, Any]) -> None:
        self._run.ledger.append("bisect-probe", **fields)
