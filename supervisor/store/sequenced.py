"""The run's snapshotter: snapshots numbered in the order they were taken, and a fresh one shared.

The gates' evaluation and the step keeper both snapshot the workspace, in threads, and hear of
the result in whatever order the event loop delivers it; the numbers let the keeper put an older
tree, delivered late, after a newer one it already kept (no step goes backwards).

Several parts of a run ask the same question within milliseconds: "what is the tree now that X
happened" (each gate's end, during an evaluation; a settle while the gates run; a trigger). Any
full scan that *started* after X answers it: every write made before X was on disk when that
scan listed the tree. :meth:`SequencedSnapshotter.take_fresh` hands out such a scan when there
is one, and takes a new one otherwise; callers that wait for the lock while a scan runs get the
next one together. It never relies on the watcher (which can miss events: an overflow, a folder
replaced) and never on timing: only on the order of "X happened" and "the scan began", both
measured on one monotonic clock in this process. A scan from the watcher's changed paths is never
shared (it does not see a change that has not settled yet), nor one taken inside a lock hold
that may have written the work tree afterwards (a rollback, a revert of protected files).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence

from paella_tui.supervisor.store.snapshot import DEFAULT_MAX_FILE_SIZE, Snapshot, Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


class SequencedSnapshotter(Snapshotter):
    """A snapshotter that numbers its snapshots (under the lock) and shares a fresh full scan."""

    KEEP = 256
    """How many recent trees keep their number."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        exclude: Sequence[str] = (),
    ) -> None:
        super().__init__(workspace, max_file_size=max_file_size, exclude=exclude)
        self.sequence = 0
        """The number of the newest snapshot."""
        self._numbers: OrderedDict[str, int] = OrderedDict()
        self._guard = threading.Lock()
        self._fresh: tuple[float, Snapshot] | None = None
        """The newest full scan that may be shared, and when it began (monotonic)."""
        self._local = threading.local()
        self.shared = 0
        """How many times :meth:`take_fresh` answered with a scan already taken."""

    @contextlib.contextmanager
    def locked(self, what: str = "a snapshot") -> Iterator[None]:
        """Hold the snapshot lock; a hold that is not only snapshots (a rollback, a revert) may
        write the work tree after its scan, so no scan taken before it ends is shared."""
        with super().locked(what):
            try:
                yield
            finally:
                if not getattr(self._local, "snapshot_only", False):
                    with self._guard:
                        self._fresh = None

    def take_locked(self, what: str = "a snapshot", *, follow_changes: bool = False) -> Snapshot:
        """Snapshot the workspace now, holding the lock for just that (blocking: git)."""
        with self.only_snapshots():
            return super().take_locked(what, follow_changes=follow_changes)

    def take_fresh(
        self, since: float, what: str = "a snapshot", *, follow_changes: bool = False
    ) -> Snapshot:
        """The tree as it was at some moment at or after ``since`` (``time.monotonic()``): a full
        scan that began then or later if there is one, else a new snapshot (under the lock;
        ``follow_changes`` as :meth:`Snapshotter.take`)."""
        # Under the lock: a hold that writes the work tree (a rollback) ends before this looks,
        # and one that waited for a scan begun after ``since`` gets that scan.
        with self.only_snapshots(), self.locked(what):
            shared = self._shareable(since)
            if shared is not None:
                return shared
            return self.take(follow_changes=follow_changes)

    def take(self, *, follow_changes: bool = False) -> Snapshot:
        """Snapshot (the caller holds the lock), and number the tree."""
        began = time.monotonic()
        snap = super().take(follow_changes=follow_changes)
        with self._guard:
            self.sequence += 1
            self._numbers[snap.tree] = self.sequence
            self._numbers.move_to_end(snap.tree)
            while len(self._numbers) > self.KEEP:
                self._numbers.popitem(last=False)
            # Only a full scan saw what changed before it began, settled or not; and only one
            # in a hold that writes nothing afterwards still shows the tree it found.
            if self.last_scan == "full" and getattr(self._local, "snapshot_only", False):
                self._fresh = (began, snap)
        return snap

    def number(self, tree: str) -> int | None:
        """The number of the newest snapshot that found ``tree`` (None: not among the recent)."""
        with self._guard:
            return self._numbers.get(tree)

    def _shareable(self, since: float) -> Snapshot | None:
        with self._guard:
            fresh = self._fresh
            if fresh is None or fresh[0] < since:
                return None
            self.shared += 1
            return fresh[1]

    @contextlib.contextmanager
    def only_snapshots(self) -> Iterator[None]:
        """Mark this thread's lock holds, for the ``with`` block, as ones that snapshot and write
        no work tree (a checkpoint of a tree: its scan may be shared)."""
        before = getattr(self._local, "snapshot_only", False)
        self._local.snapshot_only = True
        try:
            yield
        finally:
            self._local.snapshot_only = before


def take_fresh(
    snapshotter: Snapshotter, since: float, what: str, *, follow_changes: bool = False
) -> Snapshot:
    """:meth:`SequencedSnapshotter.take_fresh` when ``snapshotter`` can share, else a snapshot
    taken now (under the lock)."""
    if isinstance(snapshotter, SequencedSnapshotter):
        return snapshotter.take_fresh(since, what, follow_changes=follow_changes)
    return snapshotter.take_locked(what, follow_changes=follow_changes)
