"""The watcher's changed paths, kept for the next snapshot so that it looks at those paths only.

During a run the watcher already knows which paths changed; a snapshot that re-lists the whole
tree (``ls-files --others`` plus ``diff-files`` over every entry) costs more than ``git status``
on a big tree. A :class:`ChangeFeed` gathers the settled paths between snapshots; the snapshot
then runs its usual steps with those paths as (literal) pathspecs.

It answers "which paths" only when it is sure, and "scan everything" otherwise: before the first
full scan that started while the watcher was live, after the watcher reported a gap (an error, a
dropped batch, polling), for a path outside the work tree or one of git's own files
(``.gitignore``, ``.gitattributes``, ``.gitmodules``: they change what other paths mean), for
too many paths, and every ``FULL_EVERY`` snapshots or ``FULL_AFTER_S`` seconds (the safety net).
Paths noted while a snapshot runs stay for the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

FULL_EVERY = 50
"""Snapshots from the watcher's paths between two full scans, at most."""
FULL_AFTER_S = 120.0
"""Seconds since the last full scan after which the next snapshot is a full one."""
_GIT_FILES = (".gitignore", ".gitattributes", ".gitmodules")
MAX_PATHS = 2000
"""More changed paths than this are cheaper to find with a full scan (and fit no command line)."""


class ChangeFeed:
    """Changed paths reported by the watcher since the last snapshot (thread-safe)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._following = False
        self._pending: set[str] | None = None
        """None: unknown (a full scan is needed); a set: every path changed since the last one."""
        self._since_full = 0
        self._full_at = float("-inf")

    def follow(self) -> None:
        """The watcher is live from now on: the next full scan starts the record of changes."""
        with self._guard:
            self._following = True

    @property
    def following(self) -> bool:
        """Whether a watcher feeds this record (set by :meth:`follow`)."""
        return self._following

    def note(self, paths: Iterable[str]) -> None:
        """The watcher saw these paths (relative to the work tree) change."""
        with self._guard:
            if self._pending is not None:
                self._pending.update(paths)

    def stop(self) -> None:
        """The watcher stopped: nothing is followed any more (every snapshot is a full scan)."""
        with self._guard:
            self._following = False
            self._pending = None

    def gap(self) -> None:
        """The watcher may have missed changes: the next snapshot scans everything."""
        with self._guard:
            self._pending = None

    def full_scan_starting(self) -> None:
        """A full scan starts now: it covers every change made before it."""
        with self._guard:
            self._pending = set() if self._following else None
            self._since_full = 0
            self._full_at = time.monotonic()

    def take_paths(self) -> list[str] | None:
        """The paths the next snapshot must look at (emptied), or None for a full scan."""
        with self._guard:
            pending = self._pending
            if (
                pending is None
                or len(pending) > MAX_PATHS
                or self._since_full >= FULL_EVERY
                or time.monotonic() - self._full_at > FULL_AFTER_S
                or not all(_plain_path(p) for p in pending)
            ):
                return None
            self._pending = set()
            self._since_full += 1
            return sorted(pending)

    def give_back(self, paths: Iterable[str] | None) -> None:
        """A snapshot from these paths did not complete: keep them for the next one."""
        with self._guard:
            if paths is None:
                self._pending = None
            elif self._pending is not None:
                self._pending.update(paths)


def _plain_path(path: str) -> bool:
    """A path inside the work tree that is not one of git's own files."""
    if not path or path.startswith("/") or path.endswith("/") or "\\" in path:
        return False
    parts = path.split("/")
    if parts[-1] in _GIT_FILES:
        return False
    return not any(part in ("", ".", "..", ".git") for part in parts)
