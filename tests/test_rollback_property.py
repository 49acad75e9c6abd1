"""Property (SPEC 13, "Nothing is ever lost"): whatever an agent does between a checkpoint and a
rollback, the rollback restores the checkpoint exactly, leaves ignored files alone, and
``rollback salvage:N`` brings back the state before it exactly, HEAD included."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import copy_git_dir, index_of_copy
from hypothesis import given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# Paths overlap on purpose (``d`` is a file in one example and a folder in another) and include
# spaces, unicode, a leading dash and a newline.
PATHS = [
    "a",
    "b c",
    "ü ñ.txt",
    "-dash",
    "new\nline",
    "d",
    "d/x",
    "d/y z",
    "d/e/ü",
    "e",
    "e/f",
]
# Symlinks point outside PATHS (a file, a folder, nothing), so no chain of them loops: a folder
# replaced by a symlink loop is left out of a snapshot by git itself (ELOOP), and named.
LINK_TARGETS = ["fixed.txt", "fixed_dir", "fixed_dir/x", "nowhere", "../outside"]
# Ignored files live apart from PATHS, so none is ever in the way of a restored path (that case
# is its own test in test_rollback.py).
IGNORED = ("top.log", "ign")

path_st = st.sampled_from(PATHS)
content_st = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"", b"line\n", b"crlf\r\nline\r\n", b"\0\xff binary"]),
)
operation_st = st.one_of(
    st.tuples(st.just("write"), path_st, content_st),
    st.tuples(st.just("delete"), path_st),
    st.tuples(st.just("chmod"), path_st, st.booleans()),
    st.tuples(st.just("symlink"), path_st, st.sampled_from(LINK_TARGETS)),
    st.tuples(st.just("mkdir"), path_st),
    st.tuples(st.just("rename"), path_st, path_st),
    st.tuples(st.just("commit")),
    st.tuples(st.just("reset")),
    st.tuples(st.just("ignored"), st.sampled_from(["top.log", "ign/a", "ign/deep/b"]), content_st),
)


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def clear_way(root: Path, rel: str) -> Path:
    """Make room for something at ``rel``: parents become folders, whatever is at ``rel`` goes."""
    target = root / rel
    parts = rel.split("/")
    for i in range(1, len(parts)):
        parent = root.joinpath(*parts[:i])
        if parent.is_symlink() or parent.is_file():
            parent.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    remove(target)
    return target


def apply(root: Path, op: tuple, git) -> None:
    kind = op[0]
    if kind in ("write", "ignored"):
        clear_way(root, op[1]).write_bytes(op[2])
    elif kind == "delete":
        remove(root / op[1])
    elif kind == "chmod":
        path = root / op[1]
        if path.is_file() and not path.is_symlink():
            path.chmod(0o755 if op[2] else 0o644)
    elif kind == "symlink":
        os.symlink(op[2], clear_way(root, op[1]))
    elif kind == "mkdir":
        clear_way(root, op[1]).mkdir()
    elif kind == "rename":
        src, dst = op[1], op[2]
        exists = (root / src).is_symlink() or (root / src).exists()
        nested = dst.startswith(src + "/") or src.startswith(dst + "/")
        if exists and src != dst and not nested:
            os.rename(root / src, clear_way(root, dst))
    elif kind == "commit":
        git(root, "add", "-A")
        git(root, "commit", "-q", "--allow-empty", "-m", "agent")
    elif kind == "reset":
        git(root, "reset", "-q")


def without_empty_dirs(state):
    """Git trees hold no empty folders, so a rollback neither makes nor keeps them on purpose."""
    return type(state)((p, v) for p, v in state.items() if v != ("dir",))


def write_base(root: Path) -> None:
    (root / ".gitignore").write_text("*.log\nign/\n")
    (root / "a").write_bytes(b"tracked a\n")
    (root / "d").mkdir()
    (root / "d" / "x").write_bytes(b"tracked d/x\n")
    (root / "fixed.txt").write_bytes(b"a symlink target\n")
    (root / "fixed_dir").mkdir()
    (root / "fixed_dir" / "x").write_bytes(b"reached through a symlink\n")


def build(root: Path, git) -> None:
    git(root, "init", "-q", "-b", "main")
    write_base(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, git) -> Path:
    """``build`` once per module (per worker); each example gets a copy (``copy_of``)."""
    root = tmp_path_factory.mktemp("built") / "repo"
    root.mkdir()
    build(root, git)
    return root


def copy_of(built: Path, root: Path) -> None:
    """``built`` at ``root`` as ``make_repo`` copies its template: the same ``.git``, the work
    tree's files written again and the index with their own stat data (no git process)."""
    copy_git_dir(built / ".git", root / ".git")
    write_base(root)
    (root / ".git" / "index").write_bytes(index_of_copy(built / ".git" / "index", root))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    before=st.lists(operation_st, max_size=6),
    agent=st.lists(operation_st, min_size=1, max_size=12),
)
def test_rollback_and_salvage_restore_exactly(before, agent, git, tree_state, built) -> None:
    with tempfile.TemporaryDirectory(prefix="paella-prop-") as tmp:
        root = Path(tmp).resolve() / "repo"
        root.mkdir()
        copy_of(built, root)
        for op in before:  # the state at the checkpoint: committed, staged or not, untracked
            apply(root, op, git)
        ws = Workspace.find(root)
        run = RunStore(ws).current_or_manual("property test")
        target = checkpoints.take_checkpoint(run, Snapshotter(ws))
        at_checkpoint, checkpoint_head = tree_state(root), git.head(root)
        checkpoint_branch = git.branch(root)

        for op in agent:
            apply(root, op, git)
        damaged, damaged_head = tree_state(root), git.head(root)

        result = rollback.rollback(run, target, snapshotter=Snapshotter(ws))

        now = tree_state(root)
        restored = without_empty_dirs(now.without(*IGNORED))
        expected = without_empty_dirs(at_checkpoint.without(*IGNORED))
        assert restored == expected, "\n".join(restored.differences(expected))
        assert now.only(*IGNORED) == damaged.only(*IGNORED)
        assert git.head(root) == checkpoint_head
        assert git.branch(root) == checkpoint_branch

        rollback.rollback(run, result.salvage, snapshotter=Snapshotter(ws))

        back = without_empty_dirs(tree_state(root))
        assert back == without_empty_dirs(damaged), "\n".join(
            back.differences(without_empty_dirs(damaged))
        )
        assert git.head(root) == damaged_head
