"""The parts a run loop is built of, wired together: the attempts, the evaluator, the break
tracker, recovery, the drift checks and the watcher; the one ``emit`` every event goes through
(ledger first, then the parts that watch events, then the consumer); the commands the UI gives
(gates, checkpoint, stop, rollback, quit); and the housekeeping around the attempts (the stats
ticker, the retry wait, the wind-down).

:class:`~paella_tui.supervisor.run.run_loop.RunLoop` adds the flow: attempt after attempt, the
verdict on each, recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Literal

from paella_tui.supervisor.agent.agent_process import AgentProcess
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.breaks import BreakTracker
from paella_tui.supervisor.judge.byproducts import byproduct_globs
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.judge.frozen import FrozenFiles, GateFolder
from paella_tui.supervisor.judge.gate_cache import reads_any
from paella_tui.supervisor.run.attempt_end import stopped_on_words
from paella_tui.supervisor.run.attempt_runner import AttemptRunner
from paella_tui.supervisor.run.decisions import Decide, Decision, DecisionChannel, Review
from paella_tui.supervisor.run.drift_checks import DriftChecks
from paella_tui.supervisor.run.events import (
    CheckpointTaken,
    DriftDetected,
    Event,
    Notice,
    RecoveryChosen,
    RetryScheduled,
    RolledBack,
    RunDone,
    RunStopped,
    Usage,
    WatchPaused,
)
from paella_tui.supervisor.run.live_state import LiveState
from paella_tui.supervisor.run.recovery import Recovery
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, save_to_mirror_soon
from paella_tui.supervisor.run.state import RunState
from paella_tui.supervisor.run.state_store import StateStore
from paella_tui.supervisor.store import checkpoints as ckpt
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter
from paella_tui.supervisor.watch.flapping import QUIET_RESUME_S, FlapGuard
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher

EXIT_DONE = 0
EXIT_NOT_DONE = 1
EXIT_CANNOT_START = 2

LoopState = Literal[
    "starting", "running", "evaluating", "retry-wait", "recovering", "done", "stopped"
]
STATS_PERSIST_EVERY_S = 15.0
WATCH_READY_S = 10.0
"""How long the first attempt waits for the workspace watches to be set up, at most."""


RESUMED_WORDS = (
    f"watching resumed: the workspace was quiet for {QUIET_RESUME_S:g} s; what changed while "
    "it was paused is judged now"
)

Consumer = Callable[[Event, RunState], None]
"""Whoever shows a run (the TUI, the headless printer): each event, with the run's state after it.

