"""The protected files as frozen at run start: what the gates judge, and a person's accept or revert.

The judge is the contract as frozen (issue 11): an agent that edits a protected test (a
constraint's ``protect`` globs, and ``paella.toml`` itself) must not turn its gate green. The
frozen content of those paths is a git tree, first the run's start tree (``run-tree``), later a
tree a person accepted. For any workspace tree T, :meth:`FrozenFiles.judged` gives the tree the
gates judge: T itself while no protected path differs (the gates run in the work tree, at no
cost), otherwise T with every protected path at its frozen content (added files removed,
deleted files back), built in a private index and written out to a scratch tree.

While a protected path differs the run is not done; a person decides:

- **accept**: the workspace's content becomes the frozen content. The new frozen tree is kept
  under ``<run refs>/frozen/<n>`` (pushed to the mirror before its ledger record, like a
  checkpoint) and recorded as ``protected-accepted`` with who decided. A record the mirror does
  not confirm (a forged line) is ignored when the run is read again.
- **revert**: the protected paths are written back byte for byte from the frozen tree (blobs
  written by paella, no checkout), after a salvage snapshot: ``paella rollback salvage:N --yes``
  undoes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from paella_tui.supervisor.base.errors import GitError, WorkspaceError
from paella_tui.supervisor.base.globs import match_any
from paella_tui.supervisor.contract.model import CONTRACT_FILE, Contract
from paella_tui.supervisor.run.integrity import ensure_snapshot
from paella_tui.supervisor.run.runs import Run, save_to_mirror
from paella_tui.supervisor.run.state_store import StateStore
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.loose_reads import loose_commit_tree, loose_ref, ref_absent
from paella_tui.supervisor.store.mirror import Mirror
from paella_tui.supervisor.store.raw_restore import (
    Change,
    RestoreStopped,
    apply_changes,
    tree_changes,
    verify_written,
)
from paella_tui.supervisor.store.scratch_tree import ScratchSlot
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.run.state import RunState

ACCEPTED = "protected-accepted"
REVERTED = "protected-reverted"
_ABSENT_MODE = "000000"


KEPT_DIFFS = 4
"""How many trees' changes from the frozen tree :class:`FrozenFiles` keeps."""


@dataclass(frozen=True)
class Judged:
    """The tree the gates judge for one workspace tree."""

    tree: str
    """The workspace tree, with protected paths at their frozen content."""
    frozen: tuple[str, ...]
    """The protected paths the workspace has changed (held at their frozen content); empty
    when the gates judge the workspace tree itself."""


ReviewChoice = Literal["accept", "revert", "later"]
"""A person's answer about changed protected files (``later``: decide in the recovery)."""

_DIFF_BYTES = 256 * 1024


@dataclass(frozen=True)
class ProtectedChange:
    """Protected files that differ from their frozen content: what a person accepts or reverts."""

    tree: str
    """The workspace tree that holds the change."""
    changes: tuple[tuple[str, str], ...]
    """(status, path) per changed path: ``A`` added, ``D`` deleted, ``M`` modified, ``T`` type."""
    diff: str
    """The change as a unified diff from the frozen content (cut at 256 KiB)."""

    @property
    def paths(self) -> tuple[str, ...]:
        """The changed protected paths."""
        return tuple(path for _, path in self.changes)


def protected_globs(contract: Contract) -> tuple[str, ...]:
    """Every protected glob of the contract, and the contract file itself (at the root)."""
    return (*contract.protected_globs(), f"/{CONTRACT_FILE}")


