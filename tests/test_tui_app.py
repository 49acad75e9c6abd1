"""The TUI driven with Pilot over real runs: real git repositories, real gates, scripted agents as
real subprocesses (``tests/agents/episodes.py``), the real run loop in the App's worker.

Each test asserts on what a person sees in the pane (the screen's text and the styles of its
cells) and on what a run leaves behind: the exit status, the ledger, and no process of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import tomli_w
from rich.style import Style
from textual.pilot import Pilot
from waiting import wait_until_async

from paella_tui.app import PaellaApp
from paella_tui.confirm_screen import ConfirmScreen
from paella_tui.main_screen import MainScreen
from paella_tui.notify import Alarm, Alert, alert_for, desktop_sequence, detect_protocol
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.events import AgentExited, DriftDetected, Notice
from paella_tui.supervisor.run.run_loop import EXIT_NOT_DONE
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.widgets.agent_log import AgentLog
from paella_tui.widgets.output_view import OutputView

AGENT = Path(__file__).parent / "agents" / "episodes.py"
SIZE = (120, 36)
WAIT_S = 25.0


@pytest.fixture(autouse=True)
def _quiet_alarms(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tmux message or desktop escape from a test run inside someone's tmux."""
    for name in ("TMUX", "TMUX_PANE", "PAELLA_NOTIFY"):
        monkeypatch.delenv(name, raising=False)


# --- helpers -----------------------------------------------------------------------------------


def write_contract(repo: Path, scripts: dict[int, str], **run: Any) -> None:
    """``paella.toml``: two cumulative episodes (a.txt, then b.txt) and the scripted agent."""
    argv = [sys.executable, str(AGENT)]
    for attempt, script in scripts.items():
        argv += [f"--{attempt}", script]
    contract = {
        "run": {"name": "tui-test", "prompt": "make a.txt, then b.txt", "agent": argv, **run},
        "watch": {"settle": "0.2s"},
        "gate": [
            {"name": "a", "cmd": "test -f a.txt", "timeout": "10s"},
            {"name": "b", "cmd": "test -f b.txt", "timeout": "10s"},
        ],
        "episode": [
            {"name": "first", "goal": "a.txt exists", "gates": ["a"]},
            {"name": "second", "goal": "b.txt exists", "gates": ["b"]},
        ],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))


def new_run(repo: Path) -> Run:
    """A fresh run of the repository's contract, as ``paella run`` opens it."""
    contract = load_contract(repo / "paella.toml")
    return RunStore(Workspace.find(repo)).create(contract, manual=False)


def make_app(run: Run, **kwargs: Any) -> PaellaApp:
    """The App over ``run`` with a short stop grace."""
    contract = run.load_contract()
    assert contract is not None
    return PaellaApp(run=run, contract=contract, stop_grace=2.0, **kwargs)


@contextlib.asynccontextmanager
async def running(app: PaellaApp) -> AsyncIterator[Pilot[int]]:
    """``app.run_test`` that, whatever happens in the test, leaves no agent behind."""
    try:
        async with app.run_test(size=SIZE) as pilot:
            yield pilot
    finally:
        await app.settle_engine("test ended")


def screen_text(app: PaellaApp) -> str:
    """The visible screen as plain text (the top screen, as the terminal would show it)."""
    # Textual's compositor holds what was drawn; there is no public text export besides SVG.
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def style_at(app: PaellaApp, needle: str) -> Style:
    """The style of the first cell of ``needle`` on the screen."""
    for strip in app.screen._compositor.render_strips():
        text = strip.text
        index = text.find(needle)
        if index < 0:
            continue
        x = 0
        for segment in strip:
            if x + len(segment.text) > index:
                return segment.style or Style()
            x += len(segment.text)
    raise AssertionError(f"{needle!r} is not on the screen:\n{screen_text(app)}")


