"""A DataTable that redraws itself from a tuple of rows, with its columns fitted to its width.

The run's panels (episodes, gates, checkpoints, drift) are short lists that change as a whole, in
panes as narrow as 40 cells: each one is rebuilt from its rows whenever they change or the pane is
resized, one flexible column taking what the fixed ones leave, so nothing scrolls sideways.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from paella_tui.widgets.theme_styles import on_theme_change, theme_style


def fit(text: str | Text, width: int, style: str = "") -> Text:
    """``text`` cut to ``width`` cells with an ellipsis, never wrapped; ``style`` may name the
    theme's variables (``"bold $text-error"``)."""
    out = text.copy() if isinstance(text, Text) else Text(text, style=theme_style(style))
    out.no_wrap = True
    out.truncate(max(0, width), overflow="ellipsis", pad=False)
    return out


class FittedTable(DataTable[Text]):
    """A headerless row table rebuilt from ``table_rows()`` with one flexible column."""

    DEFAULT_CSS = """
    FittedTable {
        height: 1fr;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(
            show_header=False,
            cursor_type="row",
            cell_padding=0,
            zebra_stripes=False,
            show_cursor=False,
            id=id,
            classes=classes,
        )
        self.widths: tuple[int, ...] = ()
        """The column widths of the last redraw."""

    # --- what a subclass says -------------------------------------------------------------

    def table_rows(self) -> Sequence[Any]:
        """The rows to show, top first."""
        return ()

    def column_widths(self, width: int) -> tuple[int | None, ...]:
        """Fixed widths, and None for the one flexible column, for a table ``width`` cells wide."""
        return (None,)

    def row_cells(self, row: Any, widths: tuple[int, ...]) -> tuple[Text, ...]:
        """The cells of ``row`` (each already fitted to its width)."""
        return (fit(str(row), widths[0]),)

    def empty_text(self) -> str:
        """What a table with no rows says."""
        return ""

    def row_height(self, cells: tuple[Text, ...]) -> int:
        """How many lines a row takes (1: every cell fitted to one line)."""
        return max((len(cell.plain.split("\n")) for cell in cells), default=1)

    # --- drawing ---------------------------------------------------------------------------

    def redraw(self) -> None:
        """Rebuild every row (keeping the cursor and scroll position)."""
        if not self.is_mounted:
            return
        rows = list(self.table_rows())
        cursor, scroll_y = self.cursor_row, self.scroll_y
        # Leave the scrollbar's column free whenever the rows will not fit, so that nothing
        # ever needs a horizontal scrollbar.
        width = max(1, self.size.width - (1 if len(rows) > self.size.height else 0))
        fixed = self.column_widths(width)
        flexible = max(1, width - sum(w for w in fixed if w is not None))
        widths = tuple(flexible if w is None else w for w in fixed)
        self.widths = widths
        self.clear(columns=True)
        for index, column_width in enumerate(widths):
            self.add_column("", width=column_width, key=f"c{index}")
        if not rows:
            flex = fixed.index(None) if None in fixed else len(widths) - 1
            blank = [Text("") for _ in widths]
            blank[flex] = fit(self.empty_text(), widths[flex], "dim italic")
            self.add_row(*blank, key="empty")
            return
        for index, row in enumerate(rows):
            cells = self.row_cells(row, widths)
            self.add_row(*cells, key=f"r{index}", height=self.row_height(cells))
        self.move_cursor(row=min(cursor, len(rows) - 1), scroll=False)
        self.scroll_y = scroll_y

    def on_resize(self, _event: events.Resize) -> None:
        """Refit the columns to the new width."""
        self.redraw()

    def on_mount(self) -> None:
        """Draw the rows once the table has a size, and again in the colours of a new theme."""
        on_theme_change(self, self.redraw)
        self.redraw()

    def on_focus(self, _event: events.Focus) -> None:
        """Show the cursor only while the table has the focus (a glance reads no selection)."""
        self.show_cursor = True

    def on_blur(self, _event: events.Blur) -> None:
        """Hide the cursor again."""
        self.show_cursor = False

    def row_at_cursor(self) -> Any | None:
        """The row under the cursor, or None when the table is empty."""
        rows = self.table_rows()
        if not rows or not 0 <= self.cursor_row < len(rows):
            return None
        return rows[self.cursor_row]
