"""Bounded object growth: large untracked files rewritten at every snapshot are left out.

Every snapshot of a changed file stores a new blob: a 20 MB artifact rewritten each second would
grow ``.git`` by megabytes a second, with nothing ever pruned (refs keep every snapshot). An
untracked file of at least ``CHURN_MIN_SIZE`` bytes that changed at more than ``CHURN_STREAK``
snapshots in a row is left out of snapshots (and named, like a file over the size cap) until a
snapshot finds it unchanged; then it is kept again. Files the user's index tracks are always kept.
A rollback never touches a file a snapshot left out.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from paella_tui.supervisor.store.raw_blobs import MAX_ARGV_PATHS
from paella_tui.supervisor.store.workspace import Workspace

CHURN_MIN_SIZE = 4 * 1024 * 1024
CHURN_STREAK = 3
CHURN_REASON = (
    f"large untracked file rewritten at each of the last {CHURN_STREAK} snapshots: left out to "
    "bound .git growth (kept again once it stops changing)"
)


@dataclass(frozen=True)
class Churn:
    """What the churn rule saw in one snapshot."""

    state: dict[str, list[int]]
    """path -> [size, mtime_ns, snapshots in a row that found it changed]; kept in the memo."""
    left_out: tuple[tuple[str, int], ...]
    """(path, size) of the files to leave out of this snapshot."""


def churning(
    workspace: Workspace,
    before: dict[str, list[int]],
    candidates: list[str],
    *,
    min_size: int = CHURN_MIN_SIZE,
    stats: dict[str, os.stat_result | None] | None = None,
) -> Churn:
    """Apply the churn rule to the files a snapshot found changed or untracked (``candidates``)
    and those it watched last time (``before``, the previous :attr:`Churn.state`).

    ``stats``: ``lstat`` results the caller already has (None: the path is gone), so that a
    snapshot of thousands of changed files asks the file system once per file, not twice.
    """
    known = stats or {}
    big: list[tuple[str, int, int]] = []
    for path in dict.fromkeys([*before, *candidates]):
        if path in known:
            st = known[path]
            if st is None:
                continue
        else:
            try:
                st = os.lstat(workspace.root / path)
            except OSError:
                continue
        if stat.S_ISREG(st.st_mode) and st.st_size >= min_size:
            big.append((path, st.st_size, st.st_mtime_ns))
    if not big:
        return Churn({}, ())
    # Tracked in the user's index means the user's work: never left out for churn.
    args = ["ls-files", "-z"]
    if len(big) <= MAX_ARGV_PATHS:
        args += ["--", *[p for p, _, _ in big]]
    tracked = set(workspace.git.lines_z(args, env={"GIT_LITERAL_PATHSPECS": "1"}))
    state: dict[str, list[int]] = {}
    left_out: list[tuple[str, int]] = []
    for path, size, mtime in big:
        if path in tracked:
            continue
        old = before.get(path)
        if old is None:
            streak = 1
        elif [old[0], old[1]] == [size, mtime]:
            streak = 0
        else:
            streak = old[2] + 1
        state[path] = [size, mtime, streak]
        if streak > CHURN_STREAK:
            left_out.append((path, size))
    return Churn(state, tuple(left_out))
