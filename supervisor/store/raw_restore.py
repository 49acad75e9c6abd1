"""Writing snapshot trees into the work tree byte for byte: git's blobs, never its checkout.

A rollback cannot use ``git checkout``/``read-tree -u``: they convert (``text``/``eol``,
``core.autocrlf``, ``ident``, smudge filters), follow sparse-checkout patterns, need an index that
is "uptodate", and leave a child writing files if paella is killed. Here the changes between two
trees are listed (``diff-tree -z``), blobs are read raw (``cat-file --batch``) and written by
paella itself: deletions first (deepest first, emptied folders pruned), then each file to a
temporary name beside it and renamed into place, with its executable bit, or as a symlink. So
at any moment every path holds either its old or its new content, and :class:`RestoreStopped`
says exactly which paths were changed when something (a full disk) stops it part-way.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.store.gitcli import Git

_CHUNK = 1 << 20
FILE_MODES = ("100644", "100755")
LINK_MODE = "120000"
GITLINK_MODE = "160000"


@dataclass(frozen=True)
class Change:
    """One path that differs between two trees (``diff-tree --raw``)."""

    status: str
    """A (added), D (deleted), M (modified), T (type changed)."""
    path: str
    old_mode: str
    new_mode: str
    old_oid: str
    new_oid: str


class RestoreStopped(Exception):
    """The restore stopped part-way; ``changed`` names every path it had already changed."""

    def __init__(self, path: str, error: str, changed: list[str]) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path
        self.error = error
        self.changed = changed


def tree_changes(git: Git, from_tree: str, to_tree: str) -> list[Change]:
    """The paths that differ from ``from_tree`` to ``to_tree``, with modes and object ids."""
    raw = git.run(["diff-tree", "-r", "-z", "--no-renames", from_tree, to_tree]).stdout
    items = raw.split(b"\0")
    changes: list[Change] = []
    # -z raw output: ":oldmode newmode oldsha newsha status\0path\0" per entry.
    for meta, path in zip(items[0::2], items[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        old_mode, new_mode, old_oid, new_oid, status = meta[1:].decode().split(" ")
        changes.append(
            Change(
                status[:1],
                path.decode(errors="surrogateescape"),
                old_mode,
                new_mode,
                old_oid,
                new_oid,
            )
        )
    return changes


class _Blobs:
    """Reads blobs from one ``git cat-file --batch`` process, in the order they were asked for.

    Every object id is sent up front by a feeder thread (one round trip per object would wait
    on git thousands of times); the reader takes the answers in the same order.
    """

    def __init__(self, git: Git, oids: list[str]) -> None:
        self._proc = git.popen(["cat-file", "--batch"])
        self._feeder = threading.Thread(
            target=self._feed, args=(oids,), name="paella-restore-blobs", daemon=True
        )
        self._feeder.start()

    def _feed(self, oids: list[str]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        # A stopped restore closes the process: the feeder then stops on the broken pipe.
        with contextlib.suppress(OSError, ValueError):
            stdin.write("".join(f"{oid}\n" for oid in oids).encode())
            stdin.close()

    def stream(self, oid: str, sink: Callable[[bytes], object]) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        header = stdout.readline().split()
        if len(header) != 3 or header[0].decode(errors="replace") != oid:
            raise OSError(f"object {oid} is missing from the repository")
        left = int(header[2])
        while left:
            chunk = stdout.read(min(left, _CHUNK))
            if not chunk:
                raise OSError(f"git cat-file stopped while reading {oid}")
            sink(chunk)
            left -= len(chunk)
        stdout.read(1)  # the newline after the content

    def read(self, oid: str) -> bytes:
        parts: list[bytes] = []
        self.stream(oid, parts.append)
        return b"".join(parts)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._proc.kill()
        self._proc.wait()
        self._feeder.join()
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name[:80]}.paella-{os.getpid()}.tmp")


def _remove(full: Path) -> None:
    """Remove a file, symlink or empty folder at ``full`` (missing is fine)."""
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.rmdir(full)  # a gitlink's folder goes only when empty: paella never enters it
    else:
        os.unlink(full)


def _prune_empty_parents(root: Path, rel: str) -> None:
    parts = rel.split("/")[:-1]
    while parts:
        try:
            os.rmdir(root.joinpath(*parts))
        except OSError:
            return
        parts.pop()


def _make_parents(root: Path, rel: str, folders: set[str]) -> None:
    """Create the folders above ``rel``, refusing to go through a file or a symlink.

    ``folders``: those this restore already found or made (checked once, not once per file).
    """
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if folder in folders:
            continue
        current = root / folder
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current)
        else:
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(f"{folder} is in the way (not a folder)")
        folders.add(folder)


def _write(root: Path, change: Change, blobs: _Blobs | None, folders: set[str]) -> None:
    full = root / change.path
    _make_parents(root, change.path, folders)
    try:
        here: os.stat_result | None = os.lstat(full)
    except FileNotFoundError:
        here = None
    if change.new_mode == GITLINK_MODE:
        if here is None:
            os.mkdir(full)
        return
    assert blobs is not None
    if here is not None and stat.S_ISDIR(here.st_mode):
        _remove_empty_tree(full)  # empty folders where the file goes (the plan refused files)
    tmp = _tmp_name(full)
    try:
        if change.new_mode == LINK_MODE:
            target = os.fsdecode(blobs.read(change.new_oid))
            try:
                os.symlink(target, tmp)
            except FileExistsError:  # left by a killed paella of the same pid: ours to replace
                os.unlink(tmp)
                os.symlink(target, tmp)
        else:
            # The umask decides the permission bits, as git's checkout does.
            perms = 0o777 if change.new_mode == "100755" else 0o666
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            try:
                fd = os.open(tmp, flags, perms)
            except FileExistsError:
                os.unlink(tmp)
                fd = os.open(tmp, flags, perms)
            with os.fdopen(fd, "wb") as handle:
                blobs.stream(change.new_oid, handle.write)
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def apply_changes(git: Git, root: Path, changes: list[Change]) -> list[str]:
    """Make the work tree hold the new side of ``changes``; return the paths changed.

    Raises RestoreStopped (with every path changed so far) when a write or a removal fails.
    """
    changed: list[str] = []
    # A type change between a file and a symlink is one rename; to or from a gitlink (a folder)
    # the old side goes first.
    removals = [
        c
        for c in changes
        if c.status == "D" or (c.status == "T" and GITLINK_MODE in (c.old_mode, c.new_mode))
    ]
    writes = [c for c in changes if c.status != "D"]
    current = ""
    try:
        for change in sorted(removals, key=lambda c: c.path.count("/"), reverse=True):
            current = change.path
            _remove(root / change.path)
            if change.status == "D":
                changed.append(change.path)
                _prune_empty_parents(root, change.path)
        needs_blob = [c.new_oid for c in writes if not _mode_only(c) and c.new_mode != GITLINK_MODE]
        blobs = _Blobs(git, needs_blob) if needs_blob else None
        folders: set[str] = set()
        try:
            for change in writes:
                current = change.path
                if _mode_only(change):
                    _chmod_exec(root / change.path, change.new_mode == "100755")
                else:
                    _write(root, change, blobs, folders)
                changed.append(change.path)
        finally:
            if blobs is not None:
                blobs.close()
    except OSError as err:
        if current not in changed and any(c.path == current and c.status == "T" for c in removals):
            changed.append(current)  # its old side is already gone
        raise RestoreStopped(current, err.strerror or str(err), changed) from err
    return changed


def _mode_only(change: Change) -> bool:
    """Only the executable bit changed: a chmod, no blob to read."""
    return (
        change.status == "M"
        and change.old_oid == change.new_oid
        and change.new_mode in FILE_MODES
        and change.old_mode in FILE_MODES
    )


def _remove_empty_tree(folder: Path) -> None:
    """Remove a folder that holds only (nested) empty folders; OSError if it holds anything else.

    Empty folders are in no snapshot, so nothing is lost; a file in there would be (the plan
    refuses a rollback that would remove one).
    """
    for dirpath, dirnames, filenames in os.walk(folder, topdown=False):
        if filenames:
            raise OSError(f"{dirpath} is in the way (it holds files)")
        for name in dirnames:
            sub = os.path.join(dirpath, name)
            if os.path.islink(sub):
                raise OSError(f"{sub} is in the way (a symlink)")
        os.rmdir(dirpath)


def _lstat_inside(root: Path, rel: str) -> os.stat_result | None:
    """``lstat`` of ``rel`` when every folder above it is a real folder, else None: a path
    beyond a symlink (``d/x`` with ``d`` a link to elsewhere) is not this path at all."""
    current = root
    parts = rel.split("/")
    try:
        for part in parts[:-1]:
            current = current / part
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return None
        return os.lstat(current / parts[-1])
    except (FileNotFoundError, NotADirectoryError):
        return None


def _chmod_exec(full: Path, executable: bool) -> None:
    mode = stat.S_IMODE(os.lstat(full).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    if executable:
        mode |= 0o111 & ~umask
    else:
        mode &= ~0o111
    os.chmod(full, mode)


def verify_written(root: Path, changes: list[Change], blob_id: Callable[[bytes], str]) -> list[str]:
    """The paths whose content or mode on disk is not the new side of ``changes`` (re-read)."""
    wrong: list[str] = []
    for change in changes:
        full = root / change.path
        st = _lstat_inside(root, change.path)
        if change.status == "D":
            if st is not None and not stat.S_ISDIR(st.st_mode):
                wrong.append(change.path)
            continue
        if change.new_mode == GITLINK_MODE:
            continue
        if st is None:
            wrong.append(change.path)
            continue
        if change.new_mode == LINK_MODE:
            ok = stat.S_ISLNK(st.st_mode)
            data = os.fsencode(os.readlink(full)) if ok else b""
        else:
            ok = stat.S_ISREG(st.st_mode) and bool(st.st_mode & stat.S_IXUSR) == (
                change.new_mode == "100755"
            )
            data = full.read_bytes() if ok else b""
        if not ok or blob_id(data) != change.new_oid:
            wrong.append(change.path)
    return wrong
