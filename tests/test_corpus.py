"""Real agent output (tests/corpus/): each sample read by its profile the way the run loop reads it.

Every sample is kept verbatim with its provenance and expected reading in a sidecar
(`<name>.toml`, see tests/corpus/README.md). The bytes go through the profile's decoder in small
pieces (lines and UTF-8 characters split across reads, as from a pty); then the ending is judged
from what the decoder kept (the agent's signals, or the tail for a plain-text agent), the exit
code the sidecar names, and the profile's false-success rule; the reset time comes from the
same evidence. Checked: session id, usage (fresh input, cached input, output, cost), readable
lines (no raw records, no decoding garbage), the ending, the matched words, the reset instant.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import run_paella_in_process

from paella_tui.supervisor.agent.profiles.registry import PROFILES
from paella_tui.supervisor.agent.profiles.stream import DecodedStats
from paella_tui.supervisor.agent.retry import classify, read_failure, retry_wait
from paella_tui.supervisor.contract.model import RetryConfig
from paella_tui.supervisor.run.events import AgentExited

CORPUS = Path(__file__).parent / "corpus"
SAMPLES = sorted(CORPUS.glob("*/*.toml"))
PIECE = 7
ENDINGS = {"claimed-done", "false-success", "transient", "permanent", "crash"}


@dataclass(frozen=True)
class Reading:
    """What paella made of one sample."""

    shown: list[str]
    stats: DecodedStats
    exited: AgentExited
    ending: str


def wire_bytes(raw: str, form: str) -> bytes:
    """The bytes the agent printed. `pretty-json`: a record a wrapper pretty-printed goes back to
    one line (what the CLI wrote), its content unchanged."""
    if form == "pretty-json":
        decoder, text, out, at = json.JSONDecoder(), raw, [], 0
        while at < len(text):
            if text[at].isspace():
                at += 1
                continue
            record, at = decoder.raw_decode(text, at)
            out.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        return ("\n".join(out) + "\n").encode()
    return raw.encode()


def read_sample(agent: str, raw: bytes, exit_code: int) -> Reading:
    """Feed `raw` through the agent's profile as the run loop does, and judge the ending."""
    profile = PROFILES[agent]
    decoder = profile.new_decoder()
    lines = []
    for start in range(0, len(raw), PIECE):
        lines.extend(decoder.feed(raw[start : start + PIECE]))
    lines.extend(decoder.finish())
    shown = [line.text for line in lines]
    tail = tuple(shown[-40:])
    stats = decoder.stats
    streamed = profile.decoder is not None
    false_success = profile.false_success(tail, exit_code, stats)
    exited = AgentExited(
        attempt=1,
        exit_code=exit_code,
        signal=None,
        tail=tail,
        false_success=false_success,
        signals=tuple(stats.notes) if streamed else None,
    )
    transient = profile.transient_patterns(RetryConfig().transient)
    ending: str = classify(exited, all_gates_green=False, transient=transient)
    if ending == "crash" and false_success:
        ending = "false-success"
    return Reading(shown, stats, exited, ending)


