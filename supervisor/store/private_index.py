"""paella's private index file and what is kept beside it: the seed, the memo, the exclude files.

The private index (``GIT_INDEX_FILE`` under paella's state) persists between snapshots so that
git's stat cache lets only changed files be hashed again. It starts as a copy of the user's index
(:func:`seed`), with that index's modification time: git trusts an entry's stat data only when
the file is older than the index file, so a copy stamped "now" would make entries written in the
user's index's last clock tick look settled, and a same-size rewrite in that tick would be read
back as the old bytes (racy git). The memo (:class:`Memo`) remembers what the last snapshot
found (gitlinks, churn, watcher-blind entries, files left out, the ignore rules' signature) for
the index it wrote, and is
valid only while that very index file is in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from paella_tui.supervisor.base.files import ensure_dir
from paella_tui.supervisor.store.gitcli import Git, encode_paths_z
from paella_tui.supervisor.store.index_update import AttributeSources, is_attributes_file
from paella_tui.supervisor.store.loose_objects import is_object_id
from paella_tui.supervisor.store.raw_blobs import RawBlobs
from paella_tui.supervisor.store.workspace import Workspace


def seed(
    index_file: Path, workspace: Workspace, git: Git, raw: RawBlobs, attributes: AttributeSources
) -> list[str] | None:
    """Create the private index if it is missing: a copy of the user's index when it is a plain
    one (its stat cache: the first snapshot hashes only what changed), else HEAD's tree. Returns
    the copy's ``.gitattributes`` entries (None: no copy made now)."""
    if index_file.exists():
        return None
    ensure_dir(index_file.parent)
    real_index = workspace.git_dir / "index"
    # The configuration as git reads it now (no process of its own: git_programs.ConfigWatch).
    settings = workspace.git.settings()
    if real_index.exists() and _plain_user_index(settings):
        # A copy is a plain read: git replaces the index by rename, never in place.
        tmp = index_file.with_name(index_file.name + ".seed")
        copy_keeping_mtime(real_index, tmp)
        os.replace(tmp, index_file)
        # One listing proves the copy readable, names its hiding bits and its paths.
        listing = git.run(["ls-files", "-v", "-z"], check=False)
        if listing.returncode == 0:
            paths = _clear_hiding_bits(git, listing.stdout)
            autocrlf = config_values(settings, "core.autocrlf")
            everything = bool(autocrlf) and _is_true(autocrlf[-1], also=(b"input",))
            # Which entries git may have converted: ``check-attr`` only when an attributes file
            # can reach them (AttributeSources.may_apply; none can, in most repositories).
            in_index = [p for p in paths if is_attributes_file(p)]
            if everything:
                raw.keep_raw_bytes(paths)
            elif attributes.may_apply(paths, in_index):
                raw.keep_raw_bytes(raw.converting(paths))
            return in_index
        index_file.unlink()
    if git.rev_parse("HEAD^{tree}"):
        git.run(["read-tree", "HEAD"])
    return None


def config_values(settings: bytes, key: str) -> list[bytes | None]:
    """The values of ``key`` in ``git config -z --get-regexp`` output, in order (None: the key
    stands alone, which git reads as true)."""
    values: list[bytes | None] = []
    for item in settings.split(b"\0"):
        name, newline, value = item.partition(b"\n")
        if name.decode(errors="replace").lower() == key:
            values.append(value if newline else None)
    return values


def _is_true(value: bytes | None, *, also: tuple[bytes, ...] = ()) -> bool:
    """Whether git reads this config value as true (or as one of ``also``)."""
    return value is None or value.strip().lower() in (b"true", b"yes", b"on", b"1", *also)


def copy_keeping_mtime(source: Path, copy: Path) -> None:
    """Copy an index file with its modification time (the copy private: 0600).

    git trusts an entry's stat data only when the file is older than the index file itself;
    an entry written in the index's own last clock tick is "racily clean" and git compares its
    bytes. A copy with a new modification time would make those entries look settled, and a
    same-size rewrite made in that tick would be read back as the old bytes (racy git).
    """
    # One open file for the bytes and the time: git may replace the index by rename meanwhile.
    with open(source, "rb") as src:
        times = os.fstat(src.fileno())
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)
    os.chmod(copy, 0o600)
    os.utime(copy, ns=(times.st_atime_ns, times.st_mtime_ns))


def _plain_user_index(settings: bytes) -> bool:
    """The user's index can be copied as a seed: no split index, no sparse checkout."""
    keys = ("core.splitindex", "core.sparsecheckout", "index.sparse")
    return not any(_is_true(value) for key in keys for value in config_values(settings, key))


