"""The widgets' colours come from the Textual theme: switching the theme (as the palette's theme
switcher does) recolours the gate, episode and drift tables and the header, in the new theme's
own colours; symbols and attributes stay, so NO_COLOR loses nothing.

Every theme Textual ships is tried, through the real widgets in a real App.
"""

from __future__ import annotations

from typing import get_args

import pytest
from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.color import Color as TextualColor

from paella_tui.output_feed import OutputFeed
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.run.events import DriftDetected, DriftKind, GateStatus
from paella_tui.widgets.agent_log import AgentLog
from paella_tui.widgets.drift_feed import DriftFeed
from paella_tui.widgets.episode_list import EpisodeList, EpisodeRow
from paella_tui.widgets.gate_table import GateRow, GateTable
from paella_tui.widgets.output_view import OutputView
from paella_tui.widgets.run_header import RunHeader
from paella_tui.widgets.theme_styles import theme_style

T0 = 1_800_000_000.0


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        yield GateTable(id="gates")
        yield EpisodeList(id="episodes")
        yield DriftFeed(id="drift")


def colour_of(text: Text, word: str) -> Color | None:
    """The foreground colour ``text`` gives the first character of ``word``."""
    start = text.plain.index(word)
    style = Style.null()
    if isinstance(text.style, Style):
        style += text.style
    for span in text.spans:
        if span.start <= start < span.end and isinstance(span.style, Style):
            style += span.style
    return style.color


def expected(app: App[None], variable: str) -> Color:
    return Color.parse(TextualColor.parse(app.theme_variables[variable]).hex)


def cell(table: GateTable | EpisodeList | DriftFeed, row: int, column: int) -> Text:
    value = table.get_row_at(row)[column]
    assert isinstance(value, Text)
    return value


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light", "nord", "gruvbox", "dracula"])
async def test_switching_the_theme_recolours_every_widget(theme: str) -> None:
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        gates = app.query_one(GateTable)
        gates.gates = (
            GateRow("unit", "pass", 1.2, finished_at=T0),
            GateRow("lint", "fail", 0.3, finished_at=T0),
            GateRow("e2e", "running"),
        )
        episodes = app.query_one(EpisodeList)
        episodes.episodes = (
            EpisodeRow(1, "ingest", "complete", checkpoint=1, gates_total=1, gates_green=1),
            EpisodeRow(2, "export", "current", gates_total=1),
        )
        drift = app.query_one(DriftFeed)
        drift.warnings = (
            DriftDetected(drift="scope", message="src/x.py changed outside the scope", at=T0),
        )
        header = app.query_one(RunHeader)
        header.run_name = "ledger"
        header.state = "running"
        await pilot.pause()

        app.theme = theme
        await pilot.pause()

        assert colour_of(cell(gates, 0, 0), "✓") == expected(app, "text-success")
        assert colour_of(cell(gates, 1, 0), "✗") == expected(app, "text-error")
        assert colour_of(cell(gates, 2, 0), "●") == expected(app, "text-primary")
        assert colour_of(cell(episodes, 0, 0), "✓") == expected(app, "text-success")
        assert colour_of(cell(episodes, 1, 0), "●") == expected(app, "text-primary")
        assert colour_of(cell(drift, 0, 0), "⚠") == expected(app, "text-warning")
        line = header._shown[header._run_line_static]
        assert colour_of(line, "running") == expected(app, "text-success")


async def test_two_themes_give_two_colours_and_the_symbols_stay() -> None:
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        gates = app.query_one(GateTable)
        gates.gates = (GateRow("lint", "fail", 0.3, finished_at=T0),)
        seen = []
        for theme in ("textual-dark", "gruvbox"):
            app.theme = theme
            await pilot.pause()
            seen.append(colour_of(cell(gates, 0, 0), "✗"))
            assert cell(gates, 0, 0).plain.startswith("✗")
        assert seen[0] != seen[1]


def test_outside_an_app_only_the_attributes_remain() -> None:
    assert theme_style("bold reverse $error") == Style(bold=True, reverse=True)
    assert theme_style("$text-success") == Style()
    assert theme_style("dim italic") == Style(dim=True, italic=True)


