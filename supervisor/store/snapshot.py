"""Snapshots of the whole workspace into git trees, without touching HEAD, the index or the work tree.

A snapshot is built in paella's private index file (``GIT_INDEX_FILE``), kept between snapshots so
that git's stat cache lets only changed files be hashed again; the repository's own index and its
``index.lock`` are never used. Untracked files are included, ignored ones are not. Files over the
size cap are left out and named. Nested repositories and submodules are recorded as git records
them (their commit) and never entered; a nested repository with no commit cannot be recorded and
is named as not covered. ``exclude`` globs (the gates' byproducts and ``[watch] ignore``) are left
out like ignored files, unless the user's own index tracks them.

Bytes are raw, whatever the repository's configuration: ``update-index`` keeps git's stat cache
(only changed files are read again), and every file it (re)hashed is then hashed again here from
the bytes on disk, with no filter, eol conversion or ``ident``; where git's conversion changed the
bytes, the raw blob is written (``fast-import``, fed content, never a path) and put in the private
index instead. Which files git may have converted is asked of ``check-attr`` only when an
attributes file can reach them (``index_update.AttributeSources``: none can, in most
repositories, and that answer costs no git process). The private index runs with ``core.fileMode``/``core.symlinks`` on, and with sparse
checkout, skip-worktree, assume-unchanged, split index, fsmonitor and the untracked cache off: a
snapshot is exactly what is on disk (``raw_blobs``). A corrupt private index is rebuilt on its
own. A file left out (size cap, churn: see ``churn``) is taken out of the private index too, so no
older version of it stands in a snapshot for what is on disk.

During a run, a snapshot may follow the change (``follow_changes``): the same steps, with the
watcher's changed paths (:mod:`change_feed`) as literal pathspecs instead of the whole tree, plus
the paths the watcher cannot see (private-index entries git ignores, files the last snapshot left
out, files the churn rule watches). Whenever that is in doubt (no valid memo, changed ignore
rules, a folder among the paths, git naming a path that was not asked about) it is a full scan.

Ignore rules are never inferred from the listed paths (a ``.gitignore`` that ignores itself is in
no listing): :mod:`ignore_rules` keeps their signature in the memo, and when they changed the
entries they now leave out are dropped, so a snapshot is the same tree whatever came before it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.base.files import ensure_dir
from paella_tui.supervisor.base.owned_lock import OwnedLock
from paella_tui.supervisor.store import scan_listing
from paella_tui.supervisor.store.change_feed import ChangeFeed
from paella_tui.supervisor.store.churn import CHURN_MIN_SIZE, CHURN_REASON, Churn, churning
from paella_tui.supervisor.store.dormant import Dormant
from paella_tui.supervisor.store.git_words import CORRUPT_INDEX, MISSING_OBJECT
from paella_tui.supervisor.store.gitcli import Git, literal_pathspecs
from paella_tui.supervisor.store.ignore_rules import IgnoreRules, folders_holding
from paella_tui.supervisor.store.index_update import (
    AttributeSources,
    is_attributes_file,
    update_index,
)
from paella_tui.supervisor.store.private_index import Memo, remove_left_lock, seed, unchanged_tree
from paella_tui.supervisor.store.raw_blobs import PRIVATE_CONFIG, RawBlobs
from paella_tui.supervisor.store.workspace import Workspace

DEFAULT_MAX_FILE_SIZE = 50 * 1024 * 1024
LOCK_TIMEOUT_S = 60.0

REBUILDS = 3
"""A full scan rebuilds the private index and starts again at most this many times (then an
error is an error)."""


class _NeedFullScan(Exception):
    """A snapshot from the changed paths cannot be trusted: scan everything (nothing written yet)."""


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
        churn_min_size: int = CHURN_MIN_SIZE,
    ) -> None:
        self.workspace = workspace
        self.max_file_size = max_file_size
        self.exclude = tuple(exclude)
        """Globs (``.gitignore`` syntax) left out as if ignored: the gates' own byproducts."""
        self.churn_min_size = churn_min_size
        self.index_file = workspace.state_dir / "snapshot.index"
        self.lock_file = workspace.state_dir / "snapshot.lock"
        self.memo_file = workspace.state_dir / "snapshot.memo.json"
        # The user's configuration a snapshot needs comes with the read of the filter drivers
        # every git command depends on (git_programs.ConfigWatch): no process of its own.
        config = workspace.git.settings()
        self.attributes = AttributeSources(workspace, config)
        self._git_config = (*PRIVATE_CONFIG, *self.attributes.pinned())
        self.git = Git(workspace.root, index_file=self.index_file, config=self._git_config)
        self.rules = IgnoreRules(workspace, self.git, self.exclude)
        self.dormant = Dormant(workspace)
        """The ignore rules: whether they changed, what they leave out (:mod:`ignore_rules`)."""
        self.attribute_checks = 0
        """How many snapshots asked ``check-attr`` which hashed paths git may have converted."""
        self._memo = Memo(self.memo_file, self.index_file)
        self.raw = RawBlobs(self.git, workspace.root)
        self.changes = ChangeFeed()
        """The watcher's changed paths for snapshots that follow the change (fed by a run)."""
        self.last_scan = "full"
        """How the last snapshot looked at the tree: "full" or "changed" (the watcher's paths)."""
        self.scans = {"full": 0, "changed": 0}
        """How many snapshots of each kind this snapshotter took."""

    @contextlib.contextmanager
    def locked(self, what: str = "a snapshot") -> Iterator[None]:
        """Hold paella's snapshot lock: one snapshot or rollback at a time across processes."""
        ensure_dir(self.workspace.state_dir)
        with OwnedLock(self.lock_file, what=what).hold(timeout=LOCK_TIMEOUT_S):
            # We own the lock, so its previous owner is dead, and its git children die with it
            # (gitcli): a private index lock left behind is theirs, never a live paella's.
            remove_left_lock(self.index_file, self.workspace)
            yield

    def take_locked(self, what: str = "a snapshot", *, follow_changes: bool = False) -> Snapshot:
        """Snapshot the workspace now, holding the lock for just that (blocking: git)."""
        with self.locked(what):
            return self.take(follow_changes=follow_changes)

    def take(self, *, follow_changes: bool = False) -> Snapshot:
        """Snapshot the workspace now. The caller holds :meth:`locked`.

        ``follow_changes``: look only at the paths the watcher reported (:attr:`changes`) when
        that is safe; a full scan otherwise. Either way the tree is the same.
        """
        paths = self.changes.take_paths() if follow_changes else None
        if paths is not None:
            try:
                snap = self._take(paths)
                self.last_scan = "changed"
                self.scans["changed"] += 1
                return snap
            except _NeedFullScan:
                pass
            except GitError as err:
                # Objects the private index names were pruned (an agent's `git gc --prune=now`),
                # or its folder was deleted: the full scan rebuilds the index. Anything else is
                # an error.
                if not (MISSING_OBJECT.search(str(err)) or self._state_gone()):
                    self.changes.gap()
                    raise
            except BaseException:
                self.changes.gap()
                raise
        self.changes.full_scan_starting()
        self.last_scan = "full"
        self.scans["full"] += 1
        try:
            return self._full_scan()
        except BaseException:
            self.changes.gap()
            raise

    def _full_scan(self) -> Snapshot:
        for _ in range(REBUILDS):
            try:
                return self._take()
            except GitError as err:
                gone = self._state_gone()
                if not (gone or MISSING_OBJECT.search(str(err)) or self._index_corrupt()):
                    raise
            # The private index is paella's own cache: rebuild it from scratch and try again
            # (in its folder made again, when an agent deleted paella's state under the
            # snapshot: an `rm -rf` still under way deletes the folder made again too).
            self.index_file.parent.mkdir(parents=True, exist_ok=True)
            self.discard_index()
        return self._take()

    def _state_gone(self) -> bool:
        """The private index's folder is gone (an agent deleted paella's state meanwhile)."""
        return not self.index_file.parent.is_dir()

    def discard_index(self) -> None:
        """Forget the private index (the next snapshot rebuilds it and hashes everything again)."""
        for path in (self.index_file, self.memo_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _index_corrupt(self) -> bool:
        if not self.index_file.exists():
            return False
        proc = self.git.run(["ls-files", "--stage"], check=False)
        return proc.returncode != 0 and bool(
            CORRUPT_INDEX.search(proc.stderr.decode(errors="replace")) or proc.returncode == 128
        )

    def _take(self, paths: list[str] | None = None) -> Snapshot:
        # Read before this snapshot writes the index: a memo is valid only for the index it saw.
        memo = self._memo.load()
        started_ns = time.time_ns()
        # The rules as they are before the listing applies them: a change after this shows next time.
        known_folders = (memo or {}).get("rule_folders")
        # The top folder's always: every work tree has one (no full scan after its first).
        known = {"", *(known_folders if isinstance(known_folders, list) else ())}
        look = self.rules.look(sorted(known), started_ns)
        if paths is not None:
            paths = self._scope(paths, memo, look)
        # A copy of the user's index names its .gitattributes entries (a memo of no snapshot).
        seeded = seed(self.index_file, self.workspace, self.git, self.raw, self.attributes)
        status, untracked = self._listing(paths)
        back, away = self.dormant.back(memo)  # tracked, ignored files written back (dormant.py)
        untracked = list(dict.fromkeys([*untracked, *back]))
        pairs = list(zip(status[0::2], status[1::2], strict=True))
        gone = [path for code, path in pairs if code == "D"]
        changed = [path for code, path in pairs if code != "D"]
        to_update, skipped, churn = self._sort(changed, untracked, memo)
        # Entries of paths that went away leave first, and by force: update-index --remove
        # refuses a path whose folder became a symlink ("beyond a symbolic link") and would
        # keep its stale entry. Left out means out of the tree too: an older version kept in
        # the private index would be given back by a rollback as if it were the file's content.
        removed = [*gone, *(s.path for s in skipped)]
        for path, why in update_index(self.git, self.raw, to_update, remove=removed):
            skipped.append(SkippedFile(path, why))
        # The private index's .gitattributes entries now: the memo's (or the seed's), and any
        # just added.
        listed = memo.get("attributes") if memo else seeded
        attributes = _attributes_after(listed, to_update)
        if self.attributes.may_apply(to_update, attributes):
            self.attribute_checks += 1
            self.raw.keep_raw_bytes(self.raw.converting(to_update))
        return self._finish(
            memo, changed, gone, untracked, skipped, churn.state, (started_ns, look, away)
        )

    def _listing(self, paths: list[str] | None) -> tuple[list[str], list[str]]:
        """``diff-files --name-status`` items and untracked paths, over ``paths`` (None: all)."""
        if paths is not None and not paths:
            return [], []
        if paths is None:
            return self._full_listing()
        status = self.git.lines_z(self._diff_args(paths))
        # A path diff-files named has an entry, so it cannot be untracked: with one changed
        # tracked file (the usual case) there is nothing left to list.
        rest = sorted(set(paths) - set(status[1::2]))
        untracked = self.git.lines_z(self._others_args(rest)) if rest else []
        # Anything git names beyond the paths asked about (a folder's content, a nested
        # repository) is a change the watcher described differently: scan everything.
        if not set(paths).issuperset([*untracked, *status[1::2]]):
            raise _NeedFullScan
        return status, untracked

    @staticmethod
    def _diff_args(paths: Sequence[str]) -> list[str]:
        """``diff-files`` over ``paths`` (none: every entry), as literal pathspecs: a changed
        path is that path (or, for a folder gone, its content)."""
        return [*scan_listing.DIFF_START, "--", *literal_pathspecs(paths)]

    def _others_args(self, paths: Sequence[str] | None) -> list[str]:
        """``ls-files --others`` (untracked, not ignored) over ``paths`` (None: the whole tree)."""
        return [
            *scan_listing.OTHERS_START,
            *self._exclude_args(),
            "--",
            *self._state_dir_pathspec(),
            *literal_pathspecs(paths or ()),
        ]

    def _full_listing(self) -> tuple[list[str], list[str]]:
        """Both listings of a full scan, side by side, or an early scan's answer when it is the
        same (never with a watcher: its record of changes starts when this scan starts)."""
        diff_args, others_args = self._diff_args(()), self._others_args(None)
        if not self.changes.following:
            early = scan_listing.take_early(self.git, diff_args, others_args, self.index_file)
            if early is not None:
                return early
        return scan_listing.list_both(self.git, diff_args, others_args)

    def scan_spec(self) -> dict[str, object]:
        """What an early scan needs to run this snapshotter's full-scan listings (in the memo)."""
        return {
            "root": str(self.workspace.root),
            "index": str(self.index_file),
            "config": [list(pair) for pair in self._git_config],
            "diff": self._diff_args(()),
            "others": self._others_args(None),
        }

    def _sort(
        self, changed: list[str], untracked: list[str], memo: dict[str, Any] | None
    ) -> tuple[list[str], list[SkippedFile], Churn]:
        """The paths to (re)hash and the ones left out (size cap, nested repository, churn)."""
        to_update: list[str] = []
        skipped: list[SkippedFile] = []
        stats = {p: _lstat(self.workspace.root / p) for p in [*changed, *untracked]}
        churn = churning(
            self.workspace,
            (memo or {}).get("churn") or {},
            [*changed, *untracked],
            min_size=self.churn_min_size,
            stats=stats,
        )
        for path in [*changed, *untracked]:
            if path.endswith("/"):
                # git lists an untracked nested repository as one folder entry, never entered.
                nested = path.rstrip("/")
                if self._nested_commit(nested) is None:
                    skipped.append(
                        SkippedFile(nested, "nested repository with no commit: not recorded")
                    )
                else:
                    to_update.append(nested)
                continue
            too_big = self._too_big(path, stats[path])
            if too_big is not None:
                skipped.append(too_big)
            else:
                to_update.append(path)
        for path, size in churn.left_out:
            if path in to_update:
                to_update.remove(path)
                skipped.append(SkippedFile(path, CHURN_REASON, size))
        return to_update, skipped, churn

    def _finish(
        self,
        memo: dict[str, Any] | None,
        changed: list[str],
        gone: list[str],
        untracked: list[str],
        skipped: list[SkippedFile],
        churn: dict[str, list[int]],
        rules_seen: tuple[int, dict[str, object], list[str]],
    ) -> Snapshot:
        """Write the tree and the memo for the next snapshot."""
        # Two whole-index scans are needed only when what they find can have changed: the memo
        # of the last snapshot says so, unless someone else (a rollback) rewrote the index.
        known_folders = (memo or {}).get("rule_folders")
        known = set(known_folders) if isinstance(known_folders, list) else set()
        folders = known | folders_holding([*changed, *untracked])
        started_ns, look, away = rules_seen
        rules_changed = self.rules.changed(memo, look)
        # The ignored entries the private index keeps, when the rules changed: a listing saved.
        kept = self.rules.drop_newly_ignored() if rules_changed else None
        known_links = memo.get("gitlinks") if memo is not None else None
        attributes = _attributes_after((memo or {}).get("attributes"), [*changed, *untracked], gone)
        if (
            known_links is None
            or attributes is None
            or not isinstance(known_folders, list)
            or any(p.endswith("/") for p in untracked)
            or not set(known_links).isdisjoint([*changed, *gone])
        ):
            links, attributes, entries = self._index_listing()
            # The folders that hold an entry now (a listing of the index: none left over).
            folders = folders_holding(entries)
        else:
            links = list(known_links)
        objects = self.workspace.common_dir / "objects"  # the same tree, with no git: see there
        tree = unchanged_tree(memo, self.index_file, objects) or self.git.out(["write-tree"])
        # Entries git ignores can only appear with new rules or a new index (a seed, a rollback:
        # no memo then); a snapshot adds no ignored path. So the list is kept until then.
        known_blind = (memo or {}).get("blind")
        blind: list[str] | None
        if not rules_changed and isinstance(known_blind, list):
            blind = list(known_blind)
        elif self.changes.following:
            blind = kept if kept is not None else self.rules.blind()
        else:
            blind = None
        self._memo.save(
            ignore=self.rules.signature(
                {**self.rules.look(folders - known, started_ns, before_listing=False), **look},
                folders,
            ),
            rule_folders=sorted(folders),
            gitlinks=links,
            attributes=attributes,
            churn=churn,
            blind=blind,
            skipped=[s.path for s in skipped],
            scan=self.scan_spec(),
            dormant=self.dormant.memo(away, gone),
            tree=tree,
        )
        return Snapshot(tree=tree, skipped=tuple(skipped), uncovered=tuple(links))

    def _exclude_args(self) -> list[str]:
        return self.rules.exclude_args()

    def _scope(
        self, paths: list[str], memo: dict[str, Any] | None, look: dict[str, object]
    ) -> list[str]:
        """The paths a snapshot from the watcher's paths looks at (``look``: the rule files as
        the snapshot started); raises :class:`_NeedFullScan`."""
        if (
            memo is None
            or not isinstance(memo.get("blind"), list)
            or not isinstance(memo.get("skipped"), list)
            or not isinstance(memo.get("rule_folders"), list)
        ):
            raise _NeedFullScan
        if self.rules.changed(memo, look):
            raise _NeedFullScan
        # What the watcher cannot report: entries git ignores (the watcher drops ignored paths),
        # files left out last time (they come back only if listed), files the churn rule watches.
        scope = {*paths, *memo["blind"], *memo["skipped"], *(memo.get("churn") or {})}
        for path in scope:
            try:
                mode = os.lstat(self.workspace.root / path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                raise _NeedFullScan  # a folder event: its content is the full scan's job
        return sorted(scope)

    def _state_dir_pathspec(self) -> list[str]:
        # PAELLA_STATE_DIR may point inside the work tree; paella's own files are never snapshotted.
        try:
            rel = self.workspace.state_dir.relative_to(self.workspace.root)
        except ValueError:
            return []
        return [f":(exclude,top,literal){rel.as_posix()}"]

    def _too_big(self, path: str, st: os.stat_result | None) -> SkippedFile | None:
        if st is None:
            return None  # vanished: update-index --remove records the deletion
        if stat.S_ISREG(st.st_mode) and st.st_size > self.max_file_size:
            return SkippedFile(
                path, f"larger than max_file_size ({self.max_file_size} bytes)", st.st_size
            )
        return None

    def _nested_commit(self, path: str) -> str | None:
        return Git(self.workspace.root / path).rev_parse("HEAD^{commit}")

    def blob_id(self, data: bytes, *, like: str | None = None) -> str:
        """The id git gives a blob of exactly these bytes (see :class:`RawBlobs`)."""
        return self.raw.blob_id(data, like=like)

    def _index_listing(self) -> tuple[list[str], list[str], list[str]]:
        """The private index's gitlinks, its ``.gitattributes`` entries and all its paths (one
        listing)."""
        data = self.git.run(["ls-files", "-z", "--stage"]).stdout
        links, attributes, paths = [], [], []
        for entry in data.split(b"\0"):
            if not entry:
                continue
            path = entry.split(b"\t", 1)[1].decode(errors="surrogateescape")
            paths.append(path)
            if entry.startswith(b"160000 "):
                links.append(path)
            elif is_attributes_file(path):
                attributes.append(path)
        return links, attributes, paths


def _attributes_after(
    known: object, added: Iterable[str], gone: Iterable[str] = ()
) -> list[str] | None:
    """The private index's ``.gitattributes`` entries after a snapshot added ``added`` and took
    ``gone`` out, from the list of them before (the memo's, or a seed's copy of the user's
    index: read from disk, so anything but a list is no list); None when there is none."""
    if not isinstance(known, list):
        return None
    out = set(gone)
    return sorted({*(p for p in known if p not in out), *filter(is_attributes_file, added)})


def _lstat(path: os.PathLike[str]) -> os.stat_result | None:
    """``lstat`` of ``path``, or None when it cannot be read (vanished, a folder gone)."""
    try:
        return os.lstat(path)
    except OSError:
        return None
