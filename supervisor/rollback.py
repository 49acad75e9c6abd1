"""Rollback to a checkpoint or salvage snapshot, following the five steps of SPEC 5.

1. refuse while the agent runs; 2. salvage the current state (HEAD as parent) and record the
intent before touching a file; 3. restore the work tree to the target's tree exactly, deleting
only files the salvage holds; 4. put HEAD, the branch and the index back; 5. verify with a fresh
snapshot. A crash at any point leaves an intent without completion in the ledger, which
:func:`interrupted_rollback` finds at the next start together with the commands that finish or
undo it.
"""

from __future__ import annotations

import os
import signal
import uuid
from dataclasses import dataclass
from typing import Any

from supervisor import checkpoints
from supervisor.checkpoints import SnapshotRecord
from supervisor.errors import GitError, WorkspaceError
from supervisor.runs import Run
from supervisor.snapshot import Snapshotter

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
    """The newest rollback of this run that recorded its intent but never its end, if any."""
    pending: dict[str, dict[str, Any]] = {}
    for record in run.ledger.read().of_kind("rollback-intent", "rollback-done", "rollback-failed"):
        if record["kind"] == "rollback-intent":
            pending = {record["id"]: record}  # a newer rollback supersedes an older interrupted one
        else:
            pending.pop(record.get("id", ""), None)
    if not pending:
        return None
    intent = next(iter(pending.values()))
    return InterruptedRollback(
        target=intent["target"],
        salvage_name=f"salvage:{intent['salvage']}",
        salvage_ref=intent["salvage_ref"],
        t=intent["t"],
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
    workspace.require_quiet("roll back", needs_index=True)
    git = workspace.git
    if git.rev_parse(f"{target.commit}^{{commit}}") is None:
        raise RollbackError(
            f"the commit of {target.name} ({target.commit[:12]}) is missing from the repository",
            hint=f"its ref {target.ref} was deleted or the objects pruned. Nothing was changed.",
        )
    target_label = f"checkpoint {target.n}" if target.kind == "checkpoints" else target.name
    with snapshotter.locked("a rollback"):
        # Step 2: salvage, recorded (ref, then ledger) before anything in the work tree changes.
        salvage = checkpoints.take_salvage(run, snapshotter, reason=f"rollback to {target.name}")
        _kill_point("after-salvage")
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
            changed = _restore_work_tree(snapshotter, salvage.tree, target.tree)
        except GitError as err:
            run.ledger.append(
                "rollback-failed",
                id=op_id,
                step="work tree",
                error=str(err),
                salvage_ref=salvage.ref,
            )
            raise RollbackError(
                f"could not restore the work tree to {target.name}: {err.stderr.strip() or err}",
                hint=f"git checked before writing, so the work tree is as it was; the state before "
                f"is also saved as {salvage.name} ({salvage.ref}).",
            ) from err
        _kill_point("after-worktree")
        _restore_head(run, target)
        _kill_point("after-head")
        _restore_index(run, target)
        _kill_point("after-index")
        fresh = snapshotter.take()
        if fresh.tree != target.tree and not _only_skipped_differ(run, fresh.tree, target, salvage):
            run.ledger.append(
                "rollback-failed",
                id=op_id,
                step="verify",
                salvage_ref=salvage.ref,
                error=f"work tree {fresh.tree} differs from {target.name} {target.tree}",
            )
            raise RollbackError(
                f"ROLLBACK NOT VERIFIED: after restoring {target.name}, the workspace does not match it",
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
            changed_files=changed,
        )
    return RollbackResult(target=target, salvage=salvage, changed=changed)


def _restore_work_tree(snapshotter: Snapshotter, current_tree: str, target_tree: str) -> int:
    """Switch the work tree from ``current_tree`` (just salvaged) to ``target_tree``.

    A two-tree ``read-tree -m -u`` in the private index is git's own branch switch: it writes only
    the paths that differ, deletes only paths the current tree holds (so never an ignored or
    unsnapshotted file), keeps the executable bit and symlinks, and checks every path before it
    writes any, so a refusal leaves the work tree untouched. Submodules are not entered.
    """
    git = snapshotter.git
    diff = git.lines_z(
        ["diff-tree", "-r", "-z", "--no-renames", "--name-only", current_tree, target_tree]
    )
    git.run(["read-tree", "-m", "-u", current_tree, target_tree])
    return len(diff)


def _restore_head(run: Run, target: SnapshotRecord) -> None:
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
        current = git.run(["symbolic-ref", "-q", "HEAD"], check=False).stdout.decode().strip()
        if current != ref:
            git.run(["symbolic-ref", "-m", message, "HEAD", ref])
    elif target.head:
        git.run(["update-ref", "--no-deref", "-m", message, "HEAD", target.head])


def _restore_index(run: Run, target: SnapshotRecord) -> None:
    git = run.workspace.git
    # --reset keeps the stat data of entries that match, so `git status` stays fast afterwards.
    if target.head:
        git.run(["read-tree", "--reset", target.head])
    else:
        git.run(["read-tree", "--empty"])
    git.run(["update-index", "-q", "--refresh"], check=False)


def _only_skipped_differ(
    run: Run, fresh_tree: str, target: SnapshotRecord, salvage: SnapshotRecord
) -> bool:
    # Files over the size cap are never snapshotted and never touched: a difference made only of
    # them is expected, not a failed restore.
    skipped = {s["path"] for s in (*salvage.skipped_files, *target.skipped_files)}
    if not skipped:
        return False
    diff = run.workspace.git.lines_z(
        ["diff-tree", "-r", "-z", "--no-renames", "--name-only", fresh_tree, target.tree]
    )
    return all(path in skipped for path in diff)
