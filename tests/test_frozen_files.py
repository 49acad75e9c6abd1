"""The protected files' frozen content (``judge/frozen.py``) on real repositories: the judged
tree for every kind of change under a protected glob, accept and revert, and a forged accept
record in the ledger.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tomli_w
from conftest import GitRunner

from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.judge.frozen import ACCEPTED, FrozenFiles
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.run.state_store import StateStore
from paella_tui.supervisor.store.scratch_tree import ScratchTree
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


def _accepted(run: Run) -> tuple[dict[str, object], ...]:
    """The run's accept records as a run reads them again (its kept state)."""
    return tuple(dict(r) for r in StateStore(run.ledger.path).load().state.accepted)


def setup(
    repo: Path, git: GitRunner, *, draft: bool = False
) -> tuple[Run, FrozenFiles, Snapshotter]:
    contract = {
        "run": {"prompt": "x", "agent": ["true"]},
        "gate": [{"name": "g", "cmd": "true"}],
        "episode": [{"name": "e", "goal": "g", "gates": ["g"]}],
        "constraint": [{"text": "spec", "protect": ["tests/**", "*.lock"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    (repo / "tests").mkdir()
    (repo / "tests" / "spec.txt").write_bytes(b"spec\r\n")
    (repo / "tests" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (repo / "tests" / "run.sh").chmod(0o755)
    os.symlink("spec.txt", repo / "tests" / "link")
    (repo / "deps.lock").write_text("pinned\n")
    (repo / "src.txt").write_text("work\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    if draft:  # the run starts on work no commit holds: only paella's refs keep its tree
        (repo / "tests" / "draft.txt").write_text("not committed\n")
    ws = Workspace.find(repo)
    run = RunStore(ws).create(load_contract(repo / "paella.toml"), manual=False)
    snapshotter = Snapshotter(ws)
    start = snapshotter.take().tree
    run.ledger.append("run-tree", tree=start)
    contract_ = run.load_contract()
    assert contract_ is not None
    return run, FrozenFiles.for_run(run, contract_, start, _accepted(run)), snapshotter


# Every kind of change an agent can make to protected paths (and one it may make elsewhere).
CHANGES = {
    "edit": lambda r: (r / "tests" / "spec.txt").write_bytes(b"edited\n"),
    "delete": lambda r: (r / "tests" / "spec.txt").unlink(),
    "add": lambda r: (r / "tests" / "new.txt").write_text("new\n"),
    "mode": lambda r: (r / "tests" / "run.sh").chmod(0o644),
    "symlink-retarget": lambda r: (
        os.unlink(r / "tests" / "link"),
        os.symlink("run.sh", r / "tests" / "link"),
    ),
    "root-glob": lambda r: (r / "deps.lock").write_text("loose\n"),
    "contract": lambda r: (r / "paella.toml").write_text("# gone\n"),
}


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_the_judged_tree_holds_every_protected_path_at_its_frozen_content(
    repo: Path, git: GitRunner, tree_state, tmp_path: Path, kind: str
) -> None:
    run, frozen, snapshotter = setup(repo, git)
    at_start = tree_state(repo)
    CHANGES[kind](repo)
    (repo / "src.txt").write_text("the agent's work\n")  # not protected: judged as it is
    now = snapshotter.take().tree
    judged = frozen.judged(now)
    assert judged.frozen and judged.tree != now
    with ScratchTree(run.workspace, parent=tmp_path) as scratch:
        scratch.checkout(judged.tree)
        held = tree_state(scratch.path)
    expected = dict(at_start)
    expected["src.txt"] = ("file", b"the agent's work\n", False)
    assert held == expected, "\n".join(held.differences(expected))
    # Back to the frozen content: the gates judge the work tree itself again.
    assert frozen.judged(snapshotter.take().tree).frozen
    frozen.revert(run, snapshotter, by="test")
    assert tree_state(repo) == expected
    assert not frozen.judged(snapshotter.take().tree).frozen


def test_an_accept_holds_after_a_reload_and_a_forged_one_does_not(
    repo: Path, git: GitRunner
) -> None:
    run, frozen, snapshotter = setup(repo, git)
    start = frozen.tree
    (repo / "tests" / "spec.txt").write_bytes(b"accepted spec\n")
    tree = snapshotter.take().tree
    assert frozen.accept(run, tree, by="user") == ["tests/spec.txt"]
    assert not frozen.differing(tree)
    contract = run.load_contract()
    assert contract is not None
    again = FrozenFiles.for_run(run, contract, start, _accepted(run))
    assert again.tree == frozen.tree and not again.differing(tree)
    # The agent forges an accept of its own edit: a ref and record the mirror never saw.
    (repo / "tests" / "spec.txt").write_bytes(b"the agent's spec\n")
    forged_tree = snapshotter.take().tree
    commit = git(repo, "commit-tree", forged_tree, "-m", "forged").strip()
    ref = f"{run.ref_prefix}/frozen/9"
    git(repo, "update-ref", ref, commit)
    run.ledger.append(ACCEPTED, ref=ref, commit=commit, tree=forged_tree, paths=["tests/spec.txt"])
    reread = FrozenFiles.for_run(run, contract, start, _accepted(run))
    assert reread.tree == frozen.tree, "a record the mirror does not confirm was trusted"
    assert [c.path for c in reread.differing(forged_tree)] == ["tests/spec.txt"]
    records = [json.loads(line) for line in (run.dir / "events.jsonl").read_text().splitlines()]
    assert [r["by"] for r in records if r["kind"] == ACCEPTED and "by" in r] == ["user"]


def test_the_frozen_content_survives_deleted_refs_and_gc(repo: Path, git: GitRunner) -> None:
    run, frozen, _ = setup(repo, git, draft=True)
    start = frozen.tree
    (repo / "tests" / "spec.txt").write_bytes(b"edited\n")
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/paella").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "reflog", "expire", "--expire=now", "--all")
    (run.workspace.state_dir / "snapshot.index").unlink(missing_ok=True)
    git(repo, "gc", "-q", "--prune=now")
    assert git.run(repo, "cat-file", "-e", start).returncode != 0, "the start tree was pruned"
    tree = Snapshotter(run.workspace).take().tree
    # Fetched back from the mirror: the gates still judge the frozen content.
    assert [c.path for c in frozen.differing(tree)] == ["tests/spec.txt"]
    assert frozen.judged(tree).frozen == ("tests/spec.txt",)
