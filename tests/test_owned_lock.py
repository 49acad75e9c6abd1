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


SLOW_NAMER = textwrap.dedent(
    """
    import fcntl, json, os, sys, time
    from paella_tui.supervisor.base.owned_lock import Owner
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked", flush=True)
    time.sleep(0.3)  # a holder slow to name itself (a loaded machine, between flock and write)
    me = Owner.me("paella run")
    record = {"pid": me.pid, "start_time": me.start_time, "label": me.label}
    os.pwrite(fd, json.dumps(record).encode() + b"\\n", 0)
    time.sleep(60)
    """
)


def test_a_holder_that_just_took_the_lock_is_named_once_it_writes_its_record(
    tmp_path: Path,
) -> None:
    """Two `paella run` at once: the second read the first one's record in the instant between
    its flock and its write, and named "another paella". A held lock's empty record is waited
    for (briefly); the holder is named."""
    path = tmp_path / "run.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_NAMER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        lock = OwnedLock(path, what="a test")
        assert not lock.try_acquire()
        owner = lock.owner()
        assert owner is not None and owner.pid == proc.pid and owner.label == "paella run"
        with pytest.raises(LockHeld, match=f"paella pid {proc.pid}"):
            OwnedLock(path, what="a test").acquire()
    finally:
        proc.kill()
        proc.wait()
