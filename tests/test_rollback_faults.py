"""Crashes (SPEC 5, 13): a ``kill -9`` of paella at any step of a rollback, or in the middle of a
checkpoint, leaves a readable ledger and a workspace that is unchanged or recoverable with the
commands paella prints. The rollback kills itself at a step named by ``PAELLA_TEST_KILL_AT``.

The killed command is the real one in a subprocess; the commands that read and mend afterwards
run through ``cli.main`` in the test process (``in_process``), on the same files. A rollback
killed at a step is killed once per test process, and both ways out (undo, finish) start from
the world that kill left (``killed_at``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import SavedFolder, make_repo
from conftest import run_paella_in_process as in_process

from paella_tui.supervisor.run.runs import RunStore, wait_for_mirror
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

IGNORED = ("cache.log", "build")
FINISH = re.compile(r"to finish it:\s+(paella rollback \S+ --yes)")
UNDO = re.compile(r"to undo it:\s+(paella rollback salvage:\d+ --yes)")


def write(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)


@dataclass
class Scenario:
    repo: Path
    checkpoint_state: object
    checkpoint_head: str
    damaged_state: object
    damaged_head: str


def build_scenario(repo: Path, git, tree_state) -> Scenario:
    """Checkpoint 1 of a varied tree, then an agent's damage (with a commit)."""
    write(repo / ".gitignore", "*.log\nbuild/\n")
    write(repo / "src" / "a.py", "a = 1\n")
    write(repo / "src" / "pkg" / "b.py", "b = 1\n")
    write(repo / "tool.sh", "#!/bin/sh\n", mode=0o755)
    os.symlink("src/a.py", repo / "link")
    write(repo / "swap", "a file\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "project")
    write(repo / "src" / "a.py", "a = 2  # uncommitted\n")
    write(repo / "notes ü.txt", "untracked\n")
    write(repo / "cache.log", "ignored\n")
    ws = Workspace.find(repo)
    run = RunStore(ws).current_or_manual("test")
    checkpoints.take_checkpoint(run, Snapshotter(ws), label="good")
    checkpoint_state, checkpoint_head = tree_state(repo), git.head(repo)

    shutil.rmtree(repo / "src" / "pkg")
    write(repo / "src" / "pkg", "a folder became a file\n")
    (repo / "swap").unlink()
    write(repo / "swap" / "inside.txt", "a file became a folder\n")
    write(repo / "src" / "a.py", "a = 'broken'\n")
    (repo / "tool.sh").chmod(0o644)
    os.unlink(repo / "link")
    os.symlink("tool.sh", repo / "link")
    (repo / "notes ü.txt").unlink()
    write(repo / "new.txt", "the agent's new file\n")
    write(repo / "cache.log", "the agent's ignored log\n")
    write(repo / "build" / "x.o", b"\0ignored")
    git(repo, "add", "new.txt")
    git(repo, "commit", "-q", "-m", "agent")
    return Scenario(repo, checkpoint_state, checkpoint_head, tree_state(repo), git.head(repo))


def assert_tree(actual, expected) -> None:
    assert actual == expected, "\n".join(actual.differences(expected))


def assert_checkpoint_restored(sc: Scenario, git, tree_state) -> None:
    now = tree_state(sc.repo)
    assert_tree(now.without(*IGNORED), sc.checkpoint_state.without(*IGNORED))
    assert_tree(now.only(*IGNORED), sc.damaged_state.only(*IGNORED))
    assert git.head(sc.repo) == sc.checkpoint_head
    assert git.branch(sc.repo) == "main"


def assert_damaged_state(sc: Scenario, git, tree_state) -> None:
    assert_tree(tree_state(sc.repo), sc.damaged_state)
    assert git.head(sc.repo) == sc.damaged_head
    assert git.branch(sc.repo) == "main"


def run_printed(paella, repo: Path, command: str) -> None:
    args = command.split()
    assert args[0] == "paella"
    result = paella(repo, *args[1:])
    assert result.returncode == 0, f"{command}: {result.stderr}"


@pytest.fixture(scope="module")
def built_scenario(
    tmp_path_factory: pytest.TempPathFactory, git, tree_state
) -> tuple[Scenario, SavedFolder, Path]:
    """``build_scenario`` once per module (per xdist worker): the repository, its run's state
    and its mirror (a private XDG state folder) in one saved folder, put back for each case."""
    world = tmp_path_factory.mktemp("rollback-faults")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(world / "xdg-state"))
        sc = build_scenario(make_repo(world / "repo", git), git, tree_state)
        wait_for_mirror()  # the checkpoint's ledger reaches the mirror before the folder is saved
    saved = SavedFolder(world)
    saved.save()
    return sc, saved, world / "xdg-state"


