"""The gate log view: the newest run first, failing tests picked out, search, older/newer runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App

from paella_tui.gate_log_screen import GateLogScreen


class Host(App[None]):
    def __init__(self, screen: GateLogScreen) -> None:
        super().__init__()
        self._screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._screen)


def text(app: App[Any]) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def logs(run_dir: Path) -> None:
    folder = run_dir / "gates" / "tests"
    folder.mkdir(parents=True)
    (folder / "1.log").write_text("ERROR tests/test_a.py - ImportError: needle [bold]\n")
    lines = [f"line {i}" for i in range(200)]
    lines[50] = "needle in the middle [/x]"
    lines += [
        "FAILED tests/test_a.py::test_p[/tmp/a-/tmp/b] - assert needle",
        "FAILED tests/test_a.py::test_q - \x1b[31mred\x1b[0m",
        "2 failed",
    ]
    (folder / "2.log").write_text("\n".join(lines) + "\n")
    # Not a numbered run: never listed.
    (folder / "notes.txt").write_text("x")


async def test_runs_failures_search_and_paging(tmp_path: Path) -> None:
    logs(tmp_path)
    app = Host(GateLogScreen(tmp_path, "tests", status="fail"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        shown = text(app)
        assert "gate tests · run 2 of 2 · fail" in shown
        assert (
            "failing (2): tests/test_a.py::test_p[/tmp/a-/tmp/b], tests/test_a.py::test_q" in shown
        )
        assert "2 failed" in shown  # opened at the end, where a red gate's story is
        await pilot.press("slash", *"needle", "enter")
        await pilot.pause()
        assert "1/2 «needle»" in text(app)
        assert "needle in the middle [/x]" in text(app)
        await pilot.press("n")
        await pilot.pause()
        assert "2/2 «needle»" in text(app)
        await pilot.press("left_square_bracket")
        await pilot.pause()
        shown = text(app)
        assert "run 1 of 2" in shown and "failing (1): tests/test_a.py" in shown
        assert "ImportError: needle [bold]" in shown
        await pilot.press("left_square_bracket")  # no older run: stays
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert "run 2 of 2" in text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, GateLogScreen)


async def test_a_gate_that_never_ran(tmp_path: Path) -> None:
    app = Host(GateLogScreen(tmp_path, "lint", message="command not found: [ruff]"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = text(app)
        assert "gate lint · no log recorded yet: command not found: [ruff]" in shown
        assert "(no run of this gate yet)" in shown
        await pilot.press("t")  # no failing test: a note, no crash
        await pilot.pause()
