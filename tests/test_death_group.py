"""The death group (``store/death_group.py``): which git writes join it, that they really run in
it, and that a group whose keeper or leader is gone is replaced, in this process and in a forked
one. The kill -9 of a paella in the middle of a write in the group is in test_rollback_kill9.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from paella_tui.supervisor.store import death_group, private_index
from paella_tui.supervisor.store.git_start import joining
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.private_index import remove_left_lock
from paella_tui.supervisor.store.workspace import Workspace

# (arguments, stdin, private index?, joins the group?)
ROUTES: list[tuple[list[str], bytes | None, bool, bool]] = [
    (["hash-object", "-w", "--stdin"], b"an object\n", False, True),
    (["mktree"], b"", False, True),
    (["update-ref", "refs/paella/run/checkpoints/1", "HEAD", ""], None, False, True),
    (["update-ref", "--stdin"], b"create refs/paella/run/steps/1 HEAD\n", False, True),
    (["write-tree"], None, True, True),
    (["update-index", "--add", "-z", "--stdin"], b"a.txt\0", True, True),
    (["read-tree", "HEAD"], None, True, True),
    # The work tree, the user's index and branches, a remote: setpriv's way, in paella's group.
    (["read-tree", "--reset", "-u", "HEAD"], None, True, False),
    (["write-tree"], None, False, False),
    (["update-index", "-q", "--refresh"], None, False, False),
    (["update-ref", "refs/heads/main", "HEAD"], None, False, False),
    (["update-ref", "--stdin"], b"update refs/heads/main HEAD\n", False, False),
    (["push", "origin", "HEAD"], None, False, False),
    (["rev-parse", "HEAD"], None, False, False),  # a read: no death signal at all
]


@pytest.mark.parametrize(("args", "stdin", "private", "joins"), ROUTES, ids=lambda v: str(v)[:40])
def test_a_write_joins_the_group_by_what_it_writes(
    repo: Path, args: list[str], stdin: bytes | None, private: bool, joins: bool
) -> None:
    git = Git(repo, index_file=repo / ".git" / "private" if private else None)
    how = git.how_to_start(args, input=stdin)
    if joins:
        assert how.process_group is not None and how.process_group == death_group.group()
        assert (how.argv, how.preexec_fn) == (git.command(args), None)
    else:
        assert how.process_group is None


@pytest.mark.parametrize("private", [False, True], ids=["objects", "private-index"])
def test_a_write_of_the_group_really_runs_in_it(repo: Path, private: bool) -> None:
    git = Git(repo, index_file=repo / ".git" / "private" if private else None)
    args = ["update-index", "--add", "-z", "--stdin"] if private else ["fast-import", "--quiet"]
    proc = git.popen(args)
    try:
        assert os.getpgid(proc.pid) == death_group.group() != os.getpgid(0)
    finally:
        proc.communicate(b"")
    assert proc.returncode == 0
    # Run to its end through Git.run too (its stdin is not the terminal's).
    assert git.run(["hash-object", "-w", "--stdin"], input=b"x\n").returncode == 0


def _ended(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:  # our child: a zombie until reaped; anyone's once adopted
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (ProcessLookupError, FileNotFoundError):
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} did not end")


@pytest.mark.parametrize("which", ["leader", "keeper"])
def test_a_group_whose_leader_or_keeper_ended_is_replaced(repo: Path, which: str) -> None:
    git = Git(repo)
    before = death_group.group()
    assert before is not None
    leader, keeper = death_group.members()
    _ended(leader if which == "leader" else keeper)

    oid = git.out(["hash-object", "-w", "--stdin"], input=b"after the group ended\n")
    assert git.out(["cat-file", "blob", oid]) == "after the group ended"
    after = death_group.group()
    assert after is not None and after != before
    assert set(death_group.members()).isdisjoint({leader, keeper})
    # What was left of the old group is gone: the keeper (its own, or the one it had) ended it.
    for pid in (leader, keeper):
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_start_that_cannot_join_makes_a_new_group_once(repo: Path) -> None:
    """The leader ends between the check and the start: ``setpgid`` refuses, a new group."""
    git = Git(repo)
    how = git.how_to_start(["hash-object", "-w", "--stdin"], input=b"late\n")
    stale = how.process_group
    assert stale is not None
    os.kill(stale, signal.SIGKILL)
    os.waitpid(stale, 0)  # reaped: its group is no more
    joined: list[int | None] = []

    def start(group: int | None) -> subprocess.CompletedProcess[bytes]:
        joined.append(group)
        return subprocess.run(
            how.argv,
            cwd=repo,
            env=git.env,
            input=b"late\n",
            capture_output=True,
            process_group=group,
            check=True,
        )

    proc = joining(how, start)
    assert proc.stdout.strip()
    assert joined[0] == stale and joined[1] == death_group.group() != stale


def test_a_forked_paella_makes_its_own_group(repo: Path) -> None:
    mine = death_group.group()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child reports through the pipe
        try:
            os.close(read_end)
            theirs = death_group.group()
            os.write(write_end, f"{theirs} {os.getpgid(0)}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with open(read_end) as answer:
        theirs, their_own = (int(v) for v in answer.read().split())
    os.waitpid(child, 0)
    assert theirs not in (mine, their_own)
    assert death_group.group() == mine  # the parent's is untouched


def test_disabled_there_is_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(death_group, "disabled", True)
    assert death_group.group() is None


def test_a_left_private_index_lock_is_removed_once_no_process_has_it_open(repo: Path) -> None:
    """A dead paella's git in its death group ends a moment after paella: the next snapshot
    waits for the lock to be closed before removing it (never under a git still writing)."""
    index = repo / ".git" / "private.index"
    lock = repo / ".git" / "private.index.lock"
    lock.write_bytes(b"half an index")
    holder = subprocess.Popen(
        ["/bin/sh", "-c", 'exec 3<"$1"; echo open; sleep 0.4', "sh", str(lock)],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
    remove_left_lock(index, Workspace.find(repo))
    assert holder.poll() is not None, "the lock was removed while a process had it open"
    assert not lock.exists()


def test_a_left_lock_is_kept_while_a_git_runs_in_the_repository(repo: Path) -> None:
    """Between closing its lock and renaming it into place, git holds no descriptor of it: a
    git running in the repository counts as the lock in use (left_locks.in_use)."""
    index = repo / ".git" / "private.index"
    lock = repo / ".git" / "private.index.lock"
    lock.write_bytes(b"")
    running = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE)
    assert running.stdin is not None
    threading.Timer(0.4, running.stdin.close).start()
    remove_left_lock(index, Workspace.find(repo))
    assert running.poll() is not None, "the lock was removed while a git ran in the repository"
    assert not lock.exists()


def test_a_left_lock_held_open_for_good_is_removed_after_the_wait(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(private_index, "LEFT_LOCK_WAIT_S", 0.1)
    index = repo / ".git" / "private.index"
    lock = repo / ".git" / "private.index.lock"
    lock.write_bytes(b"")
    workspace = Workspace.find(repo)
    with lock.open("rb"):  # held by this very process, past the wait
        remove_left_lock(index, workspace)
        assert not lock.exists()
    remove_left_lock(index, workspace)  # no lock: nothing to do
