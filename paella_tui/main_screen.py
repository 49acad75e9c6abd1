"""The main screen: the run at a glance, in one tmux pane.

Top to bottom: the header (run, state, agent, verdict), episodes and gates side by side, a strip
of checkpoints and drift, then the live agent output taking the rest, and the keys in the footer.
It fits 80×24 and gives the panels more rows from 32 rows up. The App sets what it shows (from its
:class:`~paella_tui.run_board.RunBoard`); the widgets' messages bubble up to the App.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen

from paella_tui.output_feed import OutputFeed
from paella_tui.run_board import RunBoard
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.widgets.agent_log import AgentLog
from paella_tui.widgets.checkpoint_list import CheckpointList
from paella_tui.widgets.drift_feed import DriftFeed
from paella_tui.widgets.episode_list import EpisodeList
from paella_tui.widgets.gate_table import GateRow, GateTable
from paella_tui.widgets.keys_footer import KeysFooter
from paella_tui.widgets.run_header import RunHeader

WIDE_FOOTER = 100
"""From this width the footer also shows the command palette's key."""


class MainScreen(Screen[None]):
    """Header, episodes and gates, checkpoints and drift, the agent's output, the keys."""

    # Screen declares these as plain attributes, so no ClassVar here.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-normal")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__()
        # What the App set before the widgets existed, applied once they do.
        self._ready = False
        self._pending: tuple[RunBoard, str | None] | None = None
        self._now = 0.0
        self._tail: OutputTail | None = None
        self._feed: OutputFeed | None = None
        self._board: RunBoard | None = None
        # The screen's own children, kept so that setting them never depends on the DOM (the
        # App's clock may tick while the screen is being taken down).
        self._header = RunHeader(id="header")
        self._episodes = EpisodeList(id="episodes")
        self._gates = GateTable(id="gates")
        self._checkpoints = CheckpointList(id="checkpoints")
        self._drift = DriftFeed(id="drift")
        self._log = AgentLog(id="log")
        self._footer = KeysFooter(compact=True, show_command_palette=False)

    def compose(self) -> ComposeResult:
        """The panels, top to bottom."""
        yield self._header
        with Horizontal(id="board"):
            yield self._episodes
            yield self._gates
        with Horizontal(id="strip"):
            yield self._checkpoints
            yield self._drift
        yield self._log
        yield self._footer

    def on_mount(self) -> None:
        """The widgets exist now: show what the App set so far."""
        self._ready = True
        if self._pending is not None:
            board, state = self._pending
            self.show(board, state=state)
        self.set_now(self._now)
        if self._tail is not None:
            self.attach_output(self._tail)

    def on_resize(self, event: events.Resize) -> None:
        """The palette's key only when the footer has room for it after every other key."""
        self._footer.show_command_palette = event.size.width >= WIDE_FOOTER

    # --- attributes down: the App calls these ---------------------------------------------------

    def show(self, board: RunBoard, *, state: str | None = None) -> None:
        """Show ``board`` (``state`` overrides its state with one of the UI's own, e.g. stopping)."""
        self._board = board
        if not self._ready:
            self._pending = (board, state)
            return
        header = self._header
        header.run_name = board.name
        header.run_id = board.run_id
        header.state = state or board.state
        header.attempt = board.attempt
        header.pid = board.pid
        header.started = board.agent_started
        stats = board.stats
        header.cpu_percent = stats.cpu_percent if stats else None
        header.rss_bytes = stats.rss_bytes if stats else None
        header.descendants = stats.descendants if stats else None
        header.cpu_history = tuple(board.cpu_history)
        header.retry_at = board.retry_at
        header.done_gates = board.done_gates
        header.detail = board.detail
        header.usage = board.usage
        self._episodes.episodes = board.episode_rows()
        self._gates.gates = board.gate_rows()
        checkpoints = self._checkpoints
        checkpoints.checkpoints = tuple(board.checkpoints)
        checkpoints.salvage = tuple(board.salvage)
        checkpoints.base = board.base.n if board.base else None
        self._drift.warnings = tuple(board.drift)

    # --- messages up: what the screen answers itself --------------------------------------------

    def chosen_gate(self) -> GateRow | None:
        """The gate ``l`` opens: the one under the table's cursor while it has the focus, else
        the first red one, else the first."""
        gates = self._gates
        if gates.has_focus:
            row = gates.row_at_cursor()
            if isinstance(row, GateRow):
                return row
        rows = gates.gates
        red = [r for r in rows if r.status in ("fail", "timeout", "error")]
        if red:
            return red[0]
        return rows[0] if rows else None

    def on_episode_list_selected(self, message: EpisodeList.Selected) -> None:
        """An episode chosen: its goal."""
        message.stop()
        episode = message.episode
        self.notify(
            episode.goal or "(no goal)", title=f"episode {episode.n}: {episode.name}", timeout=10
        )

    def on_drift_feed_selected(self, message: DriftFeed.Selected) -> None:
        """A drift warning chosen: its whole message."""
        message.stop()
        warning = message.warning
        self.notify(
            warning.message, title=f"drift: {warning.drift}", severity="warning", timeout=12
        )

    def set_now(self, now: float) -> None:
        """The clock moved: uptime, countdown and ages count from ``now``."""
        self._now = now
        if not self._ready:
            return
        self._header.now = now
        self._gates.now = now

    def attach_output(self, tail: OutputTail) -> None:
        """Show this output tail (each run loop has its own): its lines reach the log as data;
        the old lines stay above the new tail's."""
        self._tail = tail
        if not self._ready:
            return
        if self._feed is not None:
            self._feed.stop()
        self._feed = OutputFeed(tail, self._log.show)
        self._feed.start()

    def on_unmount(self) -> None:
        """Stop taking output: the tail outlives the screen."""
        if self._feed is not None:
            self._feed.stop()

    def open_search(self) -> None:
        """``/``: search the agent's output."""
        self._log.open_search()

    def toggle_follow(self) -> bool:
        """``f``: follow the output or stop; returns whether it follows now."""
        log = self._log
        log.toggle_follow()
        return log.follow
