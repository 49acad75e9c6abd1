"""The checkpoint picker: every checkpoint and salvage snapshot of the run, newest first, to roll
back to.

Each row says when it was taken, what it is (the episode it completed, or the rollback it would
undo), the gates green on it, and how far it is from the work tree now (files, +lines −lines).
That last column needs a snapshot of now and one tree diff per row, so it is filled in by a
thread worker and shows "…" until it is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey
from textual.worker import Worker, WorkerState, get_current_worker

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.run.offline import tree_now
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.tree_diff import FileChange, changes_between
from paella_tui.widgets.keys_footer import KeysFooter
from paella_tui.widgets.recovery_panel import when
from paella_tui.widgets.theme_styles import theme_style

COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("snapshot", "name", 15),
    ("taken (UTC)", "time", 12),
    ("what", "what", 0),
    ("green", "green", 5),
    ("vs now", "change", 16),
)
"""The table's columns: label, key, width. Widths are fixed (auto widths would move as the
diff stats arrive); "what" takes the width left over, and the line under the table shows it whole."""

WHAT_WIDTH = (16, 48)
"""The narrowest and widest the "what" column gets."""


def describe(record: SnapshotRecord) -> str:
    """What a snapshot is, in words: its label, or for salvage the rollback that picking it undoes."""
    if record.kind == "salvage":
        reason = record.reason or "a rollback"
        return f"undoes the {reason}" if reason.startswith("rollback") else f"before {reason}"
    return record.label or (
        f"episode {record.episode}" if isinstance(record.episode, int) else "manual checkpoint"
    )


def stats_cell(changes: list[FileChange] | None) -> Text:
    """``3 files +12 −4``, ``no change``, or ``…`` while it is not known yet."""
    if changes is None:
        return Text("…", style="dim")
    if not changes:
        return Text("no change", style="dim")
    added = sum(c.added or 0 for c in changes)
    removed = sum(c.removed or 0 for c in changes)
    return Text.assemble(
        f"{len(changes)} file{'s' if len(changes) != 1 else ''} ",
        (f"+{added:,}", theme_style("$text-success")),
        " ",
        (f"−{removed:,}", theme_style("$text-error")),
    )


class PickerScreen(Screen[SnapshotRecord | None]):
    """Pick a checkpoint or salvage snapshot (Enter), or cancel (Escape: None)."""

    CSS_PATH = "styles/screens.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "pick", "Roll back to it"),
        Binding("escape", "cancel", "Cancel"),
    ]

    @dataclass
    class Listed(Message):
        """The run's snapshots, newest first, and which one is the base."""

        records: list[SnapshotRecord]
        base: SnapshotRecord | None

    @dataclass
    class Compared(Message):
        """How one snapshot differs from the work tree now."""

        ref: str
        changes: list[FileChange]

    @dataclass
    class Failed(Message):
        """Listing or comparing failed; ``reason`` says why, in words."""

        reason: str

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run
        self._records: dict[str, SnapshotRecord] = {}
        self._base: SnapshotRecord | None = None
        self._compared: dict[str, list[FileChange]] = {}

    def compose(self) -> ComposeResult:
        """A title, the table of snapshots, the highlighted one in full, the footer."""
        yield Static(
            Content.assemble(
                ("Roll back to which snapshot?", "bold"),
                ("  ⏎ picks · Esc cancels", "dim"),
            ),
            id="picker-title",
        )
        # DataTable cells are Rich renderables (it measures them with Rich), hence Text here.
        table: DataTable[str | Text] = DataTable(
            id="picker-table", cursor_type="row", zebra_stripes=True
        )
        yield table
        yield Static(Content.styled("Reading the run's snapshots…", "dim"), id="picker-detail")
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Lay out the columns and start reading and comparing in a thread."""
        table = self.query_one("#picker-table", DataTable)
        for label, key, width in COLUMNS:
            table.add_column(label, key=key, width=width or WHAT_WIDTH[0])
        self._load()

    def on_resize(self) -> None:
        """Give the "what" column the width the others leave."""
        table = self.query_one("#picker-table", DataTable)
        # Each column is padded on both sides; 2 more columns are kept for a scrollbar.
        taken = sum(w + 2 * table.cell_padding for _, _, w in COLUMNS) + 2
        low, high = WHAT_WIDTH
        table.columns[ColumnKey("what")].width = max(low, min(high, self.size.width - taken))
        table.refresh()

    @work(
        thread=True,
        group="picker",
        description="read the checkpoints and compare each with the work tree now",
        exit_on_error=False,
        exclusive=True,
    )
    def _load(self) -> None:
        view = RunView.load(self.run)
        records = sorted(
            [*view.checkpoints, *view.salvage],
            key=lambda r: (r.t, r.kind == "salvage", r.n),
            reverse=True,
        )
        self.post_message(self.Listed(records, view.last_green_checkpoint))
        if not records:
            return
        worker = get_current_worker()
        try:
            now = tree_now(self.run)
            for record in records:
                if worker.is_cancelled:
                    return
                changes = changes_between(self.run.workspace, record.tree, now)
                self.post_message(self.Compared(record.ref, changes))
        except PaellaError as err:
            self.post_message(self.Failed(f"Could not compare with now: {err.message}"))

    @on(Listed)
    def _show_records(self, message: Listed) -> None:
        self._base = message.base
        table = self.query_one("#picker-table", DataTable)
        table.clear()
        self._records = {r.ref: r for r in message.records}
        for record in message.records:
            table.add_row(*self._row(record), key=record.ref)
        if not message.records:
            self.query_one("#picker-detail", Static).update(
                Content.styled(
                    "No checkpoints yet: one is taken at every green episode, or take one "
                    "with c on the main screen (`paella checkpoint`).",
                    "dim",
                )
            )
            return
        table.focus()
        # Start on the base: it is what a rollback without a pick would restore.
        if message.base is not None and message.base.ref in self._records:
            table.move_cursor(row=table.get_row_index(message.base.ref))
        self._show_detail(self._highlighted())

    def _row(self, record: SnapshotRecord) -> list[str | Text]:
        is_base = self._base is not None and record.ref == self._base.ref
        name = f"checkpoint {record.n}" if record.kind == "checkpoints" else record.name
        mark = ("● ", theme_style("bold $text-success")) if is_base else "  "
        if record.kind == "salvage":
            green = Text("—", style="dim")
        elif record.gates_green:
            green = Text.assemble(
                ("✓ ", theme_style("$text-success")), str(len(record.gates_green))
            )
        else:
            green = Text("none", style="dim")
        # Cut to the column with an ellipsis, never wrapped: one row, one line.
        what = Text(describe(record), no_wrap=True, overflow="ellipsis")
        if record.kind == "salvage":
            what.stylize("italic")
        return [
            Text.assemble(mark, name),
            when(record.t).removesuffix(" UTC"),
            what,
            green,
            stats_cell(self._compared.get(record.ref)),
        ]

    @on(Compared)
    def _show_comparison(self, message: Compared) -> None:
        self._compared[message.ref] = message.changes
        if message.ref in self._records:
            table = self.query_one("#picker-table", DataTable)
            table.update_cell(message.ref, "change", stats_cell(message.changes), update_width=True)
            if self._highlighted() is self._records[message.ref]:
                self._show_detail(self._records[message.ref])

    @on(Failed)
    def _show_failure(self, message: Failed) -> None:
        self.query_one("#picker-detail", Static).update(
            Content.assemble(("✗ ", "bold $text-error"), message.reason)
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """An unexpected failure in the worker shows under the table, not as a crash."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(
                self.Failed(f"{event.worker.description} failed: {event.worker.error}")
            )

    def _highlighted(self) -> SnapshotRecord | None:
        table = self.query_one("#picker-table", DataTable)
        if not self._records or table.row_count == 0:
            return None
        row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return self._records.get(str(row_key.value))

    @on(DataTable.RowHighlighted, "#picker-table")
    def _row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail(self._highlighted())

    def _show_detail(self, record: SnapshotRecord | None) -> None:
        if record is None:
            return
        lines: list[Content] = []
        is_base = self._base is not None and record.ref == self._base.ref
        title = f"checkpoint {record.n}" if record.kind == "checkpoints" else record.name
        base_note = (" · ", ("● the last green checkpoint", "$text-success")) if is_base else ()
        lines.append(Content.assemble((title, "bold"), f" · {describe(record)}", *base_note))
        if record.kind == "checkpoints":
            green = ", ".join(record.gates_green) or "none"
            lines.append(Content(f"green there: {green}"))
        else:
            lines.append(
                Content("picking it puts back the work tree as it was before that rollback")
            )
        where = f"on {record.branch}" if record.branch else "detached HEAD"
        lines.append(Content.styled(f"{record.ref} · {where}", "dim"))
        changes = self._compared.get(record.ref)
        if changes:
            shown = ", ".join(c.path for c in changes[:4])
            more = f", … {len(changes) - 4} more" if len(changes) > 4 else ""
            lines.append(Content.assemble("differs from now in: ", (shown + more, "dim")))
        for skipped in record.skipped_files:
            lines.append(
                Content.assemble(
                    ("⚠ not in this snapshot: ", "$text-warning"),
                    f"{skipped.get('path')} ({skipped.get('reason')})",
                )
            )
        if record.uncovered:
            lines.append(
                Content.assemble(
                    ("⚠ recorded by commit only: ", "$text-warning"), ", ".join(record.uncovered)
                )
            )
        lines.append(
            Content.styled("The current state is saved first, so a rollback can be undone.", "dim")
        )
        self.query_one("#picker-detail", Static).update(Content("\n").join(lines))

    @on(DataTable.RowSelected, "#picker-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        record = self._records.get(str(event.row_key.value))
        if record is not None:
            self.dismiss(record)

    def action_pick(self) -> None:
        """Roll back to the highlighted snapshot (when the table does not have the key)."""
        record = self._highlighted()
        if record is not None:
            self.dismiss(record)

    def action_cancel(self) -> None:
        """Back without a pick."""
        self.dismiss(None)