class FrozenFiles:
    """The frozen content of the protected paths of one run, and what differs from it."""

    def __init__(
        self,
        workspace: Workspace,
        globs: Sequence[str],
        tree: str,
        *,
        run: Run | None = None,
        kept: tuple[str, str] | None = None,
    ) -> None:
        """``tree`` holds the frozen content (the run's start tree, or the last accepted one);
        ``kept`` the (ref, commit) that keeps it, fetched back from the mirror if pruned."""
        self.workspace = workspace
        self.globs = tuple(globs)
        self.tree = tree
        """The frozen tree: protected paths are judged at their content here."""
        self._run = run
        self._kept = kept
        self._judged: dict[str, Judged] = {}
        self._changes: dict[tuple[str, str], list[Change]] = {}
        """The newest trees compared with the frozen tree: (frozen tree, tree) -> every change,
        oldest first (at most :data:`KEPT_DIFFS`)."""

    @classmethod
    def for_run(
        cls,
        run: Run,
        contract: Contract,
        start_tree: str,
        accepted: Sequence[Mapping[str, Any]],
    ) -> FrozenFiles:
        """The run's frozen files: its start tree, or the newest accepted tree the mirror confirms
        (``accepted``: the run's ``protected-accepted`` records, oldest first, as its state keeps
        them)."""
        mirrored = Mirror.for_workspace(run.workspace).refs(run.run_id) or {}
        for record in reversed(accepted):
            if _confirmed(run, record, mirrored):
                kept = (str(record["ref"]), str(record["commit"]))
                return cls(
                    run.workspace,
                    protected_globs(contract),
                    str(record["tree"]),
                    run=run,
                    kept=kept,
                )
        start = _keep_start(run, start_tree, mirrored)
        return cls(run.workspace, protected_globs(contract), start_tree, run=run, kept=start)

    @classmethod
    def of_state(cls, run: Run, contract: Contract | None, state: RunState) -> FrozenFiles | None:
        """The run's frozen files from its folded state, as the loop, ``paella gates`` and the
        bisect judge with; None for a manual run (no contract) or a run with no start tree yet
        (nothing is frozen)."""
        if contract is None or state.start_tree is None:
            return None
        return cls.for_run(run, contract, state.start_tree, state.accepted)

    def differing(self, tree: str) -> list[Change]:
        """The protected paths whose content (or mode, or presence) in ``tree`` is not frozen;
        ``old_*`` is the frozen side."""
        return [c for c in self.changes(tree) if match_any(c.path, self.globs)]

    def changes(self, tree: str) -> list[Change]:
        """Every path that differs from the frozen tree to ``tree`` (protected or not). The newest
        answers are kept: a pass's gates, the drift checks of its verdict and the protected-file
        check at the agent's exit all ask about the same tree, and a rollback returns to a tree
        asked about a few trees before (the raw diff of two trees is a function of their
        object ids alone: no configuration or attribute changes it)."""
        if tree == self.tree:
            return []
        known = self.known_changes(tree)
        if known is not None:
            return known
        try:
            changes = tree_changes(self.workspace.git, self.tree, tree)
        except GitError:
            # Pruned (refs deleted, then gc): fetched back from the mirror, or said plainly.
            if not self._restore():
                raise WorkspaceError(
                    f"the frozen content of the protected files (tree {self.tree[:12]}) is "
                    "missing from the repository and the mirror",
                    hint="the gates cannot judge the protected files as frozen; start a new run "
                    "(`paella run`) to freeze them again.",
                ) from None
            changes = tree_changes(self.workspace.git, self.tree, tree)
        self._changes[(self.tree, tree)] = changes
        while len(self._changes) > KEPT_DIFFS:
            del self._changes[next(iter(self._changes))]
        return list(changes)

    def known_changes(self, tree: str) -> list[Change] | None:
        """:meth:`changes` when this is one of the newest trees asked about (no git), else None."""
        key = (self.tree, tree)
        known = self._changes.pop(key, None)
        if known is None:
            return None
        self._changes[key] = known  # the newest again
        return list(known)

    def _restore(self) -> bool:
        """Bring the frozen tree back from the mirror; True when it is in the repository."""
        if self._run is None or self._kept is None:
            return False
        ref, commit = self._kept
        return ensure_snapshot(self._run, ref, commit)

    def judged(self, tree: str) -> Judged:
        """The tree the gates judge for the workspace tree ``tree`` (memoised per frozen tree)."""
        key = f"{self.tree}:{tree}"
        known = self._judged.get(key)
        if known is not None:
            return known
        changes = self.differing(tree)
        result = (
            Judged(tree, ())
            if not changes
            else Judged(_overlay(self.workspace, tree, changes), _paths(changes))
        )
        if len(self._judged) > 256:
            self._judged.clear()
        self._judged[key] = result
        return result

    def describe(self, tree: str) -> ProtectedChange:
        """What differs in ``tree`` from the frozen content, with its diff."""
        changes = self.differing(tree)
        paths = [c.path for c in changes]
        diff = b""
        if paths:
            diff = self.workspace.git.run(
                [
                    "diff",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-renames",
                    self.tree,
                    tree,
                    "--",
                    *[f":(literal){p}" for p in paths],
                ]
            ).stdout
        text = diff[:_DIFF_BYTES].decode(errors="replace")
        if len(diff) > _DIFF_BYTES:
            text += f"\n… (the diff goes on: {len(diff)} bytes in all)\n"
        return ProtectedChange(tree, tuple((c.status, c.path) for c in changes), text)

    def accept(self, run: Run, tree: str, *, by: str) -> list[str]:
        """Make the protected content of ``tree`` the frozen content; return the paths accepted."""
        changes = self.differing(tree)
        if not changes:
            return []
        # The new frozen tree: the old one with the accepted paths at their new content.
        new_tree = _overlay(self.workspace, self.tree, [_reverse(c) for c in changes])
        git = self.workspace.git
        paths = list(_paths(changes))
        body = f"paella: protected files accepted by {by}: {', '.join(paths[:20])}\n"
        commit = git.out(["commit-tree", new_tree], input=body.encode())
        n = 1 + len(StateStore(run.ledger.path).load().state.accepted)
        ref, _ = checkpoints.create_numbered_ref(
            run, "frozen", n, commit, message="paella: frozen files accepted"
        )
        save_to_mirror(run, {ref: commit}, state=False)
        run.ledger.append(ACCEPTED, ref=ref, commit=commit, tree=new_tree, paths=paths, by=by)
        self.tree = new_tree
        self._run, self._kept = run, (ref, commit)
        return paths

    def revert(self, run: Run, snapshotter: Snapshotter, *, by: str) -> SnapshotRecord | None:
        """Write the protected paths back from the frozen tree, after a salvage; the salvage
        (None when nothing differed). Raises WorkspaceError when a file cannot be written."""
        with snapshotter.locked("reverting protected files"):
            snap = snapshotter.take()
            if not self.differing(snap.tree):
                return None
            salvage = checkpoints.take_salvage(run, snapshotter, reason="revert protected files")
            changes = [_reverse(c) for c in self.differing(salvage.tree)]
            undo = f"`paella rollback {salvage.name} --yes` puts the changed files back"
            try:
                apply_changes(snapshotter.git, self.workspace.root, changes)
            except RestoreStopped as stop:
                raise WorkspaceError(
                    f"reverting the protected files stopped at {stop.path}: {stop.error}",
                    hint=f"{len(stop.changed)} path(s) were reverted; {undo}.",
                ) from stop
            wrong = verify_written(
                self.workspace.root,
                changes,
                lambda data: snapshotter.blob_id(data, like=self.tree),
            )
            if wrong:
                raise WorkspaceError(
                    f"reverting the protected files did not hold: {', '.join(wrong[:5])} differ",
                    hint=f"{undo}.",
                )
            run.ledger.append(
                REVERTED,
                paths=[c.path for c in changes],
                salvage=salvage.n,
                salvage_ref=salvage.ref,
                by=by,
            )
        return salvage


