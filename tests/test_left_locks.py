"""A lock paella's own git child left when paella was killed (``HEAD.lock``, ``index.lock``, a
branch's lock) is recognised and removed by the next rollback, so the printed undo works; a lock
that may be anyone else's is never touched.

The "paella" here is a real process that records its intent with :func:`recorded_locks`, takes
the lock as its git child would, and is killed with SIGKILL while holding it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_paella

from paella_tui.supervisor.store.left_locks import clear_left_locks, recorded_locks
from paella_tui.supervisor.store.workspace import Workspace

KILLED_WHILE_LOCKED = r"""
import os, signal, sys
from pathlib import Path
from paella_tui.supervisor.store.left_locks import recorded_locks
from paella_tui.supervisor.store.workspace import Workspace
ws = Workspace.find(Path(sys.argv[1]))
locks = [Path(p) for p in sys.argv[2:]]
with recorded_locks(ws, locks, "a rollback's HEAD"):
    for lock in locks:
        lock.write_text("taken by the git child\n")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_paella(repo: Path, *locks: Path) -> None:
    """A paella that is killed while its git child holds ``locks``."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_LOCKED, str(repo), *map(str, locks)], check=False
    )
    assert proc.returncode == -signal.SIGKILL
    assert all(lock.exists() for lock in locks)


def test_the_undo_works_after_paella_was_killed_holding_head_lock(repo: Path, git) -> None:
    (repo / "a.txt").write_text("checkpointed\n")
    assert run_paella(repo, "checkpoint").returncode == 0
    (repo / "a.txt").write_text("the agent's\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "agent")
    head = git.head(repo)
    rolled = run_paella(repo, "rollback", "1", "--yes")
    assert rolled.returncode == 0, rolled.stderr
    git_dir = repo / ".git"
    locks = (git_dir / "HEAD.lock", git_dir / "index.lock", git_dir / "refs/heads/main.lock")
    killed_paella(repo, *locks)
    undo = run_paella(repo, "rollback", "salvage:1", "--yes")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert "HEAD.lock, left by paella's git child" in undo.stdout + undo.stderr
    assert not any(lock.exists() for lock in locks)
    assert (repo / "a.txt").read_text() == "the agent's\n" and git.head(repo) == head
    assert not list((git_dir / "paella" / "git-writes").iterdir())


@pytest.mark.parametrize("case", ["owner-alive", "lock-older-than-record", "lock-held-open"])
def test_a_lock_that_may_be_someone_elses_is_left_alone(repo: Path, case: str) -> None:
    ws = Workspace.find(repo)
    lock = repo / ".git" / "HEAD.lock"
    if case == "owner-alive":
        with recorded_locks(ws, [lock], "a test"):
            lock.write_text("ours, live\n")
            assert clear_left_locks(ws) == []  # this process, the record's owner, still runs
        assert lock.exists()
        return
    if case == "lock-older-than-record":
        lock.write_text("a user's stale lock\n")
        old = time.time() - 60
        os.utime(lock, (old, old))
        # A killed paella whose record names HEAD.lock, made long before the record.
        killed_paella_naming(repo, lock)
        assert clear_left_locks(ws) == []
        assert lock.exists()
        return
    killed_paella(repo, lock)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1]); time.sleep(60)",
            str(lock),
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _has_open(holder.pid, lock) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert clear_left_locks(ws) == []
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    # Once nobody holds it, the record (kept while the lock was in use) proves it is ours.
    [said] = clear_left_locks(ws)
    assert "HEAD.lock" in said and not lock.exists()


def killed_paella_naming(repo: Path, lock: Path) -> None:
    """A killed paella whose record names ``lock`` without taking it (it existed before)."""
    code = KILLED_WHILE_LOCKED.replace('lock.write_text("taken by the git child\\n")', "pass")
    proc = subprocess.run([sys.executable, "-c", code, str(repo), str(lock)], check=False)
    assert proc.returncode == -signal.SIGKILL


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


@pytest.mark.parametrize("in_worktree", [False, True], ids=["repository", "linked-worktree"])
def test_a_ref_lock_a_killed_checkpoint_left_never_blocks_the_next(
    repo: Path, git, in_worktree: bool
) -> None:
    """paella killed while its git child created checkpoint N's ref leaves ``N.lock``: the next
    checkpoint takes number N again (N was never recorded), and its create-only update-ref said
    "cannot lock ref ... File exists" for ever (CI: the mirror's kill -9 test). Under paella's
    snapshot lock such a lock is a dead paella's: removed, and checkpoint N is taken."""
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.checkpoints import take_checkpoint
    from paella_tui.supervisor.store.snapshot import Snapshotter

    where = repo
    if in_worktree:
        where = repo.parent / "linked"
        git(repo, "worktree", "add", "-q", str(where))
    ws = Workspace.find(where)
    run = RunStore(ws).create(None, manual=True)
    snapshotter = Snapshotter(ws)
    assert take_checkpoint(run, snapshotter, label="one").n == 1
    left = ws.common_dir / f"{run.ref_prefix}/checkpoints/2.lock"
    left.write_text("")  # what git writes first, and leaves when killed
    (where / "more.txt").write_text("more\n")
    second = take_checkpoint(run, snapshotter, label="two")
    assert second.n == 2 and not left.exists()
    assert git(where, "rev-parse", second.ref).strip() == second.commit


@pytest.mark.parametrize("folder", ["steps", "frozen", "salvage"])
def test_every_numbered_paella_ref_is_made_past_a_left_lock(repo: Path, git, folder: str) -> None:
    """Steps and frozen trees are numbered refs too, made by the one create_numbered_ref: a lock
    a killed paella left on the next number is removed; a ref that exists is skipped, never
    overwritten."""
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.checkpoints import create_numbered_ref

    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    head = git(repo, "rev-parse", "HEAD").strip()
    first, n = create_numbered_ref(run, folder, 0, head)
    left = ws.common_dir / f"{run.ref_prefix}/{folder}/1.lock"
    left.write_text("")
    second, m = create_numbered_ref(run, folder, 0, head)  # 0 exists: skipped, 1 locked: freed
    assert (n, m) == (0, 1) and not left.exists()
    assert second == f"{run.ref_prefix}/{folder}/1" and first != second
