"""``paella demo``: the whole story on the built-in scenario, through the real command and the TUI.

The headless test runs the real console script (``paella demo --headless --fast --dir``) and
checks the story twice: in what a person reads (the output) and in what the run leaves behind
(the ledger, the git refs, the final files, no process of the agent). The play is shared with
test_json_schemas (``played_demo``: one play per test process, put back before each reader).
The TUI test plays the same demo with the real command (``paella demo --fast``) in a real tmux
pane and presses the recovery key the screen suggests, as a newcomer would; it checks the pane,
the exit status, what the run left behind, and that no agent is left.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_paella_in_process
from played_demo import GROUP as played_demo_group
from played_demo import PlayedDemo, agent_processes, played_demo
from test_tui_tmux import recorded
from waiting import wait_until

from paella_tui.commands.demo_command import _demo_dir
from paella_tui.demo import scenario
from paella_tui.demo.agent import FINAL
from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import CONTRACT_FILE
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.workspace import Workspace

DEMO_TIMEOUT_S = 60.0
ANSI = re.compile(r"\x1b\[")


def demo_run(root: Path) -> Run:
    """The demo's run, as ``paella status`` in the demo folder finds it."""
    run = RunStore(Workspace.find(root)).current()
    assert run is not None, f"no run in {root}"
    return run


def records(run: Run, kind: str) -> list[dict[str, Any]]:
    """The run's ledger records of ``kind``, in order."""
    return [r for r in run.ledger.read().records if r.get("kind") == kind]


def ref_exists(root: Path, ref: str) -> bool:
    """Whether git knows ``ref`` in the repository at ``root``."""
    return (
        subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", ref], cwd=root, capture_output=True
        ).returncode
        == 0
    )


def index_of(lines: list[str], pattern: str, start: int = 0) -> int:
    """The index of the first line from ``start`` that matches ``pattern``; fails with the output."""
    regex = re.compile(pattern)
    for i in range(start, len(lines)):
        if regex.search(lines[i]):
            return i
    raise AssertionError(f"no line matching {pattern!r} after line {start}:\n" + "\n".join(lines))


@pytest.fixture
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlayedDemo]:
    """The headless demo this test process played, as the command left it."""
    with played_demo(tmp_path_factory) as played:
        yield played


