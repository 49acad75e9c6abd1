"""Rollback to a checkpoint or salvage snapshot, following the five steps of SPEC 5.

1. refuse while the agent runs; 2. salvage the current state (HEAD as parent, the user's index
as a second parent when it holds staged changes) and record the intent before touching a file;
3. restore the work tree to the target's tree exactly, raw bytes written by paella itself
(``raw_restore``), deleting only files the salvage holds; 4. put HEAD, the branch and the index
back; 5. verify with a fresh snapshot, which re-reads every written file (its stat data is
new) while a git child refreshes the user's index (stat data only). A restore that stops
part-way (a full disk) says exactly which paths it changed, and the salvage puts them back. A
crash at any point leaves an intent without completion in the ledger, which
:func:`interrupted_rollback` finds at the next start together with the commands that finish or
undo it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from paella_tui.supervisor.base.errors import GitError, WorkspaceError
from paella_tui.supervisor.run.integrity import commit_exists
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.left_locks import clear_left_locks, recorded_locks
from paella_tui.supervisor.store.raw_restore import (
    Change,
    RestoreStopped,
    apply_changes,
    tree_changes,
)
from paella_tui.supervisor.store.snapshot import Snapshotter

# Fault injection for tests: the rollback process kills itself with SIGKILL at the named step.
KILL_AT_ENV = "PAELLA_TEST_KILL_AT"
STEPS = (
    "after-salvage",
    "after-intent",
    "after-worktree",
    "after-head",
    "after-index",
    "before-done",
)


class RollbackError(WorkspaceError):
    """A rollback that could not be done or could not be verified; names the salvage to go back to."""


@dataclass(frozen=True)
class RollbackResult:
    """What a finished rollback did."""

    target: SnapshotRecord
    salvage: SnapshotRecord
    changed: int
    """How many paths the restore wrote or removed."""
    notes: tuple[str, ...] = ()
    """Expected differences left as they are (oversized files, nested repositories' commits)."""


@dataclass(frozen=True)
class InterruptedRollback:
    """A rollback whose intent is in the ledger without its completion."""

    target: str
    salvage_name: str
    salvage_ref: str
    t: str

    def advice(self) -> str:
        """What happened and the two commands that finish or undo it."""
        return (
            f"A rollback to {self.target} started at {self.t} did not finish (paella was stopped "
            f"in the middle). Nothing is lost: the state before it is {self.salvage_name} "
            f"({self.salvage_ref}).\n"
            f"  to finish it:  paella rollback {self.target.replace('checkpoint ', '')} --yes\n"
            f"  to undo it:    paella rollback {self.salvage_name} --yes"
        )


def _kill_point(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def interrupted_rollback(run: Run) -> InterruptedRollback | None:
    """The newest rollback of this run that recorded its intent but never its end, if any (the
    run state's fold: a newer rollback supersedes an older interrupted one)."""
    from paella_tui.supervisor.run.ledger import ledger_iso
    from paella_tui.supervisor.run.state_store import StateStore

    intent = StateStore(run.ledger.path).load().state.pending_rollback
    if intent is None:
        return None
    return InterruptedRollback(
        target=str(intent.get("target")),
        salvage_name=f"salvage:{intent.get('salvage')}",
        salvage_ref=str(intent.get("salvage_ref")),
        t=ledger_iso(float(intent.get("t") or 0.0)),
    )


def rollback(
    run: Run, target: SnapshotRecord, *, snapshotter: Snapshotter, agent_running: bool = False
) -> RollbackResult:
    """Restore ``target`` exactly, salvaging first; raises RollbackError if it cannot be verified."""
    workspace = run.workspace
    if agent_running:
        raise WorkspaceError(
            f"cannot roll back while the agent runs (run {run.run_id})",
            hint="stop it first (`s` in the TUI), then roll back. Nothing was changed.",
        )
    # A lock paella's own git child left when paella was killed would fail this rollback (and
    # the undo it printed) at HEAD; it is paella's to remove, and said so.
    cleared = clear_left_locks(workspace)
    workspace.require_quiet("roll back", needs_index=True)
    if not commit_exists(run, target.commit):
        raise RollbackError(
            f"the commit of {target.name} ({target.commit[:12]}) is missing from the repository",
            hint=f"its ref {target.ref} was deleted or the objects pruned. Nothing was changed.",
        )
    progress = _Progress()
    try:
        result = _rollback(run, target, snapshotter, progress)
        return dataclasses.replace(result, notes=(*cleared, *result.notes))
    except OSError as err:
        # Space or permissions ran out outside the restore itself (the ledger, the salvage).
        said = f"{err.strerror or err}" + (f" ({err.filename})" if err.filename else "")
        if progress.salvage is None:
            raise RollbackError(
                f"rollback to {target.name} stopped before it changed anything: {said}",
                hint="the work tree, HEAD and index are as they were; free the space (or fix "
                "the permission) and run the command again.",
            ) from err
        salvage = progress.salvage
        where = (
            "before it changed a file"
            if not progress.files_changed
            else "after the work tree was restored (HEAD, the branch or the index may not be)"
        )
        raise RollbackError(
            f"rollback to {target.name} stopped {where}: {said}",
            hint=f"the state before it is {salvage.name} ({salvage.ref}): "
            f"`paella rollback {salvage.name} --yes` puts it back; "
            f"`paella rollback {target.name} --yes` finishes it.",
        ) from err


@dataclass
class _Progress:
    """How far a rollback got, for the message when something outside git stops it."""

    salvage: SnapshotRecord | None = None
    files_changed: bool = False


def _refuse_branch_of_another_worktree(
    run: Run, target: SnapshotRecord, current: str | None
) -> None:
    """A rollback never moves a branch that another worktree has checked out."""
    if not target.branch:
        return
    if current == f"refs/heads/{target.branch}":
        return  # git lets a branch be checked out in one worktree only: this one
    elsewhere = run.workspace.branch_checked_out_elsewhere(target.branch)
    if elsewhere is not None:
        raise RollbackError(
            f"cannot roll back to {target.name}: its branch {target.branch} is checked out in "
            f"the worktree {elsewhere}",
            hint=f"moving it would change that worktree's HEAD. Switch {elsewhere} to another "
            "branch first, then roll back again. Nothing was changed.",
        )


def _rollback(
    run: Run,
    target: SnapshotRecord,
    snapshotter: Snapshotter,
    progress: _Progress,
) -> RollbackResult:
    target_label = f"checkpoint {target.n}" if target.kind == "checkpoints" else target.name
    root = run.workspace.root
    with snapshotter.locked("a rollback"):
        # HEAD read once, under the lock: the salvage's parent and the branch the rollback
        # moves from (``current``, its full name) are the same reading.
        head, current = run.workspace.head_and_ref()
        _refuse_branch_of_another_worktree(run, target, current)
        # Step 2: salvage, recorded (ref, then ledger) before anything in the work tree changes.
        salvage = checkpoints.take_salvage(
            run, snapshotter, reason=f"rollback to {target.name}", head=head
        )
        progress.salvage = salvage
        _kill_point("after-salvage")
        # A file a snapshot left out (size cap, churn) is in neither tree as it is on disk: a
        # rollback never touches it, and says so.
        left_out = {s["path"] for s in (*salvage.skipped_files, *target.skipped_files)}
        changes = [
            c
            for c in tree_changes(snapshotter.git, salvage.tree, target.tree)
            if c.path not in left_out
        ]
        plan = _plan(run, changes)
        if plan.in_the_way:
            run.ledger.append(
                "rollback-refused",
                target=target_label,
                salvage_ref=salvage.ref,
                in_the_way=list(plan.in_the_way[:50]),
            )
            shown = _some(plan.in_the_way)
            raise RollbackError(
                f"cannot roll back to {target.name}: it would overwrite or delete files that no "
                f"snapshot holds (ignored or over the size cap): {shown}",
                hint="move them out of the way (or delete them if they are disposable), then roll "
                "back again. Nothing was changed.",
            )
        op_id = uuid.uuid4().hex[:12]
        run.ledger.append(
            "rollback-intent",
            id=op_id,
            target=target_label,
            target_ref=target.ref,
            target_tree=target.tree,
            salvage=salvage.n,
            salvage_ref=salvage.ref,
            from_head=salvage.head,
            from_branch=salvage.branch,
            to_head=target.head,
            to_branch=target.branch,
        )
        _kill_point("after-intent")
        try:
            written = apply_changes(snapshotter.git, root, changes)
        except RestoreStopped as stop:
            _stopped(run, op_id, target, salvage, stop, total=len(changes))
        progress.files_changed = bool(written)
        _kill_point("after-worktree")
        with recorded_locks(run.workspace, _head_locks(run, target, current), "a rollback's HEAD"):
            try:
                _restore_head(run, target, current)
                _kill_point("after-head")
                _restore_index(run, target)
                # The user's index learns the restored files' stat data in a git child of its
                # own while the verification snapshot reads the same files (the second core).
                refresh = run.workspace.git.start(["update-index", "-q", "--refresh"])
            except GitError as err:
                run.ledger.append(
                    "rollback-failed",
                    id=op_id,
                    step="head",
                    error=str(err),
                    salvage_ref=salvage.ref,
                )
                raise RollbackError(
                    f"rollback to {target.name}: the work tree is restored ({len(written)} "
                    f"paths changed), but putting HEAD, the branch and the index back failed: "
                    f"{err.stderr.strip() or err}",
                    hint=f"the state before it is {salvage.name} ({salvage.ref}): "
                    f"`paella rollback {salvage.name} --yes` puts it back.",
                ) from err
            _kill_point("after-index")
            # Step 5: a fresh snapshot must equal the target. It reads every written file again:
            # each one's stat data differs from the salvage's entry (a new inode, or a new mode),
            # so git hashes it, and raw where an attribute may convert.
            try:
                fresh = snapshotter.take()
            finally:
                refresh.wait()
        unexplained, notes = _differences(run, fresh.tree, target, salvage)
        if unexplained:
            run.ledger.append(
                "rollback-failed",
                id=op_id,
                step="verify",
                salvage_ref=salvage.ref,
                error=f"work tree {fresh.tree} differs from {target.name} {target.tree}",
                differing=unexplained[:50],
            )
            raise RollbackError(
                f"ROLLBACK NOT VERIFIED: after restoring {target.name}, the workspace does not match "
                f"it at {', '.join(unexplained[:5])}",
                hint=f"paella changed nothing more. The state before the rollback is {salvage.name} "
                f"({salvage.ref}): `paella rollback {salvage.name} --yes` brings it back; "
                f"`paella diff {target.n if target.kind == 'checkpoints' else ''}`".rstrip()
                + " shows what differs.",
            )
        _kill_point("before-done")
        run.ledger.append(
            "rollback-done",
            id=op_id,
            target=target_label,
            target_ref=target.ref,
            tree=target.tree,
            salvage=salvage.n,
            salvage_ref=salvage.ref,
            changed_files=len(written),
            notes=notes,
        )
    return RollbackResult(target=target, salvage=salvage, changed=len(written), notes=tuple(notes))


def _some(paths: tuple[str, ...] | list[str], shown: int = 5) -> str:
    text = ", ".join(paths[:shown])
    return text + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def _stopped(
    run: Run,
    op_id: str,
    target: SnapshotRecord,
    salvage: SnapshotRecord,
    stop: RestoreStopped,
    *,
    total: int,
) -> NoReturn:
    """Record and say exactly what a restore that stopped part-way had changed."""
    with contextlib.suppress(OSError):  # a full disk may refuse the record too: the message stays
        run.ledger.append(
            "rollback-failed",
            id=op_id,
            step="work tree",
            error=str(stop),
            salvage_ref=salvage.ref,
            changed=stop.changed[:200],
            changed_count=len(stop.changed),
        )
    if stop.changed:
        what = (
            f"it had changed {len(stop.changed)} of {total} paths ({_some(stop.changed)}); "
            "HEAD, the branch and the index were not touched"
        )
    else:
        what = "it had changed nothing: the work tree is as it was"
    raise RollbackError(
        f"rollback to {target.name} stopped part-way at {stop.path}: {stop.error}; {what}",
        hint=f"the state before it is {salvage.name} ({salvage.ref}): "
        f"`paella rollback {salvage.name} --yes` puts it back exactly"
        + (" (free some space first)" if "space" in stop.error.lower() else "")
        + ".",
    ) from stop


@dataclass(frozen=True)
class _Plan:
    changes: tuple[tuple[str, str], ...]
    """(status, path) of every path the restore writes or removes."""
    in_the_way: tuple[str, ...]
    """Paths on disk that the restore would overwrite or delete but no snapshot holds."""


def _plan(run: Run, restore: list[Change]) -> _Plan:
    """What the restore will do, and what on disk it would destroy without a copy.

    A folder holding an ignored file would have to go to make room for a file, an ignored file
    would be overwritten by a checkpoint's file of the same name. Neither is in the salvage, so
    such a rollback could not be undone: refuse it.
    """
    changes = tuple((c.status, c.path) for c in restore)
    leaving = {path for status, path in changes if status == "D"}
    root = run.workspace.root
    in_the_way: list[str] = []
    for status, path in changes:
        if status != "A":
            continue  # M and T paths are in the current tree, so the salvage holds them
        parts = path.split("/")
        behind_a_file = False
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            full = root / parent
            if os.path.lexists(full) and not (full.is_dir() and not full.is_symlink()):
                # A file or symlink where the target needs a folder: git removes it if the
                # salvage holds it; what lies beyond a symlink is not this path at all.
                if parent not in leaving:
                    in_the_way.append(parent)
                behind_a_file = True
                break
        if behind_a_file:
            continue
        full = root / path
        if not os.path.lexists(full):
            continue
        if full.is_dir() and not full.is_symlink():
            for folder, _dirs, files in os.walk(full):
                for name in files:
                    rel = (Path(folder) / name).relative_to(root).as_posix()
                    if rel not in leaving:
                        in_the_way.append(rel)
        else:
            in_the_way.append(path)
    return _Plan(changes=changes, in_the_way=tuple(dict.fromkeys(in_the_way)))


def _head_locks(run: Run, target: SnapshotRecord, current: str | None) -> list[Path]:
    """The lock files git may take while HEAD, the branch and the index are put back."""
    ws = run.workspace
    now = current.removeprefix("refs/heads/") if current else None  # a full name
    branches = {b for b in (target.branch, now) if b}
    return [
        ws.git_dir / "HEAD.lock",
        ws.index_lock,
        ws.common_dir / "packed-refs.lock",
        *(ws.common_dir / "refs" / "heads" / f"{b}.lock" for b in sorted(branches)),
    ]


def _restore_head(run: Run, target: SnapshotRecord, current: str | None) -> None:
    """Put HEAD and its branch where ``target`` had them (``current``: HEAD's branch now)."""
    git = run.workspace.git
    message = f"paella: rollback to {target.name}"
    if target.branch:
        ref = f"refs/heads/{target.branch}"
        if target.head:
            git.run(["update-ref", "-m", message, ref, target.head])
        elif git.rev_parse(ref):
            # The checkpoint sat on a branch with no commit yet: make it unborn again. The
            # salvage commit's parent keeps the commits made since reachable.
            git.run(["update-ref", "-d", ref])
        if current != ref:
            git.run(["symbolic-ref", "-m", message, "HEAD", ref])
    elif target.head:
        git.run(["update-ref", "--no-deref", "-m", message, "HEAD", target.head])


def _restore_index(run: Run, target: SnapshotRecord) -> None:
    """Set the user's index to the HEAD tree (a salvage's saved index, when it has one), touching
    no file: ``read-tree`` without ``-u`` never converts or writes the work tree. The caller then
    refreshes it (stat data only) so that ``git status`` reads the restored files right."""
    git = run.workspace.git
    # --reset keeps the stat data of entries that match, so `git status` stays fast afterwards.
    if target.index:
        git.run(["read-tree", "--reset", f"{target.index}^{{tree}}"])
    elif target.head:
        git.run(["read-tree", "--reset", target.head])
    else:
        git.run(["read-tree", "--empty"])


def _differences(
    run: Run, fresh_tree: str, target: SnapshotRecord, salvage: SnapshotRecord
) -> tuple[list[str], list[str]]:
    """Paths where the restored workspace differs from the target, as (unexplained, notes).

    Two kinds of difference are expected and reported rather than failed: files over the size
    cap (never snapshotted, never touched), and nested repositories or submodules whose commit
    moved (paella never enters them, so it cannot move them back).
    """
    if fresh_tree == target.tree:
        return [], []
    raw = run.workspace.git.lines_z(
        ["diff-tree", "-r", "-z", "--no-renames", fresh_tree, target.tree]
    )
    skipped = {s["path"] for s in (*salvage.skipped_files, *target.skipped_files)}
    unexplained: list[str] = []
    notes: list[str] = []
    # -z raw output: ":oldmode newmode oldsha newsha status\0path\0" per entry.
    for meta, path in zip(raw[0::2], raw[1::2], strict=True):
        modes = meta.lstrip(":").split(" ")[:2]
        if path in skipped:
            notes.append(f"{path}: left out of snapshots (size cap or churn), not touched")
        elif "160000" in modes:
            notes.append(
                f"{path}: nested repository or submodule at another commit than at {target.name}; "
                "paella never enters it, so move it back yourself if you need to"
            )
        else:
            unexplained.append(path)
    return unexplained, notes