async def until(
    pilot: Pilot[int], condition: Callable[[], bool], what: str, timeout: float = WAIT_S
) -> None:
    """Let the App run until ``condition()`` holds; fail with the screen if it never does."""
    # Every 50 ms: a condition that renders the screen costs CPU the App needs.
    await wait_until_async(
        condition,
        what,
        timeout=timeout,
        interval=0.05,
        show=lambda: screen_text(pilot.app),
        pause=pilot.pause,
    )


def ledger(run: Run, kind: str) -> list[dict[str, Any]]:
    """The run's ledger records of ``kind``."""
    return [r for r in run.ledger.read().records if r.get("kind") == kind]


def agent_pids(run: Run) -> list[int]:
    """Every agent pid the run started."""
    return [int(r["pid"]) for r in ledger(run, "agent-started")]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def on_main(app: PaellaApp) -> bool:
    """The main screen is the one shown."""
    return isinstance(app.screen, MainScreen)


# --- a run as it is watched ---------------------------------------------------------------------


async def test_live_run_shows_gates_episodes_checkpoints_then_done_until_q(repo: Path) -> None:
    write_contract(
        repo,
        {
            1: "write a.txt; wait-ledger checkpoint; sleep 0.5; write b.txt; wait-ledger checkpoint 2; exit 0"
        },
    )
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: "ckpt 1" in screen_text(app), "checkpoint 1 in the list")
        text = screen_text(app)
        assert "✓ a" in text  # the gate row, green, as soon as it was judged
        assert "✓ 1. first" in text  # episode 1 complete, with the checkpoint that proved it
        assert "● running" in text and "attempt 1" in text

        await until(pilot, lambda: app.board.state == "done", "the run to be done")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "✓ done" in text
        assert "every gate green on the final tree (a, b)" in text
        assert "✓ 2. second" in text and "ckpt 2" in text
        # Done is a verdict to read the next morning: the App stays until q.
        await pilot.pause(1.0)
        assert app.is_running and on_main(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the App to exit")
    assert app.return_value == 0
    assert app.status == 0
    assert not any(alive(pid) for pid in agent_pids(run))


@pytest.mark.slow
async def test_regression_stands_out_and_death_opens_recovery(repo: Path) -> None:
    from paella_tui.recovery_screen import RecoveryScreen

    write_contract(
        repo,
        {
            1: "write a.txt; wait-ledger checkpoint; rm a.txt; write b.txt; wait-ledger drift; sleep 0.8; exit 3",
            2: "handoff; write a.txt; write b.txt; exit 0",
        },
    )
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(
            pilot, lambda: "was ✓ ⚠" in screen_text(app), "the regression in the gate table"
        )
        text = screen_text(app)
        assert "⚠ a" in text and "regressed" in text
        # Not colour alone: the regressed row is bold and reversed, and says so in symbols.
        style = style_at(app, "⚠ a")
        assert style.bold and style.reverse
        assert "⚠ 1. first" in text  # the episode it completed is broken now
        await until(pilot, lambda: "regression" in screen_text(app), "the drift feed")

        await until(pilot, lambda: isinstance(app.screen, RecoveryScreen), "the recovery screen")
        await until(pilot, lambda: "The agent died: exit 3" in screen_text(app), "the facts")
        assert any(a.title == "paella: the agent died" for a in app.alarm.rung)
        await pilot.press("r")  # roll back to checkpoint 1 and resume: attempt 2 finishes
        await until(pilot, lambda: app.board.state == "done", "the resumed run to be done")
        assert on_main(app)
        assert "attempt 2" in screen_text(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the App to exit")
    assert app.status == 0
    chosen = ledger(run, "recovery-chosen")
    assert [(c["choice"], c["by"]) for c in chosen] == [("rollback", "user")]
    assert ledger(run, "salvage"), "the rollback salvaged the state before it"
    assert not any(alive(pid) for pid in agent_pids(run))


async def test_stop_from_recovery_then_R_resumes_with_a_new_run_loop(repo: Path) -> None:
    from paella_tui.recovery_screen import RecoveryScreen

    write_contract(repo, {1: "write a.txt; sleep 0.6; exit 2", 2: "handoff; write b.txt; exit 0"})
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecoveryScreen), "the recovery screen")
        first_loop = app.run_loop
        await pilot.press("h")  # write the handoff and stop: the state stays as it is
        await until(pilot, lambda: app.board.state == "stopped" and on_main(app), "the stop")
        # The hint comes with the next render of the main screen (not at a fixed time after it).
        await until(pilot, lambda: "R resumes" in screen_text(app), "the hint that R resumes")
        await pilot.press("R")
        await until(pilot, lambda: app.board.state == "done", "the resumed run to be done")
        assert app.run_loop is not first_loop
        assert ledger(run, "resumed"), "the resume is recorded like `paella resume`"
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the App to exit")
    assert app.status == 0