@pytest.mark.slow
@pytest.mark.xdist_group(played_demo_group)
def test_headless_demo_tells_the_whole_story_and_ends_done(demo: PlayedDemo) -> None:
    root, proc, took = demo.root, demo.proc, demo.took
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"
    assert took < 45, f"the --fast demo took {took:.1f}s (the normal pace takes about a minute)"
    assert not ANSI.search(out), "headless output is plain text (NO_COLOR is set)"

    # The story, in the order a person reads it.
    lines = out.splitlines()
    act1 = index_of(lines, r"^▶ Act 1: ")
    ckpt1 = index_of(lines, r"✓ checkpoint 1 \(episode 1: idempotent ingest\)", act1)
    ckpt2 = index_of(lines, r"✓ checkpoint 2 \(episode 2: privacy\)", ckpt1)
    act2 = index_of(lines, r"^▶ Act 2: .*breaks an old invariant", ckpt2)
    drift = index_of(
        lines, r'⚠ drift regression: gate "idempotency" was green at checkpoint 2', act2
    )
    limit = index_of(lines, r"✗ agent ended: exit 1, attempt 1", drift)
    index_of(lines, r"│ API Error: 429", limit)
    retry = index_of(lines, r"◌ transient failure 1: retrying in", limit)
    attempt2 = index_of(lines, r"● agent resumed: attempt 2", retry)
    crash = index_of(lines, r"✗ agent ended: exit 1, attempt 2", attempt2)
    index_of(lines, r"│ IndexError: list index out of range", crash)
    recovery = index_of(lines, r"✗ recovery needed: .*last good state: checkpoint 2", crash)
    index_of(lines, r"regressions: idempotency", recovery)
    rolled = index_of(lines, r"✓ rolled back to 2; the state before is salvage:1", recovery)
    attempt3 = index_of(lines, r"● agent resumed: attempt 3, ", rolled)
    index_of(lines, r"✓ checkpoint 3 \(episode 3: export format\)", attempt3)
    done = index_of(lines, r"✓ DONE: every gate is green", attempt3)
    index_of(lines, rf"cd {re.escape(str(root))}$", done)
    index_of(lines, r"paella rollback salvage:1", done)

    # What the run left behind says the same.
    run = demo_run(root)
    checkpoints = records(run, "checkpoint")
    assert [c["episode"] for c in checkpoints] == [1, 2, 3, 4]
    regressions = [d for d in records(run, "drift") if d["drift"] == "regression"]
    assert [d["gate"] for d in regressions] == ["idempotency"]
    assert len(records(run, "retry-scheduled")) == 1
    exits = [(r["attempt"], r["exit_code"]) for r in records(run, "agent-exited")]
    assert exits == [(1, 1), (2, 1), (3, 0)]
    (needed,) = records(run, "recovery-needed")
    assert needed["ending"] == "crash"
    assert needed["regressions"] == ["idempotency"]
    assert needed["default"] == "rollback"
    (salvage,) = records(run, "salvage")
    assert ref_exists(root, salvage["ref"])
    started = records(run, "agent-started")
    assert [(s["attempt"], s["resumed"]) for s in started] == [(1, False), (2, True), (3, True)]
    assert "--handoff-file" in started[-1]["argv"]
    assert records(run, "run-done")

    # The resumed agent read the handoff and said so; the final code is the correct one.
    agent_log = (run.dir / "agent.log").read_text(errors="replace")
    assert "Reading the handoff: gates to keep green: idempotency, privacy" in agent_log
    for path, version, _ in FINAL:
        assert (root / path).read_text() == (scenario.HERE / "edits" / version).read_text(), path
    # The salvage kept the crashed attempt's work, one command away.
    assert (
        "report.py"
        in subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", salvage["commit"]],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert demo.agents_left == ()
    assert agent_processes(root) == []


def test_a_non_empty_folder_that_is_not_a_demo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    # Refused before anything starts: the command's words and status, through ``cli.main``.
    proc = run_paella_in_process(tmp_path, "demo", "--headless", "--fast", "--dir", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not empty, and not an earlier paella demo" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_earlier_demo_folder_is_rebuilt_from_scratch(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    root.mkdir()
    scenario.build(root, fast=True)
    (root / "ledger" / "left_over.py").write_text("x = 1\n")
    assert _demo_dir(str(root)) == root.resolve()
    assert list(root.iterdir()) == []


def test_a_file_is_not_a_demo_folder(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(UsageError):
        _demo_dir(str(path))


def test_the_built_repository_starts_with_every_gate_red_and_a_valid_contract(
    tmp_path: Path,
) -> None:
    root = tmp_path / "demo"
    root.mkdir()
    scenario.build(root)
    contract = load_contract(root / CONTRACT_FILE)
    assert [e.gates for e in contract.episodes] == [
        ("idempotency",),
        ("privacy",),
        ("export",),
        ("report",),
    ]
    assert set(contract.protected_globs()) == {"tests/**", "paella.toml"}
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    )
    assert status.stdout == "", "everything is committed"
    for gate in contract.gates:
        assert gate.argv[0].startswith("/"), "gates run with this Python, not a PATH lookup"
        proc = subprocess.run(gate.argv, cwd=root, capture_output=True, check=False)
        assert proc.returncode != 0, f"{gate.name} is red before the agent starts"


# --- the real command in a real tmux pane ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real pane")
def test_demo_in_a_real_pane_recovers_with_the_suggested_key(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    rc = tmp_path / "rc"
    socket = f"paella-demo-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    paella = (
        f"{shlex.quote(sys.executable)} -m paella_tui demo --fast --dir {shlex.quote(str(root))}"
    )
    command = (
        f"cd {shlex.quote(str(tmp_path))} && {paella}; echo $? > {shlex.quote(str(rc))}; sleep 60"
    )

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False
        ).stdout

    def pane() -> str:
        return tmux("capture-pane", "-p", "-t", "demo")

    def wait_for(condition: Callable[[], bool], what: str) -> None:
        wait_until(condition, what, timeout=DEMO_TIMEOUT_S, interval=0.05, show=pane)

    def wait_in_pane(needle: str, once: str) -> None:
        # The pane is captured (a tmux process each time) only once the ledger holds the
        # record of the event that draws ``needle`` (test_tui_tmux's Pane.wait_for says why).
        wait_for(recorded(root, once), f"the {once} record")
        wait_for(lambda: needle in pane(), needle)

    tmux("-f", os.devnull, "new-session", "-d", "-x", "120", "-y", "36", "-s", "demo", command)
    try:
        wait_in_pane("◀ default", once="recovery-needed")
        screen = pane()
        assert "The agent died: exit 1 (attempt 2)" in screen, screen
        assert "regressed" in screen and "idempotency" in screen, screen
        # The key the screen marks as the default, as a newcomer reads it.
        suggested = re.search(r"^\s*(\w)\s+.*◀ default", screen, re.M)
        assert suggested is not None and suggested.group(1) == "r", screen
        tmux("send-keys", "-t", "demo", suggested.group(1))
        wait_in_pane("✓ done", once="run-done")
        tmux("send-keys", "-t", "demo", "q")
        wait_for(rc.exists, "the exit status")
        assert rc.read_text().strip() == "0", pane()
        wait_for(lambda: "paella rollback salvage:1" in pane(), "the commands to try")
    finally:
        tmux("kill-server")
    # What the run left behind: the person's choice, the salvage it made, the end.
    run = demo_run(root)
    assert [r["choice"] for r in records(run, "recovery-chosen")] == ["rollback"]
    assert records(run, "salvage")
    assert records(run, "run-done")
    assert agent_processes(root) == []
