"""The run's checkpoints and salvage snapshots, newest first, with the base (the last green
checkpoint, where a rollback goes by default) marked ◆."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.fitted_table import FittedTable, fit
from paella_tui.widgets.symbols import PASS, WARNING

BASE = "◆"
SALVAGE = "↺"
MANUAL = "○"
"""A manual checkpoint: a snapshot you asked for, not an episode the gates completed."""


def clock_time(iso: str) -> str:
    """``HH:MM`` in local time from a ledger timestamp (``…Z``); the text itself if unparsable."""
    try:
        stamp = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return iso[:5]
    return time.strftime("%H:%M", time.localtime(stamp))


class CheckpointList(FittedTable):
    """Checkpoints and salvage snapshots, newest first; the base marked."""

    checkpoints: reactive[tuple[SnapshotRecord, ...]] = reactive((), always_update=False)
    """Every checkpoint of the run, oldest first (as the ledger has them)."""
    salvage: reactive[tuple[SnapshotRecord, ...]] = reactive((), always_update=False)
    """Every salvage snapshot of the run (the state before each rollback), oldest first."""
    base: reactive[int | None] = reactive(None)
    """The number of the base checkpoint, or None."""

    class Selected(Message):
        """A snapshot was chosen (enter): the screen shows the diff from it to now."""

        def __init__(self, checkpoint_list: CheckpointList, record: SnapshotRecord) -> None:
            super().__init__()
            self.checkpoint_list = checkpoint_list
            self.record = record

        @property
        def control(self) -> CheckpointList:
            """The list that sent it."""
            return self.checkpoint_list

    def _changed(self) -> None:
        self.redraw()
        title = f"checkpoints {len(self.checkpoints)}"
        if self.salvage:
            title += f" · salvage {len(self.salvage)}"
        self.border_title = title

    # Any of the three changes the whole list.
    watch_checkpoints = watch_salvage = watch_base = _changed

    def table_rows(self) -> Sequence[SnapshotRecord]:
        """Checkpoints and salvage snapshots together, newest first."""
        both = [*self.checkpoints, *self.salvage]
        return sorted(both, key=lambda r: r.t, reverse=True)

    def empty_text(self) -> str:
        """Before the first green episode."""
        return "none yet: one is taken at every green episode"

    def column_widths(self, width: int) -> tuple[int | None, ...]:
        """mark | name | label | green gates (wide only) | time."""
        if width >= 46:
            return (2, 10, None, 12, 6)
        return (2, 10, None, 6)

    def row_cells(self, row: SnapshotRecord, widths: tuple[int, ...]) -> tuple[Text, ...]:
        """A snapshot's cells: the base is ◆ and bold, salvage ↺ and dim."""
        if row.kind == "salvage":
            mark, style, label = SALVAGE, "dim", row.reason or "salvage"
        elif row.n == self.base:
            # ◆ and bold say it; the word too where there is room for it.
            wide = widths[2] >= 28
            mark, style, label = BASE, "bold", f"{row.label} (base)" if wide else row.label
        elif isinstance(row.episode, int):
            mark, style, label = PASS, "", row.label
        else:
            mark, style, label = MANUAL, "dim", row.label
        if row.skipped_files:
            label += f" {WARNING} {len(row.skipped_files)} left out"
        name = f"ckpt {row.n}" if row.kind == "checkpoints" else row.name
        cells = [fit(f"{mark} ", widths[0], style), fit(name, widths[1], style)]
        cells.append(fit(label, widths[2], style))
        if len(widths) == 5:
            cells.append(
                fit(
                    f" {len(row.gates_green)} {PASS}" if row.kind == "checkpoints" else "",
                    widths[3],
                    "dim",
                )
            )
        cells.append(fit(f" {clock_time(row.t)}", widths[-1], "dim"))
        return tuple(cells)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Turn the table's row selection into a ``CheckpointList.Selected``."""
        event.stop()
        row = self.row_at_cursor()
        if row is not None:
            self.post_message(self.Selected(self, row))
