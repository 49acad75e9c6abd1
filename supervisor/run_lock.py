"""The run lock: one supervisor per workspace, owned by a process named by pid and start time.

Taking it is atomic (``flock`` on a lock file, never a check-then-create), and it dies with its
holder, so a ``kill -9`` never leaves it stale. The file's content says who holds it (pid,
process start time, command, run id) so a second ``paella run`` can name the holder; a reader
trusts that content only while the pid is alive with the same start time.

The lock file lives outside the repository (beside the mirror, under ``$XDG_STATE_HOME``), keyed
by the work tree's git dir, so an agent deleting ``.git/paella`` does not free it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from paella_tui.supervisor.errors import WorkspaceError
from paella_tui.supervisor.files import FILE_MODE
from paella_tui.supervisor.mirror import repository_key, state_home
from paella_tui.supervisor.workspace import Workspace


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: enough to tell it from a process that reused its pid."""

    pid: int
    start_time: float
    what: str
    run_id: str = ""

    def alive(self) -> bool:
        """Whether this exact process still runs."""
        try:
            proc = psutil.Process(self.pid)
            return (
                abs(proc.create_time() - self.start_time) < 1.0
                and proc.status() != psutil.STATUS_ZOMBIE
            )
        except (psutil.Error, OSError):
            return False

    def describe(self) -> str:
        """``paella pid 4242 (paella run, run 20261201-…)``."""
        run = f", run {self.run_id}" if self.run_id else ""
        return f"paella pid {self.pid} ({self.what}{run})"


def lock_path(workspace: Workspace) -> Path:
    """Where the run lock of this work tree lives."""
    worktree = hashlib.sha256(
        os.path.realpath(workspace.git_dir).encode(errors="surrogateescape")
    ).hexdigest()[:12]
    return state_home() / "paella" / repository_key(workspace) / f"run-{worktree}.lock"


def holder(workspace: Workspace) -> Holder | None:
    """The live process holding the run lock of ``workspace``, or None."""
    path = lock_path(workspace)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_lock(workspace: Workspace, *, what: str, run_id: str = "") -> Iterator[None]:
    """Hold the run lock while the block runs; WorkspaceError (exit 3) naming the holder if taken."""
    path = lock_path(workspace)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError as err:
        raise WorkspaceError(
            f"cannot create the run lock {path}: {err.strerror or err}",
            hint="set XDG_STATE_HOME to a folder you can write. Nothing was started.",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _read_holder(fd)
            who = held.describe() if held is not None else "another paella"
            raise WorkspaceError(
                f"this workspace is already supervised by {who}",
                hint="one supervisor per workspace: watch it with `paella status --watch`, or "
                "stop it first. Nothing was started.",
            ) from None
        me = psutil.Process()
        data = {"pid": me.pid, "start_time": me.create_time(), "what": what, "run_id": run_id}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(data).encode(), 0)
        yield
    finally:
        # Closing the descriptor releases the lock; the file stays (removing it would race).
        os.close(fd)


def _read_holder(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        found = Holder(
            int(data["pid"]), float(data["start_time"]), str(data["what"]), str(data["run_id"])
        )
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return found if found.alive() else None
