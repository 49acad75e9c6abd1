"""The run header while idle: a sample that reads the same draws nothing (issue 17, idle).

The agent's CPU and memory arrive every second; a repaint of the header wrote both of its lines
to the terminal each time, whatever they read. Only a line that reads differently is updated.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

from paella_tui.widgets.run_header import RunHeader


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")


def _spy(widget: Widget, calls: list[str]) -> Callable[..., Widget]:
    """``widget.refresh``, noting the widget's id on each call."""
    original = widget.refresh

    def refresh(*regions: Region, **options: bool) -> Widget:
        calls.append(str(widget.id))
        return original(*regions, **options)

    return refresh


async def test_samples_that_read_the_same_repaint_nothing() -> None:
    app = Host()
    async with app.run_test(size=(120, 6)) as pilot:
        header = app.query_one(RunHeader)
        header.state = "running"
        header.pid = 4242
        header.started = time.time() - 600
        header.now = time.time()
        header.cpu_percent = 0.0
        header.rss_bytes = 2 * 1024 * 1024
        header.cpu_history = (0.0,) * 10
        await pilot.pause()
        refreshed: list[str] = []
        for widget in [header, *header.query(Static)]:
            widget.refresh = _spy(widget, refreshed)
        for second in range(1, 6):
            header.cpu_percent = 0.0
            header.rss_bytes = 2 * 1024 * 1024 + 4096 * second  # still "2M"
            header.cpu_history = (0.0,) * (10 + second)
            header.now = header.now + 1  # the uptime reads "10m" throughout
            await pilot.pause()
        assert refreshed == []
        header.rss_bytes = 300 * 1024 * 1024  # reads differently: its line alone
        await pilot.pause()
        assert refreshed and set(refreshed) <= {"agent-stats"}


async def test_the_clock_redraws_once_a_minute_after_the_first() -> None:
    """Ticks that leave the uptime reading the same build nothing; the one that moves it does."""
    app = Host()
    async with app.run_test(size=(120, 6)) as pilot:
        header = app.query_one(RunHeader)
        start = 1_800_000_000.0
        header.state = "running"
        header.pid = 4242
        header.started = start
        header.now = start + 600.5  # "10m"
        await pilot.pause()
        redraws: list[float] = []
        redraw = header._redraw

        def counted() -> None:
            redraws.append(header.now)
            redraw()

        header._redraw = counted  # type: ignore[method-assign]
        for second in range(1, 61):
            header.now = start + 600.5 + second
        await pilot.pause()
        assert redraws == [start + 660.5]  # "11m"
        assert "up 11m" in str(header.query_one("#run-line", Static).render())
        # The first minute counts seconds: every tick redraws.
        redraws.clear()
        header.started = header.now - 10
        redraws.clear()
        for _second in range(1, 4):
            header.now = header.now + 1
        assert len(redraws) == 3


async def test_the_note_marks_an_ended_attempt_by_what_is_known() -> None:
    """While the gates judge the final tree, how the attempt ended is pending, not a failure
    (the title says "judging the gates"); in recovery it is a failure."""
    app = Host()
    async with app.run_test(size=(120, 6)) as pilot:
        header = app.query_one(RunHeader)
        note = app.query_one("#run-note", Static)
        header.detail = "attempt 2 ended: exit 0"
        shown = {}
        for state in ("evaluating", "recovering"):
            header.state = state
            await pilot.pause()
            shown[state] = str(note.render()).strip()
        assert shown == {
            "evaluating": "◌ attempt 2 ended: exit 0",
            "recovering": "✗ attempt 2 ended: exit 0",
        }