def _clear_hiding_bits(git: Git, listing: bytes) -> list[str]:
    """Drop skip-worktree and assume-unchanged bits the copied index carries (with them git
    would report a changed or missing file as unchanged), from its ``ls-files -v -z``
    ``listing``; the index's paths."""
    paths: list[str] = []
    skip: list[str] = []
    assume: list[str] = []
    for item in listing.split(b"\0"):
        if len(item) < 3:
            continue
        tag, path = item[:1], item[2:].decode(errors="surrogateescape")
        paths.append(path)
        if tag in (b"S", b"s"):
            skip.append(path)
        if tag.islower():
            assume.append(path)
    if skip:
        git.run(["update-index", "--no-skip-worktree", "-z", "--stdin"], input=encode_paths_z(skip))
    if assume:
        git.run(
            ["update-index", "--no-assume-unchanged", "-z", "--stdin"],
            input=encode_paths_z(assume),
        )
    return list(dict.fromkeys(paths))


class Memo:
    """What the last snapshot found, kept beside the private index it wrote."""

    def __init__(self, memo_file: Path, index_file: Path) -> None:
        self.memo_file = memo_file
        self.index_file = index_file

    def _index_signature(self) -> list[int] | None:
        try:
            st = os.stat(self.index_file)
        except FileNotFoundError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def load(self) -> dict[str, Any] | None:
        """The memo, or None when there is none or another index replaced the one it saw."""
        try:
            memo = json.loads(self.memo_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("index") != self._index_signature():
            return None
        return memo

    def save(self, **fields: object) -> None:
        """Keep ``fields`` for the index as it is now (private files: 0600)."""
        # git writes the index with the umask's mode; paella's state is private.
        with contextlib.suppress(OSError):
            os.chmod(self.index_file, 0o600)
        memo: dict[str, object] = {
            "index": self._index_signature(),
            "checksum": index_checksum(self.index_file),
            **fields,
        }
        tmp = self.memo_file.with_name(self.memo_file.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(memo, handle)
        os.replace(tmp, self.memo_file)


_TRAILER_BYTES = 32
"""The end of an index file read as its checksum: git closes the file with a hash of everything
before it (20 bytes with SHA-1, 32 with SHA-256; the last 32 hold it either way)."""


def index_checksum(index_file: Path) -> str | None:
    """The index file's closing checksum (hex), or None: no file, or no checksum (written with
    ``index.skipHash``: zeros)."""
    try:
        with open(index_file, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() < _TRAILER_BYTES:
                return None
            handle.seek(-_TRAILER_BYTES, os.SEEK_END)
            trailer = handle.read(_TRAILER_BYTES)
    except OSError:
        return None
    return None if not any(trailer[-20:]) else trailer.hex()


def unchanged_tree(memo: dict[str, Any] | None, index_file: Path, objects: Path) -> str | None:
    """The tree the last snapshot's ``write-tree`` gave, when ``write-tree`` now would give it
    again (no git process: half of a run's snapshots find nothing changed); else None.

    Sound because ``write-tree`` is a function of the index's entries, and the index is the
    very one the memo saw: its checksum (a hash of its whole content, read when the memo was
    saved, after that ``write-tree`` stored its cache) is the same, whatever its inode or times
    say (a reused inode within one clock tick fools those, not the checksum). Over a valid
    cache, ``write-tree`` writes nothing and checks only that the trees are in the object store
    (no blob); this checks the top tree's loose object file (packed or missing: git is asked).
    Its subtrees go with it: a prune takes an unreachable tree whole, and a repack packs a
    reachable one whole; only object files deleted one by one could keep the top alone.
    """
    if memo is None:
        return None
    tree, checksum = memo.get("tree"), memo.get("checksum")
    # The memo is read from the git dir, which the agent can write: only an object name (40 or
    # 64 lowercase hex digits) is ever joined into a path or handed on as a tree.
    if not isinstance(tree, str) or not is_object_id(tree):
        return None
    if not isinstance(checksum, str):
        return None
    if checksum != index_checksum(index_file):
        return None
    if not (objects / tree[:2] / tree[2:]).is_file():
        return None
    return tree


LEFT_LOCK_WAIT_S = 2.0
"""How long a left private index lock may stay in use before it is removed anyway."""


def remove_left_lock(index_file: Path, workspace: Workspace) -> None:
    """Remove the lock a dead paella's git left on the private index, once it is not in use
    (:func:`~paella_tui.supervisor.store.left_locks.in_use`: open by a process, or a git running
    in the repository). The snapshot lock's holder calls it: that paella is dead, and its git
    dies with it, but a git in its death group (gitcli) dies a moment after the snapshot lock is
    free, and one still writing must not find the lock gone under it. Rare (only after a death
    mid-write), so the look at every process is affordable; waits at most
    :data:`LEFT_LOCK_WAIT_S`."""
    lock = index_file.with_name(index_file.name + ".lock")
    if not lock.exists():
        return
    from paella_tui.supervisor.store.left_locks import in_use  # only on this rare path

    deadline = time.monotonic() + LEFT_LOCK_WAIT_S
    while in_use(workspace, lock) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()
