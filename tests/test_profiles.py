"""Agent profiles (SPEC 3 `profile`, SPEC 9): commands, streams, session ids, false successes.

Each agent is played by a scripted stand-in (``tests/profile_agents``) that prints the agent's
documented stream in odd-sized pieces; no network, no real agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from paella_tui.supervisor.agent.profiles.commands import (
    DEFAULT_AGENT_COMMANDS,
    DEFAULT_RESUME_COMMANDS,
    PROFILE_NAMES,
)
from paella_tui.supervisor.agent.profiles.registry import PROFILES, Profile, get_profile
from paella_tui.supervisor.agent.profiles.stream import (
    DecodedStats,
    DisplayLine,
    StreamDecoder,
    describe_tool,
)
from paella_tui.supervisor.agent.retry import classify, parse_reset_time
from paella_tui.supervisor.contract.command_line import expand_placeholders
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited

AGENTS = Path(__file__).parent / "profile_agents"
CONTRACT_TRANSIENT = RetryConfig().transient
VALUES = {
    "prompt": "Build the ledger",
    "prompt_file": "/tmp/p/TASK.md",
    "handoff": "Resume: episode 2",
    "handoff_file": "/tmp/p/handoff.md",
    "attempt": "2",
    "run_id": "r1",
    "session_id": "SESSION-42",
}


class Ran:
    """One stand-in run: what it was given, what it printed, decoded, and how it exited."""

    def __init__(
        self, argv: list[str], lines: list[DisplayLine], decoder: StreamDecoder, code: int
    ):
        self.argv = argv
        self.lines = lines
        self.texts = [line.text for line in lines]
        self.stats = decoder.stats
        self.exit_code = code
        self.tail = tuple(self.texts[-50:])


def run_agent(profile: Profile, scenario: str, tmp_path: Path, *, resume: bool = False) -> Ran:
    """Run the profile's stand-in with the profile's argv, decoding its output in 7-byte feeds."""
    argv = profile.argv(VALUES, resume=resume)
    argv_file = tmp_path / f"{profile.name}-{scenario}.argv"
    env = {**os.environ, "PROFILE_SCENARIO": scenario, "PROFILE_ARGV_FILE": str(argv_file)}
    proc = subprocess.run(
        [sys.executable, str(AGENTS / f"{profile.name}.py"), *argv[1:]],
        capture_output=True,
        env=env,
        timeout=20,
        check=False,
    )
    decoder = profile.new_decoder()
    lines: list[DisplayLine] = []
    for start in range(0, len(proc.stdout), 7):
        lines.extend(decoder.feed(proc.stdout[start : start + 7]))
    lines.extend(decoder.finish())
    given = json.loads(argv_file.read_text().splitlines()[-1])
    return Ran(given, lines, decoder, proc.returncode)


def exited(profile: Profile, ran: Ran) -> AgentExited:
    """The AgentExited the run loop makes: with the profile's false-success verdict."""
    return AgentExited(
        attempt=1,
        exit_code=ran.exit_code,
        signal=None,
        tail=ran.tail,
        false_success=profile.false_success(ran.tail, ran.exit_code, ran.stats),
        exit_meaning=profile.exit_meaning(ran.exit_code),
    )


def ending(
    profile: Profile,
    ran: Ran,
    *,
    all_gates_green: bool = False,
    transient: tuple[str, ...] = CONTRACT_TRANSIENT,
) -> tuple[str, str | None]:
    """How the run loop names the ending, and the false-success reason, if any."""
    event = exited(profile, ran)
    named = classify(
        event, all_gates_green=all_gates_green, transient=profile.transient_patterns(transient)
    )
    return named, event.false_success


# --- the registry and the commands ----------------------------------------------------------


def test_every_contract_profile_has_a_profile() -> None:
    assert set(PROFILES) == set(PROFILE_NAMES)
    assert get_profile("claude") is PROFILES["claude"]
    assert get_profile(None) is None
    assert get_profile("nope") is None


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_commands_are_the_contracts(name: str) -> None:
    profile = PROFILES[name]
    assert profile.start == DEFAULT_AGENT_COMMANDS[name]
    assert profile.resume == DEFAULT_RESUME_COMMANDS[name]
    assert profile.argv(VALUES) == expand_placeholders(profile.start, VALUES)
    assert profile.argv(VALUES, resume=True) == expand_placeholders(profile.resume, VALUES)
    # The profile's own commands ask for its stream, where it has one.
    assert profile.stream_on(profile.start) == (profile.decoder is not None)
    assert profile.stream_on(profile.resume) == (profile.decoder is not None)