async def test_quit_while_the_agent_runs_asks_then_stops_it(repo: Path) -> None:
    write_contract(repo, {1: "write a.txt; forever"})
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: app.board.pid is not None, "the agent to start")
        pid = app.board.pid
        assert pid is not None
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await until(
            pilot, lambda: "The agent is running" in screen_text(app), "the question's text"
        )
        await pilot.press("n")  # keep running
        await until(pilot, lambda: on_main(app), "the main screen again")
        await pilot.pause(0.3)
        assert alive(pid) and app.is_running

        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question again")
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running, "the App to exit after the stop")
    assert app.status == 1  # stopped, not done
    assert not alive(pid)
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a zombie (another test's) is not running
            if child.status() != psutil.STATUS_ZOMBIE:
                assert str(AGENT) not in " ".join(child.cmdline()), f"left running: {child}"
    stopped = ledger(run, "run-stopped")
    assert [s["reason"] for s in stopped] == ["quit by you"]
    exited = ledger(run, "agent-exited")
    assert exited and exited[-1]["signal"] == 15  # stopped through the loop, and recorded


async def test_keys_are_in_the_footer_and_the_palette(repo: Path) -> None:
    write_contract(repo, {1: "write a.txt; forever"})
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: app.board.pid is not None, "the agent to start")
        await pilot.pause(0.3)
        footer = screen_text(app).splitlines()[-1]
        for key in (
            "g gates",
            "c ckpt",
            "r back",
            "s stop",
            "d diff",
            "h handoff",
            "/ find",
            "l log",
            "q quit",
            "? help",
        ):
            assert key in footer, f"{key!r} missing from the footer: {footer!r}"
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert {
            "Run gates",
            "Checkpoint",
            "Roll back",
            "Stop the agent",
            "Resume",
            "Diff",
        } <= titles
        assert {
            "Handoff",
            "Gate log",
            "Search the output",
            "Follow the output",
            "Help",
            "Quit",
        } <= titles

        await pilot.press("s")  # stop the agent: its end goes through recovery

        await until(
            pilot, lambda: "You stopped the agent" in screen_text(app), "the recovery screen"
        )
        assert not any(a.title == "paella: the agent died" for a in app.alarm.rung)
        await pilot.press("h")
        await until(pilot, lambda: app.board.state == "stopped", "the stop")
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        assert "R resume" in footer and "s stop" not in footer


