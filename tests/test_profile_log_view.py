"""What each agent's own output looks like in the TUI: the agent log view, and the header's usage.

Every known agent's scripted stand-in (``tests/profile_agents``) runs as a real subprocess; its
stdout is fed, chunk by chunk as it arrives, through what the run loop puts in front of the
display tail (the profile's decoder in a ``DecodedTail``, or nothing for aider's plain text), and
the real ``AgentLog`` shows that tail. A person must read what the agent says and does, never the
JSON records it came in. Update the snapshots after a deliberate change with
``pytest --snapshot-update tests/test_profile_log_view.py``, and look at the SVGs first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_profile_runs import CLAUDE_SID, claude_run
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Static

from paella_tui.app import PaellaApp
from paella_tui.output_feed import OutputFeed
from paella_tui.run_board import RunBoard
from paella_tui.supervisor.agent.decoded_tail import DecodedTail
from paella_tui.supervisor.agent.output_tail import OutputSink, OutputTail, strip_sgr
from paella_tui.supervisor.agent.profiles.registry import PROFILES
from paella_tui.supervisor.run.attempt_end import ATTEMPT_MARKER
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    Usage,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.widgets.agent_log import AgentLog
from paella_tui.widgets.run_header import RunHeader

AGENTS = Path(__file__).parent / "profile_agents"
SnapCompare = Callable[..., bool]

# (agent, scenario) -> lines the log view must show, as a person reads them.
CASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("claude", "success"): ("● Read src/a.py", "✎ Edit src/a.py", "$ pytest -q", "All tests pass."),
    ("claude", "usage_limit"): (),  # its error line: test_a_claude_usage_limit_shows_as_an_error
    ("codex", "success"): (
        "$ pytest -q",
        "✗ exit 1: pytest -q",
        "✎ Add src/b.py",
        "Tests pass now.",
    ),
    ("gemini", "success"): ("Reading the code.", "● Read src/a.py", "✗ tool error: exit code 1"),
    ("aider", "success"): ("Applied edit to src/a.py", "Commit 1a2b3c4 fix: ledger"),
    ("opencode", "success"): ("Let me look at the ledger.", "✎ Edit src/a.py", "$ pytest -q"),
}
PARAMS = [pytest.param(agent, scenario, id=f"{agent}-{scenario}") for agent, scenario in CASES]

# The marks DecodedTail colours: a marked line always comes with its colour.
MARKS = ("✗", "✓", "$", "●", "✎")


@pytest.fixture(autouse=True)
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots in colour (the session sets NO_COLOR); restored after each test."""
    monkeypatch.delenv("NO_COLOR", raising=False)


