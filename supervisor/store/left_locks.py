"""Locks of the user's repository left by paella's own git child, killed with paella.

paella's git children die with it (``PR_SET_PDEATHSIG``), so a ``kill -9`` of paella while its
``update-ref`` or ``read-tree`` runs leaves that child's ``HEAD.lock``, ``refs/heads/<b>.lock`` or
``index.lock`` behind, and every git command after it (the printed undo included) fails with
"Unable to create '…/HEAD.lock': File exists".

paella can tell such a lock from a live one because it says beforehand what it is about to do:
:func:`recorded_locks` writes a record (paella's pid and start time, the time, the lock paths
its child may take) into ``<state dir>/git-writes/`` before the git command runs and removes it
after. :func:`clear_left_locks` removes a listed lock only when all of these hold: the record's
paella is gone (pid and start time: a reused pid is not it), so its child is gone too; the lock
was made after the record was written; no process has the lock file open; and no git process
runs in this repository (between closing a lock and renaming it, git holds no descriptor). A
lock that fails any of these is left alone, and git's own message says what to do with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from paella_tui.supervisor.base.files import ensure_dir, write_atomic
from paella_tui.supervisor.store.workspace import Workspace

_FOLDER = "git-writes"
_CLOCK_SLACK_S = 2.0
"""File times and ``time.time()`` may disagree by a coarse timestamp's granularity."""


def _folder(workspace: Workspace) -> Path:
    return workspace.state_dir / _FOLDER


def _started(pid: int) -> float | None:
    import psutil  # here: a checkpoint imports this module and never needs psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


@contextlib.contextmanager
def recorded_locks(workspace: Workspace, locks: Iterable[Path], what: str) -> Iterator[None]:
    """Record, for as long as the block runs, that paella's git child may take ``locks``."""
    ensure_dir(workspace.state_dir)
    folder = ensure_dir(_folder(workspace))
    pid = os.getpid()
    record = {
        "pid": pid,
        "started": _started(pid),
        "t": time.time(),
        "what": what,
        "locks": [str(lock) for lock in locks],
    }
    path = folder / f"{pid}-{secrets.token_hex(6)}.json"
    write_atomic(path, json.dumps(record))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def clear_left_locks(workspace: Workspace) -> list[str]:
    """Remove the locks a dead paella's git child left; one sentence per lock removed."""
    folder = _folder(workspace)
    try:
        records = sorted(folder.glob("*.json"))
    except OSError:
        return []
    said: list[str] = []
    for path in records:
        try:
            record = json.loads(path.read_text())
            pid, started, t = int(record["pid"]), record["started"], float(record["t"])
            locks = [Path(str(lock)) for lock in record["locks"]]
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                path.unlink()  # unreadable: it proves nothing, and would be read forever
            continue
        alive = _started(pid)
        if alive is not None and (started is None or abs(alive - float(started)) < 1.0):
            continue  # its paella still runs (this one, or another): its locks are live
        keep = False
        for lock in locks:
            verdict = _verdict(workspace, lock, since=t)
            keep = keep or verdict == "in use"  # looked at again next time
            if verdict == "left":
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
                said.append(
                    f"removed {lock}, left by paella's git child ({record.get('what', 'a write')}) "
                    f"when paella (pid {pid}) was killed"
                )
        if not keep:
            with contextlib.suppress(OSError):
                path.unlink()
    return said


def _verdict(workspace: Workspace, lock: Path, *, since: float) -> str:
    """``gone``, ``older`` (than the record: someone else's), ``in use``, or ``left`` (ours)."""
    try:
        made = os.lstat(lock).st_mtime
    except OSError:
        return "gone"
    if made < since - _CLOCK_SLACK_S:
        return "older"
    return "in use" if in_use(workspace, lock) else "left"


def in_use(workspace: Workspace, lock: Path) -> bool:
    """Whether a process has ``lock`` open, or a git process runs in this repository (between
    closing a lock and renaming it into place, git holds no descriptor of it)."""
    places = {str(workspace.root), str(workspace.git_dir), str(workspace.common_dir)}
    import psutil

    target = str(lock)
    for proc in psutil.process_iter(["name", "cwd"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "git" and any(
                (proc.info["cwd"] or "").startswith(place) for place in places
            ):
                return True
            for handle in proc.open_files():
                if handle.path == target:
                    return True
    return False
