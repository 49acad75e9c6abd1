"""The Textual App: runs the engine's RunLoop in a worker and shows its events on the screens.

The run loop emits typed events (the same stream the headless printer reads); the App folds them
into a :class:`~paella_tui.run_board.RunBoard` and sets it on the main screen, rings the alarm on
a death or a drift, and answers the loop's recovery question with the recovery screen. It never
outlives its agent: quitting asks while the agent runs, then stops it through the loop (so the
stop is recorded) and exits with the loop's exit status; SIGHUP (the pane closed) and SIGTERM do
the same without asking, and :func:`run_app` makes sure of it however the App ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, ClassVar

from textual.worker import Worker, WorkerState

from paella_tui.app_keys import RunKeys
from paella_tui.confirm_screen import ConfirmScreen
from paella_tui.main_screen import MainScreen
from paella_tui.notify import Alarm, Alert, alert_for
from paella_tui.protected_screen import ProtectedScreen
from paella_tui.quit_signals import QuitSignals, mute_driver
from paella_tui.recovery_screen import RecoveryScreen
from paella_tui.run_board import RunBoard
from paella_tui.run_commands import RunCommands
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.frozen import ProtectedChange, ReviewChoice
from paella_tui.supervisor.run.decisions import Decision, OnDeath, policy
from paella_tui.supervisor.run.events import (
    AgentExited,
    BisectFinished,
    EvaluationFinished,
    Event,
    Notice,
    RecoveryFacts,
    RecoveryNeeded,
    RunDone,
)
from paella_tui.supervisor.run.run_loop import EXIT_NOT_DONE, RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.run.state import RunState

EXIT_INTERRUPTED = 130
TICK_S = 1.0
"""How often the clock moves (uptime, the retry countdown, the gates' ages)."""
STOP_PATIENCE_S = 20.0
"""After the agent's stop grace, how long a quit waits for the run loop before cutting it short."""


class PaellaApp(RunKeys):
    """paella's TUI: one run, supervised live."""

    TITLE = "paella"
    # Absolute, so a subclass defined elsewhere (a test, the screenshot script) finds it too.
    # screens.tcss belongs to the other screens (they name it too); read at start, the first
    # death does not pay for parsing it and restyling every node before the recovery shows.
    CSS_PATH: ClassVar[list[str | PurePath]] = [
        Path(__file__).parent / "styles" / "app.tcss",
        Path(__file__).parent / "styles" / "screens.tcss",
    ]

    def __init__(
        self,
        *,
        contract: Contract,
        run: Run | None = None,
        run_id: str | None = None,
        resume: bool = False,
        on_death: OnDeath = "ask",
        clock: Callable[[], float] = time.time,
        stop_grace: float = 10.0,
        engine: bool = True,
        not_before: float | None = None,
    ) -> None:
        """``engine=False`` shows only what is fed to :meth:`feed` (tests, screenshots)."""
        super().__init__()
        self.run_ = run
        """The supervised run (``run`` is the App's own method), or None without an engine."""
        self.contract = contract
        """The frozen contract the run is held to."""
        self.board = RunBoard(contract=contract, run_id=run_id or (run.run_id if run else ""))
        """The run as shown, folded from the events."""
        self.run_loop: RunLoop | None = None
        """The live run loop (a new one after ``R``), or None before the first."""
        self.exit_code = EXIT_NOT_DONE
        """What ``paella run`` exits with: the run loop's status (0 only when done)."""
        self.alarm = Alarm(self)
        """Rings a death, a drift, exhausted retries: bell, toast, desktop, tmux."""
        self._resume_first = resume
        self._not_before = not_before
        self._on_death = on_death
        self._clock = clock
        self._stop_grace = stop_grace
        self._with_engine = engine and run is not None
        self._engine_task: asyncio.Task[int] | None = None
        self._recovery_screen: RecoveryScreen | None = None
        self._verdict_since_exit: EvaluationFinished | None = None
        """The newest verdict since the agent last exited: the final tree's, when the recovery
        screen opens after it came (a cached verdict takes milliseconds) and judged its tree."""
        self._quitting = False
        self._asking_to_quit = False
        self._signal_code: int | None = None
        self._loop_thread = threading.get_ident()
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._redraw_pending = False
        self._shown_bindings: tuple[bool, bool] = (False, False)
        self._deferred_panic: tuple[Any, ...] | None = None
        self._signals = QuitSignals(self._on_signal, mute=lambda: mute_driver(self._driver))
        self.commands = RunCommands(self, self)
        """What the run keys do (g, c, r, s, R)."""

    # --- text from outside is never markup ------------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A toast whose text is shown as it is: agent output, paths and test ids hold brackets
        that Textual's markup would parse (and crash on), so no toast of this App reads markup.
        While the recovery screen is up only errors show: its facts say the rest, and a toast
        would cover its choices."""
        del markup  # every caller, Widget.notify included, passes its default True
        if isinstance(self.screen, RecoveryScreen) and severity != "error":
            return
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # --- start -----------------------------------------------------------------------------

    def on_mount(self) -> None:
        """Show the main screen, start the clock and the engine, take over the quit signals."""
        self._event_loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.set_interval(TICK_S, self._tick, name="paella-clock")
        self._tick()
        if self._with_engine:
            self._signals.install(self._event_loop)
            self.start_engine(resume=self._resume_first)
        self._redraw()

    def get_default_screen(self) -> MainScreen:
        """The main screen is the bottom of the stack."""
        return MainScreen()

    @property
    def main(self) -> MainScreen:
        """The main screen (the bottom of the screen stack)."""
        return next(s for s in self.screen_stack if isinstance(s, MainScreen))

    def start_engine(self, *, resume: bool) -> None:
        """Start a run loop (a new one after ``R``) in the engine worker."""
        self.board.state = "starting" if not resume else "resuming"
        self.run_worker(
            self._supervise(resume),
            name="run loop",
            group="engine",
            description=f"supervising run {self.board.run_id}",
            exit_on_error=False,
            exclusive=True,
        )

    async def _supervise(self, resume: bool) -> int:
        """The engine worker: build the run loop (its ledger read in a thread) and run it."""
        assert self.run_ is not None
        run = self.run_
        view = await asyncio.to_thread(RunView.load, run)
        self.board.seed(view)
        self._redraw()
        loop = await asyncio.to_thread(
            lambda: RunLoop(
                run=run,
                contract=self.contract,
                emit=self.feed,
                decide=None if self._on_death == "ask" else policy(self._on_death),
                review=self._review,
                resume=resume,
                stop_grace=self._stop_grace,
                not_before=self._not_before if resume else None,
            )
        )
        self.run_loop = loop
        self.main.attach_output(loop.tail)
        # The loop runs in its own task, shielded from the worker: if the App ends abruptly
        # (its workers are cancelled), run_app still stops the agent through the loop.
        self._engine_task = asyncio.get_running_loop().create_task(
            loop.run(), name="paella-run-loop"
        )
        return await asyncio.shield(self._engine_task)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The engine ended (or a command worker failed): show it, and exit if quitting."""
        worker = event.worker
        if worker.group == "engine":
            if event.state == WorkerState.SUCCESS:
                self.exit_code = int(worker.result or 0)
            elif event.state == WorkerState.ERROR:
                self.exit_code = EXIT_NOT_DONE
                self.board.state = "error"
                self.board.detail = f"the run loop failed: {worker.error!r}"
                self.alarm.ring(Alert("paella: supervisor error", self.board.detail))
            elif event.state == WorkerState.CANCELLED:
                self.exit_code = EXIT_NOT_DONE
            if event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
                self._redraw()
                if self._quitting:
                    self._leave()
        elif event.state == WorkerState.ERROR:
            self.notify(
                f"{worker.description} failed: {worker.error}", severity="error", timeout=15
            )

    # --- events from the engine ----------------------------------------------------------------

    def feed(self, event: Event, state: RunState | None = None) -> None:
        """The run loop's consumer: show ``event`` with the run's ``state`` after it (the loop
        folded it first); redraw, ring what is loud. Without a state (a command's own event, `g`
        after the loop ended) the board folds the event by the same rules."""
        if threading.get_ident() != self._loop_thread and self._event_loop is not None:
            # The engine's contract is the event loop's thread; be safe if it ever is not.
            self._event_loop.call_soon_threadsafe(self.feed, event, state)
            return
        try:
            self._feed(event, state)
        except Exception as err:  # the engine must never die of a display problem
            with contextlib.suppress(Exception):
                self.notify(f"display error: {err!r}", severity="error")

    def _feed(self, event: Event, state: RunState | None) -> None:
        self.board.apply(event, state)
        if isinstance(event, RecoveryNeeded):
            self._ask(event.facts)
        if isinstance(event, AgentExited):
            self._verdict_since_exit = None
        elif isinstance(event, EvaluationFinished) and not event.stale:
            self._verdict_since_exit = event
        if not self.is_running:
            return
        recovery = self._recovery_screen
        if isinstance(event, EvaluationFinished) and not event.stale and recovery is not None:
            # The final tree's verdict (the screen may have opened while it was still running).
            # A verdict on another tree is not it: a pass that snapshotted before the death can
            # finish after it.
            self.call_later(recovery.final_gates, event, set(self.board.regressed))
        if isinstance(event, BisectFinished) and recovery is not None:
            self.call_later(recovery.bisected, event.point, event.before_break)
        alert = alert_for(event)
        if isinstance(event, AgentExited) and self._quitting:
            alert = None  # a quit's own stop is no death
        if alert is not None:
            self.alarm.ring(alert)
        elif isinstance(event, Notice):
            self.notify(
                event.message, severity="warning" if event.level == "warning" else "information"
            )
        elif isinstance(event, RunDone):
            self.notify(
                f"every gate is green: {', '.join(event.gates)}", title="✓ done", timeout=10
            )
            self.bell()
        self._redraw()

    def _redraw(self) -> None:
        """Show the board soon, once for a burst of events."""
        if self._redraw_pending or not self.is_running:
            return
        self._redraw_pending = True
        self.call_later(self._show_board)

    def _show_board(self) -> None:
        self._redraw_pending = False
        main = self._main_or_none()
        if main is None:
            return
        main.show(self.board, state="stopping" if self._quitting and self.engine_live else None)
        shown = (self.agent_alive, self._can_resume())
        if shown != self._shown_bindings:
            self._shown_bindings = shown
            self.refresh_bindings()

    def _tick(self) -> None:
        """The clock: uptime, countdowns and ages count from now."""
        main = self._main_or_none()
        if main is not None:
            main.set_now(self._clock())

    # --- recovery ------------------------------------------------------------------------------

    def _ask(self, facts: RecoveryFacts) -> None:
        """A recovery is asked: the recovery screen, whose choice goes back to the run loop's
        decision channel (with ``--on-death`` the policy answers; a quit answers stop)."""
        loop = self.run_loop
        if loop is None:
            return
        if self._quitting or not self.is_running:
            loop.decisions.send(Decision("stop", by="quit"))
            return
        if self._on_death != "ask":
            self.notify(
                f"{facts.how_and_attempt}: --on-death {self._on_death} applied", severity="warning"
            )
            return
        assert self.run_ is not None
        screen = RecoveryScreen(facts, run=self.run_)

        def chosen(decision: Decision | None) -> None:
            if self._recovery_screen is screen:
                self._recovery_screen = None
            if loop.decisions.asking:
                # No choice (the screen was closed some other way) keeps the state: stop.
                loop.decisions.send(decision or Decision("stop", by="user"))

        self._recovery_screen = screen
        # The facts are on the screen; toasts would only cover its choices (at 80x24 they do).
        self.clear_notifications()
        self.push_screen(screen, chosen)
        verdict = self._verdict_since_exit
        if not facts.gates_final and verdict is not None:
            # The verdict came before the screen: take it in now, as if it came after.
            self.call_later(screen.final_gates, verdict, set(self.board.regressed))

    async def _review(self, change: ProtectedChange) -> ReviewChoice:
        """The run loop's ``review``: the protected-files screen (``later`` under a policy)."""
        if self._quitting or self._on_death != "ask":
            return "later"
        self.clear_notifications()
        return await ProtectedScreen.ask(self, change)

    # --- quitting --------------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """``q``: quit; while the agent runs, ask first, then stop it and wait for the loop."""
        if self._quitting:
            return
        if not self.agent_alive:
            self._stop_and_exit("quit by you")
            return
        if self._asking_to_quit:
            return
        self._asking_to_quit = True
        board = self.board
        question = (
            f"The agent is running (attempt {board.attempt}, pid {board.pid}).\n\n"
            "Stop it and quit? The run is recorded as stopped; `paella resume` continues it."
        )

        def answered(yes: bool | None) -> None:
            self._asking_to_quit = False
            if yes:
                self._stop_and_exit("quit by you")

        self.push_screen(ConfirmScreen(question, yes="Stop and quit", no="Keep running"), answered)

    def _stop_and_exit(self, reason: str) -> None:
        """End the run (the agent stopped and recorded) and exit when the loop has ended."""
        self._quitting = True
        self._answer_stop(reason)
        if self._recovery_screen is not None and self.screen is self._recovery_screen:
            self._recovery_screen = None
            self.pop_screen()
        if not self.engine_live:
            self._leave()  # with the loop's status, if its worker's message is not in yet
            return
        assert self.run_loop is not None
        self.run_loop.request_stop(reason)
        self._redraw()
        # A gate still running after the agent's end could keep the loop for minutes: past the
        # grace and some patience, cut it short (the loop's own cleanup still stops the agent).
        self.set_timer(
            self._stop_grace + STOP_PATIENCE_S, self._cut_short, name="paella-quit-patience"
        )

    def _answer_stop(self, reason: str) -> None:
        """A recovery being asked (or the next one) is answered: stop (the run is quitting)."""
        loop = self.run_loop
        if loop is not None:
            loop.decisions.send(Decision("stop", by="quit", reason=reason))

    def _cut_short(self) -> None:
        if self._engine_task is not None and not self._engine_task.done():
            self._engine_task.cancel()

    @property
    def status(self) -> int:
        """What ``paella run`` exits with: 130 after SIGINT, else the run loop's status."""
        return self._signal_code if self._signal_code is not None else self.exit_code

    def _take_returned_status(self) -> None:
        """Once the run loop has returned, the status is its own, whether or not its worker's
        news was handled: it may still be queued (a quit right after the verdict), or the App
        ended first and cancelled that worker on the way out (which says "not done")."""
        task = self._engine_task
        if task is not None and task.done() and not task.cancelled() and not task.exception():
            self.exit_code = int(task.result() or 0)

    def _leave(self) -> None:
        self._take_returned_status()
        if self._signals.terminal_lost:
            # The run is recorded and the agent stopped. Textual's shutdown would now restore a
            # terminal that no longer exists, and can block forever writing to it: exit here.
            os._exit(self.status)
        self._signals.release_stdin()
        if self._deferred_panic is not None:
            super().panic(*self._deferred_panic)
            return
        self.exit(self.status, return_code=self.status)

    def panic(self, *renderables: Any) -> None:
        """A fatal display error: stop the agent through the loop first, then show it and exit."""
        if self.engine_live and self._deferred_panic is None:
            self._deferred_panic = renderables
            self._stop_and_exit("paella's display failed")
            return
        super().panic(*renderables)

    def _on_signal(self, sig: int) -> None:
        """SIGHUP, SIGTERM, SIGINT: stop the agent the same way as a quit, without asking."""
        name = signal.Signals(sig).name
        if sig == signal.SIGINT:
            self._signal_code = EXIT_INTERRUPTED
        if self._quitting:
            return
        if self.engine_live and self.run_loop is not None:
            self._stop_and_exit(f"paella received {name}")
        else:
            self._stop_and_exit(name)

    async def engine_ended(self) -> None:
        """Return once no run loop is running (at once when none is)."""
        task = self._engine_task
        if task is not None and not task.done():
            await asyncio.wait({task})

    async def settle_engine(self, reason: str = "paella ended") -> None:
        """After the App ended, however it did: end the run loop through its own stop; the
        status is then the loop's."""
        task = self._engine_task
        if task is not None and task.done():
            self._take_returned_status()
        elif task is not None:
            self._answer_stop(reason)
            if self.run_loop is not None:
                self.run_loop.request_stop(reason)
            try:
                self.exit_code = await asyncio.wait_for(
                    asyncio.shield(task), self._stop_grace + STOP_PATIENCE_S
                )
            except (TimeoutError, asyncio.CancelledError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._signals.restore()

    def on_unmount(self) -> None:
        """Give the signals back (a test process runs many Apps), unless the engine still runs:
        then :meth:`settle_engine` does, once the agent is stopped."""
        if not self.engine_live:
            self._signals.restore()

    # --- for tests and screenshots ------------------------------------------------------------------

    def attach_output(self, tail: OutputTail) -> None:
        """Show ``tail`` as the agent's output (without an engine)."""
        self.main.attach_output(tail)


async def run_app(app: PaellaApp) -> int:
    """Run the TUI to its end; however it ends, the agent does not outlive it. Returns the status."""
    try:
        await app.run_async()
    finally:
        await app.settle_engine()
    return app.status
