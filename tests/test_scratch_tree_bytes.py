"""Scratch trees hold the snapshot's bytes under every git configuration (issue 11, part 2).

A scratch tree is where gates judge a tree that is not the work tree (a bisect's steps, the
work with protected files at their frozen content). Its files are written from the raw blobs,
so ``core.autocrlf`` (configuration, not an attribute), ``eol``/``text``/``ident`` attributes and
smudge filters never change a byte. Run against the configuration matrix of
``test_byte_exact_matrix``: the scratch tree equals the work tree the snapshot was taken of,
after moving to another tree and back, and after a gate changed files inside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_byte_exact_matrix import CONFIGS, base_commit, configure, damage, make_checkpoint_state

from paella_tui.supervisor.store.scratch_tree import ScratchTree
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# Sparse checkout and linked worktrees change where files are, not how bytes are converted.
BYTE_CONFIGS = [kind for kind in CONFIGS if kind not in ("sparse", "worktree")]


def gate_scribbles(root: Path) -> None:
    """What a careless gate does in the folder it runs in."""
    (root / "mod.txt").write_bytes(b"a gate wrote here\n")
    (root / "mode.sh").chmod(0o644)
    os.unlink(root / "link")
    (root / "gate-output.log").write_bytes(b"left by the gate\n")


@pytest.mark.parametrize("kind", BYTE_CONFIGS)
def test_a_scratch_tree_holds_the_snapshot_byte_for_byte(
    kind: str, tmp_path: Path, git, tree_state: Callable[..., dict[str, object]]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    configure(kind, repo, git)
    base_commit(repo, git)
    if kind == "index_v4_split":
        git(repo, "update-index", "--index-version", "4", "--split-index")
    make_checkpoint_state(repo, git)
    first = tree_state(repo)
    ws = Workspace.find(repo)
    snapshotter = Snapshotter(ws)
    one = snapshotter.take().tree
    damage(repo, git)
    second = tree_state(repo)
    two = snapshotter.take().tree
    parent = tmp_path / "scratch"
    parent.mkdir()
    with ScratchTree(ws, parent=parent) as scratch:
        scratch.checkout(one)
        assert tree_state(scratch.path) == first, "\n".join(
            tree_state(scratch.path).differences(first)  # type: ignore[attr-defined]
        )
        gate_scribbles(scratch.path)
        scratch.checkout(two)
        now = tree_state(scratch.path).without("gate-output.log")  # type: ignore[attr-defined]
        assert now == second, "\n".join(now.differences(second))
        gate_scribbles(scratch.path)
        scratch.checkout(one)
        now = tree_state(scratch.path).without("gate-output.log")  # type: ignore[attr-defined]
        assert now == first, "\n".join(now.differences(first))
        # The user's work tree was never written.
        assert tree_state(repo) == second
    assert not any(parent.iterdir()), "the scratch folder is removed"


def test_a_smudge_filter_never_runs_for_a_scratch_tree(tmp_path: Path, git) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    witness = tmp_path / "smudged"
    git(repo, "config", "filter.spy.smudge", f"touch {witness}; cat")
    git(repo, "config", "filter.spy.clean", "cat")
    git(repo, "config", "core.autocrlf", "true")
    (repo / ".gitattributes").write_text("*.txt filter=spy\n")
    (repo / "a.txt").write_bytes(b"lf only\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "spy")
    ws = Workspace.find(repo)
    tree = Snapshotter(ws).take().tree
    with ScratchTree(ws, parent=tmp_path) as scratch:
        scratch.checkout(tree)
        assert (scratch.path / "a.txt").read_bytes() == b"lf only\n"  # no CRLF from autocrlf
    assert not witness.exists(), "the smudge filter ran"