@pytest.fixture
def scenario(
    built_scenario: tuple[Scenario, SavedFolder, Path], monkeypatch: pytest.MonkeyPatch
) -> Scenario:
    """The built scenario as it was saved: checkpoint 1, then the agent's damage."""
    sc, saved, xdg_state = built_scenario
    saved.restore()
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg_state))
    return sc


# Each step's killed rollback, and the world it left (the repository, its state, the mirror),
# per test process: both ways out of a kill at one step start from the same kill.
_KILLED: dict[tuple[Path, str], tuple[subprocess.CompletedProcess[str], SavedFolder]] = {}


def killed_at(
    step: str, built: tuple[Scenario, SavedFolder, Path], paella
) -> subprocess.CompletedProcess[str]:
    """``paella rollback 1 --yes`` killed at ``step``, a real process: run the first time a test
    process asks for this step, and its world kept; put back as the kill left it after that.
    (The killed command is the same for both recoveries; running it once per step spares a
    paella process, about 0.25 s of CPU, and the recoveries still each start from a real kill.)"""
    sc, saved, _ = built
    key = (saved.folder, step)
    if key in _KILLED:
        killed, world = _KILLED[key]
        world.restore()
        return killed
    killed = paella(sc.repo, "rollback", "1", "--yes", env={rollback.KILL_AT_ENV: step})
    if killed.returncode == -signal.SIGKILL:
        # The world once the kill is over: a git of the dead paella's death group (a mirror
        # save's) is killed by the group's keeper a moment later, and the keeper ends then.
        settled(saved.folder)
        world = SavedFolder(saved.folder, name=f"killed-at-{step}")
        world.save()
        _KILLED[key] = (killed, world)
    return killed


def settled(folder: Path, timeout: float = 10.0) -> None:
    """Wait until no process but this one works in ``folder`` (its current directory there)."""
    inside = f"{folder}{os.sep}"
    deadline = time.monotonic() + timeout
    while True:
        left = [
            proc.info
            for proc in psutil.process_iter(["pid", "name", "cwd"])
            if proc.pid != os.getpid() and f"{proc.info['cwd']}{os.sep}".startswith(inside)
        ]
        if not left:
            return
        assert time.monotonic() < deadline, f"processes outlived the killed paella: {left}"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("recovery", ["undo", "finish"])
