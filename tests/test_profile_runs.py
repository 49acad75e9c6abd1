"""Agent profiles in a real run: the run loop drives each agent's scripted stand-in.

What a user of a profile relies on, end to end: the JSON stream is shown readably while
``agent.log`` keeps its bytes; the agent's session id is captured, recorded, and used by the
resume (or the newest-session form when none was seen); a false success is judged as the
failure it is and retried at the reset time the agent printed; the agent's turns, tokens and
cost are summed over attempts in the ledger, ``status --json`` and the handoff.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import tomli_w
from conftest import run_paella_in_process

from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.decisions import policy
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    DriftDetected,
    Event,
    Notice,
    RecoveryNeeded,
    RetryScheduled,
    RunDone,
    Usage,
)
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.workspace import Workspace


@pytest.fixture
def paella() -> Callable[..., Any]:
    """``paella log``, ``status`` and ``check`` read what a run left: ``cli.main`` in the test
    process (``run_paella_in_process``: the same parser, output and exit status, without the
    interpreter's start-up, 0.2 s of CPU a command)."""
    return run_paella_in_process


AGENTS = Path(__file__).parent / "profile_agents"
CLAUDE_SID = "4f1c2b7e-claude-session"
OPENCODE_SID = "ses_6b2f0c1a9ffeOPENCODE"
E = TypeVar("E", bound=Event)

CLAUDE_STREAM = ["--output-format", "stream-json", "--verbose"]


class ProfileRun:
    """A repository whose contract runs one stand-in under a profile; the run's events."""

    def __init__(
        self,
        repo: Path,
        monkeypatch: pytest.MonkeyPatch,
        *,
        profile: str,
        scenarios: str,
        agent: list[str],
        resume: list[str] | None,
        on_death: str = "continue",
        max_attempts: int = 3,
    ) -> None:
        self.repo = repo
        self.argv_file = repo.parent / "argv.jsonl"
        stand_in = [sys.executable, str(AGENTS / f"{profile}.py")]
        monkeypatch.setenv("PROFILE_SCENARIO", scenarios)
        monkeypatch.setenv("PROFILE_ARGV_FILE", str(self.argv_file))
        monkeypatch.setenv("PROFILE_WRITE", str(repo / "done.txt"))
        self.reset_epoch = int(time.time()) + 3600
        monkeypatch.setenv("PROFILE_RESET_EPOCH", str(self.reset_epoch))
        run_table: dict[str, Any] = {
            "prompt": "make done.txt",
            "profile": profile,
            "agent": [*stand_in, *agent],
        }
        if resume is not None:
            run_table["resume"] = [*stand_in, *resume]
        contract = {
            "run": run_table,
            "watch": {"settle": "0.2s"},
            "retry": {"backoff": "1s", "max_attempts": max_attempts},
            "gate": [{"name": "done", "cmd": "test -f done.txt", "timeout": "10s"}],
            "episode": [{"name": "done", "goal": "done.txt exists", "gates": ["done"]}],
        }
        (repo / "paella.toml").write_text(tomli_w.dumps(contract))
        self.contract = load_contract(repo / "paella.toml")
        self.run: Run = RunStore(Workspace.find(repo)).create(self.contract, manual=False)
        self.events: list[Event] = []
        self.loop = RunLoop(
            run=self.run, contract=self.contract, emit=self._emit, decide=policy(on_death)
        )

    def _emit(self, event: Event, _state: object) -> None:
        self.events.append(event)
        if isinstance(event, RetryScheduled):
            # The wait itself is the retry tests' business: here its length is checked, and
            # the countdown is skipped the way `R` skips it.
            asyncio.get_running_loop().call_soon(self.loop.skip_wait)

    def go(self) -> int:
        return asyncio.run(asyncio.wait_for(self.loop.run(), 60))

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def argvs(self) -> list[list[str]]:
        return [json.loads(line) for line in self.argv_file.read_text().splitlines()]

    def shown(self) -> list[str]:
        return self.loop.tail.plain_lines()


def claude_run(
    repo: Path, monkeypatch: pytest.MonkeyPatch, scenarios: str, **kw: Any
) -> ProfileRun:
    return ProfileRun(
        repo,
        monkeypatch,
        profile="claude",
        scenarios=scenarios,
        agent=kw.pop(
            "agent", ["-p", "{prompt}", "--permission-mode", "acceptEdits", *CLAUDE_STREAM]
        ),
        resume=kw.pop("resume", ["-r", "{session_id}", "-p", "{handoff}", *CLAUDE_STREAM]),
        **kw,
    )


def test_claude_usage_limit_waits_for_its_reset_and_resumes_its_session(
    repo: Path, monkeypatch: pytest.MonkeyPatch, paella: Callable[..., Any]
) -> None:
    run = claude_run(repo, monkeypatch, "usage_limit,success")
    assert run.go() == 0
    assert run.of(RunDone)

    # The exit 0 with `is_error: true` was a false success, judged as the limit it was.
    first, second = run.of(AgentExited)
    assert first.exit_code == 0 and first.false_success is not None
    assert "usage limit reached" in first.false_success
    assert first.describe() == first.false_success
    assert first.usage == Usage(turns=1, input_tokens=10, output_tokens=0, cost_usd=0.0)
    assert second.false_success is None
    assert not [d for d in run.of(DriftDetected) if d.drift == "claimed-done"]

    # The wait is until the reset the agent printed (plus a small margin), not the 1 s backoff.
    (retry,) = run.of(RetryScheduled)
    assert "limit resets" in retry.reason
    assert retry.resume_at == pytest.approx(run.reset_epoch + 5, abs=2)

    # The session id was captured once and the resume continued that very session.
    assert [s.session_id for s in run.of(AgentSession)] == [CLAUDE_SID]
    start, resumed = run.argvs()
    assert "-r" not in start
    assert resumed[resumed.index("-r") + 1] == CLAUDE_SID

    # Readable in the log view; raw in agent.log.
    shown = run.shown()
    assert "✎ Edit src/a.py" in shown and "$ pytest -q" in shown
    assert not [line for line in shown if line.lstrip().startswith('{"type"')]
    raw = (run.run.dir / "agent.log").read_bytes()
    assert b'"type": "system"' in raw and b'"session_id": "4f1c2b7e-claude-session"' in raw

    # Ledger, status and handoff: summed over both attempts.
    view = RunView.load(run.run)
    assert view.session_id() == CLAUDE_SID
    total = Usage(turns=5, input_tokens=1210, output_tokens=340, cost_usd=0.0421)
    assert view.usage() == total
    status = view.to_json()["agent"]
    assert status["session_id"] == CLAUDE_SID
    assert status["usage"]["turns"] == 5 and status["usage"]["input_tokens"] == 1210
    assert run.loop.usage == total
    exited = view.of_kind("agent-exited")
    assert exited[0]["false_success"] == first.false_success
    # The handoff given to attempt 2 said how attempt 1 ended, and what it had used.
    handoff = (run.run.dir / "handoff.md").read_text()
    assert CLAUDE_SID in handoff and "usage limit reached" in handoff
    assert "The agent reported, over every attempt: 1 turn, 10 tokens" in handoff
    # `paella log` tells it in words.
    log = paella(repo, "log").stdout
    assert f"agent session {CLAUDE_SID} (attempt 1)" in log
    assert "agent attempt 1 ended: exit 0, but Claude Code reported an error: Claude AI" in log
    assert "agent attempt 2 ended: exit 0; it reported 4 turns, 1.5k tokens" in log


def test_paella_status_says_what_the_agent_reported(
    repo: Path, monkeypatch: pytest.MonkeyPatch, paella: Callable[..., Any]
) -> None:
    run = ProfileRun(
        repo,
        monkeypatch,
        profile="opencode",
        scenarios="success",
        agent=["run", "--format", "json", "{prompt}"],
        resume=None,
    )
    assert run.go() == 0
    shown = paella(repo, "status")
    assert shown.returncode == 0, shown.stderr
    assert "agent reported: 2 turns, 1.3k tokens (1.2k in, 60 out), $0.01" in shown.stdout
    assert f"agent session: {OPENCODE_SID}" in shown.stdout
    tmux = paella(repo, "status", "--tmux").stdout.strip()
    assert tmux == "paella ✓ done ep 1/1 ✓1 ✗0 $0.01"
    status = json.loads(paella(repo, "status", "--json").stdout)
    assert status["agent"]["usage"] == {
        "turns": 2,
        "input_tokens": 1200,
        "output_tokens": 60,
        "cost_usd": pytest.approx(0.012),
        "cached_input_tokens": 0,
    }


def test_without_a_session_id_the_resume_takes_the_newest_session_here(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = claude_run(repo, monkeypatch, "no_session,success")
    assert run.go() == 0
    _, second = run.argvs()
    assert "-r" not in second and "" not in second
    assert second[:3] == ["-c", "-p", second[2]] and "paella" in second[2].casefold()
    notices = [n.message for n in run.of(Notice)]
    assert any("no session id was seen" in m and "newest session" in m for m in notices)
    # A transient failure before the stream began: retried after the backoff.
    (retry,) = run.of(RetryScheduled)
    assert retry.wait_s == pytest.approx(1.0)


def test_a_session_id_survives_a_restart_of_paella(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One retry allowed: the second rate limit ends the run, as after a long night of limits.
    run = claude_run(repo, monkeypatch, "rate_limit", on_death="stop", max_attempts=1)
    assert run.go() == 1
    assert RunView.load(run.run).session_id() == CLAUDE_SID
    # `paella resume` later: a new loop over the same run, as a new paella process makes.
    monkeypatch.setenv("PROFILE_SCENARIO", "success")
    again = RunLoop(
        run=run.run,
        contract=run.contract,
        emit=lambda event, _state: run.events.append(event),
        decide=policy("stop"),
        resume=True,
    )
    assert again.attempts.session_id == CLAUDE_SID
    assert asyncio.run(asyncio.wait_for(again.run(), 60)) == 0
    resumed = run.argvs()[-1]
    assert resumed[resumed.index("-r") + 1] == CLAUDE_SID
    # Usage adds up across the two paella processes (each rate-limited attempt: 1 turn).
    assert RunView.load(run.run).usage() == Usage(
        turns=6, input_tokens=1200, output_tokens=340, cost_usd=0.0421
    )


def test_with_the_stream_flags_removed_the_log_is_raw(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = claude_run(
        repo, monkeypatch, "success", agent=["-p", "{prompt}"], resume=["-c", "-p", "{handoff}"]
    )
    assert run.go() == 0
    assert any(line.startswith('{"type": "system"') for line in run.shown())
    assert not run.of(AgentSession)
    assert RunView.load(run.run).usage() is None
    assert run.loop.usage is None


def test_gemini_turn_limit_is_named_in_the_recovery(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ProfileRun(
        repo,
        monkeypatch,
        profile="gemini",
        scenarios="turn_limit",
        agent=["-p", "{prompt}", "-o", "stream-json"],
        resume=None,
        on_death="stop",
    )
    assert run.go() == 1
    (exited,) = run.of(AgentExited)
    assert exited.exit_code == 53 and exited.exit_meaning == "turn limit reached"
    (needed,) = run.of(RecoveryNeeded)
    assert needed.facts.ending == "crash"
    assert "exit 53 (turn limit reached)" in needed.facts.how
    handoff = (run.run.dir / "handoff.md").read_text()
    assert "exit 53 (turn limit reached)" in handoff


def test_aider_exit_0_after_a_rate_limit_is_retried_not_claimed_done(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resume = ["--message-file", "{handoff_file}", "--yes-always", "--restore-chat-history"]
    run = ProfileRun(
        repo,
        monkeypatch,
        profile="aider",
        scenarios="rate_limited,success",
        agent=["--message-file", "{prompt_file}", "--yes-always"],
        resume=resume,
    )
    assert run.go() == 0
    first, _ = run.of(AgentExited)
    assert first.exit_code == 0
    assert first.false_success is not None and "rate limited you" in first.false_success
    assert first.usage is None  # aider has no stream
    assert len(run.of(RetryScheduled)) == 1
    assert not run.of(RecoveryNeeded)  # never offered as "claimed done"
    _, resumed = run.argvs()
    assert resumed[-1] == "--restore-chat-history"
    assert Path(resumed[1]).name == "handoff.md"
    # Plain text passes through as it is.
    assert "The API provider has rate limited you. Try again later or check your quotas." in (
        run.shown()
    )


def test_opencode_too_many_requests_resumes_its_session(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ProfileRun(
        repo,
        monkeypatch,
        profile="opencode",
        scenarios="too_many_requests,success",
        agent=["run", "--format", "json", "{prompt}"],
        resume=["run", "--format", "json", "-s", "{session_id}", "{handoff}"],
    )
    assert run.go() == 0
    first, _ = run.of(AgentExited)
    assert first.false_success == "exit 0, but opencode reported an error: Too Many Requests"
    assert "✗ error: Too Many Requests" in run.shown()
    _, resumed = run.argvs()
    assert resumed[resumed.index("-s") + 1] == OPENCODE_SID
    assert RunView.load(run.run).usage() == Usage(
        turns=2, input_tokens=1200, output_tokens=60, cost_usd=0.012
    )


def test_paella_check_says_whether_the_stream_is_decoded(
    repo: Path, paella: Callable[..., Any]
) -> None:
    base = """
[[gate]]
name = "done"
cmd = "test -f done.txt"
[[episode]]
name = "done"
gates = ["done"]
"""
    contract = repo / "paella.toml"
    contract.write_text('[run]\nprompt = "x"\nagent = "claude -p {prompt}"\n' + base)
    checked = paella(repo, "check").stdout
    assert 'hint: set profile = "claude" for its readable stream, session resume' in checked

    contract.write_text(
        '[run]\nprompt = "x"\nprofile = "claude"\nagent = "claude -p {prompt}"\n'
        'resume = "claude -c -p {handoff} --output-format=stream-json --verbose"\n' + base
    )
    checked = paella(repo, "check").stdout
    assert (
        "agent output: raw text, no session id captured: add --output-format stream-json"
        " --verbose to `agent`" in checked
    )
    assert "resume output: decoded (readable log, session id, turns, tokens, cost)" in checked

    contract.write_text('[run]\nprompt = "x"\nprofile = "aider"\n' + base)
    assert "output: plain text (aider has no JSON stream)" in paella(repo, "check").stdout
