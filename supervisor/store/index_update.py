"""The private index's update for a snapshot, and whether git may have converted what it hashed.

:func:`update_index` takes the removed entries out and (re)hashes the changed paths in one
``update-index`` when it can, leaving out (and naming) a path git cannot read.

:class:`AttributeSources` answers, with no git process, whether any git attribute can apply to
the paths just hashed. The private index runs with ``core.autocrlf=false`` and every filter a
no-op (:mod:`raw_blobs`), so git changes a file's bytes only through an attribute (``text``,
``eol``, ``crlf``, ``filter``, ``ident``, ``working-tree-encoding``); with none possible, the
``check-attr`` that finds the converted paths would find none and is not run. An attribute can
come from these files, and only these (gitattributes(5)); any one present means "may apply":

- ``.gitattributes`` in the folder of a path or any folder above it, on disk (any file type,
  ignored or not: git reads it either way) or, where the disk has none, in the private index
  (git falls back to the index's copy): the entries named so are kept in the snapshot's memo;
- ``info/attributes`` of the repository (``$GIT_DIR`` and the common folder);
- the global file: ``core.attributesFile`` when configured (then always "may apply"), else
  ``$XDG_CONFIG_HOME/git/attributes`` or ``~/.config/git/attributes``;
- the system file ``$(sysconfdir)/gitattributes`` unless ``GIT_ATTR_NOSYSTEM`` is true: git's
  build decides the folder, so every usual one is looked at (``/etc``, and ``etc`` beside the
  ``bin`` of the git that runs, as a link and resolved);
- a tree: ``GIT_ATTR_SOURCE`` (git 2.40 and later) in paella's environment, or ``attr.tree``
  (git 2.42 and later) in the configuration as git read it for the snapshot's own commands
  (:mod:`git_programs` reads it again whenever the configuration changed, so an agent that
  sets it mid-run is seen). Either one means "may apply", whatever git runs: an older git
  ignores them (the check then finds nothing), a newer one reads attributes from the tree.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.git_programs import config_watch
from paella_tui.supervisor.store.git_words import UNENCODABLE, UNPROCESSABLE
from paella_tui.supervisor.store.gitcli import Git, encode_paths_z
from paella_tui.supervisor.store.raw_blobs import RawBlobs
from paella_tui.supervisor.store.workspace import Workspace

_MAX_RETRIES = 50
_MAX_ARGV_BYTES = 256 * 1024
"""Paths to remove that go on update-index's command line (more: a process of their own)."""
ATTRIBUTES_NAME = ".gitattributes"
_FALSE = ("", "0", "false", "no", "off")
ATTR_SOURCE_ENV = "GIT_ATTR_SOURCE"
"""A tree git (2.40 and later) reads attributes from instead of the work tree's files."""


def update_index(
    git: Git, raw: RawBlobs, paths: list[str], *, remove: list[str]
) -> list[tuple[str, str]]:
    """Take ``remove``'s entries out (by force), then (re)hash ``paths``: one git process when
    the removals fit on its command line. Returns the paths left out, with why."""
    left_out: list[tuple[str, str]] = []
    removals: list[str] = []
    # With nothing to remove, no removal options either: a snapshot that found nothing changed
    # then starts no update-index at all (one with nothing to do writes nothing; about half of
    # a run's snapshots).
    if remove and sum(len(p) + 3 for p in remove) <= _MAX_ARGV_BYTES:
        # Paths on the command line are taken in order, before --stdin's; "./" keeps a path
        # that starts with a dash from reading as an option.
        removals = ["--force-remove", *(f"./{p}" for p in remove), "--no-force-remove"]
    elif remove:
        git.run(["update-index", "--force-remove", "-z", "--stdin"], input=encode_paths_z(remove))
    pending = list(dict.fromkeys(paths))
    for _ in range(_MAX_RETRIES):
        if not pending and not removals:
            return left_out
        try:
            git.run(
                ["update-index", *removals, "--add", "--remove", "-z", "--stdin"],
                input=encode_paths_z(pending),
            )
            return left_out
        except GitError as err:
            encoding = UNENCODABLE.search(err.stderr)
            if encoding is not None and encoding.group(1) in pending:
                # Its bytes are what a snapshot keeps: store them raw, past git's conversion.
                bad = encoding.group(1)
                pending.remove(bad)
                if not raw.add_raw(bad):
                    left_out.append((bad, "unreadable"))
                continue
            # One unreadable path makes git refuse the whole batch: leave that one out, loudly,
            # and snapshot the rest rather than nothing.
            match = UNPROCESSABLE.search(err.stderr)
            if match is None or match.group(1) not in pending:
                raise
            bad = match.group(1)
            reason = err.stderr.strip().splitlines()[0] if err.stderr.strip() else "git refused it"
            left_out.append((bad, f"unreadable: {reason}"))
            pending.remove(bad)
    raise GitError(["update-index"], 1, f"gave up after {_MAX_RETRIES} unreadable paths")