@pytest.mark.parametrize(
    "step",
    # Both recoveries of a step in one test process, so that they share its kill.
    [
        pytest.param(s, marks=pytest.mark.xdist_group(f"rollback-killed-at-{s}"))
        for s in rollback.STEPS
    ],
)
def test_kill_at_each_rollback_step_is_recoverable(
    built_scenario: tuple[Scenario, SavedFolder, Path],
    scenario: Scenario,
    git,
    paella,
    tree_state,
    step: str,
    recovery: str,
) -> None:
    sc, repo = scenario, scenario.repo

    killed = killed_at(step, built_scenario, paella)

    assert killed.returncode == -signal.SIGKILL, killed.stderr
    unchanged = tree_state(repo) == sc.damaged_state and git.head(repo) == sc.damaged_head
    status = in_process(repo, "status")
    assert status.returncode == 0, status.stderr
    finish, undo = FINISH.search(status.stderr), UNDO.search(status.stderr)
    if step != "after-salvage":
        # The intent is in the ledger: the next command must say so, with both ways out.
        assert finish and undo, f"no recovery advice after a kill at {step}:\n{status.stderr}"
    if not unchanged:
        assert finish and undo, f"workspace changed but no advice printed:\n{status.stderr}"
    if finish:
        assert finish.group(1) == "paella rollback 1 --yes"
        assert undo.group(1) == "paella rollback salvage:1 --yes"

    if recovery == "undo":
        if undo:
            run_printed(in_process, repo, undo.group(1))
        assert_damaged_state(sc, git, tree_state)
    else:
        run_printed(in_process, repo, finish.group(1) if finish else "paella rollback 1 --yes")
        assert_checkpoint_restored(sc, git, tree_state)

    after = in_process(repo, "status")
    assert after.returncode == 0 and "did not finish" not in after.stderr, after.stderr


def test_a_torn_last_ledger_line_is_reported_and_the_next_record_is_whole(
    repo: Path,
) -> None:
    assert in_process(repo, "checkpoint").returncode == 0
    ledger = next((repo / ".git" / "paella" / "runs").iterdir()) / "events.jsonl"
    with ledger.open("ab") as handle:
        handle.write(b'{"t":"2026-11-29T02:14:55.000Z","kind":"checkpo')

    status = in_process(repo, "status")
    assert status.returncode == 0
    assert "torn last line" in status.stderr

    second = in_process(repo, "checkpoint", "--label", "after the tear")
    assert second.returncode == 0, second.stderr
    lines = ledger.read_bytes().split(b"\n")
    assert lines[-1] == b""
    last = json.loads(lines[-2])
    assert last["kind"] == "checkpoint" and last["n"] == 2 and last["label"] == "after the tear"
    assert lines[-3].startswith(b'{"t":"2026-11-29T02:14:55.000Z"')  # the torn one, alone
    listed = json.loads(in_process(repo, "checkpoints", "--json").stdout)
    assert [c["n"] for c in listed["checkpoints"]] == [1, 2]
    log = in_process(repo, "log")
    assert log.returncode == 0 and "after the tear" in log.stdout


def test_kill_9_during_a_checkpoint_never_changes_the_index(repo: Path, git, paella) -> None:
    for n in range(3):
        write(repo / "data" / f"blob{n}.bin", os.urandom(6 * 1024 * 1024))
    write(repo / "README.md", "edited\n")
    git(repo, "add", "README.md")
    index = repo / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns, git.head(repo))

    for delay in (0.05, 0.12, 0.2, 0.3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "paella_tui", "checkpoint"],
            cwd=repo,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)  # paella and the git it runs, as a crash would
        proc.wait()
        assert (index.read_bytes(), index.stat().st_mtime_ns, git.head(repo)) == before
        assert not (repo / ".git" / "index.lock").exists()

    # Whatever the kills left (a private index lock included), the next checkpoint works.
    (repo / ".git" / "paella").mkdir(exist_ok=True)
    (repo / ".git" / "paella" / "snapshot.index.lock").write_bytes(b"stale")
    result = in_process(repo, "checkpoint")
    assert result.returncode == 0, result.stderr
    assert not (repo / ".git" / "paella" / "snapshot.index.lock").exists()
    assert (index.read_bytes(), index.stat().st_mtime_ns, git.head(repo)) == before
    listed = json.loads(in_process(repo, "checkpoints", "--json").stdout)
    tree = git(repo, "ls-tree", "-r", "-l", listed["checkpoints"][-1]["tree"])
    sizes = re.findall(r"\s(\d+)\tdata/blob\d\.bin", tree)
    assert sizes == [str(6 * 1024 * 1024)] * 3
