"""The gate table as the clock moves: the "ran … ago" cells follow it, and only they change."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.coordinate import Coordinate

from paella_tui.widgets.gate_table import AGE_COLUMN, GateRow, GateTable

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


async def test_a_moving_age_repaints_its_cell_alone() -> None:
    """The clock dirties the age cell's region, never the whole table (its border and empty
    rows went to the terminal every second: 2.4 KB/s of an idle first minute)."""
    app = Host()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(GateTable)
        table.gates = (
            GateRow("unit", "pass", 1.2, finished_at=T0, ever_green=True),
            GateRow("lint", "fail", 0.3, finished_at=T0 - 120),
        )
        table.now = T0 + 5
        await pilot.pause()
        dirtied: list[tuple[object, ...]] = []
        set_dirty = table._set_dirty

        def spy(*regions: object) -> None:
            dirtied.append(regions)
            set_dirty(*regions)  # type: ignore[arg-type]

        table._set_dirty = spy  # type: ignore[method-assign]
        table.now = T0 + 6
        await pilot.pause()
        assert dirtied, "the moved age was not repainted"
        assert all(regions for regions in dirtied), "the whole table was repainted"
        cell = table._get_cell_region(Coordinate(0, AGE_COLUMN))
        assert all(r.height == 1 and r.width == cell.width for regs in dirtied for r in regs)  # type: ignore[attr-defined]
        assert [row[4] for row in cell_texts(table)] == ["6s ago", "2m ago"]
        # A change of the gates themselves still repaints everything.
        dirtied.clear()
        table.gates = (GateRow("unit", "fail", 1.0, finished_at=T0 + 6),)
        await pilot.pause()
        assert any(not regions for regions in dirtied)
