"""Racy git: a same-size rewrite made in the clock tick in which an index was written is never
read back as the old bytes, whoever wrote that index and however the snapshot looks.

git trusts an entry's stat data (size, times, inode) only when the file is older than the index
file; an entry written in the index's own tick is compared by content. Anything that gives an
index a later time than git gave it (a copy) breaks that. The class: every writer of an index a
snapshot reads (the user's index that seeds the private one, a full snapshot, a followed one, a
rollback's verification), each followed by an in-place rewrite of the same size in the same
tick, then a snapshot in a later tick, full or followed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner, make_repo

from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# Each case waits for the clock's next second (twice), hardly using the CPU.
pytestmark = pytest.mark.waits

OLD, NEW = b"old bytes\n", b"new bytes\n"
assert len(OLD) == len(NEW)


def rewrite_in_place(path: Path, data: bytes) -> None:
    """The same inode and size: only the times can tell the change (and they keep the tick)."""
    with open(path, "r+b") as handle:
        handle.write(data)


def in_one_tick(action: Callable[[], None], index: Path, file: Path) -> int:
    """Run ``action`` (ending with the rewrite of ``file``) until the file's times fall in the
    second the index file was written in (git compares whole seconds); return that second. The
    first try is at once (the action takes a small part of a second, so it mostly falls in one:
    no wait for the next second's start); what the try must show is checked either way."""
    for attempt in range(5):
        if attempt:  # the last try crossed a second: start the next one at a second's start
            time.sleep(1.02 - time.time() % 1)
        action()
        written = int(os.stat(index).st_mtime)
        st = os.stat(file)
        if written == int(st.st_mtime) == int(st.st_ctime):
            return written
    pytest.fail("the index and the rewrite never fell in one second in five tries (overloaded)")


def after_tick(second: int) -> None:
    """Wait until the clock has left ``second``."""
    while int(time.time()) <= second:
        time.sleep(1.01 - time.time() % 1)


def new_snapshotter(root: Path, *, follow: bool) -> Snapshotter:
    snapshotter = Snapshotter(Workspace.find(root))
    if follow:
        snapshotter.changes.follow()
    return snapshotter


def take(snapshotter: Snapshotter, *paths: str) -> str:
    if paths:
        snapshotter.changes.note(paths)
    with snapshotter.locked():
        return snapshotter.take(follow_changes=snapshotter.changes.following).tree


USER_INDEX_WRITERS = {
    "add": ["add", "f.txt"],
    "commit": ["commit", "-q", "--allow-empty", "-am", "agent"],
    "reset": ["reset", "-q"],
    "refresh": ["update-index", "-q", "--refresh"],
    "status": ["status", "--porcelain"],
}
"""git commands that (re)write the user's index with f.txt's stat data."""


@pytest.mark.parametrize("writer", sorted(USER_INDEX_WRITERS))
def test_the_seed_from_the_users_index_keeps_its_racy_entries(
    tmp_path: Path, git: GitRunner, writer: str
) -> None:
    root = make_repo(tmp_path / "repo", git)
    (root / "f.txt").write_bytes(OLD)
    git(root, "add", "f.txt")
    git(root, "commit", "-q", "-m", "f")

    def write_index_then_rewrite() -> None:
        (root / "f.txt").write_bytes(OLD)  # new times: the writer stores them in the index
        git(root, *USER_INDEX_WRITERS[writer])
        rewrite_in_place(root / "f.txt", NEW)

    second = in_one_tick(
        write_index_then_rewrite, Workspace.find(root).git_dir / "index", root / "f.txt"
    )
    after_tick(second)
    # A fresh snapshotter has no private index: it starts from a copy of the user's.
    tree = take(new_snapshotter(root, follow=False))
    assert git.tree(root, tree)["f.txt"][1] == NEW


@pytest.mark.parametrize("follow", [False, True], ids=["full", "followed"])
def test_a_snapshot_written_in_the_rewrites_tick_reads_it_next_time(
    tmp_path: Path, git: GitRunner, follow: bool
) -> None:
    root = make_repo(tmp_path / "repo", git)
    snapshotter = new_snapshotter(root, follow=follow)
    take(snapshotter)  # the first one is a full scan (it starts the followed record)

    def snapshot_then_rewrite() -> None:
        (root / "f.txt").write_bytes(OLD)
        assert git.tree(root, take(snapshotter, "f.txt"))["f.txt"][1] == OLD
        rewrite_in_place(root / "f.txt", NEW)

    second = in_one_tick(snapshot_then_rewrite, snapshotter.index_file, root / "f.txt")
    after_tick(second)
    # An unrelated change first: its snapshot rewrites the index (git must smudge f.txt's
    # entry then, or a later snapshot would trust it).
    (root / "other.txt").write_bytes(b"other\n")
    take(snapshotter, "other.txt")
    assert git.tree(root, take(snapshotter, "f.txt"))["f.txt"][1] == NEW
    assert snapshotter.last_scan == ("changed" if follow else "full")


@pytest.mark.parametrize("follow", [False, True], ids=["full", "followed"])
def test_a_file_a_rollback_restored_and_rewrote_in_its_tick_is_read_next_time(
    tmp_path: Path, git: GitRunner, follow: bool
) -> None:
    root = make_repo(tmp_path / "repo", git)
    (root / "f.txt").write_bytes(OLD)
    run = RunStore(Workspace.find(root)).current_or_manual("racy test")
    snapshotter = new_snapshotter(root, follow=follow)
    target = checkpoints.take_checkpoint(run, snapshotter)

    def roll_back_then_rewrite() -> None:
        (root / "f.txt").write_bytes(b"the agent's version\n")
        rollback.rollback(run, target, snapshotter=snapshotter)
        rewrite_in_place(root / "f.txt", NEW)

    second = in_one_tick(roll_back_then_rewrite, snapshotter.index_file, root / "f.txt")
    after_tick(second)
    assert git.tree(root, take(snapshotter, "f.txt"))["f.txt"][1] == NEW
