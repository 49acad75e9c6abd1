"""Judging trees: the evaluation queue, the gate cache, green checkpoints and regressions (SPEC 6, 8).
An evaluation snapshots the workspace (tree T) and judges every contract gate on T. Results are
cached by (gate definition, T), and a gate with ``paths`` keeps its result while nothing under
its paths changed. At most one evaluation runs and at most one waits: a newer trigger replaces
the waiting one, and a running evaluation is never restarted, so a long gate is not killed on
every keystroke and a change during it is never lost.

A gate result is stale when the tree moved while the gate ran (under its ``paths``, for a gate
that has them): it is shown as such (its
``GateFinished`` has ``stale=True``) but never cached, never used for a checkpoint or a
regression, and another evaluation is queued. The tree is checked right after each gate ends,
so a short gate's verdict is shown (and kept) without waiting for the longest gate; any full scan
begun after the gate ended is that check (:mod:`tree_moved`: gates ending together share one).

When an evaluation shows more episodes complete on T than on the base, T becomes a green
checkpoint at once and the new base. Regressions follow the run state's one rule
(:mod:`paella_tui.supervisor.run.state`), reported once per fall, naming where it was green.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.contract.model import Contract, Gate
from paella_tui.supervisor.judge.evaluation_queue import (
    EvaluatorClosed as EvaluatorClosed,
)
from paella_tui.supervisor.judge.evaluation_queue import Pass, Request, as_stale, fail
from paella_tui.supervisor.judge.frozen import GateFolder, Judged
from paella_tui.supervisor.judge.gate_cache import GateCache
from paella_tui.supervisor.judge.gates import log_tail, next_log_path, run_gate
from paella_tui.supervisor.judge.green_checkpoint import green_checkpoint
from paella_tui.supervisor.judge.regression_text import regression_message
from paella_tui.supervisor.judge.tree_moved import moved_under_gate
from paella_tui.supervisor.run.events import (
    CheckpointTaken,
    DriftDetected,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    GateFinished,
    GateResult,
    GateStarted,
    Notice,
)
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.run.state import (
    ContractSpec,
    RunState,
    add_green_tree,
    complete_episodes,
    green_after_rollback,
    is_regression,
)
from paella_tui.supervisor.run.state_store import fold_records
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.sequenced import take_fresh
from paella_tui.supervisor.store.snapshot import Snapshot, Snapshotter

log = logging.getLogger(__name__)

CHANGED_DURING_GATES = "changed during gates"
"""The reason of the evaluation queued because the tree moved under a running gate."""

MAX_STALE_STREAK = 5
"""Stale evaluations in a row after which the evaluator stops queueing another by itself (a gate
that changes a tracked file on every run would otherwise loop forever)."""

_TRIGGER_WINDOW_S = 60.0


class Evaluator:
    """Judges workspace trees against the contract's gates, one evaluation at a time."""

    def __init__(
        self,
        *,
        run: Run,
        contract: Contract,
        snapshotter: Snapshotter,
        emit: Callable[[Event], None],
        jobs: int | None = None,
        base: SnapshotRecord | None = None,
        history: Iterable[dict[str, Any]] = (),
        checkpoints: bool = True,
    ) -> None:
        """Set up the evaluator; ``history`` (ledger ``gate-finished`` records) seeds a resumed run;
        ``checkpoints=False`` judges without ever taking a checkpoint (``paella gates``)."""
        self._takes_checkpoints = checkpoints
        self._run = run
        self._contract = contract
        self._snapshotter = snapshotter
        self._emit = emit
        self._jobs = max(1, jobs if jobs is not None else contract.gates_config.jobs)
        self._base = base
        self._cache = GateCache(contract.gates, run.workspace.git)
        self._latest: dict[str, GateResult] = {}
        self._spec = ContractSpec.of(contract)
        # The trees each gate was green on (at most two: the run state's regression rule).
        self._green_on: dict[str, frozenset[str]] = {}
        self._regressed: set[str] = set()
        self._epoch = 0
        """Bumped by a rollback: evaluations that started before it judge an abandoned tree."""
        self._waiting: Request | None
        self._running: Request | None
        self._waiting = self._running = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()  # nothing runs or waits yet
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._triggers: deque[float] = deque()
        self._stale_streak = 0
        self._folder: GateFolder | None = None
        self.seed(history)

    def judge_frozen(self, folder: GateFolder) -> None:
        """Judge protected files at their frozen content from now on (the run's judge)."""
        self._folder = folder

    @property
    def latest(self) -> dict[str, GateResult]:
        """The newest non-stale result of each gate (a copy)."""
        return dict(self._latest)

    @property
    def ever_green(self) -> dict[str, frozenset[str]]:
        """For each gate ever green in this run, trees it was green on (at most two, see state)."""
        return dict(self._green_on)

    @property
    def regressed(self) -> frozenset[str]:
        """Gates red now on the latest tree after being green on an earlier one."""
        return frozenset(self._regressed)

    @property
    def base(self) -> SnapshotRecord | None:
        """The last green checkpoint (SPEC 6): what recovery offers to roll back to."""
        return self._base

    @property
    def complete_on_base(self) -> int:
        """How many episodes are complete at the base (0 without one)."""
        base = self._base
        if base is None:
            return 0
        from_gates = complete_episodes(self._spec, base.gates_green)
        return max(from_gates, base.episode if isinstance(base.episode, int) else 0)

    def set_base(self, record: SnapshotRecord | None, *, restart_history: bool = False) -> None:
        """Make ``record`` the base (after a rollback restored it; None: no green base).

        With ``restart_history`` (a rollback), what counts as "was green" starts again from the
        restored checkpoint: a gate that passed only on the abandoned work is not a regression.
        """
        self._base = record
        if restart_history:
            self._epoch += 1
            self._green_on = green_after_rollback(record)
            self._regressed = set()

    @property
    def busy(self) -> bool:
        """Whether an evaluation runs now (a new request waits instead of snapshotting at once)."""
        return self._running is not None

    def triggers_last_minute(self) -> int:
        """How many times :meth:`request` was called in the last 60 seconds (the flapping guard)."""
        self._prune_triggers()
        return len(self._triggers)

    def request(self, reason: str, *, force: bool = False, follow_changes: bool = False) -> None:
        """Ask for an evaluation (non-blocking); it replaces one waiting, never a running one.

        ``follow_changes``: the watcher's settled batch asks, so the snapshot may look at the
        changed paths only; any other trigger (an exit, a person) snapshots everything.
        """
        if self._closed:
            return
        self._triggers.append(time.monotonic())
        self._prune_triggers()
        self._enqueue(reason, force, follow_changes)

    async def evaluate(
        self,
        reason: str,
        *,
        force: bool = False,
        on_tree: Callable[[str], None] | None = None,
    ) -> EvaluationFinished:
        """Request an evaluation and return the verdict of the one that covers this request;
        ``on_tree`` is told the tree that one judges as soon as it is snapshotted (a pass that
        started before this request, on an older tree, may still be running meanwhile)."""
        if self._closed:
            raise EvaluatorClosed("the gate evaluator is closed")
        self.request(reason, force=force)
        assert self._waiting is not None
        future: asyncio.Future[EvaluationFinished] = asyncio.get_running_loop().create_future()
        self._waiting.waiters.append(future)
        if on_tree is not None:
            self._waiting.on_tree.append(on_tree)
        return await future

    async def idle(self) -> None:
        """Return once no evaluation runs or waits."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop: cancel the evaluation in progress (killing its gates' process trees)."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None and not worker.done():
            worker.cancel()
            # wait() rather than await: the worker's cancellation is not ours to re-raise.
            await asyncio.wait([worker])
        if self._folder is not None:
            await asyncio.to_thread(self._folder.close)
        for request in (self._running, self._waiting):
            if request is not None:
                fail(request, EvaluatorClosed("the gate evaluator was closed"))
        self._running = self._waiting = None
        self._idle.set()

    def _enqueue(
        self, reason: str, force: bool, follow: bool = False, since: float | None = None
    ) -> None:
        since = time.monotonic() if since is None else since
        if self._waiting is None:
            self._waiting = Request(reason, force, follow, since=since)
        else:
            self._waiting.since = max(self._waiting.since, since)
            self._waiting.reason = reason
            self._waiting.force = self._waiting.force or force
            # One trigger that was not the watcher's makes the whole request a full scan.
            self._waiting.follow = self._waiting.follow and follow
        self._idle.clear()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._work(), name="gate-evaluator"
            )
        self._wake.set()

    def _prune_triggers(self) -> None:
        horizon = time.monotonic() - _TRIGGER_WINDOW_S
        while self._triggers and self._triggers[0] < horizon:
            self._triggers.popleft()

    async def _work(self) -> None:
        """Run waiting evaluations one at a time, for as long as the evaluator lives."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            request, self._waiting = self._waiting, None
            if request is None:
                continue
            self._running = request
            try:
                finished = await self._evaluate(request)
            except asyncio.CancelledError:
                fail(request, EvaluatorClosed("the gate evaluator was closed"))
                raise
            except Exception as exc:
                log.exception("evaluating the gates failed")
                self._notice(f"could not evaluate the gates: {exc}", "error")
                fail(request, exc)
            else:
                for future in request.waiters:
                    if not future.done():
                        future.set_result(finished)
            finally:
                self._running = None
                if self._waiting is None:
                    self._idle.set()

    async def _evaluate(self, request: Request) -> EvaluationFinished:
        """Judge the current tree: reuse what is known, run the rest, then act on the verdict."""
        epoch = self._epoch
        # The snapshot that starts an evaluation the watcher asked for follows its changed paths
        # (issue 17); any other trigger, and the checks after each gate, scan everything.
        snap = await asyncio.to_thread(self._snapshot, request)
        judged, cwd = Judged(snap.tree, ()), self._run.workspace.root
        if self._folder is not None:
            judged, cwd = await asyncio.to_thread(self._folder.place, snap.tree)
        current = Pass(snap, judged, cwd)
        tree = current.tree
        for tell in request.on_tree:
            tell(tree)
        self._cache.judged_as(tree, judged.tree)
        gates = self._contract.gates
        self._emit(
            EvaluationStarted(
                tree=tree,
                reason=request.reason,
                gates=tuple(g.name for g in gates),
                frozen=judged.frozen,
            )
        )
        results: dict[str, GateResult] = {}
        stale: set[str] = set()
        to_run: list[Gate] = []
        for gate in gates:
            reused = None if request.force else await self._reusable(gate, tree, judged.tree)
            if reused is None:
                to_run.append(gate)
            else:
                results[gate.name] = reused
                self._emit(GateFinished(result=reused))
        if to_run:
            slots = asyncio.Semaphore(self._jobs)
            async with asyncio.TaskGroup() as group:
                for gate in to_run:
                    group.create_task(
                        self._run_one(gate, current, slots, results, stale),
                        name=f"gate-{gate.name}",
                    )
        ordered = tuple(results[g.name] for g in gates)
        if self._epoch != epoch:
            # A rollback restarted the history while this pass ran: its tree was abandoned, so
            # nothing it found may count as green, as a regression, or for a checkpoint.
            stale.update(r.gate for r in ordered)
        # One stale result makes the pass no verdict on its tree (nor a checkpoint of it).
        current.moved = bool(stale)
        new_regressions = [r for r in ordered if r.gate not in stale and self._remember(r)]
        green = {r.gate for r in ordered if r.green}
        complete = 0 if current.moved else complete_episodes(self._spec, green)
        # A stale verdict is not a verdict on any tree: nobody reading the summary may count
        # it green (GateFinished kept the status it had, next to stale=True).
        shown = tuple(as_stale(r) if r.gate in stale else r for r in ordered)
        finished = EvaluationFinished(
            tree=tree,
            results=shown,
            complete_episodes=complete,
            stale=current.moved,
            frozen=judged.frozen,
        )
        self._emit(finished)
        for result in new_regressions:
            message = await self._regression_message(result)
            self._emit(DriftDetected(drift="regression", gate=result.gate, message=message))
        if current.moved:
            self._stale_streak += 1
            # After a rollback (a new epoch) the next pass judges the tree from now on.
            self._requeue_after_stale(current.last_end if self._epoch == epoch else None)
        else:
            self._stale_streak = 0
            # A tree whose protected files differ from their frozen content is no checkpoint:
            # its gates judged other files than it holds, and a person has yet to decide.
            if complete > self.complete_on_base and self._takes_checkpoints and not judged.frozen:
                green_names = tuple(g.name for g in gates if g.name in green)
                await self._checkpoint(current.snap, complete, green_names)
        return finished

    async def _run_one(
        self,
        gate: Gate,
        current: Pass,
        slots: asyncio.Semaphore,
        results: dict[str, GateResult],
        stale: set[str],
    ) -> None:
        """Run one gate on the pass's tree and report it, stale if the tree moved meanwhile."""
        async with slots:
            current.running.add(gate.name)
            self._emit(GateStarted(gate=gate.name, tree=current.tree))
            try:
                log_path = await asyncio.to_thread(next_log_path, self._run.dir, gate.name)
                result = await run_gate(gate, tree=current.tree, cwd=current.cwd, log_path=log_path)
            except OSError as exc:
                # The log cannot be written (disk full, permissions): a visible red, not a crash.
                result = GateResult(
                    gate=gate.name,
                    status="error",
                    tree=current.tree,
                    message=f'gate "{gate.name}" could not run: {exc}',
                )
            ended = time.monotonic()
            current.running.discard(gate.name)
        moved = await moved_under_gate(
            gate,
            current,
            ended=ended,
            snapshotter=self._snapshotter,
            cache=self._cache,
            warn=lambda message: self._notice(message, "warning"),
        )
        results[gate.name] = result
        if moved:
            stale.add(gate.name)
        else:
            self._cache.put(gate.name, current.judged.tree, result)
        self._emit(GateFinished(result=result, stale=moved))

    async def _reusable(self, gate: Gate, tree: str, judged: str) -> GateResult | None:
        """A known result for ``gate`` on ``tree`` (which it judges as ``judged``): cached, or
        unchanged under its ``paths``. Results are keyed by the judged tree."""
        hit = self._cache.hit(gate.name, tree, judged)
        if hit is not None:
            return hit
        previous = self._latest.get(gate.name)
        return await asyncio.to_thread(self._cache.unchanged, gate, tree, judged, previous)

    def _snapshot(self, request: Request) -> Snapshot:
        """The tree since the request's newest trigger: a full scan begun after it, or a new
        snapshot under the lock (blocking: called in a thread)."""
        return take_fresh(
            self._snapshotter,
            request.since,
            "a snapshot for the gates",
            follow_changes=request.follow,
        )

    def _requeue_after_stale(self, since: float | None) -> None:
        """Queue another evaluation for the tree that moved, unless one waits or gates loop; a
        scan begun after the pass's last gate ended (its check's) holds the moved tree."""
        if self._waiting is not None:
            return  # a trigger already waits: it covers the new tree
        if self._stale_streak > MAX_STALE_STREAK:
            self._notice(
                f"the tree changed during the gates {self._stale_streak} evaluations in a row; "
                "gates run again at the next change or when you ask (g). Does a gate write to "
                "a tracked file? A gate's `paths` keeps changes elsewhere from making it stale.",
                "warning",
            )
            return
        self._enqueue(CHANGED_DURING_GATES, False, since=since)

    def _remember(self, result: GateResult) -> bool:
        """Fold a non-stale result into latest and ever_green; True when it is a new regression
        (the run state's rule: a red on the very tree the gate passed on is flakiness)."""
        name = result.gate
        self._latest[name] = result
        trees = self._green_on.get(name, frozenset())
        if result.green:
            self._green_on[name] = add_green_tree(trees, result.tree)
            self._regressed.discard(name)
            return False
        if is_regression(trees, result.status, result.tree) and name not in self._regressed:
            self._regressed.add(name)
            return True
        return False

    async def _regression_message(self, result: GateResult) -> str:
        trees = self._green_on.get(result.gate, frozenset())
        records = await asyncio.to_thread(checkpoints.records, self._run, "checkpoints")
        return regression_message(result, trees, records)

    async def _checkpoint(self, snap: Snapshot, episode: int, green: tuple[str, ...]) -> None:
        """Make ``snap`` the green checkpoint of ``episode`` and the new base."""
        try:
            record, new = await green_checkpoint(
                self._run, self._contract, self._snapshotter, snap, episode=episode, green=green
            )
        except PaellaError as exc:
            self._notice(f"could not take the checkpoint of episode {episode}: {exc}", "error")
            return
        self._base = record
        if new:
            self._emit(CheckpointTaken(record_=record))

    def _notice(self, message: str, level: Literal["info", "warning", "error"]) -> None:
        # A notice reports a problem; a consumer failing on it must not become another one.
        with contextlib.suppress(Exception):
            self._emit(Notice(message=message, level=level))

    # -- a resumed run ---------------------------------------------------------------------

    def seed(self, history: Iterable[dict[str, Any]]) -> None:
        """Learn latest, ever_green and the regressions already reported from ledger records
        (folded by the run state's rules)."""
        self.adopt(fold_records(history), with_base=False)

    def adopt(self, state: RunState, *, with_base: bool = True) -> None:
        """Start from a run's folded state (a resumed run): its latest verdicts, the trees each
        gate was green on, the regressions already reported and (``with_base``) the base."""
        if with_base:
            self.set_base(state.base)
        self._green_on = {g: t for g, t in state.green_on.items() if g in self._cache.keys}
        self._regressed = {g for g in state.regressed if g in self._cache.keys}
        for name, gate in state.gates.items():
            if name in self._cache.keys and gate.tree is not None and (gate.green or gate.red):
                self._latest[name] = gate.result()
        for name, result in list(self._latest.items()):
            if result.log_path and not result.green:
                # The handoff shows a failing gate's output: read it back from its log.
                result = replace(result, tail=log_tail(result.log_path))
                self._latest[name] = result
            self._cache.put(name, result.tree, result)
