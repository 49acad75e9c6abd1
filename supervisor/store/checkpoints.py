"""Checkpoints and salvage snapshots: snapshot commits kept under ``refs/paella/<run-id>/``
(``refs/paella/wt/<id>/<run-id>/`` in a linked worktree).

A checkpoint commit's tree is the whole workspace; its parent is the HEAD it sat on, so the
agent's commits stay reachable. A salvage commit has the user's index as a second parent when the
index holds staged changes, so a rollback's undo gives them back. The record (SPEC 5) goes to the ledger after the ref exists:
a crash in between leaves a harmless extra ref, never a record pointing at nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from typing import Any

from paella_tui.supervisor.base.errors import GitError, UsageError, WorkspaceError
from paella_tui.supervisor.base.files import ensure_dir
from paella_tui.supervisor.run.ledger import utc_now
from paella_tui.supervisor.run.runs import Run, save_to_mirror
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.loose_reads import loose_commit_tree
from paella_tui.supervisor.store.snapshot import Snapshot, Snapshotter
from paella_tui.supervisor.store.snapshot_record import Kind as Kind
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord as SnapshotRecord
from paella_tui.supervisor.store.workspace import HeadState


def records(run: Run, kind: Kind) -> list[SnapshotRecord]:
    """The run's checkpoints (or salvage snapshots), in order: from the run's folded state, so
    that only the records written since it was kept are read."""
    # Imported here: the run state folds these records (a module-level import would be a cycle).
    from paella_tui.supervisor.run.state_store import StateStore

    state = StateStore(run.ledger.path).load().state
    return list(state.checkpoints if kind == "checkpoints" else state.salvage)


def find(run: Run, name: str) -> SnapshotRecord:
    """The record a person names: ``N`` (checkpoint) or ``salvage:N``; a UsageError otherwise."""
    kind: Kind = "checkpoints"
    text = name.strip()
    if text.startswith("salvage:"):
        kind, text = "salvage", text.removeprefix("salvage:")
    # ASCII digits only ("²" is a digit to str.isdigit), and few of them: int() of thousands of
    # digits is refused by Python itself.
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise UsageError(
            f"{shown!r} names no snapshot",
            hint="use a checkpoint number (3) or salvage:N (salvage:1)",
        )
    wanted = int(text)
    known = records(run, kind)
    for record in known:
        if record.n == wanted:
            return record
    have = ", ".join(r.name for r in known) or "none"
    what = "checkpoint" if kind == "checkpoints" else "salvage snapshot"
    raise UsageError(
        f"run {run.run_id} has no {what} {wanted}",
        hint=f"it has: {have} (see `paella checkpoints`)",
    )


def commit_snapshot(
    run: Run,
    snapshotter: Snapshotter,
    snap: Snapshot,
    *,
    kind: Kind,
    message: str,
    fields: dict[str, Any],
    head: HeadState | None = None,
) -> SnapshotRecord:
    """Commit ``snap`` on top of HEAD (``head``: as the caller read it now), keep it under a
    new numbered ref, and record it."""
    git = run.workspace.git
    if head is None:
        head = run.workspace.head()
    parents = ["-p", head.commit] if head.commit else []
    index_commit = None
    if kind == "salvage":
        index_commit = _index_commit(run, head.commit)
        if index_commit is not None:
            # A second parent keeps what only the index held reachable (SPEC 5: staged content
            # survives a rollback and its undo).
            parents += ["-p", index_commit]
            fields = {**fields, "index": index_commit}
    meta = {
        "paella": kind,
        "run": run.run_id,
        **{k: v for k, v in fields.items() if k != "skipped_files"},
    }
    body = f"{message}\n\n{json.dumps(meta, sort_keys=True, default=str)}\n"
    commit = git.out(["commit-tree", snap.tree, *parents], input=body.encode())
    existing = [r.n for r in records(run, kind)]
    n = max(existing, default=0) + 1
    ref, n = create_numbered_ref(run, kind, n, commit, message=f"paella: {message}")
    record = SnapshotRecord(
        kind=kind,
        n=n,
        ref=ref,
        commit=commit,
        tree=snap.tree,
        head=head.commit,
        branch=head.branch,
        t=utc_now(),
        skipped_files=tuple(s.to_json() for s in snap.skipped),
        uncovered=snap.uncovered,
        index=index_commit,
        **{k: v for k, v in fields.items() if k != "index"},
    )
    data = record.to_json()
    data.pop("t")
    # Kept outside the repository too, before the record names it: a deleted ref or a gc
    # there never loses it, and a record is never older than its mirrored ref.
    save_to_mirror(run, {ref: commit}, state=False)
    written = run.ledger.append("checkpoint" if kind == "checkpoints" else "salvage", **data)
    # The ledger's copy in the mirror follows from whoever took it (the run loop in the
    # background, a command before it exits): see runs.save_to_mirror.
    # The ledger's own time is the record's time: what is returned equals what is read back.
    return SnapshotRecord.from_ledger(written)


def _index_commit(run: Run, head: str | None) -> str | None:
    """A commit of the user's index tree when it differs from HEAD's tree, else None.

    The index is read from a copy (``write-tree`` would lock the user's index to store its
    cache). An index git cannot write as a tree (unmerged entries) is not saved.
    """
    workspace = run.workspace
    real = workspace.git_dir / "index"
    if not real.exists():
        return None
    copy = workspace.state_dir / f"user-index.{os.getpid()}.tmp"
    try:
        ensure_dir(copy.parent)
        shutil.copyfile(real, copy)
        proc = Git(workspace.root, index_file=copy, config=(("core.splitIndex", "false"),)).run(
            ["write-tree"], check=False
        )
    finally:
        with contextlib.suppress(OSError):
            copy.unlink()
    tree = proc.stdout.decode().strip()
    if proc.returncode != 0 or not tree:
        return None
    if head is not None:
        # HEAD's tree from its loose commit (checked against its id) when it is one: no git.
        head_tree = loose_commit_tree(workspace.common_dir / "objects", head)
        if (head_tree or workspace.git.rev_parse(f"{head}^{{tree}}")) == tree:
            return None
    parents = ["-p", head] if head else []
    return workspace.git.out(
        ["commit-tree", tree, *parents], input=b"paella: the index (staged changes) at salvage\n"
    )


def create_numbered_ref(
    run: Run, folder: str, n: int, commit: str, *, message: str = ""
) -> tuple[str, int]:
    """Create ``<run refs>/<folder>/<n>`` at ``commit``, or the next free number; the ref and
    its number. Create-only (the empty old value): a ref a crash left is never overwritten.

    The caller holds paella's snapshot lock or the run lock, so a lock file on a paella ref not
    yet made is a dead paella's (its git children died with it, see gitcli): it is removed. A
    ``kill -9`` while git created the ref left it, and every later checkpoint, step or frozen
    tree of that number failed with "cannot lock ref ... File exists".
    """
    git = run.workspace.git
    stale: set[str] = set()
    while True:
        ref = f"{run.ref_prefix}/{folder}/{n}"
        try:
            git.run(["update-ref", *(["-m", message] if message else []), ref, commit, ""])
            return ref, n
        except GitError:
            lock = run.workspace.common_dir / f"{ref}.lock"
            if git.rev_parse(ref) is not None:
                n += 1
            elif ref in stale or not lock.exists():
                raise
            else:
                stale.add(ref)
                lock.unlink(missing_ok=True)


def take_checkpoint(
    run: Run,
    snapshotter: Snapshotter,
    *,
    episode: int | str | None = "manual",
    gates_green: tuple[str, ...] = (),
    label: str = "",
    snap: Snapshot | None = None,
) -> SnapshotRecord:
    """Snapshot now (or commit the given snapshot) as the run's next checkpoint."""
    try:
        with snapshotter.locked("a checkpoint"):
            snap = snap or snapshotter.take()
            title = label or (
                f"episode {episode}" if isinstance(episode, int) else "manual checkpoint"
            )
            return commit_snapshot(
                run,
                snapshotter,
                snap,
                kind="checkpoints",
                message=f"checkpoint: {title}",
                fields={
                    "episode": episode,
                    "gates_green": tuple(gates_green),
                    "label": label or title,
                },
            )
    except OSError as err:
        # A full disk or a permission: a checkpoint only adds objects, refs and a ledger line.
        raise WorkspaceError(
            f"could not take a checkpoint: {err.strerror or err}"
            + (f" ({err.filename})" if err.filename else ""),
            hint="the work tree, HEAD and index were not changed; free the space (or fix the "
            "permission) and try again.",
        ) from err


def take_salvage(
    run: Run, snapshotter: Snapshotter, *, reason: str, head: HeadState | None = None
) -> SnapshotRecord:
    """Snapshot the current state as a salvage snapshot (on ``head``, as the caller read it
    under the lock, else read here). The caller holds the snapshot lock."""
    snap = snapshotter.take()
    return commit_snapshot(
        run,
        snapshotter,
        snap,
        kind="salvage",
        message=f"salvage: {reason}",
        fields={"reason": reason},
        head=head,
    )
