"""git's loose objects read and written by paella itself, where a git process per object costs
more than the object: the mirror's ledger saves (a blob, a tree and a commit each) and its reads
of the newest state commit.

An object is ``<kind> <size>\\0<data>``, zlib-compressed, stored at ``objects/xx/yyyy…`` where
``xxyyyy…`` is the sha1 (or sha256) of the uncompressed bytes: its id is its content, so an
object written here is the object git would write (``hash-object -w``, ``mktree``,
``commit-tree`` of the same bytes), and git reads it as its own. Written as git does: a private
temporary file in the same folder, read-only, linked into place (an object that exists already
is kept, and its time refreshed); a kill leaves at most a ``tmp_obj_*`` file git's ``prune``
removes, never a half object.

Only for repositories paella can read the format of: a ``compatObjectFormat`` (objects written
twice, under two hashes) is left to git.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import zlib
from pathlib import Path

_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
COMPAT_FORMAT = re.compile(rb"compatobjectformat", re.IGNORECASE)
"""In a repository's config: objects are written under two hashes (left to git)."""
LOOSE_COMPRESSION = 1
"""git's ``core.looseCompression`` default (best speed)."""


def is_object_id(text: str) -> bool:
    """Whether ``text`` is an object id, whole (40 or 64 lowercase hex digits; no newline): the
    only strings paella joins under ``objects/`` or hands git as an object."""
    return _OBJECT_ID.fullmatch(text) is not None


def hash_name(oid: str) -> str:
    """The hash an object id of this length comes from."""
    return "sha1" if len(oid) == 40 else "sha256"


def object_id(kind: str, data: bytes, hash_algo: str) -> str:
    """The id git gives an object of this kind and content."""
    digest = hashlib.new(hash_algo, f"{kind} {len(data)}\0".encode())
    digest.update(data)
    return digest.hexdigest()


def read_loose(objects: Path, oid: str) -> tuple[str, bytes] | None:
    """The kind and content of a loose object, checked against its id; None when it is not a
    loose object here (packed, missing) or does not match its id."""
    if not is_object_id(oid):
        return None
    try:
        with open(objects / oid[:2] / oid[2:], "rb") as handle:
            raw = zlib.decompress(handle.read())
    except (OSError, ValueError, zlib.error):
        return None
    header, _, data = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if hashlib.new(hash_name(oid), raw).hexdigest() != oid or size != str(len(data)).encode():
        return None
    return kind.decode("ascii", errors="replace"), data


def commit_parents(data: bytes) -> list[str]:
    """The parents a commit's content names, in order."""
    head = data.partition(b"\n\n")[0]
    return [line[7:].decode("ascii") for line in head.split(b"\n") if line.startswith(b"parent ")]


def write_loose(objects: Path, kind: str, data: bytes, hash_algo: str) -> str:
    """Write one object into ``objects`` (unless there) and return its id."""
    oid = object_id(kind, data, hash_algo)
    folder = objects / oid[:2]
    final = folder / oid[2:]
    if final.exists():
        # git refreshes an object it would have written, so that a prune's grace counts from now.
        with contextlib.suppress(OSError):
            os.utime(final)
        return oid
    folder.mkdir(exist_ok=True)
    # A name of its own (not tempfile's: its import costs every command that reads the mirror).
    tmp = str(folder / f"tmp_obj_{os.getpid()}_{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(zlib.compress(f"{kind} {len(data)}\0".encode() + data, LOOSE_COMPRESSION))
        os.chmod(tmp, 0o444)
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass  # another writer put the same object there first: the same bytes
        except OSError:
            os.replace(tmp, final)  # a file system without hard links
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return oid


def signature(name: str, email: str, when: tuple[int, str] | None = None) -> str:
    """An author or committer line's value as ``commit-tree`` writes it: ``name <email> seconds
    ±hhmm`` (now, in the local time zone, unless ``when`` is given)."""
    if when is None:
        seconds = int(time.time())
        offset = (time.localtime(seconds).tm_gmtoff or 0) // 60
        sign = "-" if offset < 0 else "+"
        when = (seconds, f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}")
    return f"{name} <{email}> {when[0]} {when[1]}"
