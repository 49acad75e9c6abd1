"""Snapshots of the whole workspace into git trees, without touching HEAD, the index or the work tree.

A snapshot is built in paella's private index file (``GIT_INDEX_FILE``), kept between snapshots so
that git's stat cache lets only changed files be hashed again; the repository's own index and its
``index.lock`` are never used. Untracked files are included, ignored ones are not. Files over the
size cap are left out and named. Nested repositories and submodules are recorded as git records
them (their commit) and never entered; a nested repository with no commit cannot be recorded and
is named as not covered. ``exclude`` globs (the gates' byproducts and ``[watch] ignore``) are left
out like ignored files, unless the user's own index tracks them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paella_tui.supervisor.errors import GitError
from paella_tui.supervisor.files import ensure_dir, exclusive_lock
from paella_tui.supervisor.gitcli import Git, encode_paths_z
from paella_tui.supervisor.workspace import Workspace

DEFAULT_MAX_FILE_SIZE = 50 * 1024 * 1024
_UNPROCESSABLE = re.compile(r"Unable to process path (.+)$", re.MULTILINE)
_MAX_RETRIES = 50
# Attributes under which git may change a file's bytes between the work tree and a blob.
_CONVERTING_ATTRIBUTES = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")


@dataclass(frozen=True)
class SkippedFile:
    """A file left out of a snapshot, and why."""

    path: str
    reason: str
    size: int | None = None

    def to_json(self) -> dict[str, object]:
        """The record stored in the ledger and printed by ``status --json``."""
        return {"path": self.path, "size": self.size, "reason": self.reason}


@dataclass(frozen=True)
class Snapshot:
    """The workspace as one git tree, with what it could not hold."""

    tree: str
    """The tree object id: equal trees mean byte-identical snapshots."""
    skipped: tuple[SkippedFile, ...] = ()
    """Files left out (over the size cap, unreadable, nested repositories with no commit)."""
    uncovered: tuple[str, ...] = field(default=())
    """Nested repositories and submodules recorded by their commit only: their inside is not covered."""


class Snapshotter:
    """Takes snapshots of one workspace through paella's private, persistent index."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        exclude: Sequence[str] = (),
    ) -> None:
        self.workspace = workspace
        self.max_file_size = max_file_size
        self.exclude = tuple(exclude)
        """Globs (``.gitignore`` syntax) left out as if ignored: the gates' own byproducts."""
        self.index_file = workspace.state_dir / "snapshot.index"
        self.lock_file = workspace.state_dir / "snapshot.lock"
        self.memo_file = workspace.state_dir / "snapshot.memo.json"
        self.git = Git(workspace.root, index_file=self.index_file)
        self._exclude_files: list[Path] | None = None
        self._autocrlf: bool | None = None

    @contextlib.contextmanager
    def locked(self, what: str = "a snapshot") -> Iterator[None]:
        """Hold paella's workspace lock: one snapshot or rollback at a time across processes."""
        ensure_dir(self.workspace.state_dir)
        with exclusive_lock(self.lock_file, what=what):
            # We hold the lock, so a private index lock left behind is from a killed paella.
            with contextlib.suppress(FileNotFoundError):
                self.index_file.with_name(self.index_file.name + ".lock").unlink()
            yield

    def take_locked(self, what: str = "a snapshot") -> Snapshot:
        """Snapshot the workspace now, holding the lock for just that (blocking: git)."""
        with self.locked(what):
            return self.take()

    def take(self) -> Snapshot:
        """Snapshot the workspace now. The caller holds :meth:`locked`."""
        # Read before this snapshot writes the index: a memo is valid only for the index it saw.
        memo = self._load_memo()
        self._seed_index()
        skipped: list[SkippedFile] = []
        excludes = self._state_dir_pathspec()
        untracked = self.git.lines_z(
            [
                "ls-files",
                "-z",
                "--others",
                "--exclude-standard",
                *self._exclude_args(),
                "--",
                *excludes,
            ]
        )
        status = self.git.lines_z(
            ["diff-files", "-z", "--name-status", "--no-renames", "--ignore-submodules=dirty"]
        )
        pairs = list(zip(status[0::2], status[1::2], strict=True))
        gone = [path for code, path in pairs if code == "D"]
        changed = [path for code, path in pairs if code != "D"]
        if gone:
            # Entries of paths that went away leave first, and by force: update-index --remove
            # refuses a path whose folder became a symlink ("beyond a symbolic link") and would
            # keep its stale entry. Changed paths come next, untracked ones last: update-index
            # works in order, and a new path (a folder now a file, a file now a folder) conflicts
            # with the old entry while that entry is still there.
            self.git.run(
                ["update-index", "--force-remove", "-z", "--stdin"], input=encode_paths_z(gone)
            )
        to_update: list[str] = []
        for path in changed:
            too_big = self._too_big(path)
            if too_big is not None:
                skipped.append(too_big)
            else:
                to_update.append(path)
        for path in untracked:
            if path.endswith("/"):
                # git lists an untracked nested repository as one folder entry and does not enter it.
                nested = path.rstrip("/")
                if self._nested_commit(nested) is None:
                    skipped.append(
                        SkippedFile(nested, "nested repository with no commit: not recorded")
                    )
                else:
                    to_update.append(nested)
                continue
            too_big = self._too_big(path)
            if too_big is not None:
                skipped.append(too_big)
            else:
                to_update.append(path)
        self._update_index(to_update, skipped)
        self._keep_raw_bytes(to_update)
        # Two whole-index scans are needed only when what they find can have changed: the memo
        # of the last snapshot says so, unless someone else (a rollback) rewrote the index.
        touched = [*changed, *gone, *untracked]
        ignore_sig = self._ignore_signature()
        if (
            memo is None
            or memo.get("ignore") != ignore_sig
            or any(os.path.basename(p.rstrip("/")) == ".gitignore" for p in touched)
        ):
            self._drop_newly_ignored()
        known_links = memo.get("gitlinks") if memo is not None else None
        if (
            known_links is None
            or any(p.endswith("/") for p in untracked)
            or not set(known_links).isdisjoint([*changed, *gone])
        ):
            links = self._gitlinks()
        else:
            links = list(known_links)
        tree = self.git.out(["write-tree"])
        self._save_memo(ignore_sig, links)
        return Snapshot(tree=tree, skipped=tuple(skipped), uncovered=tuple(links))

    def _exclude_args(self) -> list[str]:
        return [f"--exclude={pattern}" for pattern in self.exclude]

    def _index_signature(self) -> list[int] | None:
        try:
            st = os.stat(self.index_file)
        except FileNotFoundError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns]

    def _load_memo(self) -> dict[str, Any] | None:
        try:
            memo = json.loads(self.memo_file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("index") != self._index_signature():
            return None
        return memo

    def _save_memo(self, ignore_sig: list[object], links: list[str]) -> None:
        # git writes the index with the umask's mode; paella's state is private (0600).
        with contextlib.suppress(OSError):
            os.chmod(self.index_file, 0o600)
        memo = {"index": self._index_signature(), "ignore": ignore_sig, "gitlinks": links}
        tmp = self.memo_file.with_name(self.memo_file.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(memo, handle)
        os.replace(tmp, self.memo_file)

    def _ignore_signature(self) -> list[object]:
        """What the repository-wide exclude files look like now (per-folder .gitignore files are
        seen as changed paths instead)."""
        if self._exclude_files is None:
            files = [self.workspace.common_dir / "info" / "exclude"]
            configured = self.workspace.git.out(
                ["config", "--path", "core.excludesFile"], check=False
            )
            if configured:
                files.append(Path(configured).expanduser())
            else:
                xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
                files.append(Path(xdg) / "git" / "ignore")
            self._exclude_files = files
        sig: list[object] = [list(self.exclude)]
        for path in self._exclude_files:
            try:
                st = os.stat(path)
                sig.append([str(path), st.st_size, st.st_mtime_ns])
            except OSError:
                sig.append([str(path), None])
        return sig

    def _seed_index(self) -> None:
        if self.index_file.exists():
            return
        ensure_dir(self.index_file.parent)
        real_index = self.workspace.git_dir / "index"
        split = self.workspace.git.run(["config", "--bool", "core.splitIndex"], check=False)
        if real_index.exists() and split.stdout.strip() != b"true":
            # Starting from a copy of the user's index reuses its stat cache: the first snapshot
            # hashes only what changed. A copy is a plain read: git replaces the index by rename.
            tmp = self.index_file.with_name(self.index_file.name + ".seed")
            shutil.copyfile(real_index, tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.index_file)
        elif self.git.rev_parse("HEAD^{tree}"):
            self.git.run(["read-tree", "HEAD"])

    def _state_dir_pathspec(self) -> list[str]:
        # PAELLA_STATE_DIR may point inside the work tree; paella's own files are never snapshotted.
        try:
            rel = self.workspace.state_dir.relative_to(self.workspace.root)
        except ValueError:
            return []
        return [f":(exclude,top,literal){rel.as_posix()}"]

    def _too_big(self, path: str) -> SkippedFile | None:
        try:
            st = os.lstat(self.workspace.root / path)
        except OSError:
            return None  # vanished: update-index --remove records the deletion
        if stat.S_ISREG(st.st_mode) and st.st_size > self.max_file_size:
            return SkippedFile(
                path, f"larger than max_file_size ({self.max_file_size} bytes)", st.st_size
            )
        return None

    def _nested_commit(self, path: str) -> str | None:
        return Git(self.workspace.root / path).rev_parse("HEAD^{commit}")

    def _update_index(self, paths: list[str], skipped: list[SkippedFile]) -> None:
        pending = list(dict.fromkeys(paths))
        for _ in range(_MAX_RETRIES):
            if not pending:
                return
            try:
                self.git.run(
                    ["update-index", "--add", "--remove", "-z", "--stdin"],
                    input=encode_paths_z(pending),
                )
                return
            except GitError as err:
                # One unreadable path makes git refuse the whole batch: leave that one out, loudly,
                # and snapshot the rest rather than nothing.
                match = _UNPROCESSABLE.search(err.stderr)
                if match is None or match.group(1) not in pending:
                    raise
                bad = match.group(1)
                reason = (
                    err.stderr.strip().splitlines()[0] if err.stderr.strip() else "git refused it"
                )
                skipped.append(SkippedFile(bad, f"unreadable: {reason}"))
                pending.remove(bad)
        raise GitError(["update-index"], 1, f"gave up after {_MAX_RETRIES} unreadable paths")

    def _keep_raw_bytes(self, paths: list[str]) -> None:
        """Store the exact bytes of files that git's conversion changed on the way in.

        ``update-index`` hashes a file the way ``git add`` would: ``text``/``eol`` attributes,
        ``core.autocrlf`` and clean filters may rewrite it (a CRLF file under ``* text=auto`` is
        stored with LF). A checkpoint must give back what was on disk, so for those files the
        raw bytes are hashed (``--no-filters``) and put in the private index instead. Such entries
        carry no stat data, so only these few files are hashed again by the next snapshot.
        """
        root = self.workspace.root
        files = [
            p
            for p in paths
            if "\n" not in p and os.path.isfile(root / p) and not os.path.islink(root / p)
        ]
        if not files:
            return
        if self._autocrlf is None:
            value = self.git.out(["config", "--get", "core.autocrlf"], check=False).strip().lower()
            self._autocrlf = value in ("true", "input")
        if not self._autocrlf:
            data = self.git.run(
                ["check-attr", "-z", "--stdin", *_CONVERTING_ATTRIBUTES],
                input=encode_paths_z(files),
            ).stdout.split(b"\0")
            # -z output: path, attribute, value triplets.
            converting = {
                data[i].decode(errors="surrogateescape")
                for i in range(0, len(data) - 2, 3)
                if data[i + 2] not in (b"unspecified", b"unset")
            }
            files = [p for p in files if p in converting]
            if not files:
                return
        literal = {"GIT_LITERAL_PATHSPECS": "1"}
        stored: dict[str, tuple[str, str]] = {}
        for entry in self.git.run(["ls-files", "-z", "-s", "--", *files], env=literal).stdout.split(
            b"\0"
        ):
            if entry:
                meta, path = entry.split(b"\t", 1)
                mode, sha, _stage = meta.decode().split(" ")
                stored[path.decode(errors="surrogateescape")] = (mode, sha)
        present = [p for p in files if p in stored]
        raw = self.git.out(
            ["hash-object", "--no-filters", "--stdin-paths"],
            input="".join(f"{p}\n" for p in present).encode(errors="surrogateescape"),
        ).split("\n")
        differ = [(p, sha) for p, sha in zip(present, raw, strict=True) if stored[p][1] != sha]
        if not differ:
            return
        self.git.run(
            ["hash-object", "-w", "--no-filters", "--stdin-paths"],
            input="".join(f"{p}\n" for p, _ in differ).encode(errors="surrogateescape"),
        )
        info = b"".join(
            f"{stored[p][0]} {sha}\t".encode() + p.encode(errors="surrogateescape") + b"\0"
            for p, sha in differ
        )
        self.git.run(["update-index", "-z", "--index-info"], input=info)

    def _drop_newly_ignored(self) -> None:
        # A path snapshotted while untracked stays in the private index even after it becomes
        # ignored; drop it unless the user's own index tracks it (force-added files stay in).
        listing = ["ls-files", "-z", "-c", "-i", "--exclude-standard", *self._exclude_args()]
        ours = set(self.git.lines_z(listing))
        if not ours:
            return
        theirs = set(self.workspace.git.lines_z(listing))
        stale = sorted(ours - theirs)
        if stale:
            self.git.run(
                ["update-index", "--force-remove", "-z", "--stdin"], input=encode_paths_z(stale)
            )

    def _gitlinks(self) -> list[str]:
        data = self.git.run(["ls-files", "-z", "--stage"]).stdout
        links = []
        for entry in data.split(b"\0"):
            if entry.startswith(b"160000 "):
                links.append(entry.split(b"\t", 1)[1].decode(errors="surrogateescape"))
        return links