def colours(text: Text) -> set[Color]:
    styles = [text.style, *(span.style for span in text.spans)]
    return {
        c for st in styles if isinstance(st, Style) for c in (st.color, st.bgcolor) if c is not None
    }


@pytest.mark.parametrize("theme", ["textual-dark", "gruvbox"])
async def test_every_colour_drawn_is_one_of_the_themes(theme: str) -> None:
    """Every state of every table and of the header: no colour that the theme did not give."""
    from paella_tui.widgets.run_header import _STATES

    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        app.theme = theme
        gates = app.query_one(GateTable)
        every_status = [
            GateRow(f"g{i}", status, 1.0, finished_at=T0, ever_green=i == 0)
            for i, status in enumerate(get_args(GateStatus))
        ]
        regressed = GateRow("again", "fail", 1.0, finished_at=T0, ever_green=True, regressed=True)
        gates.gates = (*every_status, regressed)
        episodes = app.query_one(EpisodeList)
        episodes.episodes = tuple(
            EpisodeRow(i + 1, state, state, gates_total=1)  # type: ignore[arg-type]
            for i, state in enumerate(("complete", "current", "pending", "broken"))
        )
        drift = app.query_one(DriftFeed)
        drift.warnings = tuple(
            DriftDetected(drift=kind, message=kind, at=T0) for kind in get_args(DriftKind)
        )
        await pilot.pause()
        allowed: set[Color] = set()
        for value in app.theme_variables.values():
            try:
                allowed.add(Color.parse(TextualColor.parse(value).hex))
            except Exception:  # a variable that is not a colour (a size, a style)
                continue
        drawn: set[Color] = set()
        for table in (gates, episodes, drift):
            for row in range(table.row_count):
                for value in table.get_row_at(row):
                    if isinstance(value, Text):
                        drawn |= colours(value)
        header = app.query_one(RunHeader)
        for state in _STATES:
            header.state = state
            await pilot.pause()
            drawn |= colours(header._shown[header._run_line_static])
            drawn |= colours(header._shown[header._note_static])
        assert drawn, "the widgets drew no colour at all"
        assert drawn <= allowed, drawn - allowed


class LogHost(App[None]):
    def __init__(self, tail: OutputTail) -> None:
        super().__init__()
        self.tail = tail

    def compose(self) -> ComposeResult:
        yield AgentLog(id="log")

    def on_mount(self) -> None:
        OutputFeed(self.tail, self.query_one(AgentLog).show).start()


def segment_colour(view: OutputView, y: int, word: str) -> Color | None:
    """The colour the agent log paints ``word`` in on its row ``y``."""
    for segment in view.render_line(y):
        if word in segment.text and segment.style is not None:
            return segment.style.color
    raise AssertionError(f"{word!r} is not on row {y}")


@pytest.mark.parametrize("theme", ["textual-light", "gruvbox"])
async def test_the_agent_logs_ansi_colours_follow_the_theme(theme: str) -> None:
    """The decoded stream's marks (✗ red, ✓ green, $ cyan, ✎ yellow), and an agent's own ANSI
    colours, are drawn in the theme's error, success, primary and warning colours."""
    tail = OutputTail()
    tail.feed(
        b"\x1b[31m\xe2\x9c\x97 tool error\x1b[0m\n\x1b[32m\xe2\x9c\x93 finished\x1b[0m\n"
        b"\x1b[36m$ pytest -q\x1b[0m\n\x1b[93m\xe2\x9c\x8e Edit a.py\x1b[0m\nplain words\n"
    )
    app = LogHost(tail)
    async with app.run_test(size=(80, 12)) as pilot:
        await pilot.pause()
        view = app.query_one(OutputView)
        before = segment_colour(view, 0, "tool error")
        app.theme = theme
        await pilot.pause()
        assert segment_colour(view, 0, "tool error") == expected(app, "text-error")
        assert segment_colour(view, 0, "tool error") != before
        assert segment_colour(view, 1, "finished") == expected(app, "text-success")
        assert segment_colour(view, 2, "pytest") == expected(app, "text-primary")
        assert segment_colour(view, 3, "Edit") == expected(app, "text-warning")
        assert segment_colour(view, 4, "plain") not in {
            expected(app, name) for name in ("text-error", "text-success", "text-primary")
        }