@pytest.mark.slow
async def test_r_picks_a_checkpoint_confirms_and_rolls_back_through_the_loop(repo: Path) -> None:
    from paella_tui.picker_screen import PickerScreen

    write_contract(
        repo,
        {
            1: "write a.txt; wait-ledger checkpoint; write junk.txt; forever",
            2: "handoff; write b.txt; exit 0",
        },
    )
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: (repo / "junk.txt").exists() and app.agent_alive, "junk.txt")
        await pilot.press("c")  # a manual checkpoint first: the newest row in the picker
        await until(pilot, lambda: "manual checkpoint" in screen_text(app), "the manual checkpoint")

        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), "the picker")
        await until(pilot, lambda: "episode 1" in screen_text(app), "the checkpoints listed")
        await pilot.press("down")  # from the manual checkpoint (newest) to checkpoint 1
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await until(pilot, lambda: "Roll back to 1" in screen_text(app), "the question")
        await pilot.press("y")
        await until(pilot, lambda: app.board.state == "done", "the resumed run to be done")
        assert not (repo / "junk.txt").exists()  # rolled back to checkpoint 1, then resumed
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, "the App to exit")
    chosen = ledger(run, "recovery-chosen")
    assert [(c["choice"], c["target"], c["by"]) for c in chosen] == [("rollback", "1", "user")]
    manual = [c for c in ledger(run, "checkpoint") if c["episode"] == "manual"]
    assert manual and "a" in manual[0]["gates_green"]  # the loop judged the gates first
    salvage = ledger(run, "salvage")
    assert salvage, "the state before the rollback (with junk.txt) was salvaged"


# --- the output view ------------------------------------------------------------------------------


def _contract_only(repo: Path) -> PaellaApp:
    write_contract(repo, {1: "exit 0"})
    return PaellaApp(contract=load_contract(repo / "paella.toml"), run_id="test", engine=False)


async def test_output_is_batched_bounded_coloured_and_searchable(repo: Path) -> None:
    app = _contract_only(repo)
    tail = OutputTail()
    async with app.run_test(size=SIZE) as pilot:
        app.attach_output(tail)
        log = app.screen.query_one(AgentLog)
        view = log.query_one(OutputView)
        # 20,000 lines between two polls arrive as one batch, and only the newest 5,000 stay.
        tail.feed(b"".join(f"line {i}\n".encode() for i in range(20_000)))
        tail.feed(b"\x1b[31mred alert\x1b[0m at the end\npartial")
        await until(
            pilot,
            lambda: view.line_count == 5_000 + 1,
            "the batch (5,000 lines + the unfinished one)",
        )
        await until(
            pilot, lambda: "red alert at the end" in screen_text(app), "the newest lines in view"
        )
        assert "partial" in screen_text(app)
        assert style_at(app, "red alert").color is not None  # ANSI colour rendered

        await pilot.press("f")
        await until(pilot, lambda: "paused" in screen_text(app), "follow to stop")
        tail.feed(b"\nnewer line\n")
        await until(pilot, lambda: view.line_count == 5_000, "the new lines")
        await pilot.pause(0.2)
        assert "newer line" not in screen_text(app)  # not following: the same lines stay in view

        await pilot.press("slash")
        await pilot.press(*"line 19990")
        await pilot.press("enter")
        await until(pilot, lambda: "match 1/1" in screen_text(app), "the search")
        assert style_at(app, "line 19990").reverse  # the match is highlighted
        await pilot.press("escape")
        await pilot.press("f")
        await until(pilot, lambda: "newer line" in screen_text(app), "following again")
        assert log.follow


# --- loud failure --------------------------------------------------------------------------------


