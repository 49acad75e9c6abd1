"""Scratch trees never pile up in the temporary folder: a gate folder closed while its worker
thread still places a tree makes none after its close, and the folders a killed paella could not
delete are removed by the next scratch tree made there, only when their owner is gone.

Each scratch tree is a whole copy of a tree; one was left in /tmp per suite run (an evaluator
closed while its abandoned thread was about to make one), and every ``kill -9`` of a paella
judging with a protected file changed would leave another.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import GitRunner
from test_frozen_files import setup

from paella_tui.supervisor.judge.frozen import GateFolder
from paella_tui.supervisor.store.scratch_tree import (
    OWNER_FILE,
    PREFIX,
    ScratchClosed,
    ScratchTree,
    remove_left_scratch,
)


def _areas(parent: Path) -> set[str]:
    return {p.name for p in parent.iterdir() if p.name.startswith(PREFIX)}


def test_a_gate_folder_places_nothing_after_its_close(
    repo: Path, git: GitRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    _run, frozen, snapshotter = setup(repo, git)
    (repo / "tests" / "spec.txt").write_bytes(b"edited by the agent\n")
    tree = snapshotter.take().tree
    folder = GateFolder(frozen)

    judged, where = folder.place(tree)
    assert judged.frozen and where.is_relative_to(temp)
    assert (where / "tests" / "spec.txt").read_bytes() == b"spec\r\n"
    folder.close()
    assert _areas(temp) == set()
    # The order a closing evaluator's abandoned thread can take: close first, then place.
    with pytest.raises(ScratchClosed):
        folder.place(tree)
    assert _areas(temp) == set()
    folder.close()  # a second close is harmless


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_only_the_folders_of_a_paella_that_is_gone_are_removed(tmp_path: Path, repo: Path) -> None:
    from paella_tui.supervisor.store.workspace import Workspace

    ws = Workspace.find(repo)
    parent = tmp_path / "tmp"
    parent.mkdir()
    dead, live, old, garbled = (ScratchTree(ws, parent=parent) for _ in range(4))
    # A paella killed with -9 in the middle of a gate: its folder, a read-only folder a gate
    # left, and its owner record naming a process that is gone.
    (dead.path / "build").mkdir()
    (dead.path / "build" / "out.txt").write_text("x\n")
    (dead.path / "build").chmod(0o500)
    (dead.path.parent / OWNER_FILE).write_text(f"{_dead_pid()} 1700000000.0\n")
    # A record an older paella did not write, and one that is not a record.
    (old.path.parent / OWNER_FILE).unlink()
    (garbled.path.parent / OWNER_FILE).write_text("paella was here\n")
    # Names that look like scratch folders but are not this user's folders to delete.
    (parent / f"{PREFIX}a-file").write_text("not a folder\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / OWNER_FILE).write_text(f"{_dead_pid()} 1700000000.0\n")
    (parent / f"{PREFIX}a-link").symlink_to(elsewhere, target_is_directory=True)
    before = _areas(parent)

    fresh = ScratchTree(ws, parent=parent)

    assert _areas(parent) == (before - {dead.path.parent.name}) | {fresh.path.parent.name}
    assert (elsewhere / OWNER_FILE).exists()
    assert remove_left_scratch(parent) == []
    for scratch in (live, old, garbled, fresh):
        scratch.close()
    assert _areas(parent) == {f"{PREFIX}a-file", f"{PREFIX}a-link"}


@pytest.mark.parametrize("blocked", ["__init__", "checkout"])
async def test_a_bisect_cancelled_while_its_scratch_tree_is_placed_leaves_none(
    repo: Path, git: GitRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    """A bisect stopped at the run's end while its worker thread makes or fills the scratch tree
    (cancelling the task does not stop the thread): the tree is deleted once that thread is done,
    never made or written after the delete."""
    import asyncio
    import contextlib
    import threading

    from paella_tui.supervisor.contract.model import Gate
    from paella_tui.supervisor.judge.bisect import Bisection
    from paella_tui.supervisor.store.steps import take_step

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    run, _frozen, snapshotter = setup(repo, git)
    step = take_step(run, snapshotter.take().tree, previous=None, tail=[])
    assert step is not None
    # The real method, held at its start until the search is cancelled: the thread's timing.
    entered, go, done = threading.Event(), threading.Event(), threading.Event()
    real = getattr(ScratchTree, blocked)

    def held(self: ScratchTree, *args: object, **kwargs: object) -> object:
        entered.set()
        go.wait(20)
        try:
            return real(self, *args, **kwargs)
        finally:
            done.set()

    monkeypatch.setattr(ScratchTree, blocked, held)
    gate = Gate(name="g", argv=("true",), cmd="true", timeout=5.0, retries=0, paths=())
    search = Bisection(run=run, gate=gate, steps=[step], known={}, slots=asyncio.Semaphore(1))
    task = asyncio.create_task(search.find())
    assert await asyncio.to_thread(entered.wait, 20)
    task.cancel()
    go.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(done.wait, 20)
    await asyncio.sleep(0.1)  # the abandoned thread's last writes, if it made any
    assert _areas(temp) == set()