def test_the_commands_carry_the_stream_flags() -> None:
    assert PROFILES["claude"].argv(VALUES) == (
        "claude", "-p", "Build the ledger", "--permission-mode", "acceptEdits",
        "--output-format", "stream-json", "--verbose",
    )  # fmt: skip
    assert PROFILES["claude"].argv(VALUES, resume=True) == (
        "claude", "-r", "SESSION-42", "-p", "Resume: episode 2", "--permission-mode",
        "acceptEdits", "--output-format", "stream-json", "--verbose",
    )  # fmt: skip
    assert PROFILES["codex"].argv(VALUES) == (
        "codex", "exec", "--json", "--sandbox", "workspace-write", "Build the ledger",
    )  # fmt: skip
    # Options of `exec` go before its `resume` subcommand.
    assert PROFILES["codex"].argv(VALUES, resume=True) == (
        "codex", "exec", "--json", "-c", 'sandbox_mode="workspace-write"', "resume",
            "SESSION-42",
        "Resume: episode 2",
    )  # fmt: skip
    assert PROFILES["gemini"].argv(VALUES, resume=True) == (
        "gemini", "-r", "SESSION-42", "-p", "Resume: episode 2", "--approval-mode", "auto_edit",
        "-o", "stream-json",
    )  # fmt: skip
    assert PROFILES["opencode"].argv(VALUES, resume=True) == (
        "opencode", "run", "--auto", "--format", "json", "-s", "SESSION-42", "Resume: episode 2",
    )  # fmt: skip
    assert PROFILES["aider"].argv(VALUES, resume=True) == (
        "aider", "--message-file", "/tmp/p/handoff.md", "--yes-always", "--no-stream",
        "--no-pretty", "--restore-chat-history",
    )  # fmt: skip


def test_stream_on_reads_the_command_in_use() -> None:
    claude, codex, gemini = PROFILES["claude"], PROFILES["codex"], PROFILES["gemini"]
    assert not claude.stream_on(("claude", "-p", "{prompt}"))
    assert not claude.stream_on(("claude", "-p", "{prompt}", "--output-format", "json"))
    assert claude.stream_on(("claude", "--output-format=stream-json", "-p", "{prompt}"))
    assert codex.stream_on(("codex", "exec", "--json", "{prompt}"))
    assert not codex.stream_on(("codex", "exec", "{prompt}"))
    assert gemini.stream_on(("gemini", "--output-format", "stream-json", "-p", "{prompt}"))
    assert not PROFILES["aider"].stream_on(DEFAULT_AGENT_COMMANDS["aider"])


def test_a_resume_without_a_session_id_takes_the_newest_session_here() -> None:
    newest = {
        name: PROFILES[name].resume_without_session(DEFAULT_RESUME_COMMANDS[name])
        for name in PROFILE_NAMES
    }
    assert newest["claude"] == (
        "claude", "-c", "-p", "{handoff}", "--permission-mode", "acceptEdits",
        "--output-format", "stream-json", "--verbose",
    )  # fmt: skip
    assert newest["codex"] == (
        "codex", "exec", "--json", "-c", 'sandbox_mode="workspace-write"', "resume",
            "--last",
        "{handoff}",
    )  # fmt: skip
    assert newest["gemini"] is not None and newest["gemini"][:3] == ("gemini", "-r", "latest")
    assert newest["opencode"] == (
        "opencode", "run", "--auto", "--format", "json", "-c", "{handoff}",
    )  # fmt: skip
    assert newest["aider"] is None  # no session id: its resume never names one
    # A user's own resume keeps its other flags; the long forms are understood too.
    assert PROFILES["claude"].resume_without_session(
        ("claude", "--resume", "{session_id}", "--model", "opus", "-p", "{handoff}")
    ) == ("claude", "--continue", "--model", "opus", "-p", "{handoff}")
    # A session id used some other way cannot be dropped safely.
    assert PROFILES["claude"].resume_without_session(("claude", "--x={session_id}")) is None


def test_transient_patterns_extend_the_contracts() -> None:
    merged = PROFILES["aider"].transient_patterns(CONTRACT_TRANSIENT)
    assert merged[: len(CONTRACT_TRANSIENT)] == CONTRACT_TRANSIENT
    assert "rate limited you" in merged
    assert PROFILES["claude"].transient_patterns(["OVERLOADED", "overloaded_error"]) == (
        "OVERLOADED",
        "overloaded_error",
        "rate_limit_error",
        "limit reached",
        "hit your limit",
    )