class TestLoudFailure:
    """A death, a drift, exhausted retries: bell, toast, desktop escape, tmux message."""

    def test_alerts_for_death_and_drift_but_not_for_a_stop(self) -> None:
        died = alert_for(AgentExited(attempt=2, exit_code=3, signal=None, tail=("boom",)))
        assert died is not None and "exit 3" in died.message and "boom" in died.message
        assert (
            alert_for(AgentExited(attempt=1, exit_code=None, signal=15, stopped_by_user=True))
            is None
        )
        assert alert_for(AgentExited(attempt=1, exit_code=0, signal=None)) is None
        drift = alert_for(DriftDetected(drift="regression", message="a now fails", gate="a"))
        assert drift is not None and drift.severity == "error"
        assert alert_for(Notice(message="fyi")) is None

    def test_desktop_sequences_and_the_tmux_wrapper(self) -> None:
        assert desktop_sequence("t", "b;c", "osc777", tmux=False) == "\x1b]777;notify;t;b;c\x07"
        assert desktop_sequence("t", "b", "osc9", tmux=False) == "\x1b]9;t: b\x07"
        wrapped = desktop_sequence("t", "b", "osc9", tmux=True)
        assert wrapped == "\x1bPtmux;\x1b\x1b]9;t: b\x07\x1b\\"
        assert "\n" not in desktop_sequence("t", "two\nlines", "osc777", tmux=False)
        assert detect_protocol({"TERM_PROGRAM": "iTerm.app"}) == "osc9"
        assert detect_protocol({"VTE_VERSION": "7600"}) == "osc777"
        assert detect_protocol({"TERM": "xterm-256color"}) is None  # unknown: no garbage
        assert detect_protocol({"PAELLA_NOTIFY": "osc777", "TERM": "dumb"}) == "osc777"
        assert detect_protocol({"PAELLA_NOTIFY": "off", "TERM_PROGRAM": "iTerm.app"}) is None

    async def test_ring_toasts_and_tells_tmux(self, repo: Path, tmp_path: Path) -> None:
        # A stand-in `tmux` on PATH records how it was called.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        record = tmp_path / "tmux-args.json"
        fake = bin_dir / "tmux"
        fake.write_text(
            f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
        )
        fake.chmod(0o755)
        app = _contract_only(repo)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            env = {
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                "TMUX": "/tmp/x,1,0",
                "TMUX_PANE": "%7",
            }
            alarm = Alarm(app, env=env)
            alarm.ring(Alert("paella: the agent died", "attempt 1, exit 3"))
            alarm.ring(Alert("paella: the agent died", "attempt 1, exit 3"))  # once is enough
            for _ in range(100):
                if record.exists():
                    break
                await asyncio.sleep(0.05)
            await pilot.pause(0.2)
            assert "paella: the agent died" in screen_text(app)  # the toast
            assert len(alarm.rung) == 2
        args = json.loads(record.read_text())
        assert args[:1] == ["display-message"] and "-t" in args and "%7" in args
        assert args[-1] == "paella: the agent died: attempt 1, exit 3"


# --- the command line -------------------------------------------------------------------------------


async def test_the_status_is_the_loops_once_it_returned_however_the_app_ended(repo: Path) -> None:
    """A run done just as the App ends another way than by quitting (a Pilot leaving, Textual
    ending): the engine's worker may be cancelled on the way out, or its news never handled,
    either of which leaves "not done". The status is the loop's, which had returned 0 (the
    accept case of test_protected_screen exited 1 after run-done, once in 180 under load)."""
    write_contract(repo, {1: "exit 0"})
    app = make_app(new_run(repo))

    async def loop_returned() -> int:
        return 0

    app._engine_task = asyncio.ensure_future(loop_returned())
    await app._engine_task
    assert app.status == EXIT_NOT_DONE  # the worker's news never came in
    await app.settle_engine("the App ended")
    assert app.status == 0


