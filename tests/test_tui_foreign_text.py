"""Foreign text is never markup: every screen of the real App, fed brackets, tags and ANSI.

A real run in a real repository: the contract's names, goals, prompt and constraint, the agent's
output and its last line, a file name, the gate's output (pytest-like ids with brackets) are all
full of ``[``, ``]``, ``[/x]``, ``[bold]``, ``[@click=app.quit]`` and ANSI escapes. The App is
driven through the main screen, the toasts, the gate log view, the recovery screen, the diff, the
picker, the handoff preview and the help; nothing may crash, and the text must show literally.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from textual.pilot import Pilot
from waiting import wait_until_async

from paella_tui.app import PaellaApp
from paella_tui.diff_screen import DiffScreen
from paella_tui.gate_log_screen import GateLogScreen
from paella_tui.handoff_screen import HandoffScreen
from paella_tui.help_screen import HelpScreen
from paella_tui.main_screen import MainScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.recovery_screen import RecoveryScreen
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace

SIZE = (160, 44)
WAIT_S = 30.0
# Each would break (or be silently eaten by) Textual's markup parser.
HOSTILE = (
    "[/tmp/x]",
    "[bold]",
    "[@click=app.quit]",
    "item[key]",
    "[/]",
    "[red on blue]",
)
FAILED_ID = "tests/test_p.py::test_paths[/tmp/a-/tmp/b]"
FILE_NAME = "[bold]notes[@click=app.quit].txt"

AGENT = """
import subprocess, sys, time
print("\\x1b[31mred\\x1b[0m output with [bold] and item[key] and [@click=app.quit]")
print("see [red on blue] and [/]")
open("a.txt", "w").write("ok")
# Wait for paella's green checkpoint of this tree (a loaded machine may take a while).
deadline = time.monotonic() + 25
while time.monotonic() < deadline:
    refs = subprocess.run(["git", "for-each-ref", "refs/paella"], capture_output=True, text=True)
    if "/checkpoints/" in refs.stdout:
        break
    time.sleep(0.1)
open({file_name!r}, "w").write("[/x]")
open("a.txt", "w").write("changed")
import os; os.remove("a.txt")
time.sleep(1.5)
print("fatal: cannot open [/tmp/x]", flush=True)
sys.exit(3)
"""

GATE = """
import os, sys
print("\\x1b[1m=== test session starts ===\\x1b[0m [bold] [@click=app.quit]")
if os.path.exists("a.txt"):
    print("1 passed")
    sys.exit(0)
print("FAILED {failed_id} - AssertionError: item[key] [/tmp/x]")
print("=== 1 failed ===")
sys.exit(1)
"""


@pytest.fixture(autouse=True)
def _quiet_alarms(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tmux message or desktop escape from a test run inside someone's tmux."""
    for name in ("TMUX", "TMUX_PANE", "PAELLA_NOTIFY"):
        monkeypatch.delenv(name, raising=False)