def _reverse(change: Change) -> Change:
    """The same change read the other way (new side first; an added file is deleted)."""
    status = {"A": "D", "D": "A"}.get(change.status, change.status)
    return Change(
        status, change.path, change.new_mode, change.old_mode, change.new_oid, change.old_oid
    )


def _overlay(workspace: Workspace, tree: str, changes: list[Change]) -> str:
    """``tree`` with each changed protected path at its frozen side (built in a private index)."""
    git_dir = workspace.git_dir
    index = git_dir / f"paella-frozen-{uuid.uuid4().hex}.index"
    git = Git(workspace.root, index_file=index)
    lines = []
    for change in changes:
        path = change.path.encode(errors="surrogateescape")
        if change.old_mode == _ABSENT_MODE:
            lines.append(b"0 " + b"0" * len(change.old_oid) + b"\t" + path + b"\0")
        else:
            lines.append(f"{change.old_mode} {change.old_oid}\t".encode() + path + b"\0")
    try:
        git.run(["read-tree", tree])
        git.run(["update-index", "-z", "--index-info"], input=b"".join(lines))
        return git.out(["write-tree"])
    finally:
        index.unlink(missing_ok=True)


def _paths(changes: list[Change]) -> tuple[str, ...]:
    return tuple(sorted(c.path for c in changes))