def test_gemini_exit_codes_are_named() -> None:
    gemini = PROFILES["gemini"]
    assert gemini.exit_meaning(41) == "authentication failed"
    assert gemini.exit_meaning(42) == "invalid input"
    assert gemini.exit_meaning(52) == "configuration error"
    assert gemini.exit_meaning(53) == "turn limit reached"
    assert gemini.exit_meaning(1) is None
    assert gemini.exit_meaning(None) is None
    assert PROFILES["claude"].exit_meaning(53) is None


# --- each agent's stream --------------------------------------------------------------------


def test_claude_success(tmp_path: Path) -> None:
    claude = PROFILES["claude"]
    ran = run_agent(claude, "success", tmp_path)
    assert ran.argv == list(claude.argv(VALUES)[1:])
    assert ran.texts == [
        "I'll read the ledger first — ok.",
        "● Read src/a.py",
        "✎ Edit src/a.py",
        "$ pytest -q",
        "not json: a plain line",
        "{broken json",
        "All tests pass.",
        "✓ finished after 4 turns",
    ]
    assert [line.structured for line in ran.lines][4:6] == [False, False]
    stats = ran.stats
    assert stats.session_id == "4f1c2b7e-claude-session"
    assert (stats.turns, stats.input_tokens, stats.output_tokens) == (4, 1200, 340)
    assert stats.cost_usd == pytest.approx(0.0421)
    assert not stats.is_error
    assert claude.false_success(ran.tail, 0, stats) is None
    assert ending(claude, ran) == ("claimed-done", None)


def test_claude_usage_limit_with_exit_0_is_a_false_success(tmp_path: Path) -> None:
    claude = PROFILES["claude"]
    ran = run_agent(claude, "usage_limit", tmp_path, resume=True)
    assert ran.argv[ran.argv.index("-r") + 1] == "SESSION-42"
    assert ran.exit_code == 0
    assert ran.stats.is_error
    assert ran.stats.last_error == "Claude AI usage limit reached|1767225600"  # the default
    assert "✗ error: Claude AI usage limit reached|1767225600" in ran.texts
    reason = claude.false_success(ran.tail, 0, ran.stats)
    assert reason is not None and "usage limit reached" in reason
    assert ending(claude, ran) == ("transient", reason)
    # The reset time it printed is read by the retry's parser, unchanged.
    now = datetime(2025, 12, 31, 20, 0, tzinfo=UTC)
    evidence = exited(claude, ran).evidence()
    assert parse_reset_time("\n".join(evidence), now=now) == datetime(2026, 1, 1, tzinfo=UTC)
    # Green gates still mean done: done is what the gates say.
    assert ending(claude, ran, all_gates_green=True) == ("done", reason)
    # Said so, not "exit 0".
    assert exited(claude, ran).describe() == reason


@pytest.mark.parametrize("scenario", ["rate_limit", "overloaded"])
def test_claude_api_errors_are_transient(tmp_path: Path, scenario: str) -> None:
    claude = PROFILES["claude"]
    ran = run_agent(claude, scenario, tmp_path)
    assert ran.exit_code == 1
    assert ran.stats.is_error and ran.stats.last_error is not None
    assert ran.texts[-1].startswith("✗ error: API Error: ")
    assert ending(claude, ran) == ("transient", None)
    # The profile's own patterns suffice even when the contract lists none.
    assert ending(claude, ran, transient=()) == ("transient", None)


def test_codex_stream(tmp_path: Path) -> None:
    codex = PROFILES["codex"]
    ran = run_agent(codex, "success", tmp_path)
    assert ran.argv == ["exec", "--json", "--sandbox", "workspace-write", "Build the ledger"]
    assert ran.texts == [
        "$ pytest -q",
        "✗ exit 1: pytest -q",
        "✎ Edit src/a.py",
        "✎ Add src/b.py",
        "Fixed the ledger.",
        "Tests pass now.",
    ]
    stats = ran.stats
    assert stats.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    # Codex counts cached input inside input_tokens: paella shows the two apart.
    assert (stats.turns, stats.input_tokens, stats.output_tokens) == (2, 415, 130)
    assert stats.cached_input_tokens == 24863 - 415
    assert stats.cost_usd is None and not stats.is_error
    assert codex.false_success(ran.tail, 0, stats) is None