def screen_text(app: PaellaApp) -> str:
    """The visible screen as plain text (toasts included: they are on the screen's layer)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot: Pilot[int], condition: Callable[[], bool], what: str) -> None:
    """Let the App run until ``condition()`` holds; fail with the screen if it never does."""
    await wait_until_async(
        condition,
        what,
        timeout=WAIT_S,
        interval=0.05,  # a condition that renders the screen costs CPU the App needs
        show=lambda: screen_text(pilot.app),  # type: ignore[arg-type]
        pause=pilot.pause,
    )


def toasts(app: PaellaApp) -> str:
    """What the App's toasts say: a Toast parses its message as markup unless told not to, so
    every notification must say ``markup=False`` (the App's ``notify`` sees to it)."""
    notes = list(app._notifications)
    assert all(not note.markup for note in notes), [n.message for n in notes if n.markup]
    return "\n".join(f"{note.title}\n{note.message}" for note in notes)


@contextlib.asynccontextmanager
async def running(app: PaellaApp) -> AsyncIterator[Pilot[int]]:
    """``app.run_test`` that leaves no agent behind."""
    try:
        async with app.run_test(size=SIZE) as pilot:
            yield pilot
    finally:
        await app.settle_engine("test ended")


def hostile_app(repo: Path) -> PaellaApp:
    """The App over a fresh run whose every text is hostile."""
    (repo / "agent.py").write_text(textwrap.dedent(AGENT.format(file_name=FILE_NAME)))
    (repo / "gate.py").write_text(textwrap.dedent(GATE.format(failed_id=FAILED_ID)))
    contract: dict[str, Any] = {
        "run": {
            "name": "x[bold]y",
            "prompt": "do [bold]it[/bold] [@click=app.quit]",
            "agent": [sys.executable, "agent.py"],
            "scope": ["a.txt"],
        },
        "watch": {"settle": "0.2s"},
        "gate": [{"name": "tests", "cmd": f"{sys.executable} gate.py", "timeout": "20s"}],
        "episode": [{"name": "e[/x]", "goal": "goal with [/tmp/x] and [bold]", "gates": ["tests"]}],
        "constraint": [{"text": "keep [red on blue] and [/]", "protect": [FILE_NAME]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    run = RunStore(Workspace.find(repo)).create(load_contract(repo / "paella.toml"), manual=False)
    loaded = run.load_contract()
    assert loaded is not None
    return PaellaApp(run=run, contract=loaded, stop_grace=2.0)


async def show(pilot: Pilot[int], screen: type, what: str) -> str:
    """Wait for ``screen`` on top and its workers; the text it shows."""
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, screen), what)
    # The screens' own workers (a diff, the snapshots) finish in well under a second; the
    # App's long-lived ones (the engine, the output reader) never do, so no wait_for_complete.
    await pilot.pause(0.5)
    return screen_text(app)  # type: ignore[arg-type]


@pytest.mark.slow
async def test_every_screen_shows_foreign_text_literally(repo: Path) -> None:
    app = hostile_app(repo)
    async with running(app) as pilot:
        await until(pilot, lambda: "[/x]" in screen_text(app), "the episode row")
        text = screen_text(app)
        assert "x[bold]y" in text  # the run name in the header
        await until(pilot, lambda: "[@click=app.quit]" in screen_text(app), "the agent output")
        await until(pilot, lambda: "item[key]" in screen_text(app), "the agent output")

        # The death: its toast and the recovery screen quote the agent's last line.
        text = await show(pilot, RecoveryScreen, "the recovery screen")
        await until(
            pilot,
            lambda: "fatal: cannot open [/tmp/x]" in screen_text(app),
            "the last line on the recovery screen",
        )
        # The red gate's failing test, named among the facts.
        assert isinstance(app.screen, RecoveryScreen)
        assert any(FAILED_ID in r.failed_tests for r in app.screen.facts.gates_now), screen_text(
            app
        )

        await pilot.press("d")
        text = await show(pilot, DiffScreen, "the diff")
        assert FILE_NAME in text
        await pilot.press("escape")
        await pilot.press("h")  # write the handoff and stop: back on the main screen
        await show(pilot, MainScreen, "the main screen")
        await until(pilot, lambda: app.board.state == "stopped", "the run to stop")

        # The drift feed and its toast: the protected file's name and the constraint's text.
        await until(pilot, lambda: "[red on blue]" in screen_text(app), "the protected drift")

        # The gate log view: the failing id picked out, a search for a tag, older runs.
        await pilot.press("l")
        text = await show(pilot, GateLogScreen, "the gate log view")
        assert f"failing (1): {FAILED_ID}" in text
        assert "[bold] [@click=app.quit]" in text
        await pilot.press("slash")
        for key in "[bold]":
            await pilot.press(
                key
                if key.isalnum()
                else {"[": "left_square_bracket", "]": "right_square_bracket"}[key]
            )
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert "«[bold]»" in screen_text(app)
        await pilot.press("left_square_bracket")
        await pilot.pause(0.1)
        assert "run " in screen_text(app)
        await pilot.press("escape")

        # Enter on the episode: its goal in a toast.
        await show(pilot, MainScreen, "the main screen")
        app.main.query_one("#episodes").focus()
        await pilot.pause(0.2)
        await pilot.press("enter")
        await until(
            pilot, lambda: "goal with [/tmp/x] and [bold]" in toasts(app), "the episode's toast"
        )
        # The death's alert quoted the agent's last line as it was (its toast was cleared when
        # the recovery screen opened: it would cover the choices).
        assert any("fatal: cannot open [/tmp/x]" in a.message for a in app.alarm.rung)

        await pilot.press("h")
        text = await show(pilot, HandoffScreen, "the handoff preview")
        app.screen.query_one("#handoff-scroll").scroll_to(y=12, animate=False)
        await until(pilot, lambda: FAILED_ID in screen_text(app), "the failing test in the handoff")
        await pilot.press("escape")

        await pilot.press("r")
        text = await show(pilot, PickerScreen, "the picker")
        await pilot.press("escape")
        await pilot.press("question_mark")
        await show(pilot, HelpScreen, "the help")
        await pilot.press("escape")
        await show(pilot, MainScreen, "the main screen")
        assert app.is_running
