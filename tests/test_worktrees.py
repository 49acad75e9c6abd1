"""Each git worktree is its own workspace (issue 10, SPEC 4): its own runs, ``current``, lock and
private index under its own git dir, refs namespaced apart, both supervisable at once, and a
rollback never moves a branch that another worktree has checked out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
from conftest import run_paella_in_process

from paella_tui.schemas import load_schema
from paella_tui.supervisor.base.owned_lock import OwnedLock
from paella_tui.supervisor.store.workspace import Workspace


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Checkpoints, rollbacks and status through ``cli.main`` in the test process
    (``run_paella_in_process``); the supervised runs are real ``paella run`` processes."""
    return run_paella_in_process


def ok(result):  # type: ignore[no-untyped-def]
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def two_worktrees(repo: Path, git, tmp_path: Path) -> Path:
    second = tmp_path / "second"
    git(repo, "worktree", "add", "-q", "-b", "side", str(second))
    return second


def test_two_worktrees_keep_separate_state_refs_and_locks(
    repo: Path, git, paella, tmp_path: Path
) -> None:
    second = two_worktrees(repo, git, tmp_path)
    (repo / "main.txt").write_text("main's work\n")
    (second / "side.txt").write_text("side's work\n")

    # The main worktree's snapshot lock is held (a rollback running there): the second worktree
    # checkpoints anyway, since it is another workspace.
    main_ws, second_ws = Workspace.find(repo), Workspace.find(second)
    assert main_ws.state_dir == repo / ".git" / "paella"
    assert second_ws.state_dir == repo / ".git" / "worktrees" / "second" / "paella"
    with OwnedLock(main_ws.state_dir / "snapshot.lock", what="a rollback").hold():
        ok(paella(second, "checkpoint", "--label", "side"))
    ok(paella(repo, "checkpoint", "--label", "main"))

    main_list = json.loads(ok(paella(repo, "checkpoints", "--json")).stdout)["checkpoints"]
    side_list = json.loads(ok(paella(second, "checkpoints", "--json")).stdout)["checkpoints"]
    assert [c["label"] for c in main_list] == ["main"]
    assert [c["label"] for c in side_list] == ["side"]
    # The main worktree keeps the refs it always had; the second has its own namespace.
    assert main_list[0]["ref"].startswith("refs/paella/2")
    assert side_list[0]["ref"].startswith("refs/paella/wt/second/")
    main_files = git(repo, "ls-tree", "-r", "--name-only", main_list[0]["tree"]).splitlines()
    side_files = git(repo, "ls-tree", "-r", "--name-only", side_list[0]["tree"]).splitlines()
    assert "main.txt" in main_files and "side.txt" not in main_files
    assert "side.txt" in side_files and "main.txt" not in side_files

    # A rollback in one never imports the other's files or touches its branch.
    (second / "side.txt").write_text("damaged\n")
    git(second, "add", "side.txt")  # staged: the salvage keeps the index as a second parent
    ok(paella(second, "rollback", "1", "--yes"))
    assert (second / "side.txt").read_text() == "side's work\n"
    assert not (second / "main.txt").exists()
    assert (repo / "main.txt").read_text() == "main's work\n"
    assert git.branch(repo) == "main" and git.branch(second) == "side"

    # The worktree's records keep the published shape of `status --json`.
    status = json.loads(ok(paella(second, "status", "--json")).stdout)
    jsonschema.Draft202012Validator(load_schema("status")).validate(status)
    assert status["salvage"][0]["ref"].startswith("refs/paella/wt/second/")
    index = status["salvage"][0]["index"]
    assert git(second, "show", f"{index}:side.txt") == "damaged"


def test_a_rollback_never_moves_a_branch_checked_out_in_another_worktree(
    repo: Path, git, paella, tmp_path: Path, tree_state
) -> None:
    second = two_worktrees(repo, git, tmp_path)
    (second / "side.txt").write_text("at the checkpoint\n")
    ok(paella(second, "checkpoint"))
    git(second, "checkout", "-q", "-b", "other")
    git(repo, "checkout", "-q", "side")
    before = tree_state(second), tree_state(repo), git.head(repo), git.head(second)

    result = paella(second, "rollback", "1", "--yes")

    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert f"its branch side is checked out in the worktree {repo}" in result.stderr
    assert "Nothing was changed" in result.stderr
    assert (tree_state(second), tree_state(repo), git.head(repo), git.head(second)) == before
    assert git.branch(repo) == "side" and git.branch(second) == "other"


CONTRACT = """\
[run]
prompt = "wait"
agent = ["sleep", "30"]

[[gate]]
name = "ok"
cmd = "true"

[[episode]]
name = "one"
gates = ["ok"]
"""


def test_both_worktrees_are_supervised_at_once(repo: Path, git, paella, tmp_path: Path) -> None:
    (repo / "paella.toml").write_text(CONTRACT)
    git(repo, "add", "paella.toml")
    git(repo, "commit", "-q", "-m", "contract")
    second = two_worktrees(repo, git, tmp_path)
    runs = []
    try:
        for where in (repo, second):
            runs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "paella_tui", "run", "--headless"],
                    cwd=where,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "NO_COLOR": "1"},
                )
            )
            deadline = time.monotonic() + 30
            state = None
            while time.monotonic() < deadline:
                assert runs[-1].poll() is None, runs[-1].communicate()[1]
                status = paella(where, "status", "--json")
                data = json.loads(status.stdout) if status.returncode == 0 else None
                state = data["state"] if data else None  # null until the run has started
                if state == "running":
                    break
                time.sleep(0.2)
            assert state == "running", f"{where}: {state}"
        main_status = json.loads(ok(paella(repo, "status", "--json")).stdout)
        side_status = json.loads(ok(paella(second, "status", "--json")).stdout)
        assert main_status["state"] == side_status["state"] == "running"
        assert main_status["run_id"] != side_status["run_id"]
    finally:
        for proc in runs:
            proc.send_signal(signal.SIGTERM)
        for proc in runs:
            proc.communicate(timeout=30)