def is_attributes_file(path: str) -> bool:
    """Whether an index path is a ``.gitattributes`` (any case: a case-blind disk reads it)."""
    return os.path.basename(path).lower() == ATTRIBUTES_NAME


def _folders(paths: Iterable[str]) -> set[str]:
    """Every folder that holds one of ``paths``, up to the top ("")."""
    folders = {""}
    for path in paths:
        parts = path.rstrip("/").split("/")[:-1]
        for end in range(1, len(parts) + 1):
            folders.add("/".join(parts[:end]))
    return folders


_SYSTEM_FILES: list[Path] = []


def system_attribute_files() -> list[Path]:
    """Where git's system-wide attributes file may be (``$(sysconfdir)/gitattributes``)."""
    if not _SYSTEM_FILES:
        found = [Path("/etc/gitattributes")]
        git = shutil.which("git")
        if git:
            for exe in dict.fromkeys([Path(git), Path(os.path.realpath(git))]):
                prefix = exe.parent.parent  # <prefix>/bin/git, or <prefix>/libexec/git-core/git
                found += [prefix / "etc" / "gitattributes", prefix.parent / "etc" / "gitattributes"]
        _SYSTEM_FILES.extend(dict.fromkeys(found))
    return list(_SYSTEM_FILES)


class AttributeSources:
    """The files a git attribute can come from, for one workspace's snapshots."""

    def __init__(self, workspace: Workspace, config: bytes) -> None:
        self.root = workspace.root
        self.configured = False
        """``core.attributesFile`` is set: attributes are always looked up."""
        for item in config.split(b"\0"):
            if item.partition(b"\n")[0].lower() == b"core.attributesfile":
                self.configured = True
        files = [workspace.git_dir / "info" / "attributes"]
        files.append(workspace.common_dir / "info" / "attributes")
        xdg = os.environ.get("XDG_CONFIG_HOME", "")
        home = os.environ.get("HOME")
        self.global_file: Path | None = None
        """git's global attributes file when ``core.attributesFile`` is not set (None: none)."""
        if xdg:
            self.global_file = Path(xdg) / "git" / "attributes"
        elif home:
            self.global_file = Path(home) / ".config" / "git" / "attributes"
        if self.global_file is not None:
            files.append(self.global_file)
        if os.environ.get("GIT_ATTR_NOSYSTEM", "").strip().lower() in _FALSE:
            files += system_attribute_files()
        self.files = files

    def pinned(self) -> tuple[tuple[str, str], ...]:
        """Config for the snapshot's git: the global attributes file it read this configuration
        in, so that a ``core.attributesFile`` set later (by the agent, in ``.git/config``, while
        the run lasts) cannot bring git an attributes file :meth:`may_apply` does not look at.
        Empty when one is configured already (then attributes are always looked up)."""
        if self.configured:
            return ()
        return (("core.attributesFile", str(self.global_file or os.devnull)),)

    def from_tree(self) -> bool:
        """Attributes may come from a tree (``GIT_ATTR_SOURCE``, or ``attr.tree`` as the last
        git command in this work tree saw the configuration)."""
        return ATTR_SOURCE_ENV in os.environ or config_watch(self.root).attr_tree

    def may_apply(self, paths: list[str], in_index: Iterable[str] | None) -> bool:
        """Whether any attribute can apply to ``paths``: ``in_index`` names the private index's
        ``.gitattributes`` entries (None: not known, so yes)."""
        if not paths:
            return False
        if in_index is None or self.configured or self.from_tree():
            return True
        if any(_exists(f) for f in self.files):
            return True
        folders = _folders(paths)
        if any(os.path.dirname(entry) in folders for entry in in_index):
            return True
        return any(_exists(self.root / folder / ATTRIBUTES_NAME) for folder in folders)


def _exists(path: Path) -> bool:
    """Anything at ``path`` (a file, a folder, a dangling link): lstat, not stat."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # unreadable: it may be there
    return True
