"""An owned lock: one holder at a time across processes, and who holds it (pid + start time).

The lock is an exclusive ``flock`` on a file, so taking it is atomic and the kernel drops it when
its holder dies: a ``kill -9`` never leaves it stale, and a live holder is never robbed (no one
decides on their own that an owner is dead and deletes its lock). While held, the file names the
owner: its pid and the process start time (the pair tells a live owner from a recycled pid), so
messages and other commands can say who holds it.

Children the holder starts may keep the lock alive: :meth:`OwnedLock.inheritable_fd` is the open
descriptor to hand them (``pass_fds``), so the lock is free only when the holder *and* those
children are gone. paella's git children also die with paella (see ``gitcli``).

Use::

    lock = OwnedLock(state_dir / "snapshot.lock", what="a snapshot")
    with lock.hold(timeout=60):
        ...
    owner = lock.owner()          # Owner(pid, start_time) of a live holder, or None
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.base.start_ticks import TICKS_PER_SECOND, boot_time, start_ticks

_FILE_MODE = 0o600
_POLL_S = 0.05
_RECORD_WAIT_S = 1.0
"""How long a reader waits for a just-taken lock's holder to write its record."""


@dataclass(frozen=True)
class Owner:
    """A process that holds (or held) a lock: its pid and start time (seconds since the epoch)."""

    pid: int
    start_time: float
    label: str = ""
    """What the owner said it is doing (``paella run, run 20261201-…``), for messages."""

    @classmethod
    def me(cls, label: str = "") -> Owner:
        """This process."""
        return cls(os.getpid(), process_start_time(os.getpid()) or 0.0, label)

    def describe(self) -> str:
        """``paella pid 4242 (paella run, run 20261201-…)``."""
        return f"paella pid {self.pid}" + (f" ({self.label})" if self.label else "")

    def alive(self) -> bool:
        """The same process still runs (the pid is alive and started at the same time)."""
        started = process_start_time(self.pid)
        return started is not None and abs(started - self.start_time) < 0.01


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None when there is none."""
    # psutil's own formula on Linux, read here: importing psutil cost every command that takes
    # a lock (a checkpoint) ~10 ms of start-up.
    ticks = start_ticks(pid) if pid > 0 else None
    if ticks is not None and TICKS_PER_SECOND:
        try:
            return round(ticks / TICKS_PER_SECOND + boot_time(), 2)
        except (OSError, ValueError):
            return None
    if os.path.isdir("/proc/self"):
        return None  # no such process
    import psutil  # no /proc (macOS): psutil knows the platform's way

    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.Error, ValueError):
        return None


class LockHeld(WorkspaceError):
    """The lock is held by another live process (exit 3); names it."""

    def __init__(self, message: str, *, hint: str | None = None, owner: Owner | None) -> None:
        super().__init__(message, hint=hint)
        self.owner = owner


class OwnedLock:
    """An exclusive lock on ``path`` that records its owner (pid + start time) while held."""

    def __init__(self, path: Path, *, what: str, label: str = "") -> None:
        self.path = path
        self.what = what
        self.label = label
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """This object holds the lock now."""
        return self._fd is not None

    def inheritable_fd(self) -> int | None:
        """The locked descriptor, for ``pass_fds`` of children that must keep the lock alive."""
        return self._fd

    def try_acquire(self) -> bool:
        """Take the lock if it is free, at once; True when taken."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        # Ours now: name the owner in the file (in place, so the locked inode stays the same).
        me = Owner.me(self.label)
        record = (
            json.dumps({"pid": me.pid, "start_time": me.start_time, "label": me.label}).encode()
            + b"\n"
        )
        # A full disk may refuse the record: the lock is held all the same (the record only names).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        self._fd = fd
        return True

    def acquire(self, timeout: float = 0.0) -> None:
        """Take the lock, waiting up to ``timeout`` seconds; LockHeld (naming the owner) if not."""
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                owner = self.owner()
                who = owner.describe() if owner else "another paella process"
                raise LockHeld(
                    f"{who} is busy with {self.what}"
                    + (f" and did not finish within {timeout:.0f}s" if timeout else ""),
                    hint="wait for it (see `paella status`) and try again.",
                    owner=owner,
                )
            time.sleep(_POLL_S)

    def release(self) -> None:
        """Give the lock up (the owner record is cleared first, so no one reads a stale owner)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)

    @contextlib.contextmanager
    def hold(self, timeout: float = 0.0) -> Iterator[OwnedLock]:
        """Hold the lock for a ``with`` block (see :meth:`acquire`)."""
        self.acquire(timeout)
        try:
            yield self
        finally:
            self.release()

    def owner(self) -> Owner | None:
        """The live process holding the lock, or None when it is free (or its holder is gone)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                # A shared lock we can take means no one holds it exclusively.
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            except BlockingIOError:
                pass
            # The holder names itself right after taking the lock: one that just took it may not
            # have yet (a second `paella run` started at once read an empty record, and named
            # "another paella"). Held, the record is worth a short wait.
            deadline = time.monotonic() + _RECORD_WAIT_S
            while (owner := _parse_owner(os.pread(fd, 4096, 0))) is None:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(_POLL_S)
        finally:
            os.close(fd)
        # A holder that died leaves its children holding the descriptor: say who started it,
        # only while that process itself still runs.
        return owner if owner.alive() else None


def _parse_owner(data: bytes) -> Owner | None:
    """The owner a lock file's record names, or None when it is empty or not a record."""
    try:
        record = json.loads(data)
        return Owner(int(record["pid"]), float(record["start_time"]), str(record.get("label", "")))
    except (ValueError, KeyError, TypeError):
        return None
