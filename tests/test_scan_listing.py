"""The early scan of ``paella checkpoint`` (issue 17, start-up): the snapshot's two listings
started before the command's imports give the same tree as the snapshot's own listings, for
random edits of files and ignore rules, and are thrown away whenever anything they depend on
changed before the snapshot's lock was taken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.judge.byproducts import BYPRODUCTS
from paella_tui.supervisor.store import scan_listing
from paella_tui.supervisor.store.raw_blobs import PRIVATE_CONFIG
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace
from tests.test_snapshot_follow import MAX_SIZE, apply, edit_st, full_scan_tree, state_dir

# Ignore rules change what the listings answer without any tracked file changing.
IGNORE_FILES = (".gitignore", "a/.gitignore", "c/.gitignore")
RULES = (b"*.txt\n", b"a/\n", b"*.log\n!keep.log\n", b"b/\nx.txt\n", b"", b"*\n!*/\n!y.py\n")
any_edit_st = st.one_of(
    edit_st,
    st.tuples(st.just("write"), st.sampled_from(IGNORE_FILES), st.sampled_from(RULES)),
    st.tuples(st.just("delete"), st.sampled_from(IGNORE_FILES)),
)


def snapshotter(
    root: Path,
    where: Path,
    exclude: tuple[str, ...] = BYPRODUCTS,
    workspace: Workspace | None = None,
) -> Snapshotter:
    """A command's snapshotter (no watcher) whose private index lives in ``where``; on
    ``workspace`` when given (found once: the work tree's paths, the same for every
    snapshotter), else on one it finds as a command does."""
    with state_dir(where):
        found = workspace or Workspace.find(root)
        return Snapshotter(found, max_file_size=MAX_SIZE, exclude=exclude)


def early_tree(root: Path, where: Path, exclude: tuple[str, ...] = BYPRODUCTS) -> tuple[str, int]:
    """Start an early scan as ``paella checkpoint`` does, then snapshot: the tree, and how many
    early answers were taken."""
    before = scan_listing.used
    with state_dir(where):
        scan_listing.start_early(root)
    try:
        tree = snapshotter(root, where, exclude).take_locked().tree
    finally:
        scan_listing.discard_early()
    return tree, scan_listing.used - before


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(st.lists(any_edit_st, min_size=1, max_size=4), min_size=1, max_size=5))
def test_an_early_scan_gives_the_tree_of_the_snapshots_own_listing(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[tuple[object, ...]]]
) -> None:
    tmp = tmp_path_factory.mktemp("early")
    root = make_repo(tmp / "repo")
    (root / "keep.log").write_text("tracked though ignored\n")
    # The early path finds its workspace as the command does; the references use one found once.
    workspace = Workspace.find(root)
    workspace.git.run(["add", "-f", "keep.log"])
    # Two private indexes with the same history: one snapshotted from early scans, one from the
    # snapshot's own listings (the slow path), after every step.
    for where in ("early-state", "slow-state"):
        snapshotter(root, tmp / where, workspace=workspace).take_locked()
    for edits in steps:
        for edit in edits:
            apply(root, edit, False)
        tree, taken = early_tree(root, tmp / "early-state")
        assert taken == 1, edits  # the fast path was the one checked
        slow = snapshotter(root, tmp / "slow-state", workspace=workspace).take_locked().tree
        assert tree == slow, edits
        assert tree == full_scan_tree(workspace, tmp / "fresh-state"), edits


OTHER_SNAPSHOT = """
import os, sys
from pathlib import Path
os.environ["PAELLA_STATE_DIR"] = sys.argv[2]
from paella_tui.supervisor.judge.byproducts import BYPRODUCTS
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace
Snapshotter(Workspace.find(Path(sys.argv[1])), max_file_size=int(sys.argv[3]), exclude=BYPRODUCTS).take_locked()
"""


def test_an_index_replaced_meanwhile_discards_the_early_scan(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    where = tmp_path / "state"
    snapshotter(root, where).take_locked()
    with state_dir(where):
        scan_listing.start_early(root)
    assert scan_listing._early is not None
    try:
        for proc in scan_listing._early.listing._procs:
            proc.wait()  # the early answer is in: "nothing changed"
        # Then README.md changes, another process snapshots it, and it changes back: the early
        # answer would keep the other snapshot's README.md, which is no longer on disk.
        (root / "README.md").write_text("HELLO\n")
        subprocess.run(
            [sys.executable, "-c", OTHER_SNAPSHOT, str(root), str(where), str(MAX_SIZE)], check=True
        )
        (root / "README.md").write_text("hello\n")
        before = scan_listing.used
        snap = snapshotter(root, where).take_locked()
    finally:
        scan_listing.discard_early()
    assert scan_listing.used == before
    assert snap.tree == full_scan_tree(Workspace.find(root), tmp_path / "ref-state")


def test_another_command_line_discards_the_early_scan(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    where = tmp_path / "state"
    snapshotter(root, where).take_locked()
    (root / "notes.txt").write_text("untracked\n")
    # The memo's listings leave nothing out; this snapshotter leaves *.txt out.
    tree, taken = early_tree(root, where, exclude=("*.txt",))
    assert taken == 0
    names = Workspace.find(root).git.lines_z(["ls-tree", "-r", "-z", "--name-only", tree])
    assert "notes.txt" not in names and "README.md" in names


@pytest.mark.parametrize(
    "memo",
    [b"not json", b"{}", b'{"scan": {"root": 3}}', b'{"scan": {"index": "/elsewhere/x"}}'],
    ids=["garbage", "no-scan", "wrong-shape", "other-index"],
)
def test_a_memo_that_is_not_understood_starts_nothing(tmp_path: Path, memo: bytes) -> None:
    root = make_repo(tmp_path / "repo")
    where = tmp_path / "state"
    snapshotter(root, where).take_locked()
    (where / scan_listing.MEMO_NAME).write_bytes(memo)
    with state_dir(where):
        scan_listing.start_early(root)
    assert scan_listing._early is None
    before = scan_listing.used
    tree = snapshotter(root, where).take_locked().tree  # the memo is rebuilt, the tree the same
    assert scan_listing.used == before
    assert tree == full_scan_tree(Workspace.find(root), tmp_path / "ref-state")


PROBE = r"""
import contextlib, io, json, os, sys
from paella_tui.cli import main
from paella_tui.supervisor.store import death_group, scan_listing
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    code = main(sys.argv[1:])
# Every child, running or not yet reaped, but the death group's two (paella's own until it ends).
me = f"/proc/{os.getpid()}/task"
kids = set()
for task in os.listdir(me):
    with open(f"{me}/{task}/children") as handle:
        kids.update(int(pid) for pid in handle.read().split())
