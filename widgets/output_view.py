"""The agent's output lines themselves: a bounded, colour-keeping line view with search
highlights (the line API: only visible lines are rendered). Lines are kept raw (with their SGR
colours) and turned into styled text only when they are drawn, so only the visible lines cost
anything."""

from __future__ import annotations

import re
from collections import deque
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from paella_tui.widgets.theme_styles import themed_ansi

MAX_LINES = 5000
"""The most lines kept (and searchable) in the view."""
_MAX_WIDTH = 2000
"""Horizontal scrolling stops here; the tail already cuts lines at 64 KiB."""

# The tail keeps only SGR sequences; the plain text (for search) is the line without them.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_MATCH_STYLE = Style(bold=True, reverse=True)
_CURRENT_STYLE = Style(bold=True, reverse=True, underline=True)


def plain(line: str) -> str:
    """``line`` without its colour sequences."""
    return _SGR.sub("", line) if "\x1b" in line else line


class OutputView(ScrollView, can_focus=True):
    """The lines of output themselves (the line API: only visible lines are rendered)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "up", show=False),
        Binding("down", "scroll_down", "down", show=False),
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
        Binding("home", "scroll_home", "top", show=False),
        Binding("end", "scroll_end", "end (follow)", show=False),
        Binding("n", "next_match", "next match", show=False),
        Binding("N", "previous_match", "previous match", show=False),
    ]

    DEFAULT_CSS = """
    OutputView {
        background: $surface;
        overflow: auto auto;
        scrollbar-size: 1 1;
    }
    """

    class Scrolled(Message):
        """The person scrolled: away from the end (stop following) or to it (follow)."""

        def __init__(self, view: OutputView, at_end: bool) -> None:
            super().__init__()
            self.view = view
            self.at_end = at_end

        @property
        def control(self) -> OutputView:
            """The view that was scrolled."""
            return self.view

    class MatchMoved(Message):
        """The current search match changed (``index`` of ``count``, from 1; 0 when none)."""

        def __init__(self, view: OutputView, index: int, count: int) -> None:
            super().__init__()
            self.view = view
            self.index = index
            self.count = count

        @property
        def control(self) -> OutputView:
            """The view whose match moved."""
            return self.view

    def __init__(self, *, max_lines: int = MAX_LINES, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._first = 0
        """The absolute number of ``_lines[0]`` (lines dropped so far)."""
        self._partial = ""
        self._width = 0
        self._cache: LRUCache[int, Strip] = LRUCache(1024)
        self._query = ""
        self._matches: list[int] = []
        """Absolute line numbers that contain the query, oldest first."""
        self._current: int | None = None
        """Index into ``_matches`` of the current match."""
        self.follow = True
        """Keep the newest line in view (set by the AgentLog)."""

    # --- content ----------------------------------------------------------------------------

    @property
    def line_count(self) -> int:
        """Lines shown, the unfinished last one included."""
        return len(self._lines) + (1 if self._partial else 0)

    def add(self, lines: list[str], partial: str) -> None:
        """Append complete ``lines`` and set the unfinished last line (one batch)."""
        overflow = 0
        if lines:
            overflow = max(0, len(self._lines) + len(lines) - (self._lines.maxlen or 0))
            if overflow:
                # Absolute numbers keep the cache and the matches valid as old lines drop.
                self._first += overflow
                current = None if self._current is None else self._matches[self._current]
                self._matches = [m for m in self._matches if m >= self._first]
                self._current = self._matches.index(current) if current in self._matches else None
            self._lines.extend(lines)
            self._width = min(_MAX_WIDTH, max(self._width, *(len(line) for line in lines)))
            if self._query:
                needle = self._query
                self._matches.extend(
                    self._first + i
                    for i in range(max(0, len(self._lines) - len(lines)), len(self._lines))
                    if needle in plain(self._lines[i]).lower()
                )
        changed_partial = partial != self._partial
        self._partial = partial
        if partial:
            self._width = min(_MAX_WIDTH, max(self._width, len(partial)))
        if lines or changed_partial:
            self.virtual_size = Size(self._width, self.line_count)
            if self.follow:
                self._to_end()
            elif overflow:
                # The oldest lines dropped and every line moved up: keep the same lines in view.
                self._scroll_y_now(self.scroll_offset.y - overflow)
            # Rendered lines are cached by absolute number, so a full refresh only draws what
            # is visible, and stays right when old lines dropped and everything moved up.
            self.refresh()

    def _to_end(self) -> None:
        self._scroll_y_now(self.max_scroll_y)

    def _scroll_y_now(self, y: int) -> None:
        # Not scroll_to: it does nothing until a layout has shown the scrollbar, and a batch
        # arrives before that. max_scroll_y follows the new virtual size at once.
        y = max(0, min(y, self.max_scroll_y))
        self.scroll_target_y = y
        self.scroll_y = y

    def scroll_to_end(self) -> None:
        """Show the newest line now."""
        self._to_end()

    def on_resize(self, _event: events.Resize) -> None:
        """A follower stays at the newest line when the pane changes size."""
        if self.follow:
            self._to_end()

    def clear(self) -> None:
        """Forget every line."""
        self._lines.clear()
        self._partial = ""
        self._first = 0
        self._width = 0
        self._cache.clear()
        self._matches = []
        self._current = None
        self.virtual_size = Size(0, 0)
        self.refresh()

    # --- search -----------------------------------------------------------------------------

    def search(self, query: str) -> int:
        """Highlight every match of ``query`` (case-insensitive); jump to the newest. Returns the count."""
        self._query = query.lower()
        self._cache.clear()
        if not self._query:
            self._matches, self._current = [], None
            self.refresh()
            return 0
        self._matches = [
            self._first + i
            for i, line in enumerate(self._lines)
            if self._query in plain(line).lower()
        ]
        self._current = len(self._matches) - 1 if self._matches else None
        self._show_current()
        self.refresh()
        return len(self._matches)

    def action_next_match(self) -> None:
        """Jump to the next (newer) match."""
        self._step(+1)

    def action_previous_match(self) -> None:
        """Jump to the previous (older) match."""
        self._step(-1)

    def _step(self, step: int) -> None:
        if not self._matches:
            self.app.bell()
            return
        current = len(self._matches) - 1 if self._current is None else self._current
        self._current = (current + step) % len(self._matches)
        self._cache.clear()
        self._show_current()
        self.refresh()

    def _show_current(self) -> None:
        if self._current is None:
            self.post_message(self.MatchMoved(self, 0, len(self._matches)))
            return
        index = self._matches[self._current] - self._first
        self.scroll_to(y=max(0, index - self.size.height // 2), animate=False, immediate=True)
        self.post_message(self.Scrolled(self, at_end=False))
        self.post_message(self.MatchMoved(self, self._current + 1, len(self._matches)))

    # --- scrolling by a person ----------------------------------------------------------------

    def _scrolled(self) -> None:
        self.post_message(self.Scrolled(self, at_end=self.is_vertical_scroll_end))

    def action_scroll_up(self) -> None:
        """Scroll up one line (and stop following)."""
        self.scroll_up(animate=False, immediate=True)
        self._scrolled()

    def action_scroll_down(self) -> None:
        """Scroll down one line."""
        self.scroll_down(animate=False, immediate=True)
        self._scrolled()

    def action_page_up(self) -> None:
        """Scroll up a page (and stop following)."""
        self.scroll_page_up(animate=False)
        self.post_message(self.Scrolled(self, at_end=False))

    def action_page_down(self) -> None:
        """Scroll down a page."""
        self.scroll_page_down(animate=False)
        self._scrolled()

    def action_scroll_home(self) -> None:
        """Go to the oldest line kept (and stop following)."""
        self.scroll_home(animate=False)
        self.post_message(self.Scrolled(self, at_end=False))

    def action_scroll_end(self) -> None:
        """Go to the newest line and follow again."""
        self.scroll_end(animate=False)
        self.post_message(self.Scrolled(self, at_end=True))

    def on_mouse_scroll_up(self, _event: events.MouseScrollUp) -> None:
        """The wheel went up: stop following."""
        self.post_message(self.Scrolled(self, at_end=False))

    def on_mouse_scroll_down(self, _event: events.MouseScrollDown) -> None:
        """The wheel went down: follow again if it reached the end."""
        self.call_after_refresh(self._scrolled)

    # --- drawing ----------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        """Styles changed: forget the rendered lines."""
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        """One visible row: line ``scroll_y + y``, cropped to the view."""
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        style = self.rich_style
        if index < len(self._lines):
            absolute = self._first + index
            strip = self._cache.get(absolute)
            if strip is None:
                strip = self._draw_line(self._lines[index], absolute, style)
                self._cache[absolute] = strip
        elif index == len(self._lines) and self._partial:
            # The unfinished line changes with every progress update: never cached.
            strip = self._draw_line(self._partial, None, style)
        else:
            return Strip.blank(width, style)
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(scroll_x, index)

    def _draw_line(self, raw: str, absolute: int | None, style: Style) -> Strip:
        text = themed_ansi(Text.from_ansi(raw.expandtabs(), no_wrap=True, end=""), self.app)
        text.stylize_before(style)
        if self._query:
            current = (
                self._current is not None
                and absolute is not None
                and self._matches[self._current] == absolute
            )
            lowered = text.plain.lower()
            start = lowered.find(self._query)
            while start >= 0:
                end = start + len(self._query)
                text.stylize(_CURRENT_STYLE if current else _MATCH_STYLE, start, end)
                start = lowered.find(self._query, end)
        return Strip(text.render(self.app.console), text.cell_len)
