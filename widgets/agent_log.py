"""The agent's live output with follow (``f``) and search (``/``, then ``n``/``N``): the line
view (:mod:`~paella_tui.widgets.output_view`) and its search box.

It receives data, never a live engine object: batches of new lines
(:class:`~paella_tui.widgets.rows.OutputBatch`), handed to :meth:`AgentLog.show` by whoever
reads the engine's output (the main screen's :class:`~paella_tui.output_feed.OutputFeed`, which
batches a flood into one call per 100 ms).
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.markup import escape
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input

from paella_tui.widgets.output_view import MAX_LINES as MAX_LINES
from paella_tui.widgets.output_view import OutputView as OutputView
from paella_tui.widgets.output_view import plain as plain
from paella_tui.widgets.rows import OutputBatch


class AgentLog(Vertical):
    """The live agent output with follow and search; fed by setting ``source``."""

    DEFAULT_CSS = """
    AgentLog {
        height: 1fr;
    }
    AgentLog > OutputView {
        height: 1fr;
    }
    AgentLog > Input {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
        background: $boost;
    }
    AgentLog.-searching > Input {
        display: block;
    }
    """

    follow: reactive[bool] = reactive(True)
    """Keep the newest line in view as output arrives (``f`` toggles)."""
    search_text: reactive[str] = reactive("")
    """The search text; every match is highlighted."""

    class SearchChanged(Message):
        """A search ran: ``count`` lines match ``query``."""

        def __init__(self, agent_log: AgentLog, query: str, count: int) -> None:
            super().__init__()
            self.agent_log = agent_log
            self.query = query
            self.count = count

        @property
        def control(self) -> AgentLog:
            """The log that was searched."""
            return self.agent_log

    def __init__(self, *, max_lines: int = MAX_LINES, id: str | None = None) -> None:
        super().__init__(id=id)
        self._match_note = ""
        self._view = OutputView(max_lines=max_lines)
        self._search_box = Input(
            placeholder="search the output · enter: jump · esc: close", id="log-search"
        )

    def compose(self) -> ComposeResult:
        """The view and its (hidden) search box."""
        yield self._view
        yield self._search_box

    def on_mount(self) -> None:
        """The title says whether it follows."""
        self._retitle()

    @property
    def view(self) -> OutputView:
        """The line view (a child of this widget)."""
        return self._view

    def show(self, batch: OutputBatch) -> None:
        """New output: complete lines, and the unfinished last one."""
        self._view.add(list(batch.lines), batch.partial)

    def watch_follow(self, follow: bool) -> None:
        """Following again jumps to the newest line."""
        self._retitle()
        self.view.follow = follow
        if follow and self.is_mounted:
            self.view.scroll_to_end()

    def watch_search_text(self, query: str) -> None:
        """Run the search and say how it went."""
        if not self.is_mounted:
            return
        count = self.view.search(query)
        if not query:
            self._match_note = ""
            self._retitle()
        self.post_message(self.SearchChanged(self, query, count))

    # --- actions the screen calls -----------------------------------------------------------

    def toggle_follow(self) -> None:
        """``f``: follow the newest output, or stop following."""
        self.follow = not self.follow

    def open_search(self) -> None:
        """``/``: show the search box and focus it."""
        self.add_class("-searching")
        box = self._search_box
        box.value = self.search_text
        box.focus()

    def close_search(self) -> None:
        """Hide the search box and clear the highlights."""
        self.remove_class("-searching")
        self.search_text = ""
        self.view.focus()

    # --- messages from the children ----------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: search (again) and give the keys back to the view (``n``/``N`` step)."""
        event.stop()
        if event.value == self.search_text:
            self.view.action_previous_match()
        self.search_text = event.value
        self.view.focus()

    def on_key(self, event: events.Key) -> None:
        """Escape closes the search."""
        if event.key == "escape" and self.has_class("-searching"):
            event.stop()
            self.close_search()

    def on_output_view_scrolled(self, event: OutputView.Scrolled) -> None:
        """Scrolling away stops following; scrolling back to the end follows again."""
        event.stop()
        self.follow = event.at_end

    def on_output_view_match_moved(self, event: OutputView.MatchMoved) -> None:
        """Show where the current match is in the title."""
        event.stop()
        if event.count:
            self._match_note = f"match {event.index}/{event.count} · n/N"
        elif self.search_text:
            self._match_note = f"no match for {self.search_text!r}"
        self._retitle()

    def _retitle(self) -> None:
        how = "following ↓" if self.follow else "paused · f follows"
        self.border_title = f"agent output · {how}"
        # The note quotes the search text: a title is markup, the user's text must not be.
        self.border_subtitle = escape(self._match_note)
