"""Snapshots that follow the change (issue 17): a snapshot built from the watcher's changed paths
is the same tree as a fresh full scan, for random edit sequences on a real repository (files,
folders, and ignore files that ignore themselves or their folder, at any depth), and any doubt
falls back to the full scan."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.base.globs import folder_match, match_any
from paella_tui.supervisor.judge.byproducts import BYPRODUCTS
from paella_tui.supervisor.store.change_feed import FULL_EVERY, ChangeFeed
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace
from paella_tui.supervisor.watch.ignore_verdicts import IgnoreVerdicts

MAX_SIZE = 64
"""A small size cap, so that some writes are left out and come back."""
FOLDERS = ("", "a", "a/b", "build", "__pycache__", "a/__pycache__", "c")
NAMES = ("x.txt", "y.py", "z.pyc", "w.log", "big.bin")
PATHS = [f"{d}/{n}" if d else n for d, n in itertools.product(FOLDERS, NAMES)]
CONTENTS = (b"one\n", b"two\r\nlines\r\n", b"\0binary", b"x" * (MAX_SIZE + 1), b"")

path_st = st.sampled_from(PATHS)
edit_st = st.one_of(
    st.tuples(st.just("write"), path_st, st.sampled_from(CONTENTS)),
    st.tuples(st.just("delete"), path_st),
    st.tuples(st.just("rename"), path_st, path_st),
    st.tuples(st.just("chmod"), path_st, st.booleans()),
    st.tuples(st.just("symlink"), path_st, st.sampled_from(["x.txt", "a", "../nowhere"])),
    st.tuples(st.just("rmtree"), st.sampled_from(FOLDERS[1:])),
)
RULE_FILES = (".gitignore", "a/.gitignore", "a/b/.gitignore", "c/.gitignore", "build/.gitignore")
"""Rule files at every depth, one in a folder the top rules ignore whole (``build/``)."""
RULES = (
    b"*\n",  # ignores itself and everything beside it (a venv's, a tool cache's)
    b"*\n!x.txt\n",  # ignores itself, lets one file in
    b"*.txt\n",
    b"b/\n",
    b".gitignore\n*.py\n",  # ignores itself by name
    b"!*\n",
    b"",
)
rule_edit_st = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(RULE_FILES), st.sampled_from(RULES)),
    st.tuples(st.just("delete"), st.sampled_from(RULE_FILES)),
)
"""Edits of ignore rules: written (self-ignoring ones too), rewritten, deleted."""
any_edit_st = st.one_of(edit_st, rule_edit_st, rule_edit_st)


@contextlib.contextmanager
def state_dir(path: Path) -> Iterator[None]:
    """Build a snapshotter whose private index lives in ``path`` (not the run's own)."""
    old = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(path)
    try:
        yield
    finally:
        if old is None:
            del os.environ[STATE_DIR_ENV]
        else:
            os.environ[STATE_DIR_ENV] = old


def full_scan_tree(workspace: Workspace, where: Path) -> str:
    """The tree a fresh snapshotter (no private index yet, nothing followed) finds. (A
    ``Workspace`` is the work tree's paths only, found once: the same for every snapshotter.)"""
    shutil.rmtree(where, ignore_errors=True)
    with state_dir(where):
        fresh = Snapshotter(workspace, max_file_size=MAX_SIZE, exclude=BYPRODUCTS)
        with fresh.locked():
            return fresh.take().tree


def watcher_view(workspace: Workspace, touched: set[str]) -> list[str]:
    """What the watcher reports of these paths: its own rules (byproduct globs, then git's
    ignore rules asked the way it asks them, a ``.gitignore`` git reads counting though
    ignored), so entries it cannot see are the snapshot's job."""
    cheap = [p for p in touched if not (folder_match(p, BYPRODUCTS) or match_any(p, BYPRODUCTS))]
    verdicts = IgnoreVerdicts(workspace.git)
    ignored = verdicts.ignored(cheap) if cheap else set()
    return [p for p in cheap if p not in ignored or verdicts.rules_read(p)]


class Disk:
    """Edits on disk, as an agent makes them, and the paths a watcher would have seen change."""

    def __init__(self, root: Path, with_folders: bool) -> None:
        self.root = root
        self.with_folders = with_folders
        self.touched: set[str] = set()

    def clear_way(self, rel: str) -> None:
        """A file (or link) where a folder must go is removed first, as an agent would."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            target = self.root / folder
            if target.is_symlink() or target.is_file():
                target.unlink()
                self.touched.add(folder)
            elif not target.exists():
                target.mkdir()
                if self.with_folders:
                    self.touched.add(folder)
        target = self.root / rel
        if target.is_dir() and not target.is_symlink():
            self.remove_tree(rel)

    def remove_tree(self, rel: str) -> None:
        target = self.root / rel
        for dirpath, dirnames, filenames in os.walk(target):
            for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                self.touched.add(str((Path(dirpath) / name).relative_to(self.root)))
        shutil.rmtree(target)
        self.touched.add(rel)

    def is_file(self, rel: str) -> bool:
        target = self.root / rel
        return target.is_symlink() or target.is_file()

    def write(self, rel: str, data: object) -> None:
        assert isinstance(data, bytes)
        self.clear_way(rel)
        (self.root / rel).unlink(missing_ok=True)
        (self.root / rel).write_bytes(data)
        self.touched.add(rel)

    def delete(self, rel: str) -> None:
        if self.is_file(rel):
            (self.root / rel).unlink()
            self.touched.add(rel)

    def rename(self, src: str, dst: str) -> None:
        if src != dst and self.is_file(src):
            self.clear_way(dst)
            os.replace(self.root / src, self.root / dst)
            self.touched.update((src, dst))

    def chmod(self, rel: str, executable: object) -> None:
        target = self.root / rel
        if target.is_file() and not target.is_symlink():
            target.chmod(0o755 if executable else 0o644)
            self.touched.add(rel)

    def symlink(self, rel: str, where: str) -> None:
        self.clear_way(rel)
        (self.root / rel).unlink(missing_ok=True)
        os.symlink(where, self.root / rel)
        self.touched.add(rel)

    def rmtree(self, rel: str) -> None:
        target = self.root / rel
        if target.is_dir() and not target.is_symlink():
            self.remove_tree(rel)


def apply(root: Path, edit: tuple[object, ...], with_folders: bool) -> set[str]:
    """Do one edit on disk; the paths a watcher would have seen change."""
    disk = Disk(root, with_folders)
    kind, *args = edit
    if kind == "write":
        disk.write(str(args[0]), args[1])
    elif kind == "chmod":
        disk.chmod(str(args[0]), bool(args[1]))
    elif kind in ("rename", "symlink"):
        getattr(disk, str(kind))(str(args[0]), str(args[1]))
    else:  # delete, rmtree
        getattr(disk, str(kind))(str(args[0]))
    return disk.touched


def start(root: Path, tmp: Path) -> Snapshotter:
    """A run's snapshotter on a repository with ignore rules and a tracked ignored file."""
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "keep.log").write_text("tracked though ignored\n")
    workspace = Workspace.find(root)
    # The rules tracked too: the edits delete and write back tracked files the rules ignore
    # (keep.log, and .gitignore once it ignores itself), which store/dormant.py holds again.
    workspace.git.run(["add", "-f", "keep.log", ".gitignore"])
    with state_dir(tmp / "run-state"):
        snapshotter = Snapshotter(workspace, max_file_size=MAX_SIZE, exclude=BYPRODUCTS)
    snapshotter.changes.follow()
    with snapshotter.locked():
        snapshotter.take(follow_changes=True)  # the first one is a full scan
    assert snapshotter.last_scan == "full"
    return snapshotter


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(
        st.tuples(st.lists(any_edit_st, min_size=1, max_size=4), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_a_snapshot_from_the_changed_paths_equals_a_full_scan(
    tmp_path_factory, steps: list[tuple[list[tuple[object, ...]], bool]]
) -> None:
    tmp = tmp_path_factory.mktemp("follow")
    root = make_repo(tmp / "repo")
    snapshotter = start(root, tmp)
    for edits, with_folders in steps:
        touched: set[str] = set()
        for edit in edits:
            touched |= apply(root, edit, with_folders)
        # Also tracked, ignored by the rules (while they say so): the watcher does not report it.
        (root / "keep.log").write_text(f"{len(touched)} changes\n")
        touched.add("keep.log")
        snapshotter.changes.note(watcher_view(snapshotter.workspace, touched))
        with snapshotter.locked():
            followed = snapshotter.take(follow_changes=True).tree
        reference = full_scan_tree(snapshotter.workspace, tmp / "ref-state")
        assert followed == reference, (edits, snapshotter.last_scan)


def test_one_changed_file_is_snapshotted_from_its_path(tmp_path: Path, git) -> None:
    root = make_repo(tmp_path / "repo", git)
    snapshotter = start(root, tmp_path)
    (root / "README.md").write_text("changed\n")
    (root / "new.txt").write_text("new\n")
    snapshotter.changes.note(["README.md", "new.txt"])
    with snapshotter.locked():
        tree = snapshotter.take(follow_changes=True).tree
    assert snapshotter.last_scan == "changed"
    assert git.tree(root, tree)["new.txt"] == ("100644", b"new\n")
    assert tree == full_scan_tree(snapshotter.workspace, tmp_path / "ref")


def test_a_change_the_watcher_did_not_report_is_kept_for_the_full_scan(tmp_path: Path) -> None:
    """Not a fast path's promise, but its bound: the safety net finds what no path named."""
    root = make_repo(tmp_path / "repo")
    snapshotter = start(root, tmp_path)
    (root / "unseen.txt").write_text("missed by the watcher\n")
    snapshotter.changes.gap()
    with snapshotter.locked():
        tree = snapshotter.take(follow_changes=True).tree
    assert snapshotter.last_scan == "full"
    assert tree == full_scan_tree(snapshotter.workspace, tmp_path / "ref")


def test_doubtful_paths_fall_back_to_the_full_scan(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    snapshotter = start(root, tmp_path)
    (root / "folder").mkdir()
    (root / "folder" / "f.txt").write_text("in a new folder\n")
    for reported in (["folder"], [".gitignore"], ["../outside"], ["/abs"], ["a/./b"]):
        snapshotter.changes.note(reported)
        with snapshotter.locked():
            tree = snapshotter.take(follow_changes=True).tree
        assert snapshotter.last_scan == "full", reported
        assert tree == full_scan_tree(snapshotter.workspace, tmp_path / "ref")


def test_a_full_scan_comes_back_every_so_often() -> None:
    feed = ChangeFeed()
    feed.follow()
    assert feed.take_paths() is None  # nothing is known before the first full scan
    feed.full_scan_starting()
    kinds = []
    for _ in range(FULL_EVERY + 1):
        feed.note(["f.txt"])
        kinds.append(feed.take_paths())
    assert kinds[:FULL_EVERY] == [["f.txt"]] * FULL_EVERY
    assert kinds[FULL_EVERY] is None


def test_paths_noted_without_a_follower_never_replace_a_full_scan() -> None:
    feed = ChangeFeed()
    feed.full_scan_starting()
    feed.note(["f.txt"])
    assert feed.take_paths() is None
