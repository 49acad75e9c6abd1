"""The drift panel at every width: each warning keeps its kind, its time and every word of its
message, and no line is wider than its column (at 80 columns the panel is 36 cells wide, and a
three-column layout left the message a dozen cells, cut mid-word). The real widget in a real App.
"""

from __future__ import annotations

import time

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from paella_tui.supervisor.run.events import DriftDetected
from paella_tui.widgets.drift_feed import DriftFeed

T0 = 1_800_000_000.0
MESSAGE = (
    'gate "idempotency" was green at checkpoint 2 and fails now: '
    "tests/test_idempotency.py::test_replay_twice"
)


class Host(App[None]):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.feed_width = width

    def compose(self) -> ComposeResult:
        feed = DriftFeed(id="drift")
        feed.styles.width = self.feed_width
        yield feed


@pytest.mark.parametrize("width", [24, 36, 47, 48, 60, 100])
async def test_a_warning_keeps_its_kind_time_and_every_word_at_any_width(width: int) -> None:
    app = Host(width)
    async with app.run_test(size=(120, 30)) as pilot:
        feed = app.query_one(DriftFeed)
        feed.warnings = (
            DriftDetected(drift="regression", gate="idempotency", message=MESSAGE, at=T0),
        )
        await pilot.pause()
        cells = [c for c in feed.get_row_at(0) if isinstance(c, Text)]
        text = " ".join(c.plain for c in cells)
        words = text.split()
        assert "regression" in words and time.strftime("%H:%M", time.localtime(T0)) in words
        # Every character of the message, in order (a long path may be broken across lines).
        assert "".join(MESSAGE.split()) in "".join(words), text
        for cell, column in zip(cells, feed.widths, strict=True):
            assert all(len(line) <= column for line in cell.plain.split("\n")), (cell, column)
        # The kind and the start of the message are on the first line a person sees.
        first = " ".join(c.plain.split("\n")[0] for c in cells)
        assert "regression" in first and 'gate "idempotency"' in " ".join(cells[-1].plain.split())
        if width < 48:
            assert first.split()[1:3] == ["regression", time.strftime("%H:%M", time.localtime(T0))]