def agent_output(agent: str, scenario: str) -> OutputTail:
    """The display tail after one attempt of ``agent``'s stand-in, fed as the run loop feeds it."""
    tail = OutputTail()
    tail.feed(f"\n{ATTEMPT_MARKER}1 ──\n".encode())
    profile = PROFILES[agent]
    # Only a profile with a stream gets a decoder; aider's plain text goes straight to the tail.
    sink: OutputSink = DecodedTail(tail, profile.new_decoder()) if profile.decoder else tail
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROFILE_", "PAELLA_"))}
    env["PROFILE_SCENARIO"] = scenario
    proc = subprocess.Popen(
        [sys.executable, str(AGENTS / f"{agent}.py")], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    # Chunks as they come (the stand-in writes 37-byte pieces): lines split across reads.
    while chunk := os.read(proc.stdout.fileno(), 4096):
        sink.feed(chunk)
    proc.stdout.close()
    proc.wait(timeout=30)
    sink.finish()
    return tail


class LogApp(App[None]):
    """Just the agent log, styled as on the main screen, showing one tail."""

    CSS_PATH = PaellaApp.CSS_PATH[:1]

    def __init__(self, tail: OutputTail) -> None:
        super().__init__()
        self.tail = tail

    def compose(self) -> ComposeResult:
        yield AgentLog(id="log")

    def on_mount(self) -> None:
        OutputFeed(self.tail, self.query_one(AgentLog).show).start()


class TestAgentLogShowsTheStreamReadably:
    @pytest.mark.parametrize(("agent", "scenario"), PARAMS)
    def test_lines_read_as_words_not_records(self, agent: str, scenario: str) -> None:
        tail = agent_output(agent, scenario)
        shown = tail.plain_lines()
        assert not [line for line in shown if line.lstrip().startswith('{"')]
        for expected in CASES[agent, scenario]:
            assert expected in shown
        for raw in tail.lines():
            if strip_sgr(raw).startswith(MARKS):
                assert raw.startswith("\x1b["), f"{raw!r} is marked but has no colour"

    def test_a_claude_usage_limit_shows_as_an_error(self) -> None:
        shown = agent_output("claude", "usage_limit").plain_lines()
        assert [line for line in shown if line.startswith("✗") and "usage limit" in line]

    @pytest.mark.parametrize(("agent", "scenario"), PARAMS)
    def test_snapshot(self, snap_compare: SnapCompare, agent: str, scenario: str) -> None:
        app = LogApp(agent_output(agent, scenario))

        async def run_before(pilot: Pilot[Any]) -> None:
            await pilot.pause(0.3)  # the log polls its tail every 100 ms

        assert snap_compare(app, terminal_size=(80, 16), run_before=run_before)


class HeaderApp(App[None]):
    """Just the run header, as an agent with a stream would have it."""

    def compose(self) -> ComposeResult:
        header = RunHeader(id="header")
        header.run_name = "ledger-service"
        header.run_id = "20270115-061455-ab12"
        header.state = "running"
        header.attempt = 2
        header.pid = 48213
        header.started = 1_800_000_000.0 - 3725
        header.now = 1_800_000_000.0
        header.usage = Usage(turns=12, input_tokens=41_000, output_tokens=7_300, cost_usd=0.84)
        yield header


class TestHeaderShowsUsage:
    @pytest.mark.parametrize(
        ("width", "shown", "left_out"),
        [
            (120, "12 turns · 48.3k tok · $0.84  run 20270115-061455-ab12", ()),
            (80, "up 1h02m  48.3k tok · $0.84", ("turns", "run ")),
            (64, "attempt 2  48.3k tok · $0.84", ("pid", "up ", "run ")),
        ],
    )
    async def test_usage_outlasts_the_run_id_when_narrow(
        self, width: int, shown: str, left_out: tuple[str, ...]
    ) -> None:
        app = HeaderApp()
        async with app.run_test(size=(width, 4)) as pilot:
            await pilot.pause()
            text = str(app.query_one("#run-line", Static).content)
        assert shown in text
        for piece in left_out:
            assert piece not in text

    async def test_no_usage_without_a_stream(self) -> None:
        app = HeaderApp()
        async with app.run_test(size=(120, 4)) as pilot:
            app.query_one(RunHeader).usage = None
            await pilot.pause()
            text = str(app.query_one("#run-line", Static).content)
        assert "tok" not in text and "turns" not in text and "run 2027" in text


class TestBoardSumsUsage:
    def test_ended_attempts_and_the_live_one(self) -> None:
        from test_tui_snapshots import contract

        board = RunBoard(contract=contract(), run_id="r")
        assert board.usage is None
        first = Usage(turns=3, input_tokens=100, output_tokens=10, cost_usd=0.5)
        live = Usage(turns=1, input_tokens=20, output_tokens=2)
        board.apply(AgentStarted(attempt=1, pid=1, create_time=0.0, argv=("claude",)))
        board.apply(AgentSession(attempt=1, session_id="s-1"))
        board.apply(stats(1, first))
        assert board.usage == first
        board.apply(AgentExited(attempt=1, exit_code=1, signal=None, usage=first))
        assert board.usage == first  # the final count replaces the live one, not added to it
        board.apply(AgentStarted(attempt=2, pid=2, create_time=0.0, argv=("claude",)))
        board.apply(stats(2, live))
        assert board.usage == first + live
        assert board.usage.cost_usd == 0.5 and board.session_id == "s-1"

    def test_a_run_without_a_stream_has_no_usage(self) -> None:
        from test_tui_snapshots import contract

        board = RunBoard(contract=contract(), run_id="r")
        board.apply(AgentStarted(attempt=1, pid=1, create_time=0.0, argv=("aider",)))
        board.apply(stats(1, None))
        board.apply(AgentExited(attempt=1, exit_code=0, signal=None))
        assert board.usage is None

    def test_a_real_run_and_its_ledger_agree(
        self, repo: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Claude hits its usage limit, then succeeds: the live board and a board seeded from
        the ledger (a resumed paella) both say what was spent over both attempts."""
        run = claude_run(repo, monkeypatch, "usage_limit,success")
        assert run.go() == 0
        live = RunBoard(contract=run.contract, run_id=run.run.run_id)
        for event in run.events:
            live.apply(event)
        total = Usage(turns=5, input_tokens=1210, output_tokens=340, cost_usd=0.0421)
        assert live.usage == total and live.session_id == CLAUDE_SID

        seeded = RunBoard(contract=run.contract, run_id=run.run.run_id)
        seeded.seed(RunView.load(run.run))
        assert seeded.usage == total and seeded.session_id == CLAUDE_SID


def stats(attempt: int, usage: Usage | None) -> AgentStats:
    """A resource sample of ``attempt`` with what its stream reported so far."""
    return AgentStats(
        attempt=attempt,
        cpu_percent=5.0,
        rss_bytes=1 << 20,
        descendants=0,
        uptime_s=1.0,
        usage=usage,
    )
