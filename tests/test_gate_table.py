"""The gate table as the clock moves: the "ran … ago" cells follow it, and only they change."""

from __future__ import annotations

from textual.app import App, ComposeResult

from paella_tui.widgets.gate_table import GateRow, GateTable

T0 = 1_800_000_000.0


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield GateTable(id="gates")


def cell_texts(table: GateTable) -> list[list[str]]:
    return [[str(cell).strip() for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def test_ages_follow_the_clock_without_rebuilding_the_table() -> None:
    app = Host()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(GateTable)
        table.gates = (
            GateRow("unit", "pass", 1.2, finished_at=T0, ever_green=True),
            GateRow("lint", "fail", 0.3, finished_at=T0 - 120),
            GateRow("e2e", "pending"),
        )
        table.now = T0 + 5
        await pilot.pause()
        rows = cell_texts(table)
        assert [row[4] for row in rows] == ["5s ago", "2m ago", ""]
        rebuilt = []
        table.redraw = lambda: rebuilt.append(1)  # type: ignore[method-assign]
        table.now = T0 + 6  # one age moves
        await pilot.pause()
        assert [row[4] for row in cell_texts(table)] == ["6s ago", "2m ago", ""]
        table.now = T0 + 6.5  # none does: nothing to do
        await pilot.pause()
        assert rebuilt == []
        assert cell_texts(table)[0][:4] == rows[0][:4]  # the other cells are as they were
