"""The owned lock (issue 10, SPEC 4): atomic, names its owner (pid + start time), never stale after
a ``kill -9``, never robbed from a live owner, and kept alive by children given its descriptor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paella_tui.supervisor.base.owned_lock import LockHeld, OwnedLock, Owner, process_start_time

HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from paella_tui.supervisor.base.owned_lock import OwnedLock
    lock = OwnedLock(Path(sys.argv[1]), what="a test")
    lock.acquire()
    if sys.argv[2] == "child":
        fd = lock.inheritable_fd()
        child = subprocess.Popen(["sleep", "60"], pass_fds=[fd])
        print(child.pid, flush=True)
    else:
        print("ready", flush=True)
    time.sleep(60)
    """
)


def start_holder(path: Path, mode: str = "alone") -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), mode], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_a_live_owner_is_named_and_never_robbed_and_a_killed_one_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "state" / "snapshot.lock"
    holder, _ = start_holder(path)
    try:
        lock = OwnedLock(path, what="a rollback")
        owner = lock.owner()
        assert owner == Owner(holder.pid, process_start_time(holder.pid) or -1)
        assert owner.alive()
        assert not lock.try_acquire()
        with pytest.raises(LockHeld) as caught:
            lock.acquire(timeout=0.2)
        assert f"paella pid {holder.pid} is busy with a rollback" in str(caught.value)
        assert caught.value.owner == owner
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel dropped the lock with its owner: no stale lock, no one to break it by hand.
    assert lock.owner() is None
    with lock.hold() as held:
        assert held.held
        assert lock.owner() == Owner.me()
    assert not lock.held and lock.owner() is None


def test_children_given_the_descriptor_keep_the_lock_after_the_owner_dies(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    holder, child_pid = start_holder(path, "child")
    child = int(child_pid)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = OwnedLock(path, what="a test")
    try:
        # The owner is gone, its child still holds the descriptor: the lock is not free.
        assert not lock.try_acquire()
        assert lock.owner() is None  # and no live owner is claimed
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0) if _is_child(child) else None
    for _ in range(100):
        if lock.try_acquire():
            break
        subprocess.run(["sleep", "0.02"], check=False)
    assert lock.held
    lock.release()


def _is_child(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def test_a_recycled_pid_is_not_its_old_owner() -> None:
    me = Owner.me()
    assert me.alive()
    assert not Owner(me.pid, me.start_time - 100).alive()
    assert not Owner(2**22 + 12345, 0.0).alive()
