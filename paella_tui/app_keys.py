"""The App's keys: the bindings, the actions behind them (each run key goes through
:class:`~paella_tui.run_commands.RunCommands`, each view opens its screen), which of them apply
now, and the command palette that lists them all. :class:`~paella_tui.app.PaellaApp` is built on
it and supplies the run, the board and the engine's liveness it asks about."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from paella_tui.diff_screen import DiffScreen
from paella_tui.gate_log_screen import GateLogScreen
from paella_tui.handoff_screen import HandoffScreen
from paella_tui.help_screen import HelpScreen
from paella_tui.main_screen import MainScreen
from paella_tui.run_board import RunBoard
from paella_tui.run_commands import RunCommands
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.checkpoint_list import CheckpointList
from paella_tui.widgets.gate_table import GateRow, GateTable


class RunKeys(App[int]):
    """The keys of paella's TUI; the run itself is the subclass's."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "run_gates", "gates", tooltip="Run every gate on the current tree now"),
        Binding("c", "checkpoint", "ckpt", tooltip="Take a manual checkpoint now"),
        Binding("r", "rollback", "back", tooltip="Roll back to a checkpoint you pick"),
        Binding("s", "stop_agent", "stop", tooltip="Stop the agent (recovery follows)"),
        Binding("R", "resume", "resume", tooltip="Resume the run (or retry now)"),
        Binding("d", "diff", "diff", tooltip="The diff from the last green checkpoint"),
        Binding(
            "l", "gate_log", "log", tooltip="A gate's full output: failing tests, search, runs"
        ),
        Binding("h", "handoff", "handoff", tooltip="Preview the handoff"),
        Binding("slash", "search", "find", key_display="/", tooltip="Search the agent output"),
        # In the help and the palette, not the footer: at 80 columns the footer has no room left.
        Binding("f", "follow", "follow", show=False, tooltip="Follow the agent output, or stop"),
        Binding("q", "quit", "quit", tooltip="Quit (asks while the agent runs)"),
        Binding("question_mark", "help", "help", key_display="?", tooltip="Keys and symbols"),
    ]

    run_: Run | None
    run_loop: RunLoop | None
    _engine_task: asyncio.Task[int] | None
    board: RunBoard
    commands: RunCommands
    _quitting: bool

    # --- what the keys need to know of the engine (the App starts it) ------------------------

    @property
    def engine_live(self) -> bool:
        """A run loop is running (between its start and its exit status)."""
        return self._engine_task is not None and not self._engine_task.done()

    @property
    def loop_flowing(self) -> bool:
        """A run loop runs its flow: not once it stopped or is done (it may still be tidying
        up: the keys then act as after a stop, once it has ended)."""
        loop = self.run_loop
        return self.engine_live and loop is not None and loop.state not in ("done", "stopped")

    @property
    def agent_alive(self) -> bool:
        """The live run loop's agent process is running."""
        loop = self.run_loop
        return bool(
            self.engine_live
            and loop is not None
            and loop.agent is not None
            and loop.agent.returncode is None
        )

    def _main_or_none(self) -> MainScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, MainScreen)), None)

    # --- the gate log view ---------------------------------------------------------------------

    def on_gate_table_selected(self, message: GateTable.Selected) -> None:
        """Enter on a gate: its log view."""
        message.stop()
        self._open_gate_log(message.gate)

    def action_gate_log(self) -> None:
        """``l``: the log view of the gate under the cursor (else the first red one)."""
        main = self._main_or_none()
        gate = main.chosen_gate() if main is not None else None
        if gate is None:
            self.notify("the contract has no gate", severity="warning")
            return
        self._open_gate_log(gate)

    def _open_gate_log(self, gate: GateRow) -> None:
        if self.run_ is None:
            self.notify("no run: no gate log", severity="warning")
            return
        self.push_screen(
            GateLogScreen(self.run_.dir, gate.name, status=gate.status, message=gate.message)
        )

    # --- keys ------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``s`` only while the agent runs, ``R`` only when there is something to resume; on the
        other screens only their own keys (and quit)."""
        if self.screen is not self._main_or_none() and action != "quit":
            return False
        if action == "stop_agent":
            return self.agent_alive
        if action == "resume":
            return self._can_resume()
        return True

    def _can_resume(self) -> bool:
        if self.run_ is None or self._quitting:
            return False
        if self.board.state == "retry-wait" and self.loop_flowing:
            return True
        # A loop that stopped may still be tidying up: R waits for its end (RunCommands.resume).
        return not self.loop_flowing and self.board.state not in ("done", "starting")

    def action_run_gates(self) -> None:
        """``g``: judge every gate on the current tree now."""
        self.commands.run_gates()

    def action_checkpoint(self) -> None:
        """``c``: a manual checkpoint."""
        self.commands.checkpoint()

    def action_rollback(self) -> None:
        """``r``: pick a checkpoint, confirm, roll back to it (the agent is stopped first)."""
        self.commands.pick_and_roll_back()

    def action_stop_agent(self) -> None:
        """``s``: stop the agent; its end goes through recovery."""
        self.commands.stop_agent()

    def action_resume(self) -> None:
        """``R``: retry now during a retry wait, or resume a stopped run."""
        self.commands.resume()

    def action_diff(self, record: SnapshotRecord | None = None) -> None:
        """``d``: the diff from the last green checkpoint (or ``record``) to now."""
        if self.run_ is None:
            self.notify("no run", severity="warning")
            return
        self.push_screen(DiffScreen(self.run_, record))

    def action_handoff(self) -> None:
        """``h``: preview the handoff the next attempt would get."""
        if self.run_ is None:
            self.notify("no run", severity="warning")
            return
        self.push_screen(HandoffScreen(self.run_))

    def action_help(self) -> None:
        """``?``: the keys and what the symbols mean."""
        self.push_screen(HelpScreen(self.run_))

    def action_search(self) -> None:
        """``/``: search the agent's output."""
        main = self._main_or_none()
        if main is not None and self.screen is main:
            main.open_search()

    def action_follow(self) -> None:
        """``f``: follow the agent's output, or stop following."""
        main = self._main_or_none()
        if main is not None and self.screen is main:
            following = main.toggle_follow()
            self.notify(
                "following the output" if following else "not following the output", timeout=2
            )

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every key's command in the palette (ctrl+p), then Textual's own."""
        commands = [
            ("Run gates", "Judge every gate on the current tree now (g)", self.action_run_gates),
            ("Checkpoint", "Take a manual checkpoint now (c)", self.action_checkpoint),
            ("Roll back", "Pick a checkpoint and roll back to it (r)", self.action_rollback),
            ("Stop the agent", "Stop the agent; recovery follows (s)", self.action_stop_agent),
            ("Resume", "Resume the run, or retry now (R)", self.action_resume),
            ("Diff", "The diff from the last green checkpoint to now (d)", self.action_diff),
            ("Handoff", "Preview the handoff (h)", self.action_handoff),
            (
                "Gate log",
                "A gate's full output: failing tests, search, its runs (l)",
                self.action_gate_log,
            ),
            ("Search the output", "Search the agent's output (/)", self.action_search),
            ("Follow the output", "Follow the agent's output, or stop (f)", self.action_follow),
            ("Help", "Keys and symbols (?)", self.action_help),
            ("Quit", "Quit; asks while the agent runs (q)", self.action_quit),
        ]
        for title, help_text, callback in commands:
            yield SystemCommand(title, help_text, callback)
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command

    # --- messages from the main screen's widgets --------------------------------------------------

    def on_checkpoint_list_selected(self, message: CheckpointList.Selected) -> None:
        """A checkpoint chosen: the diff from it to now."""
        self.action_diff(message.record)
