"""Deleted folders through the real watcher: one report for a deleted tree, none for an ignored
one, and the snapshot the report leads to holds the deletion (issue 17, bursts)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
import watchfiles
from conftest import GitRunner
from test_watcher import SETTLE, quiet, watching, write

from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher

# Each test waits out the watcher's settle times and quiet windows, hardly using the CPU.
pytestmark = pytest.mark.waits


async def test_a_deleted_tree_is_reported_by_its_folder(repo: Path, git: GitRunner) -> None:
    """1,500 deleted files in 15 folders, through the running watcher: every file is covered by
    what it reports (the file itself, or a deleted folder holding it), nothing outside."""
    files = [f"vendor/pkg{i // 100}/f{i}.c" for i in range(1500)]
    for rel in files:
        write(repo, rel)
    write(repo, "src/kept.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "vendor")
    async with watching(repo, settle=0.4) as (_, rec):
        shutil.rmtree(repo / "vendor")
        await rec.wait_fires(1, timeout=10)
        await quiet(0.8)
    reported = {p for paths in rec.paths for p in paths}
    assert reported and all(p == "vendor" or p.startswith("vendor/") for p in reported)
    assert all(any(f == p or f.startswith(p + "/") for p in reported) for f in files)


def test_a_batch_of_deleted_files_is_judged_by_its_folder(repo: Path, git: GitRunner) -> None:
    """The batch the watcher classifies once the tree is gone (how many files a batch holds
    before their folder goes depends on the machine): one folder reported, one question to git."""
    files = [f"vendor/pkg{i // 100}/f{i}.c" for i in range(1500)]
    for rel in files:
        write(repo, rel)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "vendor")
    shutil.rmtree(repo / "vendor")
    watcher = WorkspaceWatcher(Workspace.find(repo), settle=SETTLE, on_settled=lambda _p: None)
    deleted = watchfiles.Change.deleted
    events = {p: deleted for p in [*files, *{p.rpartition("/")[0] for p in files}, "vendor"]}
    classifier = watcher._classifier
    batch = classifier.classify(events, set(), inotify=True)
    assert batch.report == {"vendor"}
    assert classifier.ignores.git_calls == 1


async def test_a_deleted_ignored_folder_reports_nothing(repo: Path, git: GitRunner) -> None:
    """``rm -rf web/build`` of a build folder made inside a watched folder: its files were seen
    (and judged ignored), and so is its deletion, as one folder."""
    write(repo, ".gitignore", "build/\n")
    write(repo, "web/src/app.js")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "web")
    async with watching(repo) as (_, rec):
        for i in range(300):
            write(repo, f"web/build/obj{i // 100}/f{i}.o")
        await quiet(1.0)
        shutil.rmtree(repo / "web" / "build")
        write(repo, "web/src/after.js")
        await rec.wait_fires(1)
        await quiet()
    assert [p for paths in rec.paths for p in paths] == ["web/src/after.js"]


async def test_whitelisted_files_in_a_deleted_folder_are_reported(
    repo: Path, git: GitRunner
) -> None:
    """``*`` then ``!*/`` and ``!*.c``: every folder is kept, so a deleted one is reported even
    though its own name, as a file, would be ignored."""
    write(repo, ".gitignore", "*\n!*/\n!*.c\n!.gitignore\n")
    for i in range(40):
        write(repo, f"lib/m{i // 10}/f{i}.c")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lib")
    async with watching(repo) as (_, rec):
        started = time.monotonic()
        shutil.rmtree(repo / "lib")
        await rec.wait_fires(1, timeout=5)
        await quiet()
    reported = {p for paths in rec.paths for p in paths}
    assert reported and all(p == "lib" or p.startswith("lib/") for p in reported)
    assert time.monotonic() - started < 10
    await asyncio.sleep(0)
