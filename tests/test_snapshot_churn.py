"""Bounded object growth (issue 10): a large untracked file rewritten at every snapshot is left out
(and named) after a few versions, kept again once it stops changing; tracked files always stay,
and a rollback never touches a file a snapshot left out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.churn import CHURN_STREAK
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


def blob_stored(repo: Path, data: bytes) -> bool:
    oid = subprocess.run(
        ["git", "hash-object", "--stdin"], cwd=repo, input=data, capture_output=True, check=True
    ).stdout.strip()
    return subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, check=False).returncode == 0


def test_a_churning_large_untracked_file_is_left_out_after_a_few_versions(repo: Path, git) -> None:
    (repo / "tracked.bin").write_bytes(os.urandom(3000))
    git(repo, "add", "tracked.bin")
    git(repo, "commit", "-q", "-m", "tracked")
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    snapshotter = Snapshotter(ws, churn_min_size=2000)

    versions = []
    records = []
    for _ in range(CHURN_STREAK + 3):
        data = os.urandom(4000)
        versions.append(data)
        (repo / "artifact.db").write_bytes(data)
        (repo / "tracked.bin").write_bytes(os.urandom(3000))  # churns too, but it is tracked
        records.append(checkpoints.take_checkpoint(run, snapshotter))

    for i, record in enumerate(records):
        names = git(repo, "ls-tree", "--name-only", record.tree).splitlines()
        left_out = {s["path"]: s["reason"] for s in record.skipped_files}
        assert "tracked.bin" in names
        if i < CHURN_STREAK:
            assert "artifact.db" in names and not left_out
            assert blob_stored(repo, versions[i])
        else:
            assert "artifact.db" not in names
            assert "rewritten at each of the last" in left_out["artifact.db"]
            assert not blob_stored(repo, versions[i]), "a left-out version still grew .git"

    # It stops changing: the next snapshot keeps it again.
    again = checkpoints.take_checkpoint(run, snapshotter)
    assert "artifact.db" in git(repo, "ls-tree", "--name-only", again.tree).splitlines()
    assert not again.skipped_files


def test_a_rollback_never_touches_a_file_left_out(repo: Path, git) -> None:
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    snapshotter = Snapshotter(ws, churn_min_size=2000)
    (repo / "artifact.db").write_bytes(b"v0" * 2000)
    first = checkpoints.take_checkpoint(run, snapshotter)
    for i in range(CHURN_STREAK + 1):
        (repo / "artifact.db").write_bytes(b"v%d" % (i + 1) * 2000)
        checkpoints.take_checkpoint(run, snapshotter)
    (repo / "README.md").write_text("damaged\n")
    # Still churning when the rollback's salvage is taken: the salvage leaves it out too.
    (repo / "artifact.db").write_bytes(b"v9" * 2000)
    newest = (repo / "artifact.db").read_bytes()

    result = rollback.rollback(run, first, snapshotter=snapshotter)

    assert (repo / "README.md").read_text() == "hello\n"
    assert (repo / "artifact.db").read_bytes() == newest, "a left-out file was overwritten"
    assert "artifact.db" in {s["path"] for s in result.salvage.skipped_files}
    assert any("artifact.db" in note and "not touched" in note for note in result.notes)
