"""The run loop: one object that supervises a run from launch to done, and emits typed events.

It ties the rooms together: the agent process, the workspace watcher, the gate evaluator (which
takes the green checkpoints), drift checks, the governed retry, recovery and the handoff. Every
event goes through one ``emit`` (:mod:`~paella_tui.supervisor.run.loop_parts`): the ledger
first, then the consumer (the headless printer or the TUI), so ``paella status`` from another
terminal and ``paella resume`` after a crash see the same truth.

Recovery is a decision the loop cannot make alone: it asks its ``DecisionChannel``, which the
TUI answers with a key and the headless printer with its ``--on-death`` policy. This module holds
the flow only; its parts live beside it: the attempt's command (``agent.attempt_command``), the
orphan sweep (``agent.orphans``, ``run.run_start``), the agent's attempts
(``run.attempt_runner``, ``run.attempt_end``), the retry plan (``run.retry_plan``), recovery
(``run.recovery``, ``run.recovery_facts``, ``run.decisions``), the drift checks
(``run.drift_checks``), and the parts wired with the UI's commands (``run.loop_parts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import traceback
from pathlib import Path

from paella_tui.supervisor.agent.agent_process import ExitInfo
from paella_tui.supervisor.agent.retry import classify
from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.base.files import write_atomic
from paella_tui.supervisor.run.attempt_end import lost_attempt
from paella_tui.supervisor.run.decisions import Decide as Decide
from paella_tui.supervisor.run.decisions import Decision as Decision
from paella_tui.supervisor.run.decisions import Review as Review
from paella_tui.supervisor.run.drift_checks import some_paths
from paella_tui.supervisor.run.events import (
    AgentExited,
    Ending,
    EvaluationFinished,
    Notice,
    RunDone,
)
from paella_tui.supervisor.run.loop_parts import EXIT_CANNOT_START as EXIT_CANNOT_START
from paella_tui.supervisor.run.loop_parts import EXIT_DONE as EXIT_DONE
from paella_tui.supervisor.run.loop_parts import EXIT_NOT_DONE as EXIT_NOT_DONE
from paella_tui.supervisor.run.loop_parts import LoopParts as LoopParts
from paella_tui.supervisor.run.loop_parts import LoopState as LoopState
from paella_tui.supervisor.run.retry_plan import (
    FarReset,
    permanent_failure,
    permanent_reason,
    plan_retry,
    resume_wait,
    transient_ending,
)
from paella_tui.supervisor.run.run_start import run_start_tree, stop_orphans
from paella_tui.supervisor.run.run_view import RunView

# How long the recovery waits for the final tree's gates before showing what is known.
RECOVERY_WAIT_S = 0.05
# How often a policy's wait for the final verdict looks whether the run was asked to stop.
STOP_POLL_S = 0.2
EARLY_ENDINGS: tuple[Ending, ...] = ("crash", "signal", "stopped")
"""Endings that are not done whatever the gates say: recovery opens before they finish."""


class RunLoop(LoopParts):
    """Supervises one run: attempts of the agent, held to the contract's gates."""

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> int:
        """Supervise until done (0), stopped or out of choices (1), or the agent cannot start (2)."""
        orphan_note = await asyncio.to_thread(stop_orphans, self.run_, self._stop_grace)
        if orphan_note:
            self._consumer(Notice(message=orphan_note, level="warning"), self.run_state)
        await self.drift.integrity()
        start_tree = await asyncio.to_thread(run_start_tree, self.run_, self.recovery.snapshot_tree)
        self.recovery.start_tree = start_tree
        self.breaks.start(start_tree)
        self.drift.start(start_tree, self._contract_sha)
        await self._freeze(start_tree)
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
            await self._wind_down(tasks)

    async def _attempts(self) -> int:
        """Attempt after attempt until the run ends; each next attempt resumes with a handoff."""
        resume = self._resume_first
        handoff_path: Path | None = None
        if resume:
            started = await self._resume_start()
            if isinstance(started, int):
                return started
            handoff_path = started
        else:
            self.evaluator.request("run start")
        while True:
            if self._stop_requested:
                return self._stopped(self._stop_requested)
            exit_info = await self._one_attempt(resume=resume, handoff_path=handoff_path)
            if exit_info is None:
                return EXIT_CANNOT_START
            # The death is news at once (the recovery screen within 250 ms), before any gate.
            after = await self._after_exit(self.attempts.exited(exit_info))
            if isinstance(after, int):
                return after
            resume = True
            handoff_path = await self.recovery.write_handoff(ending=after)

    async def _resume_start(self) -> int | Path:
        """A resume: decide the attempt a crash left undecided, write the handoff, wait for the
        agent's reset; the handoff's path, or an exit status when the run ends instead."""
        lost = await asyncio.to_thread(
            lambda: lost_attempt(RunView.load(self.run_).run_state, self.attempt)
        )
        if lost is not None:
            # paella died before a decision was made about that attempt: make it now, on the
            # tree as it is (a resume must not carry on from a regressed tree unasked).
            verdict = await self._final_evaluation()
            await self._history_drift()
            outcome = await self._decide_and_act("crash", lost, verdict)
            if outcome is not None:
                return outcome
        words = self._stopped_on_words
        path = await self.recovery.write_handoff(
            ending="paella resume" + (f" (the run had stopped: {words})" if words else "")
        )
        # `paella resume` before the agent's limit resets: wait for it first.
        until = self._not_before
        if until is None or until <= time.time():
            return path
        why = "the agent's limit resets then"
        plan = resume_wait(until, why, attempt=self.attempt, failures=self._transient_failures)
        if not await self._wait(plan):
            return self._stopped(self._stop_requested or "stopped during the wait")
        return path

    async def _after_exit(self, exited: AgentExited) -> int | str:
        """Judge an attempt's end: an exit status when the run ends, else how it ended in the
        words of the next attempt's handoff."""
        if self._stop_requested:
            # Quitting: no gate run is worth keeping a person waiting.
            return self._stopped(self._stop_requested)
        self.state = "evaluating"
        self.recovery.evaluating_tree = None
        final = asyncio.ensure_future(self._final_evaluation())
        quick = classify(exited, all_gates_green=False, transient=self._transient)
        if quick in EARLY_ENDINGS:
            # Not done whatever the gates say. A person sees recovery open now with what is
            # known; the final tree's gates keep running and fill in the gate table when they
            # finish. A policy has nobody to show it to: it decides on the final verdict, and
            # the handoff it writes holds it (a quit still cuts the wait short).
            await self._await_final(final)
            early = final.result() if final.done() else None
            final.add_done_callback(_consume_result)
            await self._history_drift()
            return await self._recovered(quick, exited, early)
        finished = await final
        if self._stop_requested:
            return self._stopped(self._stop_requested)
        finished, ending = await self._ending(exited, finished)
        if ending == "done":
            return self._done(
                RunDone(tree=finished.tree, gates=tuple(r.gate for r in finished.results))
            )
        if ending == "permanent":
            stopped = await self._permanent(exited)
            return stopped or f"the agent's session was missing: {exited.describe()}"
        if ending == "transient" and self._transient_failures < self.contract.retry.max_attempts:
            self._transient_failures += 1
            waited = await self._retry_wait(exited)
            return waited if waited is not None else transient_ending(exited, self._transient)
        return await self._recovered(ending, exited, finished)

    async def _await_final(self, final: asyncio.Future[EvaluationFinished]) -> None:
        """Wait for the final tree's verdict: briefly when a person decides, else until it is in
        or the run is asked to stop."""
        if not self.decisions.answers_itself:
            await asyncio.wait({final}, timeout=RECOVERY_WAIT_S)
            return
        while not final.done() and not self._stop_requested:
            await asyncio.wait({final}, timeout=STOP_POLL_S)

    async def _recovered(
        self, ending: Ending, exited: AgentExited, finished: EvaluationFinished | None
    ) -> int | str:
        """Recovery, then the words of the next attempt's handoff (or the run's exit status)."""
        outcome = await self._decide_and_act(ending, exited, finished)
        return outcome if outcome is not None else f"{exited.describe()} ({ending})"

    async def _ending(
        self, exited: AgentExited, finished: EvaluationFinished
    ) -> tuple[EvaluationFinished, Ending]:
        """How the attempt ended, the final tree judged: drift first, then the verdict (a new
        one when a person accepted or reverted changed protected files); both to go on with."""
        all_green = self._all_green(finished)
        if not exited.false_success:
            # An exit 0 its own stream called an error claims nothing: it is a failure.
            self.drift.claimed_done(
                exited.exit_code, [r.gate for r in finished.results if not r.green]
            )
        await self._history_drift()
        # The final tree's path drift (protected, scope, contract) is judged in the background:
        # it belongs before the verdict, in the ledger and in the handoff.
        await self.drift.settled()
        ending = classify(exited, all_gates_green=all_green, transient=self._transient)
        if ending != "done":
            return finished, ending
        return await self._hold_to_frozen(exited, finished)

    def _all_green(self, finished: EvaluationFinished) -> bool:
        return (
            bool(self.contract.gates)
            and not finished.stale
            and all(r.green for r in finished.results)
        )

    async def _hold_to_frozen(
        self, exited: AgentExited, finished: EvaluationFinished
    ) -> tuple[EvaluationFinished, Ending]:
        """Green gates over changed protected files are not done: a person accepts or reverts
        (the TUI), else the ending becomes ``claimed-done``. The verdict and ending to go on with."""
        ending: Ending = "done"
        if self._review is not None and await self.drift.protected_paths(finished.tree):
            # A person accepts or reverts; the gates then judge again (forced).
            reviewed = await self._review_protected(finished.tree)
            if reviewed is not None:
                finished = reviewed
                all_green = self._all_green(finished)
                ending = classify(exited, all_gates_green=all_green, transient=self._transient)
                if ending != "done":
                    return finished, ending
        note = await self.drift.protected(finished.tree)
        if note is None:
            return finished, ending
        # Said on the recovery screen: revert (roll back) or accept (continue).
        self.recovery.protected_note = note
        return finished, "claimed-done"

    async def _review_protected(self, tree: str) -> EvaluationFinished | None:
        """Ask a person about changed protected files; act, then the new verdict (None: later)."""
        assert self.frozen is not None and self._review is not None
        change = await asyncio.to_thread(self.frozen.describe, tree)
        if not change.changes:
            return None
        choice = await self._review(change)
        shown = some_paths(list(change.paths))
        if choice == "accept":
            await asyncio.to_thread(self.frozen.accept, self.run_, tree, by="user")
            self.emit(Notice(message=f"accepted (by you) as the frozen content: {shown}"))
        elif choice == "revert":
            salvage = await asyncio.to_thread(
                self.frozen.revert, self.run_, self.snapshotter, by="user"
            )
            undo = f"; `paella rollback {salvage.name} --yes` undoes it" if salvage else ""
            self.emit(Notice(message=f"reverted to their frozen content: {shown}{undo}"))
        else:
            return None
        finished = await self.evaluator.evaluate(f"protected files: {choice}", force=True)
        for _ in range(3):  # the revert's own writes may move the tree under the gates
            if not finished.stale:
                break
            finished = await self.evaluator.evaluate("the tree changed while the gates ran")
        return finished

    async def _final_evaluation(self) -> EvaluationFinished:
        """Judge the tree the agent left (again while it keeps changing under the gates)."""
        finished = await self.evaluator.evaluate("agent exited", on_tree=self._final_tree)
        for _ in range(3):
            if not finished.stale:
                break
            finished = await self.evaluator.evaluate(
                "the tree changed while the gates ran", on_tree=self._final_tree
            )
        return finished

    def _final_tree(self, tree: str) -> None:
        self.recovery.evaluating_tree = tree

    async def _history_drift(self) -> None:
        await self.drift.history(self.evaluator.base)

    # --- an attempt --------------------------------------------------------------------------

    async def _one_attempt(self, *, resume: bool, handoff_path: Path | None) -> ExitInfo | None:
        """The next attempt, to its end; None when its agent could not start (the run stops)."""
        started = await self.attempts.start(
            resume=resume, handoff_path=handoff_path, episode=self._current_episode()
        )
        if isinstance(started, str):
            self._stopped(f"the agent could not start: {started}")
            return None
        self.state = "running"
        return await started.wait()

    def _current_episode(self) -> int:
        latest = self.evaluator.latest
        for k in range(1, len(self.contract.episodes) + 1):
            if not all(
                latest.get(g) is not None and latest[g].green
                for g in self.contract.episode_gates(k)
            ):
                return k
        return len(self.contract.episodes)

    # --- failures the agent named ------------------------------------------------------------

    async def _permanent(self, exited: AgentExited) -> int | None:
        """A failure no wait fixes: stop, saying why and what to do. A missing session is the
        exception when this attempt resumed one: forget it and start afresh with the handoff."""
        if self.attempts.forget_missing_session(exited, permanent_failure(exited, self._transient)):
            return None
        reason = permanent_reason(exited, self._transient)
        # The handoff says why, for `paella resume` and for a person reading it.
        await self.recovery.write_handoff(ending=f"{exited.describe()}: {reason}")
        return self._stopped(reason)

    async def _retry_wait(self, exited: AgentExited) -> int | None:
        """Wait for the next attempt; an exit status when the run ends instead (stopped during
        the wait, or the reset is further away than `[retry] max_wait`)."""
        plan = plan_retry(
            exited,
            failures=self._transient_failures,
            cfg=self.contract.retry,
            transient=self._transient,
            profile=self.attempts.profile,
        )
        if isinstance(plan, FarReset):
            await self.recovery.write_handoff(ending=f"{exited.describe()}: {plan.reason}")
            return self._stopped(plan.reason, resume_after=plan.resume_after)
        if not await self._wait(plan):
            return self._stopped(self._stop_requested or "stopped during the retry wait")
        return None

    # --- recovery ----------------------------------------------------------------------------

    async def _decide_and_act(
        self, ending: Ending, exited: AgentExited, finished: EvaluationFinished | None
    ) -> int | None:
        """Recovery: ask, then roll back if that was the choice. An exit status ends the run."""
        self.state = "recovering"
        decision = await self.recovery.ask(ending, exited, finished)
        if decision.choice == "accept":
            # Done is the gates' call, never the person's: judged again (cached: instant).
            verdict = await self.evaluator.evaluate("accept: done")
            if self.contract.gates and not verdict.stale and all(r.green for r in verdict.results):
                return self._done(
                    RunDone(tree=verdict.tree, gates=tuple(r.gate for r in verdict.results))
                )
        if decision.choice in ("stop", "accept"):
            # The one handoff of this death (a resume after it continues from it).
            await self.recovery.write_handoff(ending=f"{exited.describe()} ({ending})")
        if decision.choice == "accept":
            return self._stopped("accept refused: not every gate is green on the tree")
        if decision.choice == "stop":
            return self._stopped(f"handoff written; stopped ({decision.reason or decision.by})")
        if decision.choice == "rollback":
            try:
                await self.recovery.roll_back_or_say(decision.target or self.evaluator.base)
            except PaellaError:
                # The run stops here: the death's one handoff says where it stands.
                await self.recovery.write_handoff(ending=f"{exited.describe()} ({ending})")
                raise
        return None


def _consume_result(task: asyncio.Future[EvaluationFinished]) -> None:
    # The final evaluation may end after recovery moved on; its events were emitted already,
    # and an error here (the evaluator closed) must not be reported as never retrieved.
    if not task.cancelled():
        task.exception()


def install_signal_handlers(loop: asyncio.AbstractEventLoop, run_loop: RunLoop) -> None:
    """SIGHUP (the pane closed), SIGTERM and SIGINT stop the agent cleanly and record why."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(
            sig, run_loop.request_stop, f"paella received {signal.Signals(sig).name}"
        )