def test_not_a_terminal_falls_back_to_headless_with_a_notice(repo: Path, paella) -> None:
    write_contract(repo, {1: "write a.txt; write b.txt; exit 0"})
    result = paella(repo, "run", timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "not a terminal: running headless" in result.stderr
    assert "DONE" in result.stdout  # the headless printer ran the whole run


async def test_the_recovery_screen_takes_in_the_final_gates_when_they_finish(repo: Path) -> None:
    """The screen opens at once, while a slow gate still judges the final tree; when it finishes,
    the screen shows its verdict (here a regression, so the default becomes the rollback)."""
    from paella_tui.recovery_screen import RecoveryScreen

    # The final tree is new (b.txt): without it, it would be the run's start tree, whose verdict
    # may already be known, and the screen would rightly open with the gates final.
    write_contract(repo, {1: "write a.txt; wait-ledger checkpoint; rm a.txt; write b.txt; exit 3"})
    contract = repo / "paella.toml"
    # On the final tree (b.txt there), gate a waits for the test's go: the recovery cannot wait
    # for it. (A gate that slept instead raced a loaded machine, where the agent's exit after
    # its last write can take longer than the sleep.)
    go = repo.parent / "go"
    held = f"if [ -f b.txt ]; then while [ ! -f {go} ]; do sleep 0.05; done; fi; test -f a.txt"
    contract.write_text(
        contract.read_text().replace('"test -f a.txt"', json.dumps(["sh", "-c", held]))
    )
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecoveryScreen), "the recovery screen")
        screen = app.screen
        assert isinstance(screen, RecoveryScreen)
        assert not screen.facts.gates_final  # opened while the gate waits for the go
        await until(
            pilot, lambda: "still running on the final tree" in screen_text(app), "the facts"
        )
        assert "Default: resume" in screen_text(app)  # no regression is known yet
        go.write_text("go")
        await until(
            pilot,
            lambda: "REGRESSED" in screen_text(app) and "still running" not in screen_text(app),
            "the final verdict on the screen",
        )
        assert screen.facts.gates_final
        assert screen.facts.regressions == ("a",)
        assert screen.facts.default == "rollback"
        assert "Default: roll back" in screen_text(app)
        await pilot.press("enter")  # the default now: roll back to checkpoint 1
        await until(pilot, lambda: bool(ledger(run, "recovery-chosen")), "the choice recorded")
        assert ledger(run, "recovery-chosen")[0]["choice"] == "rollback"
        await app.settle_engine("test ended")
    assert not any(alive(pid) for pid in agent_pids(run))


@pytest.mark.slow
async def test_after_a_stop_g_judges_and_a_rollback_is_judged_at_once(repo: Path) -> None:
    """No stale verdict on screen: with no agent running, g judges the tree; a rollback made
    while stopped re-judges the restored tree; the handoff then says what was rolled back."""
    from paella_tui.picker_screen import PickerScreen
    from paella_tui.recovery_screen import RecoveryScreen

    write_contract(repo, {1: "write a.txt; wait-ledger checkpoint; write b.txt; forever"})
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(
            pilot,
            lambda: app.board.gates.get("b") is not None and app.board.gates["b"].status == "pass",
            "both gates green",
        )
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, RecoveryScreen), "the recovery screen")
        await pilot.press("h")
        await until(pilot, lambda: app.board.state == "stopped", "the stop")

        (repo / "a.txt").unlink()  # a change made while stopped: g must see it
        judged = len(ledger(run, "evaluation-finished"))
        await pilot.press("g")
        await until(pilot, lambda: len(ledger(run, "evaluation-finished")) > judged, "g's verdict")
        await until(pilot, lambda: app.board.gates["a"].status == "fail", "a red on screen")
        assert not [c for c in ledger(run, "checkpoint") if c["episode"] == "manual"]

        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), "the picker")
        await until(pilot, lambda: "episode 1" in screen_text(app), "the checkpoints listed")
        await pilot.press("enter")  # the newest: checkpoint 2, where both gates passed
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: (repo / "a.txt").exists(), "the rollback")
        # The restored tree (a.txt back) is judged without a key pressed: a is green again.
        await until(pilot, lambda: app.board.gates["a"].status == "pass", "the restored verdict")
        assert ledger(run, "evaluation-started")[-1]["reason"] == "g"
        assert not app.engine_live
    handoff = subprocess.run(
        [sys.executable, "-m", "paella_tui", "handoff"], cwd=repo, capture_output=True, text=True
    )
    assert handoff.returncode == 0, handoff.stderr
    assert "rolled back to" in handoff.stdout and "salvage:1" in handoff.stdout
    assert "paella rollback salvage:1 --yes" in handoff.stdout
