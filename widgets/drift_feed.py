"""The drift warnings of the run (SPEC 8), newest first: each one ⚠, its time, kind and message."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Sequence

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from paella_tui.supervisor.run.events import DriftDetected
from paella_tui.widgets.fitted_table import FittedTable, fit
from paella_tui.widgets.symbols import REGRESSION_STYLE, WARNING
from paella_tui.widgets.theme_styles import theme_style

# The kinds that mean the work itself went wrong stand out; the others (a stall, flapping) are
# warnings about the run.
_LOUD = frozenset({"regression", "protected", "claimed-done", "history"})
WIDE = 48
"""Below this many cells the time and kind share the message's column."""


def wrapped(text: str, width: int) -> Text:
    """``text`` wrapped to ``width`` at spaces, every word kept (a long path is broken)."""
    lines = textwrap.wrap(text, max(1, width), break_on_hyphens=False) or [""]
    return Text("\n".join(lines), no_wrap=True)


def narrow_cell(kind: str, when: str, message: str, width: int, style: str) -> Text:
    """Kind, time and message wrapped together to ``width``: the kind styled, the time dim."""
    text = wrapped(f"{kind} {when} {message}", width)
    first = text.plain.split("\n", 1)[0]
    if first.startswith(f"{kind} "):
        text.stylize(theme_style(style), 0, len(kind))
        if first.startswith(f"{kind} {when}"):
            text.stylize("dim", len(kind) + 1, len(kind) + 1 + len(when))
    return text


class DriftFeed(FittedTable):
    """Drift warnings, newest first."""

    warnings: reactive[tuple[DriftDetected, ...]] = reactive((), always_update=False)
    """The warnings, newest first."""

    class Selected(Message):
        """A warning was chosen (enter): the screen shows its whole message."""

        def __init__(self, feed: DriftFeed, warning: DriftDetected) -> None:
            super().__init__()
            self.feed = feed
            self.warning = warning

        @property
        def control(self) -> DriftFeed:
            """The feed that sent it."""
            return self.feed

    def watch_warnings(self) -> None:
        """Redraw, with the count in the title."""
        self.redraw()
        count = len(self.warnings)
        self.border_title = f"drift {WARNING} {count}" if count else "drift: none"

    def table_rows(self) -> Sequence[DriftDetected]:
        """The warnings, newest first."""
        return self.warnings

    def empty_text(self) -> str:
        """No drift: the good case."""
        return "no drift so far"

    def column_widths(self, width: int) -> tuple[int | None, ...]:
        """mark | time | kind | message; in a narrow pane mark | kind, time and message in one
        wrapped column (three columns left the message a dozen cells, cut mid-word)."""
        if width >= WIDE:
            return (2, 6, 13, None)
        return (2, None)

    def row_cells(self, row: DriftDetected, widths: tuple[int, ...]) -> tuple[Text, ...]:
        """A warning's cells: the kinds that mean broken work are bold and reversed."""
        style = REGRESSION_STYLE if row.drift in _LOUD else "$text-warning"
        when = time.strftime("%H:%M", time.localtime(row.at))
        mark = fit(f"{WARNING} ", widths[0], style)
        if len(widths) == 2:
            return mark, narrow_cell(row.drift, when, row.message, widths[1], style)
        return (
            mark,
            fit(when, widths[1], "dim"),
            fit(row.drift, widths[2], style),
            wrapped(f" {row.message}", widths[3]),
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Turn the table's row selection into a ``DriftFeed.Selected``."""
        event.stop()
        row = self.row_at_cursor()
        if row is not None:
            self.post_message(self.Selected(self, row))
