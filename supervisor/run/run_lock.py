"""The run lock: one supervisor per workspace, owned by a process named by pid and start time.

It is an :class:`~paella_tui.supervisor.base.owned_lock.OwnedLock` (an exclusive ``flock``, so taking
it is atomic and it dies with its holder: a ``kill -9`` never leaves it stale). Its file names
the holder (pid, process start time, and what it is doing) so a second ``paella run`` can say who
supervises; a reader trusts that only while the pid is alive with the same start time.

The lock file lives outside the repository (beside the mirror, under ``$XDG_STATE_HOME``), keyed
by the work tree's git dir, so an agent deleting ``.git/paella`` does not free it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.base.owned_lock import OwnedLock, Owner
from paella_tui.supervisor.store.mirror import repository_key, state_home
from paella_tui.supervisor.store.workspace import Workspace

_WHAT = "supervising this workspace"


def lock_path(workspace: Workspace) -> Path:
    """Where the run lock of this work tree lives."""
    worktree = hashlib.sha256(
        os.path.realpath(workspace.git_dir).encode(errors="surrogateescape")
    ).hexdigest()[:12]
    return state_home() / "paella" / repository_key(workspace) / f"run-{worktree}.lock"


def holder(workspace: Workspace) -> Owner | None:
    """The live process holding the run lock of ``workspace``, or None."""
    try:
        return OwnedLock(lock_path(workspace), what=_WHAT).owner()
    except OSError:
        return None


@contextlib.contextmanager
def run_lock(workspace: Workspace, *, what: str, run_id: str = "") -> Iterator[None]:
    """Hold the run lock while the block runs; WorkspaceError (exit 3) naming the holder if taken."""
    label = what + (f", run {run_id}" if run_id else "")
    lock = OwnedLock(lock_path(workspace), what=_WHAT, label=label)
    try:
        taken = lock.try_acquire()
    except OSError as err:
        raise WorkspaceError(
            f"cannot create the run lock {lock.path}: {err.strerror or err}",
            hint="set XDG_STATE_HOME to a folder you can write. Nothing was started.",
        ) from None
    if not taken:
        owner = lock.owner()
        who = owner.describe() if owner is not None else "another paella"
        raise WorkspaceError(
            f"this workspace is already supervised by {who}",
            hint="one supervisor per workspace: watch it with `paella status --watch`, or "
            "stop it first. Nothing was started.",
        )
    try:
        yield
    finally:
        lock.release()