children = bool(kids - set(death_group.members()))
print(json.dumps({"code": code, "used": scan_listing.used, "children": children,
                  "out": out.getvalue()}))
"""


def _checkpoint(root: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "checkpoint", "--label", "x"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_paella_checkpoint_takes_its_early_scan_and_leaves_no_child(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    first = _checkpoint(root)  # no memo yet: nothing to start early
    assert (first["code"], first["used"], first["children"]) == (0, 0, False), first["out"]
    (root / "README.md").write_text("changed\n")
    (root / "new.txt").write_text("new\n")
    second = _checkpoint(root)
    assert (second["code"], second["used"], second["children"]) == (0, 1, False), second["out"]
    workspace = Workspace.find(root)
    refs = workspace.git.out(["for-each-ref", "--format=%(refname)", "refs/paella/"]).split()
    newest = max((r for r in refs if "/checkpoints/" in r), key=lambda r: int(r.rsplit("/")[-1]))
    tree = workspace.git.out(["rev-parse", f"{newest}^{{tree}}"])
    assert tree == full_scan_tree(Workspace.find(root), tmp_path / "ref-state")
    # A checkpoint refused after its listings started (a merge half done) stops and reaps them.
    (workspace.git_dir / "MERGE_HEAD").write_text(workspace.git.out(["rev-parse", "HEAD"]) + "\n")
    refused = _checkpoint(root)
    assert refused["code"] != 0 and "merge" in str(refused["out"])
    assert (refused["used"], refused["children"]) == (0, False)
    os.unlink(workspace.git_dir / "MERGE_HEAD")


def test_the_plain_listings_are_the_snapshotters() -> None:
    assert {key for key, _ in PRIVATE_CONFIG} == scan_listing.PRIVATE_KEYS
    assert Snapshotter._diff_args(()) == scan_listing.DIFF_ARGS


def test_a_repository_with_a_filter_driver_takes_its_early_scan(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    git = Workspace.find(root).git
    git.run(["config", "filter.lfs.clean", "git-lfs clean -- %f"])
    git.run(["config", "core.attributesFile", str(tmp_path / "attributes")])
    where = tmp_path / "state"
    snapshotter(root, where).take_locked()
    (root / "README.md").write_text("changed\n")
    tree, taken = early_tree(root, where)
    assert taken == 1
    assert tree == full_scan_tree(Workspace.find(root), tmp_path / "ref-state")


# What an agent could write into the memo (it lies in the git dir): each would make git run a
# program or read another list than the snapshot's.
TAMPERED = {
    "a-filter-command": lambda scan: scan["config"].append(["filter.x.clean", "touch pwned"]),
    "an-fsmonitor-hook": lambda scan: scan["config"].append(["core.fsmonitor", "touch pwned"]),
    "a-pager": lambda scan: scan["config"].append(["core.pager", "touch pwned"]),
    "an-external-diff": lambda scan: scan["diff"].insert(1, "--ext-diff"),
    "another-command": lambda scan: scan.update(diff=["log", "--", "."]),
    "an-output-file": lambda scan: scan["others"].insert(4, "--output=pwned"),
    "a-glob-pathspec": lambda scan: scan["others"].append(":(glob)**"),
}


@pytest.mark.parametrize("tamper", list(TAMPERED), ids=list(TAMPERED))
def test_a_memo_naming_anything_else_starts_nothing(tmp_path: Path, tamper: str) -> None:
    root = make_repo(tmp_path / "repo")
    where = tmp_path / "state"
    snapshotter(root, where).take_locked()
    memo_file = where / scan_listing.MEMO_NAME
    memo = json.loads(memo_file.read_text())
    TAMPERED[tamper](memo["scan"])
    memo_file.write_text(json.dumps(memo))
    with state_dir(where):
        scan_listing.start_early(root)
    assert scan_listing._early is None
    assert not (root / "pwned").exists()
