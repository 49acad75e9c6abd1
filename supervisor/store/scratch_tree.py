"""Scratch trees: a git tree written out to a temporary folder outside the work tree, to run gates on.

A bisect judges old steps, and the run's judge judges the work with protected files at their
frozen content: a gate must never run in the user's work tree for that (the agent may be working
there, and nothing of the user's is touched). A :class:`ScratchTree` is a folder of its own; the
repository's object store is only read. The user's work tree, index, HEAD and branch are never
written; no ref is made.

Files are written by paella from the raw blobs (:mod:`raw_restore`, as a rollback writes them):
no ``git checkout``, so neither ``core.autocrlf``/``core.eol`` (configuration), nor ``text``/
``eol``/``ident`` attributes, nor a smudge filter ever changes a byte. Moving to another tree
writes only what differs between the two, plus what a gate changed in the folder since: each
file written is remembered with its ``lstat`` (inode, size, mtime in ns, mode), and one that no
longer matches is written again. Files a gate created are left, as untracked files are in a
work tree. Ignored paths the gates need (a virtualenv, ``node_modules``) are not in any
snapshot; ``links`` names them, and each is symlinked from the work tree into the scratch tree.

The scratch tree is not a git repository (it has no ``.git``): gates that need git history see
none. Each scratch folder holds an ``owner`` record (pid and start time of the paella that made
it): a paella killed with ``kill -9`` cannot delete its folder, a whole copy of a tree, so the
next scratch tree made in the same temporary folder deletes those whose owner is gone. Usage::

    with ScratchTree(workspace, links=(".venv",)) as scratch:
        scratch.checkout(tree)
        run_the_gate(cwd=scratch.path)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.base.owned_lock import Owner
from paella_tui.supervisor.store.raw_restore import (
    GITLINK_MODE,
    Change,
    RestoreStopped,
    apply_changes,
    tree_changes,
)
from paella_tui.supervisor.store.workspace import Workspace

PREFIX = "paella-scratch-"
OWNER_FILE = "owner"
"""In each scratch folder: ``<pid> <start time>`` of the paella that made it."""

_Stat = tuple[int, int, int, int]
"""(inode, size, mtime in ns, mode) of a file as written."""


class ScratchTree:
    """A temporary work tree, outside the user's, that holds one git tree at a time."""

    def __init__(
        self, workspace: Workspace, *, links: tuple[str, ...] = (), parent: Path | None = None
    ) -> None:
        """Create the folder (under ``parent``, default the system's temp folder)."""
        self.workspace = workspace
        self.links = links
        remove_left_scratch(Path(parent or tempfile.gettempdir()))
        area = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent)).resolve()
        root = workspace.root.resolve()
        if area == root or root in area.parents:
            shutil.rmtree(area, ignore_errors=True)
            raise WorkspaceError(
                f"the temporary folder {area} is inside the work tree {root}",
                hint="point TMPDIR outside the repository; a scratch tree never lives in it.",
            )
        os.chmod(area, 0o700)
        me = Owner.me()
        (area / OWNER_FILE).write_text(f"{me.pid} {me.start_time}\n")
        self._area = area
        self.path = area / "tree"
        """The scratch work tree: run gates with this as their folder."""
        self.path.mkdir(mode=0o700)
        self.tree: str | None = None
        """The tree the folder holds now (None before the first checkout)."""
        self._git = workspace.git
        self._written: dict[str, tuple[str, str, _Stat | None]] = {}
        """Each path of the tree held: its mode, its blob and its lstat as written."""

    def __enter__(self) -> ScratchTree:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def checkout(self, tree: str) -> None:
        """Make the folder hold exactly ``tree`` (plus the links); only differing files are written."""
        if tree == self.tree:
            return
        start = self.tree or self._git.out(["mktree"], input=b"")  # the empty tree
        # What a gate changed or deleted here since is written again from the tree's blob (an
        # unknown old side: never taken for a mode-only change).
        touched = {
            path: (mode, oid)
            for path, (mode, oid, written) in self._written.items()
            if _stat(self.path / path) != written
        }
        changes = [
            replace(c, old_oid="0" * len(c.old_oid)) if c.path in touched and c.status != "D" else c
            for c in tree_changes(self._git, start, tree)
        ]
        moved = {c.path for c in changes}
        for path, (mode, oid) in touched.items():
            if path not in moved:
                changes.append(Change("M", path, mode, mode, "0" * len(oid), oid))
        try:
            apply_changes(self._git, self.path, changes)
        except RestoreStopped as stop:
            self.tree = None  # unknown now: the next checkout starts from a fresh folder
            self._reset()
            raise WorkspaceError(
                f"could not write the scratch tree at {stop.path}: {stop.error}",
                hint="free space in the temporary folder (TMPDIR) and try again.",
            ) from stop
        for change in changes:
            if change.status == "D":
                self._written.pop(change.path, None)
            elif change.new_mode == GITLINK_MODE:
                self._written[change.path] = (change.new_mode, change.new_oid, None)
            else:
                entry = (change.new_mode, change.new_oid, _stat(self.path / change.path))
                self._written[change.path] = entry
        self.tree = tree
        self._link()

    def _reset(self) -> None:
        """Empty the folder (after a failed write, nothing in it is known any more)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(mode=0o700, exist_ok=True)
        self._written.clear()

    def _link(self) -> None:
        """Symlink each configured ignored path from the work tree, where the tree has none."""
        for link in self.links:
            source = self.workspace.root / link
            target = self.path / link
            if not os.path.lexists(source) or os.path.lexists(target):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source, target_is_directory=source.is_dir())

    def close(self) -> None:
        """Delete the scratch folder (links are removed, never followed)."""
        _remove(self._area)


class ScratchClosed(RuntimeError):
    """A scratch slot was asked for a tree after its close (a search abandoned at shutdown)."""


class ScratchSlot:
    """A scratch tree made at its first checkout and deleted at the close, whichever thread
    asks: a cancelled task does not stop the worker thread that makes or fills the tree, so
    checking out and closing take one lock, and nothing is made or written after the close
    (else the abandoned thread leaves a whole copy of a tree in the temporary folder)."""

    def __init__(self, workspace: Workspace, *, links: tuple[str, ...] = ()) -> None:
        """``links``: ignored paths linked into the tree (see :class:`ScratchTree`)."""
        self.workspace = workspace
        self.links = links
        self._tree: ScratchTree | None = None
        self._lock = threading.Lock()
        self._closed = False

    def checkout(self, tree: str) -> Path:
        """Make the scratch tree hold ``tree`` (blocking); the folder. ScratchClosed after close."""
        with self._lock:
            if self._closed:
                raise ScratchClosed("the scratch tree was closed")
            if self._tree is None:
                self._tree = ScratchTree(self.workspace, links=self.links)
            self._tree.checkout(tree)
            return self._tree.path

    def close(self) -> None:
        """Delete the scratch tree, if one was made (after a checkout in progress ends)."""
        with self._lock:
            self._closed = True
            scratch, self._tree = self._tree, None
            if scratch is not None:
                scratch.close()


def remove_left_scratch(parent: Path) -> list[Path]:
    """Delete the scratch folders in ``parent`` whose paella is gone (killed before its close);
    the folders removed. Only folders of this user with a readable owner record that names a
    process no longer running (pid and start time) are touched: a live paella's, another user's
    and one without a record (made by an older paella) are left."""
    removed: list[Path] = []
    try:
        candidates = [entry for entry in os.scandir(parent) if entry.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in candidates:
        area = Path(entry.path)
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            owner = _owner(area)
        except OSError:
            continue
        if owner is not None and not owner.alive():
            _remove(area)
            removed.append(area)
    return removed


def _owner(area: Path) -> Owner | None:
    """The owner record of a scratch folder, or None when there is none or it is not one."""
    try:
        words = (area / OWNER_FILE).read_text().split()
        pid, started = int(words[0]), float(words[1])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if pid <= 0 or len(words) != 2:
        return None
    return Owner(pid, started)


def _remove(area: Path) -> None:
    """Delete a scratch folder, including read-only folders a gate left (links never followed)."""
    with contextlib.suppress(FileNotFoundError):

        def unlock(func: object, path: str, _exc: object) -> None:
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(path), 0o700)
                os.chmod(path, 0o700)
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)

        shutil.rmtree(area, onerror=unlock)


def _stat(path: Path) -> _Stat | None:
    """The ``lstat`` of a written file that says whether it was touched since (None: gone)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
