"""Is a run's state still what paella wrote? The frozen contract, the ledger and the snapshot refs,
checked against what paella recorded and against the mirror, and restored from the mirror.

Every finding is a sentence for a ``history`` drift: said on screen, kept in the ledger and the
handoff. Checks never raise: a mirror that cannot be read makes them weaker, not fatal.
"""

from __future__ import annotations

import contextlib
import os

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.base.files import write_atomic
from paella_tui.supervisor.run.frozen_contract import (
    FrozenContract as FrozenContract,
)
from paella_tui.supervisor.run.frozen_contract import (
    recorded_contract_sha as recorded_contract_sha,
)
from paella_tui.supervisor.run.frozen_contract import restore_runs as restore_runs
from paella_tui.supervisor.run.frozen_contract import stamp as _stamp
from paella_tui.supervisor.run.frozen_contract import verified_contract
from paella_tui.supervisor.run.ledger import LedgerRead
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.loose_reads import loose_commit_tree, loose_kind, loose_ref
from paella_tui.supervisor.store.mirror import LEDGER_NAME, Mirror


def frozen_contract(
    run: Run, read: LedgerRead | None = None, *, restore: bool = False
) -> FrozenContract:
    """The frozen contract's text, verified against its recorded sha256 and the mirror's copy
    (see :func:`~paella_tui.supervisor.run.frozen_contract.verified_contract`)."""
    read = read if read is not None else run.ledger.read_first()
    return verified_contract(run.workspace, run.run_id, run.contract_copy, read, restore=restore)


def ledger_against_mirror(run: Run, *, restore: bool = False) -> list[str]:
    """Whether the ledger still begins with what the mirror holds; with ``restore``, put it back.

    The mirror's copy is the ledger as of the last save: an append-only ledger always extends
    it, so a ledger cut short, or one whose newest mirrored part changed (an edit there, or a
    hash chain rewritten from any older record on), was edited, cut or deleted. Reading that
    part costs what was added since the save before it, whatever the history's length (see
    :mod:`~paella_tui.supervisor.store.mirror_ledger`).
    """
    mirror = Mirror.for_workspace(run.workspace)
    copy = mirror.state(run.run_id)
    path = run.ledger.path
    if copy is None or not copy.part_sha256 or copy.extended_by(path):
        return []
    what = "is missing" if not path.exists() else "was edited or cut"
    finding = (
        f"the ledger {path} {what}: it no longer begins with the copy the mirror "
        f"({mirror.describe()}) took at the last checkpoint"
    )
    if restore:
        saved = mirror.read_file(run.run_id, LEDGER_NAME)
        if saved is not None and len(saved) == copy.ledger_bytes:
            with contextlib.suppress(OSError):
                if path.exists():
                    os.replace(path, path.with_name(f"events.jsonl.changed-{_stamp()}"))
                write_atomic(path, saved)
                finding += "; restored from the mirror (the changed file is kept beside it)"
    return [finding]


def refs_against_mirror(run: Run, read: LedgerRead, *, restore: bool = False) -> list[str]:
    """Snapshot refs that vanished or moved in the repository; with ``restore``, fetched back."""
    git = run.workspace.git
    records = list(read.of_kind("checkpoint", "salvage"))
    if not records:
        return []
    # One git call for every snapshot ref of the run, whatever the number of checkpoints; only
    # the folders the records name (checkpoints/, salvage/), not the thousands of steps.
    if _refs_hold(run, records):
        return []  # the common case, read from the ref files: no git, no mirror
    folders = sorted({str(r["ref"]).rpartition("/")[0] + "/" for r in records})
    listing = git.out(["for-each-ref", "--format=%(refname) %(objectname)", *folders])
    in_repo = dict(line.split(" ", 1) for line in listing.splitlines() if " " in line)
    if all(in_repo.get(str(r["ref"])) == r["commit"] for r in records):
        return []  # no mirror needed
    mirror = Mirror.for_workspace(run.workspace)
    mirrored = mirror.refs(run.run_id) or {}
    findings: list[str] = []
    for record in records:
        ref, commit = str(record["ref"]), str(record["commit"])
        if not ref.startswith(f"{run.ref_prefix}/"):
            continue
        local = in_repo.get(ref)
        if local == commit:
            continue
        what = "was deleted" if local is None else f"was moved to {local[:12]}"
        finding = f"the snapshot ref {ref} {what}"
        if mirrored.get(ref) == commit:
            if restore and mirror.restore_ref(ref) and git.rev_parse(ref) == commit:
                finding += f"; restored from the mirror ({commit[:12]})"
            else:
                finding += f"; the mirror still holds it ({commit[:12]})"
        else:
            finding += "; the mirror does not hold it either"
        findings.append(finding)
    return findings


