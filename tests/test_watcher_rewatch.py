"""A watched folder that goes away and comes back (issue 17, the watcher bug): the folder that
comes back is watched, whatever made it go and whatever made it come back.

Real repositories, real files, the real watcher. The folders cover each kind of watch a plan
holds: a recursive root directly in the work tree (``vendor``), a recursive root inside a folder
watched on its own because it holds an ignored one (``web/src``, beside ``web/node_modules``),
a folder deep inside a recursive root (``lib/pkg/inner``), and a folder watched on its own
(``web``). Each is taken away and brought back in each way below, slowly (a report between
the steps) and at once (one batch of events); then, once everything has settled, one more file
is written inside the folder that came back, and it must be reported.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner
from test_watcher import SETTLE, Recorder, quiet, watching, write
from waiting import wait_until_async

from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.streams import dev_ino, inotify_watched
from paella_tui.supervisor.watch.watch_plan import PathRules, compute_plan

# Each case waits out the watcher's settle times, hardly using the CPU.
pytestmark = pytest.mark.waits

FOLDERS = {
    "top-level": "vendor",
    "inside a flat folder": "web/src",
    "nested": "lib/pkg/inner",
    "flat itself": "web",
}


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def deleted_and_made_again(repo: Path, folder: str, outside: Path) -> list[Callable[[], None]]:
    """``rm -rf folder``, then ``mkdir -p folder/x`` with a file in it."""
    return [
        lambda: _remove(repo / folder),
        lambda: write(repo, f"{folder}/x/first.c"),
    ]


def replaced_by_a_file_and_back(repo: Path, folder: str, outside: Path) -> list[Callable[[], None]]:
    """The folder becomes a file of the same name, then a folder again."""
    return [
        lambda: _remove(repo / folder),
        lambda: write(repo, folder, "now a file\n"),
        lambda: _remove(repo / folder),
        lambda: write(repo, f"{folder}/x/first.c"),
    ]


def renamed_away_and_another_in(repo: Path, folder: str, outside: Path) -> list[Callable[[], None]]:
    """``mv folder ../away`` (out of the work tree), then ``mv ../other folder``."""
    other = outside / "other"
    write(other, "x/first.c")

    def away() -> None:
        (repo / folder).rename(outside / "away")

    def back_in() -> None:
        other.rename(repo / folder)

    return [away, back_in]


WAYS = {
    "deleted and made again": deleted_and_made_again,
    "replaced by a file and back": replaced_by_a_file_and_back,
    "renamed away and another renamed in": renamed_away_and_another_in,
}


def _tree(repo: Path, git: GitRunner) -> None:
    write(repo, ".gitignore", "node_modules/\n")
    for rel in (
        "vendor/d0/f.c",
        "web/index.html",
        "web/src/app.js",
        "web/node_modules/dep/index.js",
        "lib/pkg/inner/m.py",
        "lib/top.py",
    ):
        write(repo, rel)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tree")


def _folders_to_watch(repo: Path) -> set[tuple[int, int]]:
    """The folders (device, inode) a watcher started now would watch with inotify: a fresh plan's
    flat folders, and every folder under its deep ones (notify watches each)."""
    workspace = Workspace.find(repo)
    plan = compute_plan(PathRules(workspace, ()), workspace.git)
    folders = list(plan.flat)
    for root in plan.deep:
        folders += [top for top, _, _ in os.walk(root)]
    return {key for key in map(dev_ino, folders) if key is not None}


def _watched_under(root: Path) -> set[tuple[int, int]]:
    """The folders under ``root`` (itself included) that this process's inotify handles watch.
    (A folder a test before this one watched, and leaked, is elsewhere: only this test's count.)"""
    watched = inotify_watched() or set()
    here = {dev_ino(top) for top, _, _ in os.walk(root)}
    return watched & {key for key in here if key is not None}


async def _at_rest(repo: Path, scene: Path) -> None:
    """Wait until this process's inotify handles watch, in ``scene`` (the repository and the
    folders beside it), exactly what a fresh plan names: any re-plan is done, its watches are
    live, and the old ones are closed (a folder renamed away is no longer watched). Stronger
    than a fixed wait "long past any re-plan": the watches are read from the kernel."""
    wanted = _folders_to_watch(repo)

    def settled() -> bool:
        nonlocal wanted
        if _watched_under(scene) == wanted:
            return True
        wanted = _folders_to_watch(repo)
        return False

    await wait_until_async(
        settled,
        "the watches to be exactly the plan's",
        timeout=10,
        interval=0.05,
        show=lambda: (sorted(wanted), sorted(_watched_under(scene))),
    )


async def _reported(rec: Recorder, rel: str, timeout: float) -> None:
    await wait_until_async(
        lambda: any(rel in paths for paths in rec.paths),
        f"a report of {rel}",
        timeout=timeout,
        interval=0.02,
        show=lambda: rec.paths,
    )


@pytest.mark.parametrize("pace", ["step by step", "at once"])
@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("where", list(FOLDERS))
async def test_a_folder_that_comes_back_is_watched(
    repo: Path, git: GitRunner, tmp_path: Path, where: str, way: str, pace: str
) -> None:
    folder = FOLDERS[where]
    _tree(repo, git)
    outside = tmp_path / "outside"
    outside.mkdir()
    steps = WAYS[way](repo, folder, outside)
    async with watching(repo) as (watcher, rec):
        plan = watcher.plan
        assert plan is not None and str(repo / "web") in plan.flat
        assert {str(repo / "vendor"), str(repo / "web/src")} <= set(plan.deep)
        for step in steps:
            step()
            if pace == "step by step":
                fires = len(rec.fires)
                await rec.wait_fires(fires + 1, timeout=5)
        await _reported(rec, f"{folder}/x/first.c", timeout=5)
        # Every re-plan done (the watches the kernel holds are exactly the plan's): the folder
        # that came back is watched, or it never will be.
        await _at_rest(repo, tmp_path)
        write(repo, f"{folder}/x/late.c")
        write(repo, f"{folder}/x/deeper/later.c")
        await _reported(rec, f"{folder}/x/late.c", timeout=5)
        await _reported(rec, f"{folder}/x/deeper/later.c", timeout=5)
        # The rest of the tree is still watched too.
        write(repo, "lib/top.py", "changed\n")
        await _reported(rec, "lib/top.py", timeout=5)


async def test_a_folder_back_is_watched_when_polling(repo: Path, git: GitRunner) -> None:
    """The same with notify's poll watcher: the repro of the benchmark, polled."""
    _tree(repo, git)
    async with watching(repo, force_polling=True) as (_, rec):
        _remove(repo / "vendor")
        await rec.wait_fires(1, timeout=5)
        write(repo, "vendor/x/first.c")
        await _reported(rec, "vendor/x/first.c", timeout=5)
        await quiet(SETTLE + 1.5)
        write(repo, "vendor/x/late.c")
        await _reported(rec, "vendor/x/late.c", timeout=5)
