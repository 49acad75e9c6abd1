"""What the run's keys do: ``g`` gates, ``c`` checkpoint, ``r`` roll back, ``s`` stop, ``R`` resume.

While a run loop lives, each goes through it (so the engine records it and the agent is stopped
first where it must be). After a stop no loop lives, and the two that still make sense, a
checkpoint and a rollback, call the engine's own functions in a thread worker. Nothing here
blocks the event loop, and every worker is labelled, with failures shown rather than raised.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from textual.app import App

from paella_tui.confirm_screen import ConfirmScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.run_board import RunBoard
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.run.events import Event
from paella_tui.supervisor.run.offline import checkpoint_now, judge_once, roll_back_now
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord


class RunHost(Protocol):
    """What the run keys need of the App beyond Textual's own (the App is both)."""

    run_: Run | None
    contract: Contract
    board: RunBoard
    run_loop: RunLoop | None

    @property
    def engine_live(self) -> bool:
        """A run loop is running."""
        ...

    @property
    def agent_alive(self) -> bool:
        """The live run loop's agent process is running."""
        ...

    @property
    def loop_flowing(self) -> bool:
        """A run loop runs its flow: not once it stopped or is done."""
        ...

    def feed(self, event: Event) -> None:
        """Show an engine event."""
        ...

    async def engine_ended(self) -> None:
        """Return once no run loop is running (at once when none is)."""
        ...

    def start_engine(self, *, resume: bool) -> None:
        """Start a run loop."""
        ...


class RunCommands:
    """The run keys of the App (``textual_app``, which is also the ``host``)."""

    def __init__(self, textual_app: App[int], host: RunHost) -> None:
        self.app = textual_app
        self.host = host

    def _work(self, work: Callable[[], Any] | Awaitable[Any], group: str, description: str) -> None:
        """A labelled worker: coroutines on the loop, plain callables in a thread."""
        self.app.run_worker(
            work,
            group=group,
            description=description,
            exit_on_error=False,
            exclusive=True,
            thread=callable(work),
        )

    def _live_loop(self) -> RunLoop | None:
        """The run loop while its flow runs; None once it stopped or is done (it may still be
        tidying up: the keys then work as after a stop, once it has ended)."""
        return self.host.run_loop if self.host.loop_flowing else None

    async def _after_the_loop(self, work: Callable[[], None]) -> None:
        """``work`` (blocking) once the run loop has ended, in a thread."""
        await self.host.engine_ended()
        await asyncio.to_thread(work)

    # --- g ---------------------------------------------------------------------------------------

    def run_gates(self) -> None:
        """Judge every gate on the current tree now (and resume a watcher paused by flapping)."""
        loop = self._live_loop()
        if loop is None:
            # No agent runs: judge the tree here, as `paella gates` does (no checkpoint).
            if self.host.run_ is None:
                self.app.notify("no run", severity="warning")
                return
            self._work(self._judge_offline(), "gates", "the gates")
            return
        loop.request_gates()
        self.app.notify("running every gate on the current tree", timeout=3)

    async def _judge_offline(self) -> None:
        """Every gate once on the tree as it is, recorded in the run's ledger and shown."""
        run = self.host.run_
        assert run is not None
        await self.host.engine_ended()
        view = await asyncio.to_thread(RunView.load, run)
        await judge_once(run, self.host.contract, self.host.feed, view)

    # --- c ---------------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """A manual checkpoint; the live loop judges the gates first, so it records them."""
        if self.host.run_ is None:
            self.app.notify("no run to checkpoint", severity="warning")
            return
        loop = self._live_loop()
        if loop is not None:
            self._work(loop.manual_checkpoint("manual checkpoint"), "checkpoint", "the checkpoint")
        else:
            work = self._after_the_loop(self._checkpoint_offline)
            self._work(work, "checkpoint", "the checkpoint")
        self.app.notify("taking a checkpoint…", timeout=3)

    def _checkpoint_offline(self) -> None:
        """After a stop (no loop): a snapshot with no gates judged, so none claimed green."""
        run = self.host.run_
        assert run is not None
        self.app.call_from_thread(self.host.feed, checkpoint_now(run, self.host.contract))

    # --- r ---------------------------------------------------------------------------------------

    def pick_and_roll_back(self) -> None:
        """The picker, then a confirmation, then the rollback."""
        if self.host.run_ is None:
            self.app.notify("no run to roll back", severity="warning")
            return
        self.app.push_screen(PickerScreen(self.host.run_), self._picked)

    def _picked(self, record: SnapshotRecord | None) -> None:
        if record is None:
            return
        running = self.host.agent_alive
        if self._live_loop() is not None and not running:
            self.app.notify(
                "the run is between attempts: roll back from the recovery screen, or stop first",
                severity="warning",
            )
            return
        what = record.label or record.reason or record.name
        question = (
            f"Roll back to {record.name} ({what})?\n\n"
            + ("The agent is stopped first. " if running else "")
            + "The state now is salvaged first, so the rollback can be undone."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._roll_back(record)

        self.app.push_screen(ConfirmScreen(question, yes="Roll back"), answered)

    def _roll_back(self, record: SnapshotRecord) -> None:
        loop = self._live_loop()
        what = f"the rollback to {record.name}"
        if loop is not None:
            # The loop stops the agent; its end goes through recovery with this choice made.
            self._work(loop.roll_back_to(record), "rollback", what)
        else:
            work = self._after_the_loop(lambda: self._roll_back_offline(record))
            self._work(work, "rollback", what)

    def _roll_back_offline(self, record: SnapshotRecord) -> None:
        """After a stop (no loop): the engine's rollback, salvaging first."""
        run = self.host.run_
        assert run is not None
        done = roll_back_now(run, self.host.contract, record)
        self.app.call_from_thread(self.host.feed, done)
        self.app.call_from_thread(
            self.app.notify,
            f"rolled back to {record.name}; `paella rollback {done.salvage.name}` undoes it",
        )
        # The verdicts on screen were for the tree that is gone: judge the restored one.
        self.app.call_from_thread(self.run_gates)

    # --- s and R -----------------------------------------------------------------------------------

    def stop_agent(self) -> None:
        """Stop the agent; the loop records it and opens recovery."""
        loop = self.host.run_loop
        if loop is None or not self.host.agent_alive:
            self.app.notify("the agent is not running", severity="warning")
            return
        self._work(loop.stop_agent(), "stop", "stopping the agent")
        self.app.notify("stopping the agent…", timeout=3)

    def resume(self) -> None:
        """Retry now during a retry wait; after a stop, resume with a new run loop."""
        host, say = self.host, self.app.notify
        run = host.run_
        if run is None:
            return
        if self._live_loop() is not None:
            if host.board.state == "retry-wait" and host.run_loop is not None:
                host.run_loop.skip_wait()
                say("retrying now", timeout=3)
            else:
                say("the run is live already", severity="warning")
            return
        if host.board.state == "done":
            say("the run is done: every gate was green", severity="warning")
            return

        async def resume() -> None:
            await host.engine_ended()  # a stopped loop may still be tidying up
            # Recorded like `paella resume`: another paella can tell this run is supervised.
            await asyncio.to_thread(run.ledger.append, "resumed", paella_pid=os.getpid())
            host.start_engine(resume=True)

        self._work(resume(), "resume", "resuming the run")