def _load(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


@pytest.mark.parametrize("sidecar", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_sample(sidecar: Path) -> None:
    meta = _load(sidecar)
    expect = meta["expect"]
    agent = sidecar.parent.name
    raw = wire_bytes((sidecar.with_suffix(".out")).read_text(), meta.get("form", "lines"))
    got = read_sample(agent, raw, meta["exit_code"])

    assert expect["ending"] in ENDINGS
    assert got.ending == expect["ending"], got.exited.evidence()[-8:]
    assert got.stats.session_id == expect.get("session_id")
    for key in ("input_tokens", "cached_input_tokens", "output_tokens"):
        if key in expect:
            assert getattr(got.stats, key) == expect[key], key
    if "cost_usd" in expect:
        assert got.stats.cost_usd == pytest.approx(expect["cost_usd"])
    assert bool(got.exited.false_success) == expect.get("false_success", False)

    reading = read_failure(got.exited.evidence(), PROFILES[agent].transient_patterns(()))
    if "permanent" in expect:
        assert reading.permanent is not None and reading.permanent.kind == expect["permanent"]
    if "matched" in expect:
        assert reading.transient is not None and reading.transient.pattern == expect["matched"]
        assert reading.transient.line in got.exited.evidence()

    # Readable: the records became lines; nothing raw, nothing garbled.
    text = "\n".join(got.shown)
    assert "\ufffd" not in text
    if PROFILES[agent].decoder is not None and got.stats.records:
        assert not any(line.lstrip().startswith('{"type"') for line in got.shown)
    for needle in expect.get("shown", []):
        assert any(needle in line for line in got.shown), needle
    for needle in expect.get("not_shown", []):
        assert not any(needle in line for line in got.shown), needle

    now = datetime.fromisoformat(meta["now"]).astimezone(UTC)
    wait = retry_wait(
        1,
        RetryConfig(),
        got.exited.evidence(),
        now=now,
        local_tz=UTC,
        own_backoff=PROFILES[agent].own_backoff,
    )
    if "reset" in expect:
        expected = datetime.fromisoformat(expect["reset"]).astimezone(UTC)
        assert wait.until is not None, "no reset read"
        assert abs((wait.until - expected).total_seconds()) < 1
    elif expect["ending"] == "transient":
        assert wait.until is None, wait.reason


def test_the_corpus_is_large_and_varied_enough() -> None:
    metas = [_load(p) for p in SAMPLES]
    assert all(p.with_suffix(".out").exists() for p in SAMPLES)
    assert all(m.get("source") and m.get("cli") for m in metas)
    assert {p.parent.name for p in SAMPLES} == set(PROFILES)
    failures = [m for m in metas if m["expect"]["ending"] != "claimed-done"]
    assert len(failures) >= 15
    readme = (CORPUS / "README.md").read_text()
    for path in SAMPLES:
        assert f"{path.parent.name}/{path.stem}" in readme


# --- end to end: a recorded sample through the real run loop -------------------------------


def _replay_run(
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    sample: str,
    profile: str,
    agent: list[str],
    resume: list[str] | None = None,
) -> tuple[int, list[Any], Any]:
    import asyncio
    import sys

    import tomli_w

    from paella_tui.supervisor.contract.loader import load_contract
    from paella_tui.supervisor.run.decisions import policy
    from paella_tui.supervisor.run.run_loop import RunLoop
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    samples = sample.split(",")
    exits = [str(_load(CORPUS / f"{name}.toml")["exit_code"]) for name in samples]
    monkeypatch.setenv("CORPUS_SAMPLE", ",".join(str(CORPUS / f"{n}.out") for n in samples))
    monkeypatch.setenv("CORPUS_EXIT", ",".join(exits))
    monkeypatch.setenv("CORPUS_WRITE", str(repo / "done.txt"))
    monkeypatch.setenv("CORPUS_WRITE_ON", str(len(samples)) if len(samples) > 1 else "0")
    monkeypatch.setenv("CORPUS_ARGV_FILE", str(repo.parent / "argv.jsonl"))
    replay = [sys.executable, str(Path(__file__).parent / "profile_agents" / "corpus_replay.py")]
    run_table: dict[str, Any] = {
        "prompt": "make done.txt",
        "profile": profile,
        "agent": [*replay, *agent],
    }
    if resume is not None:
        run_table["resume"] = [*replay, *resume]
    contract = {
        "run": run_table,
        "watch": {"settle": "0.2s"},
        "retry": {"backoff": "1s", "max_attempts": 3, "max_wait": "1s"},
        "gate": [{"name": "done", "cmd": "test -f done.txt", "timeout": "10s"}],
        "episode": [{"name": "done", "goal": "done.txt exists", "gates": ["done"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    loaded = load_contract(repo / "paella.toml")
    run = RunStore(Workspace.find(repo)).create(loaded, manual=False)
    events: list[Any] = []
    loop = RunLoop(
        run=run, contract=loaded, emit=lambda e, _s: events.append(e), decide=policy("continue")
    )
    code = asyncio.run(asyncio.wait_for(loop.run(), 60))
    return code, events, run


def test_an_expired_codex_login_stops_the_run_without_a_retry(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paella_tui.supervisor.run.events import AgentStarted, RetryScheduled, RunStopped

    code, events, run = _replay_run(
        repo, monkeypatch, "codex/hive-mind-715-expired-login", "codex", ["exec", "--json"]
    )
    assert code == 1
    assert len([e for e in events if isinstance(e, AgentStarted)]) == 1
    assert not [e for e in events if isinstance(e, RetryScheduled)]
    (stopped,) = [e for e in events if isinstance(e, RunStopped)]
    assert stopped.reason.startswith("permanent failure (auth), not retried")
    assert "401 Unauthorized" in stopped.reason and "log the agent in again" in stopped.reason
    ledger = list(run.ledger.read().of_kind("run-stopped"))
    assert ledger[-1]["reason"] == stopped.reason
    handoff = (run.dir / "handoff.md").read_text()
    assert "permanent failure (auth)" in handoff and "401 Unauthorized" in handoff


def test_a_claude_limit_beyond_max_wait_stops_and_says_when_to_resume(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paella_tui.supervisor.run.events import AgentExited, RetryScheduled, RunStopped
    from paella_tui.supervisor.run.run_view import RunView

    code, events, run = _replay_run(
        repo,
        monkeypatch,
        "claude/issue-62815-limit-text",
        "claude",
        ["-p", "{prompt}", "--output-format", "stream-json", "--verbose"],
    )
    assert code == 1
    (exited,) = [e for e in events if isinstance(e, AgentExited)]
    assert exited.exit_code == 1
    assert not [e for e in events if isinstance(e, RetryScheduled)]
    (stopped,) = [e for e in events if isinstance(e, RunStopped)]
    assert stopped.resume_after is not None
    reset = datetime.fromtimestamp(stopped.resume_after, UTC)
    jerusalem = reset.astimezone(__import__("zoneinfo").ZoneInfo("Asia/Jerusalem"))
    assert (jerusalem.hour, jerusalem.minute) == (17, 30)  # 5:30pm plus the 5 s margin
    assert "paella resume" in stopped.reason and "'hit your limit' in:" in stopped.reason
    retry = RunView.load(run).to_json()["retry"]
    assert retry == {"until": stopped.resume_after, "reason": stopped.reason}
    handoff = (run.dir / "handoff.md").read_text()
    assert "matched 'hit your limit' in: You've hit your session limit" in handoff


def test_a_missing_session_is_dropped_and_the_agent_starts_afresh_with_the_handoff(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paella_tui.supervisor.run.events import AgentStarted, Notice, RunDone

    # 1: opencode works in a session and stops short (gates red); 2: the resume of that session finds it gone
    # (exit 0, "Session not found" on stderr only); 3: a fresh start finishes the work.
    code, events, run = _replay_run(
        repo,
        monkeypatch,
        "opencode/pr-2810-step-events,opencode/issue-27559-missing-session-exit0,"
        "opencode/takopi-stream-success",
        "opencode",
        ["run", "--format", "json", "{prompt}"],
        resume=["run", "--format", "json", "-s", "{session_id}", "{handoff}"],
    )
    assert code == 0 and [e for e in events if isinstance(e, RunDone)]
    argvs = [json.loads(line) for line in (repo.parent / "argv.jsonl").read_text().splitlines()]
    assert len(argvs) == 3
    assert argvs[1][:5] == ["run", "--format", "json", "-s", "ses_6783457c2ffeICANaRjenHkVxv"]
    # The fresh start is the start command, with the handoff as its task, and no session.
    assert argvs[2][:3] == ["run", "--format", "json"] and "-s" not in argvs[2]
    assert "ses_6783457c2ffeICANaRjenHkVxv" not in " ".join(argvs[2][:3])
    assert "Handoff" in argvs[2][3] or "handoff" in argvs[2][3].lower()
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("is gone" in m and "session not found" in m for m in notices)
    assert [e.resumed for e in events if isinstance(e, AgentStarted)] == [False, True, True]
    # The ledger says the same: the second attempt's ending, and the run done after the third.
    sessions = [r["session_id"] for r in run.ledger.read().of_kind("agent-session")]
    assert sessions == ["ses_6783457c2ffeICANaRjenHkVxv", "", "ses_494719016ffe85dkDMj0FPRbHK"]
    exits = list(run.ledger.read().of_kind("agent-exited"))
    assert [(r["attempt"], r["exit_code"]) for r in exits] == [(1, 0), (2, 0), (3, 0)]
    assert list(run.ledger.read().of_kind("run-done"))


def test_paella_resume_refuses_before_a_far_reset_unless_told_now(
    repo: Path, monkeypatch: pytest.MonkeyPatch, paella: Any
) -> None:
    code, _events, run = _replay_run(
        repo,
        monkeypatch,
        "claude/issue-62815-limit-text",
        "claude",
        ["-p", "{prompt}", "--output-format", "stream-json", "--verbose"],
    )
    assert code == 1
    # What the run left is read in this process (``run_paella_in_process``); the resumes are the
    # real command.
    status = json.loads(run_paella_in_process(repo, "status", "--json").stdout)
    assert status["state"] == "stopped"
    assert status["retry"]["until"] > datetime.now(UTC).timestamp()
    assert "17:30 Asia/Jerusalem" in status["retry"]["reason"]

    shown = run_paella_in_process(repo, "status").stdout
    assert "next attempt not before" in shown and "17:30 Asia/Jerusalem" in shown

    refused = paella(repo, "resume", "--headless")
    assert refused.returncode == 1
    assert "limit resets" in refused.stderr and "paella resume --now" in refused.stderr
    assert len(list(run.ledger.read().of_kind("agent-started"))) == 1  # nothing started

    forced = paella(repo, "resume", "--headless", "--now")
    # The agent ran again (and met the same limit, so the run stops again, saying when).
    assert forced.returncode == 1, forced.stderr
    assert len(list(run.ledger.read().of_kind("agent-started"))) == 2
    assert "■ run stopped, not done: the agent's limit resets" in forced.stdout
    assert "matched 'hit your limit' in: You've hit your session limit" in forced.stdout


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("2.1.107 (Claude Code)", "claude version: 2.1.107 (Claude Code) (profile checked against"),
        ("3.0.1 (Claude Code)", "⚠ claude version: 3.0.1 (Claude Code), outside the range"),
        ("", "⚠ claude --version printed no version"),
    ],
)
def test_paella_check_says_which_agent_version_it_found(
    repo: Path, tmp_path: Path, printed: str, expected: str
) -> None:
    import tomli_w

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(f"#!/bin/sh\necho '{printed}'\n")
    fake.chmod(0o755)
    contract = {
        "run": {"prompt": "p", "profile": "claude"},
        "gate": [{"name": "done", "cmd": "true"}],
        "episode": [{"name": "done", "gates": ["done"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    shown = run_paella_in_process(
        repo, "check", env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    )
    assert shown.returncode == 0, shown.stderr
    assert expected in shown.stdout


def test_a_codex_429_is_retried_and_the_words_that_said_so_are_kept(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paella_tui.supervisor.run.events import RetryScheduled, RunDone

    code, events, run = _replay_run(
        repo,
        monkeypatch,
        "codex/issue-10550-retry-limit-429,codex/takopi-exec-explore",
        "codex",
        ["exec", "--json", "{prompt}"],
    )
    assert code == 0 and [e for e in events if isinstance(e, RunDone)]
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    line = (
        "exceeded retry limit, last status: 429 Too Many Requests, request id: 9c84b52ce87fbe62-SJC"
    )
    assert (retry.pattern, retry.line) == ("429", line)
    assert retry.reason.startswith("backoff 1s (1st transient failure); matched '429' in: ")
    (recorded,) = run.ledger.read().of_kind("retry-scheduled")
    assert (recorded["pattern"], recorded["line"]) == ("429", line)
    # The next attempt's handoff names the words too.
    assert f"matched '429' in: {line}" in (run.dir / "handoff.md").read_text()