def test_codex_usage_limit(tmp_path: Path) -> None:
    codex = PROFILES["codex"]
    ran = run_agent(codex, "usage_limit", tmp_path, resume=True)
    assert ran.argv[ran.argv.index("resume") :] == ["resume", "SESSION-42", "Resume: episode 2"]
    assert ran.exit_code == 1
    assert ran.stats.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert ran.stats.is_error
    # Said once, though Codex reports it as `error` and again as `turn.failed`.
    assert ran.texts == ["✗ error: You've hit your usage limit. Try again in 2 hours 5 minutes."]
    assert ending(codex, ran) == ("transient", None)
    # Had it exited 0, the failed turn would still show.
    assert codex.false_success(ran.tail, 0, ran.stats) is not None


def test_gemini_stream_joins_streamed_text(tmp_path: Path) -> None:
    gemini = PROFILES["gemini"]
    ran = run_agent(gemini, "success", tmp_path)
    assert ran.texts == [
        "Reading the code.",
        "Then I edit it.",
        "● Read src/a.py",
        "✎ Edit src/a.py",
        "$ pytest -q",
        "✗ tool error: exit code 1",
        "Done.",
    ]
    stats = ran.stats
    assert stats.session_id == "c2a1e5d0-gemini-session"
    assert (stats.turns, stats.input_tokens, stats.output_tokens) == (2, 800, 100)
    assert not stats.is_error
    assert gemini.false_success(ran.tail, 0, stats) is None


def test_gemini_quota_and_exit_codes(tmp_path: Path) -> None:
    gemini = PROFILES["gemini"]
    ran = run_agent(gemini, "quota", tmp_path)
    assert ran.exit_code == 1
    assert ran.stats.is_error and ran.stats.last_error == "RESOURCE_EXHAUSTED"
    assert ran.texts[0].startswith("✗ error: [API Error: 429 RESOURCE_EXHAUSTED")
    assert ending(gemini, ran) == ("transient", None)
    turn_limit = run_agent(gemini, "turn_limit", tmp_path)
    assert turn_limit.exit_code == 53
    assert gemini.exit_meaning(turn_limit.exit_code) == "turn limit reached"
    assert turn_limit.stats.session_id == "c2a1e5d0-gemini-session"
    assert ending(gemini, turn_limit) == ("crash", None)
    assert exited(gemini, turn_limit).describe() == "exit 53 (turn limit reached)"


def test_aider_has_no_stream(tmp_path: Path) -> None:
    aider = PROFILES["aider"]
    assert aider.decoder is None
    ran = run_agent(aider, "success", tmp_path, resume=True)
    assert ran.argv[:2] == ["--message-file", "/tmp/p/handoff.md"]
    assert ran.texts[-2:] == ["Applied edit to src/a.py", "Commit 1a2b3c4 fix: ledger"]
    assert not any(line.structured for line in ran.lines)
    assert ran.stats.usage() == DecodedStats().usage()
    assert ran.stats.session_id is None
    assert aider.false_success(ran.tail, 0, ran.stats) is None
    assert ending(aider, ran) == ("claimed-done", None)


@pytest.mark.parametrize(
    ("scenario", "said"),
    [("rate_limited", "rate limited you"), ("overloaded", "servers are down or overloaded")],
)
def test_aider_api_failure_with_exit_0_is_a_false_success(
    tmp_path: Path, scenario: str, said: str
) -> None:
    aider = PROFILES["aider"]
    ran = run_agent(aider, scenario, tmp_path)
    assert ran.exit_code == 0
    reason = aider.false_success(ran.tail, 0, ran.stats)
    assert reason is not None and said in reason
    assert ending(aider, ran) == ("transient", reason)
    assert aider.false_success(ran.tail, 1, ran.stats) is None


def test_aider_litellm_rate_limit_error() -> None:
    reason = PROFILES["aider"].false_success(["litellm.RateLimitError: quota"], 0, DecodedStats())
    assert reason == "exit 0, but aider's API call failed: litellm.RateLimitError: quota"


