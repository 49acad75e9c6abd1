"""The contract's episodes: which are complete (✓, with the checkpoint that proved it), which one
the agent is on (●), which wait (◌), and which were complete once and are broken now (⚠)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from paella_tui.widgets.fitted_table import FittedTable, fit
from paella_tui.widgets.rows import EpisodeRow as EpisodeRow
from paella_tui.widgets.rows import EpisodeState as EpisodeState
from paella_tui.widgets.symbols import PASS, PENDING, REGRESSION_STYLE, RUNNING, WARNING

_MARKS: dict[str, tuple[str, str]] = {
    "complete": (PASS, "$text-success"),
    "current": (RUNNING, "$text-primary"),
    "pending": (PENDING, "dim"),
    "broken": (WARNING, REGRESSION_STYLE),
}


class EpisodeList(FittedTable):
    """The episodes of the contract, with progress in the title."""

    episodes: reactive[tuple[EpisodeRow, ...]] = reactive((), always_update=False)
    """The rows, in contract order."""

    class Selected(Message):
        """An episode was chosen (enter): the screen may show its goal."""

        def __init__(self, episode_list: EpisodeList, episode: EpisodeRow) -> None:
            super().__init__()
            self.episode_list = episode_list
            self.episode = episode

        @property
        def control(self) -> EpisodeList:
            """The list that sent it."""
            return self.episode_list

    def watch_episodes(self) -> None:
        """Redraw the rows and the progress in the title."""
        self.redraw()
        done = sum(e.state == "complete" for e in self.episodes)
        total = len(self.episodes)
        bar_width = min(total, 10)
        filled = round(bar_width * done / total) if total else 0
        bar = "█" * filled + "░" * (bar_width - filled)
        self.border_title = f"episodes {bar} {done}/{total}"

    def table_rows(self) -> Sequence[EpisodeRow]:
        """The episodes, in contract order."""
        return self.episodes

    def empty_text(self) -> str:
        """A contract without episodes: the gates alone decide."""
        return "no episodes in the contract"

    def column_widths(self, width: int) -> tuple[int | None, ...]:
        """mark | n | name | progress."""
        return (2, 3, None, 12)

    def row_cells(self, row: EpisodeRow, widths: tuple[int, ...]) -> tuple[Text, ...]:
        """An episode's cells."""
        mark, style = _MARKS[row.state]
        if row.state == "complete":
            progress = f"ckpt {row.checkpoint}" if row.checkpoint is not None else "green"
        elif row.state == "broken":
            progress = f"was ckpt {row.checkpoint}"
        elif row.state == "current":
            progress = f"{row.gates_green}/{row.gates_total} gates"
        else:
            progress = ""
        name_style = (
            REGRESSION_STYLE if row.state == "broken" else ("dim" if row.state == "pending" else "")
        )
        return (
            fit(f"{mark} ", widths[0], style),
            fit(f"{row.n}.", widths[1], name_style),
            fit(row.name, widths[2], name_style),
            fit(f" {progress}", widths[3], style if row.state == "broken" else "dim"),
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Turn the table's row selection into an ``EpisodeList.Selected``."""
        event.stop()
        row = self.row_at_cursor()
        if row is not None:
            self.post_message(self.Selected(self, row))
