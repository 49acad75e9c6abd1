"""Answers about the repository read from its files, where git would answer the same for a git
process more: a snapshot ref's commit, whether a commit is there and its tree.

The agent writes ``.git``, so nothing here is believed beyond what it proves. Each read takes
only the plain case, checked, and says ``None`` otherwise (the caller asks git then):

- a ref is read from its loose file (``<common dir>/<ref>``), and only for a name made of plain
  parts (ASCII letters, digits, ``-``, ``_`` and inner dots; no ``..``, no part starting or
  ending with a dot or ending in ``.lock``: a name git takes as it is), from a regular file
  (never through a symbolic link), holding exactly one object id and a newline, in a repository
  with no ``reftable`` folder. git reads the loose file of a ref before ``packed-refs``, so that
  id is the ref's for git too; a ref in ``packed-refs`` only, a symbolic ref or any other
  content is git's to read;
- an object is read from its loose file (:func:`loose_objects.read_loose`: decompressed and
  checked against its id), or only its kind from the header where that is all git reads
  (``cat-file --batch-check``, and ``for-each-ref``, which skips a ref whose object is missing).
  A packed object, one of an alternate store or a damaged one is git's to read;
- HEAD (:func:`loose_head`) from its file, naming a branch whose ref and commit read as above.

The objects paella writes (commit-tree, write-tree) are loose until a ``gc`` packs them, so the
plain case is the usual one.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from pathlib import Path

from paella_tui.supervisor.store.loose_objects import is_object_id, read_loose

_REF_FILE = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64})\n\Z")
_REF_PART = re.compile(r"^[A-Za-z0-9_-](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")


def plain_ref_name(ref: str) -> bool:
    """``ref`` is ``refs/...`` made of plain parts: the path of its loose file is the name."""
    parts = ref.split("/")
    return (
        len(parts) > 1
        and parts[0] == "refs"
        and all(_REF_PART.match(p) and ".." not in p and not p.endswith(".lock") for p in parts)
    )


def _plain_file(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file (never through a symbolic link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def loose_ref(common_dir: Path, ref: str) -> str | None:
    """The object id ``ref``'s loose file holds, or None (see the module's docstring)."""
    if not plain_ref_name(ref) or os.path.lexists(common_dir / "reftable"):
        return None
    found = _REF_FILE.match(_plain_file(common_dir / ref, 80) or b"")
    return found.group(1).decode("ascii") if found else None


def loose_head(git_dir: Path, common_dir: Path) -> tuple[str, str | None] | None:
    """HEAD's commit and the full name of its branch (None: detached), as ``rev-parse
    HEAD^{commit} --symbolic-full-name HEAD`` gives them, read from the files: ``HEAD`` naming
    a branch (``ref: refs/heads/<name>``) or a commit, the branch's loose ref, the commit's
    loose object (checked against its id). The branch's short name is ``<name>`` for
    ``--abbrev-ref`` too: no other ref or file it could be mistaken for exists
    (:func:`_unambiguous`). None for anything else (an unborn branch, a packed ref or commit, a
    symbolic link): git is asked then."""
    data = _plain_file(git_dir / "HEAD", 300) or b""
    ref: str | None = None
    if data.startswith(b"ref: refs/heads/") and data.endswith(b"\n"):
        ref = data[5:-1].decode("ascii", errors="replace")
        if not _unambiguous(git_dir, common_dir, ref.removeprefix("refs/heads/")):
            return None
        oid = loose_ref(common_dir, ref)
    else:
        found = _REF_FILE.match(data)
        oid = found.group(1).decode("ascii") if found else None
    if oid is None or loose_commit_tree(common_dir / "objects", oid) is None:
        return None
    return oid, ref


def _unambiguous(git_dir: Path, common_dir: Path, name: str) -> bool:
    """No ref or file but ``refs/heads/<name>`` that git's rules for a short name could read
    as ``<name>`` (``<name>``, ``refs/<name>``, ``refs/tags/<name>``, ``refs/remotes/<name>``,
    ``refs/remotes/<name>/HEAD``; loose or in ``packed-refs``): ``--abbrev-ref`` then says
    ``<name>``. Any of them there, even one git would not take for a ref: False."""
    if not plain_ref_name(f"refs/heads/{name}"):
        return False
    others = [
        f"refs/{name}",
        f"refs/tags/{name}",
        f"refs/remotes/{name}",
        f"refs/remotes/{name}/HEAD",
    ]
    return _none_there(git_dir, common_dir, [name, *others])


def ref_absent(git_dir: Path, common_dir: Path, ref: str) -> bool:
    """Whether ``rev-parse --verify <ref>`` finds nothing: no loose file and no ``packed-refs``
    line for ``ref``, nor for any name git's rules would try it as (``refs/<ref>``,
    ``refs/tags/<ref>``, ``refs/heads/<ref>``, ``refs/remotes/<ref>``, ``.../HEAD``). False
    (ask git) for a name that is not plain or a repository with a ``reftable`` folder."""
    if not plain_ref_name(ref) or os.path.lexists(common_dir / "reftable"):
        return False
    tried = ["", "refs/", "refs/tags/", "refs/heads/", "refs/remotes/"]
    names = [*(f"{prefix}{ref}" for prefix in tried), f"refs/remotes/{ref}/HEAD"]
    return _none_there(git_dir, common_dir, names)


def _none_there(git_dir: Path, common_dir: Path, names: list[str]) -> bool:
    """No file (of any kind) at any of ``names`` in the git dir or the common dir, and no
    ``packed-refs`` line for any of them."""
    for folder in dict.fromkeys((git_dir, common_dir)):
        if any(os.path.lexists(folder / name) for name in names):
            return False
    try:
        with open(common_dir / "packed-refs", "rb") as handle:
            packed = handle.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return not any(f" {name}\n".encode() in packed for name in names)


def loose_kind(objects: Path, oid: str) -> str | None:
    """The kind a loose object's header names (``commit``, ``tree``...), or None: not a loose
    object here, or a header that does not read."""
    if not is_object_id(oid):
        return None
    try:
        with open(objects / oid[:2] / oid[2:], "rb") as handle:
            header = zlib.decompressobj().decompress(handle.read(256), 64)
    except (OSError, ValueError, zlib.error):
        return None
    kind, space, rest = header.partition(b" ")
    size = rest.partition(b"\0")[0]
    if not (space and b"\0" in rest and size.isdigit()):
        return None
    return kind.decode("ascii", errors="replace")


def loose_commit_tree(objects: Path, oid: str) -> str | None:
    """The tree of commit ``oid`` (so the commit is there), read from its loose object checked
    against its id; None when that does not show it (git is asked then)."""
    found = read_loose(objects, oid)
    if found is None or found[0] != "commit":
        return None
    first = found[1].partition(b"\n")[0]
    tree = first.removeprefix(b"tree ").decode("ascii", errors="replace")
    return tree if first.startswith(b"tree ") and is_object_id(tree) else None
