"""Raw bytes into snapshots: the private index's git configuration, and raw blobs where git converts.

``update-index`` hashes a file the way ``git add`` would: ``text``/``eol`` attributes,
``core.autocrlf`` and ``ident`` may rewrite it (a CRLF file under ``* text=auto`` is stored with
LF). A checkpoint must give back what was on disk, so every file the snapshot (re)hashed is hashed
again here from its raw bytes (only those an attribute may convert: the private index turns
``core.autocrlf`` off); where the two differ, the raw blob is written (``fast-import``, fed
content, never a path: any byte in a name is safe) and put in the private index instead. Such
entries carry no stat data, so only these files are hashed again by the next snapshot.

No filter driver runs while git hashes: every git command paella runs turns each configured
driver into a no-op, with the names read again whenever the configuration changed (mid-run
too: :mod:`git_programs`), so a snapshot never runs the user's filters (slow, failing, needing
the network) nor one an agent configured.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.gitcli import Git, encode_paths_z

# The private index sees the work tree as it is: no conversion that git could skip by
# configuration, no bit or cache that would hide a file on disk or invent one that is not.
PRIVATE_CONFIG = (
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.fileMode", "true"),
    ("core.symlinks", "true"),
    ("core.ignoreStat", "false"),
    ("core.sparseCheckout", "false"),
    ("core.sparseCheckoutCone", "false"),
    ("index.sparse", "false"),
    ("core.splitIndex", "false"),
    ("core.untrackedCache", "false"),
    ("core.fsmonitor", "false"),
)
# Attributes under which git may change a file's bytes between the work tree and a blob.
CONVERTING_ATTRIBUTES = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")
# More paths than this are looked up by listing the whole index rather than on the command line.
MAX_ARGV_PATHS = 1000
_FILE_MODES = ("100644", "100755")


class RawBlobs:
    """Hashes files as raw bytes and puts raw blobs in a private index where git converted."""

    def __init__(self, git: Git, root: Path) -> None:
        self.git = git
        self.root = root
        self._hash_name: str | None = None

    def blob_id(self, data: bytes, *, like: str | None = None) -> str:
        """The id git gives a blob of exactly these bytes (sha1, or sha256 repositories);
        ``like``, an object id of this repository, spares asking git which."""
        if self._hash_name is None and like is not None:
            self._hash_name = "sha256" if len(like) == 64 else "sha1"
        if self._hash_name is None:
            fmt = self.git.out(["rev-parse", "--show-object-format"], check=False).strip()
            self._hash_name = "sha256" if fmt == "sha256" else "sha1"
        digest = hashlib.new(self._hash_name, b"blob %d\0" % len(data))
        digest.update(data)
        return digest.hexdigest()

    def converting(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` that the private index's git may convert when it hashes them.

        The private index runs with ``core.autocrlf=false``, so only an attribute (text, eol,
        crlf, filter, ident, working-tree-encoding) makes git's blob differ from the raw bytes:
        the others need no second reading (a snapshot of 5,000 changed files read them twice).
        """
        if not paths:
            return []
        data = self.git.run(
            ["check-attr", "-z", "--stdin", *CONVERTING_ATTRIBUTES], input=encode_paths_z(paths)
        ).stdout.split(b"\0")
        # -z output: path, attribute, value triplets.
        return list(
            dict.fromkeys(
                data[i].decode(errors="surrogateescape")
                for i in range(0, len(data) - 2, 3)
                if data[i + 2] not in (b"unspecified", b"unset")
            )
        )

    def keep_raw_bytes(self, paths: list[str]) -> None:
        """Make the private index hold the raw bytes of these paths where git converted them."""
        files = [p for p in dict.fromkeys(paths) if _is_regular_file(self.root / p)]
        if not files:
            return
        stored = self.stored_entries(files)
        differ: list[tuple[str, str, str, bytes]] = []  # path, mode, raw oid, data
        for path in files:
            entry = stored.get(path)
            if entry is None or entry[0] not in _FILE_MODES:
                continue
            try:
                with open(self.root / path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue  # vanished or unreadable since update-index: its entry stands
            oid = self.blob_id(data, like=entry[1])
            if oid != entry[1]:
                differ.append((path, entry[0], oid, data))
        self._store(differ)

    def add_raw(self, path: str) -> bool:
        """Put a file's raw bytes in the private index directly, for a file git cannot hash at
        all (a ``working-tree-encoding`` its bytes do not decode from); False if unreadable."""
        full = self.root / path
        try:
            executable = os.lstat(full).st_mode & 0o111
            with open(full, "rb") as handle:
                data = handle.read()
        except OSError:
            return False
        mode = "100755" if executable else "100644"
        self._store([(path, mode, self.blob_id(data), data)])
        return True

    def _store(self, entries: list[tuple[str, str, str, bytes]]) -> None:
        """Write these blobs (path, mode, oid, bytes) and point the private index at them."""
        if not entries:
            return
        differ = entries
        proc = self.git.popen(["fast-import", "--quiet"])
        assert proc.stdin is not None
        try:
            for _path, _mode, _oid, data in differ:
                proc.stdin.write(b"blob\ndata %d\n" % len(data) + data + b"\n")
        except BrokenPipeError:
            pass  # fast-import stopped: its error is read below
        _out, err = proc.communicate()
        if proc.returncode != 0:
            raise GitError(["fast-import"], proc.returncode, err.decode(errors="replace"))
        info = b"".join(
            f"{mode} {oid}\t".encode() + path.encode(errors="surrogateescape") + b"\0"
            for path, mode, oid, _data in differ
        )
        self.git.run(["update-index", "-z", "--index-info"], input=info)

    def stored_entries(self, files: list[str]) -> dict[str, tuple[str, str]]:
        """path -> (mode, object id) in the private index, for these files."""
        args = ["ls-files", "-z", "-s"]
        if len(files) <= MAX_ARGV_PATHS:
            args += ["--", *files]
        data = self.git.run(args, env={"GIT_LITERAL_PATHSPECS": "1"}).stdout
        stored: dict[str, tuple[str, str]] = {}
        for entry in data.split(b"\0"):
            if entry:
                meta, path = entry.split(b"\t", 1)
                mode, oid, _stage = meta.decode().split(" ")
                stored[path.decode(errors="surrogateescape")] = (mode, oid)
        return stored


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
