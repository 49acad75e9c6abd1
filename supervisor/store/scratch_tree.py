"""Scratch trees: a git tree written out to a temporary folder outside the work tree, to run gates on.

A bisect judges old steps, and a gate must never run in the user's work tree for that (the agent
may be working there, and nothing of the user's is touched). A :class:`ScratchTree` is a folder
of its own with an index of its own (``GIT_INDEX_FILE`` in the scratch area) and the repository's
object store: the first tree is written with ``checkout-index``, later trees with a two-way
``read-tree -m -u``, so moving between neighbouring steps rewrites only the files that differ.
The user's work tree, index, HEAD and branch are never read for writing; no ref is made.

Files are written as the snapshot stored them: where git would convert bytes on the way out
(``text``/``eol`` attributes, ``core.autocrlf``), the raw blob is written instead, as a rollback
does. Ignored paths the gates need (a virtualenv, ``node_modules``) are not in any snapshot;
``links`` names them, and each is symlinked from the work tree into the scratch tree.

The scratch tree is not a git repository (it has no ``.git``): gates that need git history see
none. Usage::

    with ScratchTree(workspace, links=(".venv",)) as scratch:
        scratch.checkout(tree)
        run_the_gate(cwd=scratch.path)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.store.gitcli import Git, encode_paths_z
from paella_tui.supervisor.store.workspace import Workspace

# Attributes under which git may change a file's bytes between a blob and the work tree.
_CONVERTING = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")
# Never convert on the way out, whatever the user's configuration says.
_RAW_CONFIG = ("core.autocrlf=false", "core.eol=lf", "core.safecrlf=false", "core.symlinks=true")


class ScratchTree:
    """A temporary work tree, outside the user's, that holds one git tree at a time."""

    def __init__(
        self, workspace: Workspace, *, links: tuple[str, ...] = (), parent: Path | None = None
    ) -> None:
        """Create the folder (under ``parent``, default the system's temp folder)."""
        self.workspace = workspace
        self.links = links
        area = Path(tempfile.mkdtemp(prefix="paella-scratch-", dir=parent)).resolve()
        root = workspace.root.resolve()
        if area == root or root in area.parents:
            shutil.rmtree(area, ignore_errors=True)
            raise WorkspaceError(
                f"the temporary folder {area} is inside the work tree {root}",
                hint="point TMPDIR outside the repository; a scratch tree never lives in it.",
            )
        os.chmod(area, 0o700)
        self._area = area
        self.path = area / "tree"
        """The scratch work tree: run gates with this as their folder."""
        self.path.mkdir(mode=0o700)
        self.tree: str | None = None
        """The tree the folder holds now (None before the first checkout)."""
        self._raw: set[str] = set()
        """Paths written from the raw blob (git would convert them)."""
        self._git = Git(self.path, index_file=area / "index")
        self._prefix = [
            *(arg for pair in _RAW_CONFIG for arg in ("-c", pair)),
            f"--git-dir={workspace.git_dir}",
            f"--work-tree={self.path}",
        ]

    def __enter__(self) -> ScratchTree:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, args: list[str], *, input: bytes | None = None) -> bytes:
        return self._git.run([*self._prefix, *args], input=input).stdout

    def checkout(self, tree: str) -> None:
        """Make the folder hold exactly ``tree`` (plus the links); only differing files are written."""
        if tree == self.tree:
            return
        if self.tree is None:
            self._run(["read-tree", tree])
            self._run(["checkout-index", "-a", "-f"])
            written = [
                p.decode(errors="surrogateescape")
                for p in self._run(["ls-files", "-z"]).split(b"\0")
                if p
            ]
        else:
            # -m -u: a two-way merge that writes and removes only what differs between the trees.
            # --reset: a gate that edited a tracked file in here must not block the move.
            self._run(["read-tree", "--reset", "-u", self.tree])
            self._run(["read-tree", "-m", "-u", self.tree, tree])
            written = [
                p.decode(errors="surrogateescape")
                for p in self._run(
                    ["diff-tree", "-r", "-z", "--name-only", "--no-renames", self.tree, tree]
                ).split(b"\0")
                if p
            ]
        self.tree = tree
        # --reset rewrote the raw files of the tree before through git's conversion: again.
        self._write_raw(sorted({*written, *self._raw}))
        self._link()

    def _write_raw(self, paths: list[str]) -> None:
        """Rewrite, from the raw blob, the files git may have converted on the way out."""
        present = [p for p in paths if os.path.isfile(self.path / p)]
        if not present:
            return
        data = self._run(
            ["check-attr", "-z", "--stdin", *_CONVERTING], input=encode_paths_z(present)
        ).split(b"\0")
        converting = sorted(
            {
                data[i].decode(errors="surrogateescape")
                for i in range(0, len(data) - 2, 3)
                if data[i + 2] not in (b"unspecified", b"unset")
            }
        )
        self._raw = {p for p in self._raw if os.path.lexists(self.path / p)} | set(converting)
        for path in converting:
            blob = self._run(["rev-parse", f"{self.tree}:{path}"]).decode().strip()
            raw = self._run(["cat-file", "blob", blob])
            target = self.path / path
            mode = target.stat().st_mode
            target.unlink()
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o777)
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)

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
        with contextlib.suppress(FileNotFoundError):
            # A gate may have left read-only folders behind: make them writable to remove them.
            def unlock(func: object, path: str, _exc: object) -> None:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.dirname(path), 0o700)
                    os.chmod(path, 0o700)
                    if os.path.isdir(path) and not os.path.islink(path):
                        os.rmdir(path)
                    else:
                        os.unlink(path)

            shutil.rmtree(self._area, onerror=unlock)
