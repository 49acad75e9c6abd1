"""The contract's gates: state, duration, when each last ran, and whether it was green before.

A regression (a gate green earlier in the run, red now) stands out three ways at once: a ⚠
symbol, the words "was ✓", and a bold, reversed row, so it reads in any terminal and without
colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from rich.text import Text
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from paella_tui.widgets.fitted_table import FittedTable, fit
from paella_tui.widgets.rows import GateRow as GateRow
from paella_tui.widgets.symbols import (
    GATE_MARKS,
    GATE_STYLES,
    PASS,
    REGRESSION_STYLE,
    RUNNING,
    WARNING,
    age,
    short_duration,
)

WIDE = 46
"""From this width the table also says when each gate last ran."""
AGE_COLUMN = 4
"""The "ran … ago" column (shown only at WIDE and over)."""


class GateTable(FittedTable):
    """The gates of the contract, one row each, regressions first to the eye."""

    _ages: tuple[str, ...] = ()
    _cell_only = False

    DEFAULT_CSS = """
    GateTable > .datatable--cursor { text-style: bold underline; }
    """

    gates: reactive[tuple[GateRow, ...]] = reactive((), always_update=False)
    """The rows, in contract order."""
    now: reactive[float] = reactive(0.0, repaint=False)
    """The wall-clock time the "ran … ago" column counts from (frozen in snapshots)."""

    class Selected(Message):
        """A gate was chosen (enter): the screen may show its last output."""

        def __init__(self, table: GateTable, gate: GateRow) -> None:
            super().__init__()
            self.table = table
            self.gate = gate

        @property
        def control(self) -> GateTable:
            """The table that sent it."""
            return self.table

    def watch_gates(self) -> None:
        """Redraw the rows and the title when the gates change."""
        self.redraw()
        self._retitle()

    def watch_now(self) -> None:
        """The clock moved: redraw only if an age shown at this width reads differently."""
        if self.size.width < WIDE:
            return
        ages = tuple(self._age(row) for row in self.gates)
        if ages == self._ages:
            return
        before, self._ages = self._ages, ages
        widths = self.widths
        if len(before) != len(ages) or len(widths) != 6 or self.row_count != len(ages):
            self.redraw()
            return
        # Only the "ran … ago" cells that read differently: rebuilding the table every second
        # while a gate's age counts seconds is most of an idle minute's CPU.
        for index, row in enumerate(self.gates):
            if before[index] != ages[index]:
                cell = self.row_cells(row, widths)[AGE_COLUMN]
                self._update_cell_only(index, AGE_COLUMN, cell)

    def _update_cell_only(self, row: int, column: int, cell: Text) -> None:
        """Set one cell and repaint that cell alone.

        ``update_cell`` repaints the whole table, border and empty rows included: every second
        of a gate's first minute, that wrote 2.4 KB to the terminal for the 8 cells that
        changed (issue 17). Its own repaint is dropped here for the cell's region.
        """
        self._cell_only = True
        try:
            self.update_cell(f"r{row}", f"c{column}", cell)
        finally:
            self._cell_only = False
        self.refresh_coordinate(Coordinate(row, column))

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        """As for any widget; within :meth:`_update_cell_only`, a whole-table repaint is not."""
        if self._cell_only and not regions and repaint and not layout and not recompose:
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _age(self, row: GateRow) -> str:
        """``4s ago``, ``2m ago``: how long ago the gate was judged ("" before it was)."""
        return age(self.now - row.finished_at) if row.finished_at and self.now else ""

    def _retitle(self) -> None:
        green = sum(g.status in ("pass", "flaky") for g in self.gates)
        regressed = sum(g.regressed for g in self.gates)
        title = f"gates {green}/{len(self.gates)} {PASS}"
        if regressed:
            title += f"  {WARNING} {regressed} regressed"
        self.border_title = title

    def table_rows(self) -> Sequence[GateRow]:
        """The gates, in contract order."""
        return self.gates

    def empty_text(self) -> str:
        """A contract without gates can never be done."""
        return "no gates in the contract"

    def column_widths(self, width: int) -> tuple[int | None, ...]:
        """mark | name | state | took | ran (wide only) | was green."""
        if width >= WIDE:
            return (2, None, 8, 7, 8, 8)
        return (2, None, 8, 6, 8)

    def row_cells(self, row: GateRow, widths: tuple[int, ...]) -> tuple[Text, ...]:
        """A gate's cells; a regression's row is bold and reversed, with ⚠ and "was ✓"."""
        mark = WARNING if row.regressed else GATE_MARKS.get(row.status, "?")
        style = REGRESSION_STYLE if row.regressed else GATE_STYLES.get(row.status, "")
        state = f"{row.status} {RUNNING}" if row.rerunning else row.status
        took = short_duration(row.duration_s) if row.status not in ("pending", "running") else ""
        if row.regressed:
            was = f"was {PASS} {WARNING}"
        elif row.ever_green and row.status not in ("pass", "flaky"):
            was = f"was {PASS}"
        else:
            was = ""
        cells = [f"{mark} ", row.name, state, took]
        if len(widths) == 6:
            cells.append(self._age(row))
        cells.append(was)
        out = []
        for index, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            # One space of gutter before every column but the first two.
            text = cell if index < 2 else f" {cell}"
            out.append(fit(text, width, style if index != 1 or row.regressed else ""))
        return tuple(out)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Turn the table's row selection into a ``GateTable.Selected`` for the screen."""
        event.stop()
        row = self.row_at_cursor()
        if row is not None:
            self.post_message(self.Selected(self, row))