def test_opencode_stream(tmp_path: Path) -> None:
    opencode = PROFILES["opencode"]
    ran = run_agent(opencode, "success", tmp_path)
    assert ran.argv == ["run", "--auto", "--format", "json", "Build the ledger"]
    assert ran.texts == [
        "Let me look at the ledger.",
        "● Read src/a.py",
        "✎ Edit src/a.py",
        "$ pytest -q",
        "Done.",
    ]
    stats = ran.stats
    assert stats.session_id == "ses_6b2f0c1a9ffeOPENCODE"
    assert (stats.turns, stats.input_tokens, stats.output_tokens) == (2, 1200, 60)
    assert stats.cost_usd == pytest.approx(0.012)


def test_opencode_limits(tmp_path: Path) -> None:
    opencode = PROFILES["opencode"]
    ran = run_agent(opencode, "too_many_requests", tmp_path)
    assert ran.exit_code == 0
    assert ran.texts == ["✗ error: Too Many Requests"]
    reason = opencode.false_success(ran.tail, 0, ran.stats)
    assert reason == "exit 0, but opencode reported an error: Too Many Requests"
    assert ending(opencode, ran) == ("transient", reason)
    overloaded = run_agent(opencode, "overloaded", tmp_path)
    assert overloaded.stats.session_id == "ses_6b2f0c1a9ffeOPENCODE"
    assert ending(opencode, overloaded) == ("transient", None)


# --- the decoder itself ---------------------------------------------------------------------


def test_decoder_buffers_partial_lines_and_utf8() -> None:
    decoder = PROFILES["claude"].new_decoder()
    data = json.dumps(
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "héllo ✓"}]}},
        ensure_ascii=False,
    ).encode()
    assert decoder.feed(data[:20]) == []
    assert decoder.feed(data[20:] + b"\nplain\r\npart") == [
        DisplayLine("héllo ✓", structured=True),
        DisplayLine("plain", structured=False),
    ]
    assert decoder.finish() == [DisplayLine("part", structured=False)]
    assert decoder.finish() == []


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "opencode"])
def test_malformed_records_never_raise(name: str) -> None:
    decoder = PROFILES[name].new_decoder()
    garbage = [
        b"{",
        b"[1, 2]",
        b'"just a string"',
        b"{}",
        b'{"type": null}',
        b'{"type": "assistant", "message": [1]}',
        b'{"type": "assistant", "message": {"content": [null, 3, {"type": "tool_use"}]}}',
        b'{"type": "result", "usage": "x", "num_turns": "many", "total_cost_usd": true}',
        b'{"type": "item.completed", "item": {"type": "file_change", "changes": [3]}}',
        b'{"type": "turn.failed", "error": null}',
        b'{"type": "message", "role": "assistant", "content": 5, "delta": true}',
        b'{"type": "tool_use", "part": {"state": "x"}}',
        b'{"type": "error", "error": {"data": 1}}',
        b"\xff\xfe not utf-8",
        b"[" * 100_000,
        b"{" * 100_000,
    ]
    lines = decoder.feed(b"\n".join(garbage) + b"\n")
    lines += decoder.finish()
    assert all(isinstance(line.text, str) for line in lines)
    assert decoder.stats.records >= 1


def test_describe_tool() -> None:
    assert describe_tool("Write", {"file_path": "a.txt"}) == "✎ Write a.txt"
    assert describe_tool("Grep", {"pattern": "TODO"}) == "● Grep TODO"
    assert describe_tool("mcp__fs__read_file", {"path": "b"}) == "● Read b"
    assert describe_tool("exec", {"cmd": ["ls", "-la"]}) == "$ ls -la"
    assert describe_tool(None, None) == "● tool"


def test_a_gemini_error_event_followed_by_a_successful_result_is_no_false_success() -> None:
    gemini = PROFILES["gemini"]
    decoder = gemini.new_decoder()
    records = [
        {"type": "init", "session_id": "s1"},
        {"type": "error", "severity": "error", "message": "API Error: 503, retrying"},
        {"type": "message", "role": "assistant", "content": "Done."},
        {"type": "result", "status": "success", "stats": {"input_tokens": 5, "output_tokens": 2}},
    ]
    lines = decoder.feed("".join(json.dumps(r) + "\n" for r in records).encode())
    assert [line.text for line in lines] == ["✗ error: API Error: 503, retrying", "Done."]
    assert gemini.false_success([], 0, decoder.stats) is None
    # The same error with a failed result is one.
    failed = gemini.new_decoder()
    failed.feed(
        "".join(
            json.dumps(r) + "\n" for r in [*records[:2], {"type": "result", "status": "error"}]
        ).encode()
    )
    assert gemini.false_success([], 0, failed.stats) is not None