def _confirmed(run: Run, record: Mapping[str, object], mirrored: dict[str, str]) -> bool:
    """Whether an accept record is the mirror's: its ref holds its commit there, whose tree it names."""
    ref, commit, tree = record.get("ref"), record.get("commit"), record.get("tree")
    if not (isinstance(ref, str) and isinstance(commit, str) and isinstance(tree, str)):
        return False
    if mirrored.get(ref) != commit or not ensure_snapshot(run, ref, commit):
        return False
    return _tree_of(run, commit) == tree


def _tree_of(run: Run, commit: str) -> str | None:
    """``rev-parse --verify <commit>^{tree}``: from the loose commit (checked against its id)
    when it is one (:mod:`loose_reads`), else from git."""
    tree = loose_commit_tree(run.workspace.common_dir / "objects", commit)
    if tree is not None:
        return tree
    proc = run.workspace.git.run(["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"], check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def _ref_commit(run: Run, ref: str) -> str | None:
    """``rev-parse --verify <ref>``: from its loose file, or nothing when no file git's rules
    would read holds it (a new run's frozen ref), else from git."""
    ws = run.workspace
    found = loose_ref(ws.common_dir, ref)
    if found is not None or ref_absent(ws.git_dir, ws.common_dir, ref):
        return found
    return ws.git.rev_parse(ref)


def _keep_start(run: Run, tree: str, mirrored: dict[str, str]) -> tuple[str, str] | None:
    """Keep the start tree under ``<run refs>/frozen/0``, in the repository and the mirror, so
    a ``git gc`` after deleted refs cannot take the frozen content (None: it cannot be kept)."""
    git = run.workspace.git
    ref = f"{run.ref_prefix}/frozen/0"
    commit = mirrored.get(ref)
    if commit is not None and ensure_snapshot(run, ref, commit) and _tree_of(run, commit) == tree:
        if _ref_commit(run, ref) != commit:
            git.run(["update-ref", ref, commit])
        return ref, commit
    commit = _ref_commit(run, ref)
    if commit is None or _tree_of(run, commit) != tree:
        try:
            commit = git.out(
                ["commit-tree", tree], input=b"paella: protected files as frozen at run start\n"
            )
            git.run(["update-ref", ref, commit])
        except GitError:
            return None  # the start tree itself is gone: differing() says so when it is needed
    save_to_mirror(run, {ref: commit}, state=False)
    return ref, commit


class GateFolder:
    """Where the gates run for a workspace tree: the work tree itself while no protected path
    differs from its frozen content, else a scratch tree holding the judged tree.

    ``place`` runs in a worker thread that a closing evaluator abandons: its scratch tree is a
    :class:`ScratchSlot`, which places nothing after the close."""

    def __init__(self, frozen: FrozenFiles, *, links: tuple[str, ...] = ()) -> None:
        """``links``: ignored paths the gates need (``[steps] link``), linked into the scratch tree."""
        self.frozen = frozen
        self.links = links
        self._scratch = ScratchSlot(frozen.workspace, links=links)

    def place(self, tree: str) -> tuple[Judged, Path]:
        """What the gates judge for ``tree``, and the folder that holds it (blocking)."""
        judged = self.frozen.judged(tree)
        if not judged.frozen:
            return judged, self.frozen.workspace.root
        return judged, self._scratch.checkout(judged.tree)

    def close(self) -> None:
        """Delete the scratch tree, if one was made (after a ``place`` in progress ends)."""
        self._scratch.close()