_LOOSE_READS = 64
"""Snapshot records past which one ``for-each-ref`` costs less than reading each ref's file."""


def _refs_hold(run: Run, records: list[dict[str, object]]) -> bool:
    """Whether every record's ref names its commit, as ``for-each-ref`` would list it, read
    from the loose ref files and objects with no git process (:mod:`loose_reads`: the plain
    case only). False means "ask git", not "moved"."""
    if len(records) > _LOOSE_READS:
        return False
    common = run.workspace.common_dir
    for record in records:
        ref, commit = str(record["ref"]), str(record["commit"])
        # for-each-ref leaves out a ref whose object is missing: the object must be there too.
        if loose_ref(common, ref) != commit or loose_kind(common / "objects", commit) is None:
            return False
    return True


def commit_exists(run: Run, commit: str) -> bool:
    """Whether the repository holds ``commit`` as a commit (``rev-parse --verify X^{commit}``),
    from its loose object when that shows it."""
    if loose_commit_tree(run.workspace.common_dir / "objects", commit) is not None:
        return True
    return run.workspace.git.rev_parse(f"{commit}^{{commit}}") is not None


def ensure_snapshot(run: Run, ref: str, commit: str) -> bool:
    """Make sure ``commit`` is in the repository (fetching ``ref`` back from the mirror if it was
    deleted or pruned there); True when it is."""
    if commit_exists(run, commit):
        return True
    mirror = Mirror.for_workspace(run.workspace)
    if (mirror.refs(run.run_id) or {}).get(ref) != commit:
        return False
    return mirror.restore_ref(ref) and commit_exists(run, commit)


def commit_trees(run: Run, commits: list[str]) -> dict[str, str]:
    """The tree of each commit the repository holds: from the loose objects where they show it
    (:mod:`loose_reads`), one git call for all the others."""
    objects = run.workspace.common_dir / "objects"
    trees: dict[str, str] = {}
    for commit in commits if len(commits) <= _LOOSE_READS else ():
        # What cat-file reads: the commit (checked against its id) and its tree's kind.
        tree = loose_commit_tree(objects, commit)
        if tree is not None and loose_kind(objects, tree) == "tree":
            trees[commit] = tree
    commits = [c for c in commits if c not in trees]  # packed, missing or damaged: git says
    if not commits:
        return trees
    query = "".join(f"{c}^{{tree}}\n" for c in commits).encode()
    try:
        out = run.workspace.git.run(
            ["cat-file", "--batch-check=%(objectname) %(objecttype)"], input=query
        ).stdout.decode(errors="replace")
    except GitError:
        return trees
    for commit, line in zip(commits, out.splitlines(), strict=False):
        name, _, kind = line.partition(" ")
        if kind == "tree":
            trees[commit] = name
    return trees


def trusted_snapshot_refs(run: Run, read: LedgerRead) -> set[str]:
    """The refs of the snapshot records that may be rolled back to.

    A record from before any chain break is trusted unless the mirror, holding this run, says
    otherwise; a record after a break (or any record, once the mirror holds this run) needs the
    mirror to agree on its ref, commit and tree.
    """
    mirror = Mirror.for_workspace(run.workspace)
    mirrored = mirror.refs(run.run_id)
    mirror_knows_run = bool(mirrored)
    snapshots = [
        (index, record)
        for index, record in enumerate(read.records)
        if record.get("kind") in ("checkpoint", "salvage")
    ]
    trees = commit_trees(run, [str(r["commit"]) for _, r in snapshots])
    trusted: set[str] = set()
    for index, record in snapshots:
        ref, commit = str(record["ref"]), str(record["commit"])
        agrees = (
            mirrored is not None
            and mirrored.get(ref) == commit
            and trees.get(commit) == record["tree"]
        )
        if (mirror_knows_run or not read.trusted(index)) and not agrees:
            continue
        trusted.add(ref)
    return trusted


def check_run(run: Run, *, restore: bool = False) -> list[str]:
    """Every integrity finding about ``run``; with ``restore``, what can be put back is.

    The ledger's records come from the run's kept fold (its chain break, its snapshots): only
    the records new since it are read, besides the prefix the mirror vouches for."""
    from paella_tui.supervisor.run.state_store import StateStore, snapshot_read

    findings = ledger_against_mirror(run, restore=restore)
    pointer = run.workspace.state_dir / "current"
    if restore and not pointer.is_file():
        with contextlib.suppress(OSError):
            write_atomic(pointer, run.run_id + "\n")
    folded = StateStore(run.ledger.path).load()
    if folded.chain_break is not None:
        findings.append(folded.chain_break.describe(run.ledger.path))
    findings += frozen_contract(run, run.ledger.read_first(), restore=restore).findings
    findings += refs_against_mirror(run, snapshot_read(folded.state), restore=restore)
    return findings