The loop folds the event's record into its state before anything else, so a consumer never
folds events itself and never reads a state that has not yet taken in the event it is given."""


class LoopParts:
    """A run loop's parts and commands (the flow is :class:`RunLoop`'s)."""

    def __init__(
        self,
        *,
        run: Run,
        contract: Contract,
        emit: Consumer,
        decide: Decide | None = None,
        resume: bool = False,
        stop_grace: float = 10.0,
        not_before: float | None = None,
        review: Review | None = None,
    ) -> None:
        self.run_ = run
        self._review = review
        self.frozen: FrozenFiles | None = None
        """The protected files' frozen content, once the run's start tree is known."""
        self.workspace = run.workspace
        self.contract = contract
        self._consumer = emit
        self.decisions = DecisionChannel(decide)
        """How a recovery is answered: ``decide`` (a policy) or a :meth:`DecisionChannel.send`."""
        self._resume_first = resume
        self._not_before = not_before
        self._stop_grace = stop_grace
        # Numbered snapshots: steps are kept in the order their trees were seen (issue 16); the
        # gates' byproducts are left out of them (issue 13).
        self.snapshotter = SequencedSnapshotter(
            self.workspace,
            max_file_size=contract.run.max_file_size,
            exclude=byproduct_globs(contract),
        )
        view = RunView.load(run)
        self._live = LiveState(StateStore(run.ledger.path), view.folded)
        """The run's one state, current with every event emitted."""
        self._stopped_on_words = stopped_on_words(view)
        """Why the run stopped last time, when it was a far reset or a permanent failure: the
        resume's handoff says so."""
        self.attempts = AttemptRunner(run=run, contract=contract, view=view, emit=self.emit)
        """The agent's attempts: its process, output, session and usage."""
        self._transient = self.attempts.transient
        self._transient_failures = 0
        self.state: LoopState = "starting"
        """Where the loop is: starting, running, evaluating, retry-wait, recovering, done, stopped."""
        self.retry_at: float | None = None
        """Wall-clock time the next attempt starts while in retry-wait (for a countdown)."""
        self._stop_requested: str | None = None
        self._wake = asyncio.Event()
        self._verdict: RunDone | RunStopped | None = None
        """How the run ended, recorded last (see :meth:`_wind_down`)."""
        self.evaluator = Evaluator(
            run=run,
            contract=contract,
            snapshotter=self.snapshotter,
            emit=self.emit,
            base=view.last_green_checkpoint,
        )
        # The run's one state: what was green, the regressions reported, the latest verdicts.
        self.evaluator.adopt(view.run_state, with_base=False)
        self._contract_sha = (view.run_state.contract_info or {}).get("sha256", "")
        self.breaks = BreakTracker(
            run=run,
            contract=contract,
            snapshotter=self.snapshotter,
            emit=self.emit,
            tail=self.attempts.tail.last_lines,
            attempt=lambda: self.attempts.attempt,
            base=lambda: self.evaluator.base,
            busy=lambda: self.evaluator.busy,
            state=view.run_state,
        )
        """Every settled change kept as a step; a bisect at every regression (issue 16)."""
        self.recovery = Recovery(
            run=run,
            contract=contract,
            snapshotter=self.snapshotter,
            evaluator=self.evaluator,
            breaks=self.breaks,
            decisions=self.decisions,
            run_state=lambda: self.run_state,
            emit=self.emit,
        )
        """Asks the decisions, rolls back, writes the handoff."""
        self.drift = DriftChecks(run=run, contract=contract, emit=self.emit)
        """Path drift per verdict, history and integrity, stalls, protected files."""
        self.watcher = WorkspaceWatcher(
            self.workspace,
            settle=contract.watch.settle,
            ignore=byproduct_globs(contract),
            on_activity=self.attempts.touched,
            on_settled=self._on_settled,
            on_flapping=self._on_flapping,
            on_gap=self.snapshotter.changes.gap,
            flaps=FlapGuard(reruns_gates=lambda paths: reads_any(contract.gates, paths)),
            on_resumed=lambda: self.emit(Notice(message=RESUMED_WORDS)),
        )

    async def _freeze(self, start_tree: str) -> None:
        """From now on the gates and the drift checks judge protected files at their frozen
        content (the start tree's, or what a person accepted since)."""
        accepted = self.run_state.accepted
        self.frozen = await asyncio.to_thread(
            FrozenFiles.for_run, self.run_, self.contract, start_tree, accepted
        )
        assert self.drift.tracker is not None
        self.drift.tracker.frozen = self.frozen
        self.breaks.files = self.frozen  # the bisects judge steps as the gates judge the tree
        self.evaluator.judge_frozen(GateFolder(self.frozen, links=self.contract.steps.link))

    # --- events -------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Persist ``event`` to the ledger (if it has a kind), fold it into the run's state, then
        hand the consumer the event and that state."""
        pending = None
        self._live.before_handing()
        if event.kind is not None:
            # Written by the ledger's own thread, in order: the event loop never waits on fsync.
            pending = self.run_.ledger.append_soon(event.kind, **event.record())
        # The state first (its record folded as the writer will write it), then the consumers.
        self._live.handed(pending)
        self.breaks.observe(event)
        self.drift.observe(event)
        self._consumer(event, self._live.state)
        if isinstance(event, RunDone | RunStopped | CheckpointTaken | RolledBack | RecoveryChosen):
            # Kept outside the repository too, in the background and after the news is out:
            # the verdict or the checkpoint is shown at once (the command waits for the copy
            # before it exits; see runs.wait_for_mirror).
            save_to_mirror_soon(self.run_)

    @property
    def run_state(self) -> RunState:
        """The run's state: the fold of its ledger, current with every event emitted."""
        return self._live.state

    @property
    def tail(self) -> OutputTail:
        """The agent's output across attempts, display-ready; poll its ``version``."""
        return self.attempts.tail

    @property
    def agent(self) -> AgentProcess | None:
        """The newest attempt's agent process (None before the first)."""
        return self.attempts.agent

    @property
    def attempt(self) -> int:
        """The number of the newest attempt (0 before the first)."""
        return self.attempts.attempt

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt so far (None: no stream reported any)."""
        return self.attempts.usage

    def _on_settled(self, paths: tuple[str, ...]) -> None:
        # Before the request: the evaluation's snapshot looks at these paths only (issue 17).
        self.snapshotter.changes.note(paths)
        self.breaks.settled()
        self.evaluator.request(f"{len(paths)} file(s) changed", follow_changes=True)

    def _on_flapping(self, message: str) -> None:
        # Paused, the watcher holds back what changes: snapshots scan everything until resumed.
        self.snapshotter.changes.gap()
        self.emit(WatchPaused(reason=message))
        self.emit(DriftDetected(drift="flapping", message=message))

    # --- commands from the UI -----------------------------------------------------------

    def request_gates(self, *, force: bool = True) -> None:
        """Run every gate on the current tree now (``g``); also resumes a paused watcher."""
        if self.watcher.paused:
            self.watcher.resume()
        self.evaluator.request("asked for", force=force)

    async def manual_checkpoint(self, label: str = "") -> SnapshotRecord:
        """Evaluate the gates, then checkpoint the tree with the gates green on it (``c``)."""
        finished = await self.evaluator.evaluate("before a manual checkpoint")
        green = tuple(r.gate for r in finished.results if r.green) if not finished.stale else ()
        record = await asyncio.to_thread(
            ckpt.take_checkpoint,
            self.run_,
            self.snapshotter,
            episode="manual",
            gates_green=green,
            label=label or "manual checkpoint",
        )
        self.emit(CheckpointTaken(record_=record))
        return record

    async def stop_agent(self, reason: str = "stopped by you") -> None:
        """Stop the running agent (``s``); the ending is recorded as a stop by the user."""
        await self.attempts.stop(self._stop_grace, by_user=True)

    @property
    def stop_reason(self) -> str | None:
        """Why the whole run was asked to end (quit, a signal), or None."""
        return self._stop_requested

    async def roll_back_to(self, target: SnapshotRecord) -> None:
        """Stop the agent and roll back to ``target`` (``r`` on the main screen), then resume.

        The agent's end goes through recovery as usual, with this choice already made.
        """
        self.decisions.send(Decision("rollback", target, by="user"))
        if self.agent is not None and self.agent.returncode is None:
            await self.stop_agent()

    def request_stop(self, reason: str) -> None:
        """End the whole run (quit, SIGHUP, SIGTERM): stop the agent and record why."""
        self._stop_requested = reason
        self._wake.set()
        if self.agent is not None:
            asyncio.get_running_loop().create_task(self.agent.stop(self._stop_grace))

    async def _wind_down(self, tasks: list[asyncio.Task[None]]) -> None:
        """The run ends: everything that could still record (an evaluation a late watcher
        trigger queued, a drift check, a step being kept, a bisect) is closed first, then the
        verdict is recorded, the last record of the run; the agent does not outlive the loop."""
        try:
            await self.evaluator.close()
            await self.breaks.close()
            tasks += self.drift.background
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.agent is not None and self.agent.returncode is None:
                await self.agent.stop(self._stop_grace)
        finally:
            if self._verdict is not None:
                self.emit(self._verdict)
            # The exit status is the verdict's: its records are on disk before it is returned.
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.run_.ledger.flush)
            self._live.settle()

    async def _watching(self, watcher: asyncio.Task[None]) -> None:
        """Wait until the watches exist (or the watcher failed): an edit the agent made before
        then would go unseen until the next one. Planning them takes a while on a big tree."""
        ready = asyncio.create_task(self.watcher.wait_ready())
        # A watcher that ends reports nothing more: from then on every snapshot scans everything.
        watcher.add_done_callback(lambda _task: self.snapshotter.changes.stop())
        try:
            await asyncio.wait(
                [ready, watcher], timeout=WATCH_READY_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()
        if ready.done() and not ready.cancelled() and not watcher.done():
            # Watches are live: the next full scan starts the record of changed paths.
            self.snapshotter.changes.follow()

    async def _wait(self, plan: RetryScheduled) -> bool:
        """Wait for the next attempt (``R`` ends the wait early); False when stopped meanwhile."""
        self.retry_at = plan.resume_at
        self.state = "retry-wait"
        self.emit(plan)
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=plan.wait_s)
        self.retry_at = None
        return self._stop_requested is None

    def skip_wait(self) -> None:
        """End a retry wait now (``R`` during the countdown)."""
        self._wake.set()

    def _failed(self, what: str, hint: str | None) -> int:
        base = self.evaluator.base
        steps = ["fix the cause, then `paella resume` continues from the current state"]
        if base is not None:
            steps.append(f"`paella rollback {base.name} --yes` restores the last green checkpoint")
        message = f"{what}" + (f" ({hint})" if hint else "")
        self.emit(Notice(message=message, level="error"))
        return self._stopped(f"{what}. To continue: {'; '.join(steps)}.")

    def _stopped(self, reason: str, *, resume_after: float | None = None) -> int:
        """The run stops: the verdict is recorded when the loop winds down, as its last record."""
        self.state = "stopped"
        self._verdict = RunStopped(reason=reason, resume_after=resume_after)
        return EXIT_NOT_DONE

    def _done(self, verdict: RunDone) -> int:
        """The run is done: the verdict is recorded when the loop winds down, as its last record."""
        self.state = "done"
        self._verdict = verdict
        return EXIT_DONE

    # --- housekeeping ------------------------------------------------------------------------

    async def _tick(self) -> None:
        last_persist = 0.0
        while True:
            # Every second while the agent is busy, up to every few seconds while it is quiet.
            await self.attempts.pace.sleep()
            event = await asyncio.to_thread(self.attempts.stats)
            if event is None:
                continue
            self.attempts.sampled(event)
            self._consumer(event, self._live.state)
            if time.monotonic() - last_persist >= STATS_PERSIST_EVERY_S:
                last_persist = time.monotonic()
                self.run_.ledger.append_soon("agent-stats", **event.record())
            self.drift.stall(self.attempts.last_activity, time.monotonic())
