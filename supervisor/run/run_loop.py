"""The run loop: one object that supervises a run from launch to done, and emits typed events.

It ties the parts together: the agent process, the workspace watcher, the gate evaluator (which
takes the green checkpoints), drift checks, the governed retry, recovery and the handoff. Every
event is written to the ledger here (one writer), then handed to the consumer (the headless
printer or the TUI), so ``paella status`` from another terminal and ``paella resume`` after a
crash see the same truth.

Recovery is a decision the loop cannot make alone: it awaits ``decide(facts)``, which the TUI
answers with a key and the headless printer with its ``--on-death`` policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from paella_tui.supervisor.agent.agent_launch import AgentStartError
from paella_tui.supervisor.agent.agent_process import AgentProcess, ExitInfo
from paella_tui.supervisor.agent.decoded_tail import DecodedTail
from paella_tui.supervisor.agent.output_tail import OutputSink, OutputTail
from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.profiles.registry import get_profile
from paella_tui.supervisor.agent.profiles.stream import DecodedStats
from paella_tui.supervisor.agent.retry import RESET_MARGIN_S, classify, read_failure, retry_wait
from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.base.files import read_regular_file, write_atomic
from paella_tui.supervisor.contract.command_line import expand_placeholders
from paella_tui.supervisor.contract.model import MAX_PROMPT_BYTES, Contract
from paella_tui.supervisor.judge.breaks import BreakTracker
from paella_tui.supervisor.judge.byproducts import byproduct_globs
from paella_tui.supervisor.judge.drift import DriftTracker
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    CheckpointTaken,
    DriftDetected,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RecoveryFacts,
    RecoveryNeeded,
    RetryScheduled,
    RolledBack,
    RunDone,
    RunStopped,
    Usage,
    WatchPaused,
)
from paella_tui.supervisor.run.handoff import (
    handoff_inputs_from_view,
    render_handoff,
    write_handoff,
)
from paella_tui.supervisor.run.integrity import check_run, ensure_snapshot
from paella_tui.supervisor.run.run_view import RunView, process_alive
from paella_tui.supervisor.run.runs import Run, save_to_mirror_soon
from paella_tui.supervisor.store import checkpoints as ckpt
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.steps import SequencedSnapshotter
from paella_tui.supervisor.store.tree_diff import changes_between, totals
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher

EXIT_DONE = 0
EXIT_NOT_DONE = 1
EXIT_CANNOT_START = 2

ATTEMPT_MARKER = "── paella: attempt "
# How long the recovery waits for the final tree's gates before showing what is known.
RECOVERY_WAIT_S = 0.05
STATS_EVERY_S = 1.0
STATS_PERSIST_EVERY_S = 15.0
WATCH_READY_S = 10.0
"""How long the first attempt waits for the workspace watches to be set up, at most."""


@dataclass(frozen=True)
class Decision:
    """The answer to a recovery: roll back (to ``target``, default the base), continue, stop, or
    accept (every gate is green on the tree: the run is done)."""

    choice: Literal["rollback", "continue", "stop", "accept"]
    target: SnapshotRecord | None = None
    by: str = "user"


Decide = Callable[[RecoveryFacts], Awaitable[Decision]]


def policy(on_death: str) -> Decide:
    """A ``decide`` that answers every recovery the same way (``--on-death`` headless)."""

    async def decide(facts: RecoveryFacts) -> Decision:
        if on_death == "rollback":
            return Decision("rollback", facts.base, by="policy")
        if on_death == "continue":
            return Decision("continue", by="policy")
        return Decision("stop", by="policy")

    return decide


class RunLoop:
    """Supervises one run: attempts of the agent, held to the contract's gates."""

    def __init__(
        self,
        *,
        run: Run,
        contract: Contract,
        emit: Callable[[Event], None],
        decide: Decide,
        resume: bool = False,
        stop_grace: float = 10.0,
        not_before: float | None = None,
    ) -> None:
        self.run_ = run
        self.workspace = run.workspace
        self.contract = contract
        self._consumer = emit
        self._decide = decide
        self._resume_first = resume
        self._not_before = not_before
        self._fresh_next = False
        self._used_session = False
        self._stop_grace = stop_grace
        self.tail = OutputTail()
        """The agent's output across attempts, display-ready; poll its ``version``."""
        # Numbered snapshots: steps are kept in the order their trees were seen (issue 16); the
        # gates' byproducts are left out of them (issue 13).
        self.snapshotter = SequencedSnapshotter(
            self.workspace,
            max_file_size=contract.run.max_file_size,
            exclude=byproduct_globs(contract),
        )
        view = RunView.load(run)
        stops = view.of_kind("run-stopped")
        last = stops[-1] if stops else {}
        self._stopped_on_words: str | None = (
            str(last.get("reason"))
            if last.get("resume_after")
            or str(last.get("reason", "")).startswith("permanent failure")
            else None
        )
        """Why the run stopped last time, when it was a far reset or a permanent failure: the
        resume's handoff says so."""
        self.attempt = max(
            (int(r.get("attempt", 0)) for r in view.of_kind("agent-started")), default=0
        )
        self.profile = get_profile(contract.run.profile)
        self._transient = (
            self.profile.transient_patterns(contract.retry.transient)
            if self.profile is not None
            else contract.retry.transient
        )
        self.session_id: str | None = view.session_id()
        """The agent's own session id, as its stream last reported it (for `{session_id}`)."""
        self.usage_before = view.usage() or Usage()
        """What the stream reported in the attempts before this one."""
        self._decoded: DecodedTail | None = None
        self._transient_failures = 0
        self._auto_recoveries = 0
        self.agent: AgentProcess | None = None
        self.state: str = "starting"
        """starting | running | evaluating | retry-wait | recovering | done | stopped."""
        self.retry_at: float | None = None
        """Wall-clock time the next attempt starts while in retry-wait (for a countdown)."""
        self._last_activity = time.monotonic()
        self._stop_requested: str | None = None
        self._user_stopped = False
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self._pending_decision: Decision | None = None
        self._evaluating_tree: str | None = None
        self.evaluator = Evaluator(
            run=run,
            contract=contract,
            snapshotter=self.snapshotter,
            emit=self.emit,
            base=view.last_green_checkpoint,
        )
        if view.of_kind("rollback-done"):
            # What was green restarts at the restored checkpoint (as it did in the run before).
            self.evaluator.set_base(view.last_green_checkpoint, restart_history=True)
        self.evaluator.seed(view.gate_history())
        started = view.of_kind("run-started")
        self._contract_sha = (started[0].get("contract") or {}).get("sha256", "") if started else ""
        self._start_tree: str | None = None
        self.breaks = BreakTracker(
            run=run,
            contract=contract,
            snapshotter=self.snapshotter,
            emit=self.emit,
            tail=self.tail.last_lines,
            attempt=lambda: self.attempt,
            base=lambda: self.evaluator.base,
            busy=lambda: self.evaluator.busy,
            records=view.records,
        )
        """Every settled change kept as a step; a bisect at every regression (issue 16)."""
        self._integrity_reported: set[str] = set()
        self._protected_note: str | None = None
        self.drift: DriftTracker | None = None
        self.watcher = WorkspaceWatcher(
            self.workspace,
            settle=contract.watch.settle,
            ignore=byproduct_globs(contract),
            on_activity=self._on_activity,
            on_settled=self._on_settled,
            on_flapping=self._on_flapping,
        )

    # --- events -------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Persist ``event`` to the ledger (if it has a kind), then hand it to the consumer."""
        if isinstance(event, EvaluationStarted):
            self._evaluating_tree = event.tree
        if event.kind is not None:
            self.run_.ledger.append(event.kind, **event.record())
        self.breaks.observe(event)
        if isinstance(event, EvaluationFinished) and not event.stale and self.drift is not None:
            # Path drift needs git (diff-tree): judged in a thread, reported when it answers.
            task = asyncio.get_running_loop().create_task(self._check_tree(event.tree))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self._consumer(event)
        if isinstance(event, RunDone | RunStopped | CheckpointTaken | RolledBack | RecoveryChosen):
            # Kept outside the repository too, in the background and after the news is out:
            # the verdict or the checkpoint is shown at once (the command waits for the copy
            # before it exits; see runs.wait_for_mirror).
            save_to_mirror_soon(self.run_)

    async def _background_checks(self) -> None:
        """Wait for the path-drift checks of the evaluations so far."""
        while pending := [task for task in self._background if not task.done()]:
            await asyncio.wait(pending)

    async def _check_tree(self, tree: str) -> None:
        assert self.drift is not None
        for drift in await asyncio.to_thread(self.drift.check_tree, tree):
            self.emit(drift)

    def _on_activity(self) -> None:
        self._last_activity = time.monotonic()

    def _on_output(self, _data: bytes) -> None:
        self._last_activity = time.monotonic()
        decoded = self._decoded
        if decoded is not None:
            # Recorded the moment it is seen: a paella killed mid-attempt still resumes it.
            session = decoded.stats.session_id
            if session and session != self.session_id:
                self.session_id = session
                self.emit(AgentSession(attempt=self.attempt, session_id=session))

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt so far (None: no stream reported any)."""
        live = self._decoded.stats.usage() if self._decoded is not None else Usage()
        total = self.usage_before + live
        return None if total.empty and self._decoded is None else total

    def _on_settled(self, paths: tuple[str, ...]) -> None:
        self.breaks.settled()
        self.evaluator.request(f"{len(paths)} file(s) changed")

    def _on_flapping(self, message: str) -> None:
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
        self._user_stopped = True
        if self.agent is not None:
            await self.agent.stop(self._stop_grace)

    @property
    def stop_reason(self) -> str | None:
        """Why the whole run was asked to end (quit, a signal), or None."""
        return self._stop_requested

    async def roll_back_to(self, target: SnapshotRecord) -> None:
        """Stop the agent and roll back to ``target`` (``r`` on the main screen), then resume.

        The agent's end goes through recovery as usual, with this choice already made.
        """
        self._pending_decision = Decision("rollback", target, by="user")
        if self.agent is not None and self.agent.returncode is None:
            await self.stop_agent()

    def request_stop(self, reason: str) -> None:
        """End the whole run (quit, SIGHUP, SIGTERM): stop the agent and record why."""
        self._stop_requested = reason
        self._wake.set()
        if self.agent is not None:
            asyncio.get_running_loop().create_task(self.agent.stop(self._stop_grace))

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> int:
        """Supervise until done (0), stopped or out of choices (1), or the agent cannot start (2)."""
        orphan_note = await asyncio.to_thread(self._stop_orphans)
        if orphan_note:
            self._consumer(Notice(message=orphan_note, level="warning"))
        await self._integrity()
        self._start_tree = await asyncio.to_thread(self._run_start_tree)
        self.breaks.start(self._start_tree)
        self.drift = DriftTracker(
            workspace=self.workspace,
            contract=self.contract,
            start_tree=self._start_tree,
            contract_sha256=self._contract_sha,
        )
        tasks = [
            asyncio.create_task(self.watcher.run(), name="paella-watcher"),
            asyncio.create_task(self._tick(), name="paella-ticker"),
        ]
        try:
            await self._watching(tasks[0])
            return await self._attempts()
        except PaellaError as err:
            # A step of the supervision itself failed (a held index.lock, a rollback git
            # refused): the run stops cleanly, recorded, with the commands that continue it.
            return self._failed(err.message, err.hint)
        except Exception as err:  # a bug must still end in run-stopped, never a dead run
            log = self.run_.dir / "paella-error.log"
            with contextlib.suppress(OSError):
                write_atomic(log, traceback.format_exc())
            return self._failed(f"paella failed: {type(err).__name__}: {err}", f"details: {log}")
        finally:
            # The verdict is in: nothing is judged or recorded after it (no evaluation a late
            # watcher trigger queued, no drift check of one).
            await self.evaluator.close()
            await self.breaks.close()
            tasks += self._background
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.agent is not None and self.agent.returncode is None:
                await self.agent.stop(self._stop_grace)

    async def _watching(self, watcher: asyncio.Task[None]) -> None:
        """Wait until the watches exist (or the watcher failed): an edit the agent made before
        then would go unseen until the next one. Planning them takes a while on a big tree."""
        ready = asyncio.create_task(self.watcher.wait_ready())
        try:
            await asyncio.wait(
                [ready, watcher], timeout=WATCH_READY_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()

    async def _attempts(self) -> int:
        resume = self._resume_first
        handoff_path: Path | None = None
        if resume:
            lost = await asyncio.to_thread(self._lost_attempt)
            if lost is not None:
                # paella died before a decision was made about that attempt: make it now, on
                # the tree as it is (a resume must not carry on from a regressed tree unasked).
                verdict = await self._final_evaluation()
                await self._history_drift()
                outcome = await self._decide_and_act("crash", lost, verdict)
                if outcome is not None:
                    return outcome
            handoff_path = await self._write_handoff(
                ending="paella resume"
                + (
                    f" (the run had stopped: {self._stopped_on_words})"
                    if self._stopped_on_words
                    else ""
                )
            )
            # `paella resume` before the agent's limit resets: wait for it first.
            waits = self._not_before is not None and self._not_before > time.time()
            if waits and not await self._wait_until(
                self._not_before or 0.0, "the agent's limit resets then"
            ):
                return self._stopped(self._stop_requested or "stopped during the wait")
        else:
            self.evaluator.request("run start")
        while True:
            if self._stop_requested:
                return self._stopped(self._stop_requested)
            exit_info = await self._one_attempt(resume=resume, handoff_path=handoff_path)
            if exit_info is None:
                return EXIT_CANNOT_START
            # The death is news at once (the recovery screen within 250 ms), before any gate.
            exited = self._exited_event(exit_info)
            if self._stop_requested:
                # Quitting: no gate run is worth keeping a person waiting.
                return self._stopped(self._stop_requested)
            self.state = "evaluating"
            self._evaluating_tree = None
            final = asyncio.ensure_future(self._final_evaluation())
            quick = classify(exited, all_gates_green=False, transient=self._transient)
            if quick in ("crash", "signal", "stopped"):
                # Not done whatever the gates say: recovery opens now with what is known; the
                # final tree's gates keep running and fill in the gate table when they finish.
                await asyncio.wait({final}, timeout=RECOVERY_WAIT_S)
                finished = final.result() if final.done() else None
                final.add_done_callback(_consume_result)
                await self._history_drift()
                outcome = await self._decide_and_act(quick, exited, finished)
                if outcome is not None:
                    return outcome
                resume = True
                handoff_path = await self._write_handoff(ending=f"{exited.describe()} ({quick})")
                continue
            finished = await final
            all_green = (
                bool(self.contract.gates)
                and not finished.stale
                and all(r.green for r in finished.results)
            )
            if self._stop_requested:
                return self._stopped(self._stop_requested)
            red = [r.gate for r in finished.results if not r.green]
            assert self.drift is not None
            if not exited.false_success:
                # An exit 0 its own stream called an error claims nothing: it is a failure.
                for drift in self.drift.check_claimed_done(exited.exit_code, red):
                    self.emit(drift)
            await self._history_drift()
            # The final tree's path drift (protected, scope, contract) is judged in the
            # background: it belongs before the verdict, in the ledger and in the handoff.
            await self._background_checks()
            ending = classify(exited, all_gates_green=all_green, transient=self._transient)
            if ending == "done":
                touched = await asyncio.to_thread(self.drift.protected_changes, finished.tree)
                if touched:
                    # The judge is the contract as frozen: green gates over edited tests or an
                    # edited contract prove nothing until a person accepts or reverts the change.
                    self.emit(
                        DriftDetected(
                            drift="protected",
                            message=(
                                f"not done: {_some_paths(touched)} differ from their content at "
                                "run start, and the contract protects them. Revert them (roll back) "
                                "or, if the change is right, accept it by starting a new run."
                            ),
                        )
                    )
                    ending = "claimed-done"
                    # Said on the recovery screen: revert (roll back) or accept (continue).
                    self._protected_note = f"protected files changed: {_some_paths(touched)}"
            if ending == "done":
                self.state = "done"
                self.emit(
                    RunDone(tree=finished.tree, gates=tuple(r.gate for r in finished.results))
                )
                return EXIT_DONE
            if ending == "permanent":
                outcome = await self._permanent(exited)
                if outcome is not None:
                    return outcome
                resume = True
                handoff_path = await self._write_handoff(
                    ending=f"the agent's session was missing: {exited.describe()}"
                )
                continue
            if (
                ending == "transient"
                and self._transient_failures < self.contract.retry.max_attempts
            ):
                self._transient_failures += 1
                waited = await self._retry_wait(exited)
                if waited is not None:
                    return waited
                matched = read_failure(exited.evidence(), self._transient).matched
                resume = True
                handoff_path = await self._write_handoff(
                    ending=f"transient failure: {exited.describe()}"
                    + (f" (matched {matched.describe()})" if matched else "")
                )
                continue
            outcome = await self._decide_and_act(ending, exited, finished)
            if outcome is not None:
                return outcome
            resume = True
            handoff_path = await self._write_handoff(ending=f"{exited.describe()} ({ending})")

    async def _final_evaluation(self) -> EvaluationFinished:
        """Judge the tree the agent left (again while it keeps changing under the gates)."""
        finished = await self.evaluator.evaluate("agent exited")
        for _ in range(3):
            if not finished.stale:
                break
            finished = await self.evaluator.evaluate("the tree changed while the gates ran")
        return finished

    async def _history_drift(self) -> None:
        assert self.drift is not None
        await self._integrity()
        base = self.evaluator.base
        for drift in await asyncio.to_thread(self.drift.check_history, base.head if base else None):
            self.emit(drift)

    async def _integrity(self) -> None:
        """``history`` drift for state changed outside paella (refs, ledger, frozen contract),
        restored from the mirror where it can be; each finding is said once."""
        for finding in await asyncio.to_thread(check_run, self.run_, restore=True):
            if finding not in self._integrity_reported:
                self._integrity_reported.add(finding)
                self.emit(DriftDetected(drift="history", message=finding))

    async def _decide_and_act(
        self, ending: str, exited: AgentExited, finished: EvaluationFinished | None
    ) -> int | None:
        """Recovery: ask, then roll back if that was the choice. An exit status ends the run."""
        decision = await self._recover(ending, exited, finished)
        if decision.choice == "accept":
            # Done is the gates' call, never the person's: judged again (cached: instant).
            verdict = await self.evaluator.evaluate("accept: done")
            if self.contract.gates and not verdict.stale and all(r.green for r in verdict.results):
                self.state = "done"
                self.emit(RunDone(tree=verdict.tree, gates=tuple(r.gate for r in verdict.results)))
                return EXIT_DONE
            return self._stopped("accept refused: not every gate is green on the tree")
        if decision.choice == "stop":
            return self._stopped(f"handoff written; stopped ({decision.by})")
        if decision.choice == "rollback":
            target = decision.target or self.evaluator.base
            if target is None:
                self.emit(
                    Notice(
                        message="no green checkpoint to roll back to: continuing from the current state",
                        level="warning",
                    )
                )
            else:
                await self._rollback(target)
                # Judge the restored tree (its results are cached) so the handoff tells the
                # next attempt the truth about what is green now.
                await self.evaluator.evaluate("after the rollback")
        return None

    async def _one_attempt(self, *, resume: bool, handoff_path: Path | None) -> ExitInfo | None:
        self.attempt += 1
        self._user_stopped = False
        # The display tail runs across attempts; a marker line separates them (and lets the
        # death report show this attempt's lines only).
        self.tail.feed(f"\n{ATTEMPT_MARKER}{self.attempt} ──\n".encode())
        try:
            template, argv, env = self._command(resume=resume, handoff_path=handoff_path)
        except (OSError, ValueError) as err:
            # The task file turned into something unreadable (deleted, a folder, a FIFO).
            self.emit(Notice(message=f"cannot read the task: {err}", level="error"))
            self.emit(RunStopped(reason=f"the agent could not start: cannot read the task: {err}"))
            self.state = "stopped"
            return None
        output: OutputSink = self.tail
        self._decoded = None
        if self.profile is not None and self.profile.stream_on(template):
            # The log view shows what the agent says and does; agent.log keeps the raw bytes.
            self._decoded = DecodedTail(self.tail, self.profile.new_decoder())
            output = self._decoded
        try:
            self.agent = await AgentProcess.start(
                argv,
                cwd=self.workspace.root,
                env=env,
                tty=self.contract.run.tty,
                log_path=self.run_.dir / "agent.log",
                on_output=self._on_output,
                tail=output,
            )
        except AgentStartError as err:
            self.emit(Notice(message=str(err), level="error"))
            self.emit(RunStopped(reason=f"the agent could not start: {err}"))
            self.state = "stopped"
            return None
        self.state = "running"
        self._last_activity = time.monotonic()
        create_time = self.agent.tree.started
        self.emit(
            AgentStarted(
                attempt=self.attempt,
                pid=self.agent.pid,
                create_time=create_time,
                argv=tuple(argv),
                resumed=resume,
                tty=self.contract.run.tty,
            )
        )
        return await self.agent.wait()

    def _exited_event(self, info: ExitInfo) -> AgentExited:
        tail = list(info.tail)
        marks = [i for i, line in enumerate(tail) if line.startswith(ATTEMPT_MARKER)]
        if marks:
            tail = tail[marks[-1] + 1 :]
        tail = tail[-40:]
        profile, decoded = self.profile, self._decoded
        false_success = None
        if profile is not None and not self._user_stopped:
            stats = decoded.stats if decoded is not None else DecodedStats()
            false_success = profile.false_success(tail, info.exit_code, stats)
        event = AgentExited(
            attempt=self.attempt,
            exit_code=info.exit_code,
            signal=info.signal,
            tail=tuple(tail),
            false_success=false_success,
            exit_meaning=profile.exit_meaning(info.exit_code) if profile else None,
            usage=decoded.stats.usage() if decoded is not None else None,
            signals=tuple(decoded.stats.notes) if decoded is not None else None,
            leftovers=tuple(
                f"{p.pid} {p.name} {' '.join(p.cmdline)[:200]}" for p in info.leftovers
            ),
            stopped_by_user=self._user_stopped,
        )
        if event.usage is not None:
            self.usage_before = self.usage_before + event.usage
        self._decoded = None
        self.emit(event)
        return event

    def _command(
        self, *, resume: bool, handoff_path: Path | None
    ) -> tuple[tuple[str, ...], list[str], dict[str, str]]:
        """The template chosen, the argv it expands to, and the agent's environment."""
        run_cfg = self.contract.run
        prompt_file = self._prompt_file()
        prompt = read_regular_file(prompt_file, MAX_PROMPT_BYTES).decode(errors="replace")
        handoff_text = handoff_path.read_text(errors="replace") if handoff_path else ""
        values = {
            "prompt": prompt,
            "prompt_file": str(prompt_file),
            "handoff": handoff_text,
            "handoff_file": str(handoff_path or ""),
            "attempt": str(self.attempt),
            "run_id": self.run_.run_id,
            "session_id": self.session_id or "",
        }
        template = run_cfg.agent
        if resume:
            resume_template = self._resume_template()
            if resume_template is not None:
                template = resume_template
            else:
                # No usable resume command: start the agent again with the handoff as its task.
                values["prompt"] = handoff_text or prompt
                values["prompt_file"] = str(handoff_path or prompt_file)
        argv = list(expand_placeholders(template, values))
        self._used_session = bool(self.session_id) and _names_session(template)
        env = dict(os.environ)
        env.update(
            PAELLA_RUN_ID=self.run_.run_id,
            PAELLA_ATTEMPT=str(self.attempt),
            PAELLA_EPISODE=str(self._current_episode()),
        )
        if resume and handoff_path is not None:
            env["PAELLA_HANDOFF_FILE"] = str(handoff_path)
        else:
            env.pop("PAELLA_HANDOFF_FILE", None)
        return template, argv, env

    def _resume_template(self) -> tuple[str, ...] | None:
        """The resume command to use now, or None to start the agent again with the handoff.

        A resume by `{session_id}` with no id seen yet (`claude -r ""` would fail) becomes the
        profile's "newest session in this folder" form; without one, the agent starts afresh.
        """
        template = self.contract.run.resume
        if self._fresh_next:
            self._fresh_next = False
            return None  # the session was missing: start afresh with the handoff
        if template is None or self.session_id or not _names_session(template):
            return template
        newest = self.profile.resume_without_session(template) if self.profile else None
        instead = (
            "resuming the agent's newest session here"
            if newest is not None
            else "starting the agent again with the handoff"
        )
        self.emit(Notice(message=f"no session id was seen: {instead}", level="warning"))
        return newest

    def _prompt_file(self) -> Path:
        run_cfg = self.contract.run
        if run_cfg.prompt_file:
            return (self.workspace.root / run_cfg.prompt_file).resolve()
        path = self.run_.dir / "prompt.md"
        if not path.exists():
            write_atomic(path, run_cfg.prompt or "")
        return path

    def _current_episode(self) -> int:
        latest = self.evaluator.latest
        for k in range(1, len(self.contract.episodes) + 1):
            if not all(
                latest.get(g) is not None and latest[g].green
                for g in self.contract.episode_gates(k)
            ):
                return k
        return len(self.contract.episodes)

    async def _permanent(self, exited: AgentExited) -> int | None:
        """A failure no wait fixes: stop, saying why and what to do. A missing session is the
        exception when this attempt resumed one: forget it and start afresh with the handoff."""
        reading = read_failure(exited.evidence(), self._transient)
        permanent = reading.permanent
        assert permanent is not None
        resumed_session = bool(self.session_id) and self._used_session
        if permanent.kind == "session-missing" and resumed_session and not self._fresh_next:
            self.emit(
                Notice(
                    message=f"the agent's session {self.session_id} is gone "
                    f"({permanent.matched.describe()}): starting it afresh with the handoff",
                    level="warning",
                )
            )
            self.session_id = None
            # Recorded, so a resume after a crash of paella does not reach for it again.
            self.emit(AgentSession(attempt=exited.attempt, session_id=""))
            self._fresh_next = True
            return None
        reason = (
            f"permanent failure ({permanent.kind}), not retried: "
            f"{permanent.matched.describe()}; {permanent.advice}"
        )
        # The handoff says why, for `paella resume` and for a person reading it.
        await self._write_handoff(ending=f"{exited.describe()}: {reason}")
        return self._stopped(reason)

    async def _retry_wait(self, exited: AgentExited) -> int | None:
        """Wait for the next attempt; an exit status when the run ends instead (stopped during
        the wait, or the reset is further away than `[retry] max_wait`)."""
        now = datetime.now(UTC)
        wait = retry_wait(
            self._transient_failures,
            self.contract.retry,
            exited.evidence(),
            now=now,
            own_backoff=self.profile.own_backoff if self.profile else (),
        )
        matched = read_failure(exited.evidence(), self._transient).transient
        if wait.until is not None and wait.seconds > self.contract.retry.max_wait:
            # A far reset (a weekly limit): waiting here for days helps nobody.
            reason = (
                f"the agent's limit resets {wait.when} "
                f"({format_duration(wait.seconds)} away, more than [retry] max_wait): "
                "run `paella resume` after then (`--now` to try sooner)"
                + (f"; matched {matched.describe()}" if matched else "")
            )
            await self._write_handoff(ending=f"{exited.describe()}: {reason}")
            self.state = "stopped"
            self.emit(
                RunStopped(reason=reason, resume_after=wait.until.timestamp() + RESET_MARGIN_S)
            )
            return EXIT_NOT_DONE
        self.retry_at = time.time() + wait.seconds
        self.state = "retry-wait"
        self.emit(
            RetryScheduled(
                attempt=self.attempt,
                failures=self._transient_failures,
                wait_s=wait.seconds,
                resume_at=self.retry_at,
                reason=wait.reason + (f"; matched {matched.describe()}" if matched else ""),
                pattern=matched.pattern if matched else None,
                line=matched.line if matched else None,
            )
        )
        if not await self._sleep(wait.seconds):
            return self._stopped(self._stop_requested or "stopped during the retry wait")
        return None

    async def _wait_until(self, until: float, why: str) -> bool:
        """The retry wait before a resume's first attempt; False when stopped meanwhile."""
        wait_s = max(0.0, until - time.time())
        self.retry_at = until
        self.state = "retry-wait"
        self.emit(
            RetryScheduled(
                attempt=self.attempt,
                failures=self._transient_failures,
                wait_s=wait_s,
                resume_at=until,
                reason=f"until {datetime.fromtimestamp(until).astimezone():%a %d %b %H:%M} local time, {why}",
            )
        )
        return await self._sleep(wait_s)

    async def _sleep(self, wait_s: float) -> bool:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
        self.retry_at = None
        return self._stop_requested is None

    def skip_wait(self) -> None:
        """End a retry wait now (``R`` during the countdown)."""
        self._wake.set()

    async def _recover(
        self, ending: str, exited: AgentExited, finished: EvaluationFinished | None
    ) -> Decision:
        self.state = "recovering"
        facts = await asyncio.to_thread(self._facts, ending, exited, finished)
        self.emit(RecoveryNeeded(facts=facts))
        # The handoff is written while the person reads the facts, not before they see them.
        handoff = asyncio.ensure_future(self._write_handoff(ending=facts.how))
        if self._pending_decision is not None:
            decision, self._pending_decision = self._pending_decision, None
        else:
            decision = await self._decide(facts)
        await handoff
        if decision.by == "policy":
            self._auto_recoveries += 1
            if self._auto_recoveries > self.contract.retry.max_attempts:
                self.emit(
                    Notice(
                        message=f"{self._auto_recoveries - 1} automatic recoveries already: stopping instead",
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

    def _facts(
        self, ending: str, exited: AgentExited, finished: EvaluationFinished | None
    ) -> RecoveryFacts:
        """The facts of SPEC 9; without a finished final evaluation, the newest known results."""
        base = self.evaluator.base
        # Without a verdict yet, the tree the final evaluation is judging is the one to describe
        # (a snapshot of our own would cost as much again).
        tree = (
            finished.tree
            if finished is not None
            else self._evaluating_tree or self._snapshot_tree()
        )
        results = (
            finished.results if finished is not None else tuple(self.evaluator.latest.values())
        )
        since = base.tree if base else (self._start_tree or tree)
        changes = changes_between(self.workspace, since, tree)
        added, removed = totals(changes)
        regressions = tuple(
            r.gate
            for r in results
            if not r.green and r.status != "stale" and self.evaluator.ever_green.get(r.gate)
        )
        how = "stopped by you" if exited.stopped_by_user else exited.describe()
        breaks, before_break = self.breaks.facts(regressions)
        if self._protected_note:
            how, self._protected_note = f"{how}, but {self._protected_note}", None
        return RecoveryFacts(
            ending=ending,  # type: ignore[arg-type]
            how=f"{how}, attempt {exited.attempt}",
            tail=exited.tail[-15:],
            base=base,
            gates_now=results,
            regressions=regressions,
            changed_files=tuple(c.path for c in changes),
            lines_added=added,
            lines_removed=removed,
            default="rollback" if regressions and base is not None else "continue",
            gates_final=finished is not None,
            breaks=breaks,
            before_break=before_break,
        )

    async def _rollback(self, target: SnapshotRecord) -> None:
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

    async def _write_handoff(self, *, ending: str) -> Path:
        text = await asyncio.to_thread(self._render_handoff, ending)
        path = write_handoff(self.run_.dir, text)
        self.emit(HandoffWritten(path=str(path), size=len(text.encode())))
        return path

    def _render_handoff(self, ending: str) -> str:
        view = RunView.load(self.run_)
        base = self.evaluator.base
        now_tree = self._snapshot_tree()
        since = base.tree if base else (self._start_tree or now_tree)
        changes = [
            (c.path, c.added or 0, c.removed or 0)
            for c in changes_between(self.workspace, since, now_tree)
        ]
        return render_handoff(handoff_inputs_from_view(view, changes=changes, ending=ending))

    def _failed(self, what: str, hint: str | None) -> int:
        base = self.evaluator.base
        steps = ["fix the cause, then `paella resume` continues from the current state"]
        if base is not None:
            steps.append(f"`paella rollback {base.name} --yes` restores the last green checkpoint")
        message = f"{what}" + (f" ({hint})" if hint else "")
        self.emit(Notice(message=message, level="error"))
        return self._stopped(f"{what}. To continue: {'; '.join(steps)}.")

    def _stopped(self, reason: str) -> int:
        self.state = "stopped"
        self.emit(RunStopped(reason=reason))
        return EXIT_NOT_DONE

    # --- housekeeping ------------------------------------------------------------------------

    def _snapshot_tree(self) -> str:
        return self.snapshotter.take_locked().tree

    def _run_start_tree(self) -> str:
        """The tree the run started on (drift is judged against it), recorded once per run."""
        for record in self.run_.ledger.read().of_kind("run-tree"):
            return str(record["tree"])
        tree = self._snapshot_tree()
        self.run_.ledger.append("run-tree", tree=tree)
        return tree

    def _lost_attempt(self) -> AgentExited | None:
        """The attempt a crash of paella left undecided (its agent was running, or its recovery
        was being asked), as an exit to recover from; None when its end was decided."""
        view = RunView.load(self.run_)
        records = view.of_kind(
            "agent-started", "agent-exited", "recovery-needed", "recovery-chosen"
        )
        if not records or records[-1].get("kind") not in ("agent-started", "recovery-needed"):
            return None
        last = records[-1]
        attempt = int(last.get("attempt") or self.attempt)
        tail: tuple[str, ...] = ()
        if last.get("kind") == "recovery-needed":
            tail = tuple(str(line) for line in last.get("tail") or ())
            how = f"{last.get('how', 'the attempt ended')}; paella was stopped before a choice"
        else:
            how = f"paella itself stopped while attempt {attempt} ran (its agent was stopped)"
        # No exit of its own was seen: the sentence stands where the exit would be described.
        return AgentExited(
            attempt=attempt, exit_code=None, signal=None, tail=tail, false_success=how
        )

    def _stop_orphans(self) -> str | None:
        """Stop an agent a killed paella left running: an agent never runs unsupervised."""
        view = RunView.load(self.run_)
        started = view.of_kind("agent-started")
        if not started:
            return None
        last = started[-1]
        pid, create_time = last.get("pid"), last.get("create_time")
        if not process_alive(pid, create_time):
            return None
        assert isinstance(pid, int)
        members = [pid]
        for proc_pid in _pids():
            with contextlib.suppress(OSError):
                if os.getsid(proc_pid) == pid and proc_pid != pid:
                    members.append(proc_pid)
        stopped = stop_tree(members, self._stop_grace)
        self.run_.ledger.append(
            "orphan-stopped",
            pid=pid,
            attempt=last.get("attempt"),
            processes=[f"{p.pid} {p.name}" for p in stopped],
        )
        return f"stopped agent pid {pid} left running by an earlier paella"

    async def _tick(self) -> None:
        last_persist = 0.0
        while True:
            await asyncio.sleep(STATS_EVERY_S)
            agent = self.agent
            if agent is not None and agent.returncode is None:
                stats = await asyncio.to_thread(agent.stats)
                event = AgentStats(
                    attempt=self.attempt,
                    cpu_percent=stats.cpu_percent,
                    rss_bytes=stats.rss_bytes,
                    descendants=stats.descendants,
                    uptime_s=time.time() - stats.started,
                    usage=self._decoded.stats.usage() if self._decoded is not None else None,
                )
                self._consumer(event)
                if time.monotonic() - last_persist >= STATS_PERSIST_EVERY_S:
                    last_persist = time.monotonic()
                    self.run_.ledger.append("agent-stats", **event.record())
                if self.drift is not None:
                    for drift in self.drift.check_stall(self._last_activity, time.monotonic()):
                        self.emit(drift)


def _some_paths(paths: list[str]) -> str:
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def _names_session(template: tuple[str, ...]) -> bool:
    return any("{session_id}" in word for word in template)


def _consume_result(task: asyncio.Future[EvaluationFinished]) -> None:
    # The final evaluation may end after recovery moved on; its events were emitted already,
    # and an error here (the evaluator closed) must not be reported as never retrieved.
    if not task.cancelled():
        task.exception()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def install_signal_handlers(loop: asyncio.AbstractEventLoop, run_loop: RunLoop) -> None:
    """SIGHUP (the pane closed), SIGTERM and SIGINT stop the agent cleanly and record why."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(
            sig, run_loop.request_stop, f"paella received {signal.Signals(sig).name}"
        )
