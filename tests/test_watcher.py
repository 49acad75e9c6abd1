"""The workspace watcher on real repositories with real files and real watchfiles: what counts as
a change, one callback per settled burst, the flapping guard, big ignored folders, clean exits."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import GitRunner
from waiting import wait_until_async

from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.flapping import FlapGuard
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher

# Each test waits out settle times and quiet windows (the watcher's timers), hardly using the CPU.
pytestmark = pytest.mark.waits

SETTLE = 0.2


def write(root: Path, rel: str, text: str = "x\n") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class Recorder:
    """The watcher's callbacks, recorded with the time they came."""

    def __init__(self) -> None:
        self.fires: list[tuple[float, tuple[str, ...]]] = []
        self.activity = 0
        self.flaps: list[str] = []

    def on_settled(self, paths: tuple[str, ...]) -> None:
        self.fires.append((time.monotonic(), paths))

    def on_activity(self) -> None:
        self.activity += 1

    def on_flapping(self, message: str) -> None:
        self.flaps.append(message)

    @property
    def paths(self) -> list[tuple[str, ...]]:
        return [paths for _, paths in self.fires]

    async def wait_fires(self, n: int, timeout: float = 3.0) -> None:
        """Wait until ``n`` callbacks came; fail after ``timeout`` seconds."""
        await wait_until_async(
            lambda: len(self.fires) >= n,
            f"{n} on_settled calls",
            timeout=timeout,
            interval=0.01,
            show=lambda: self.paths,
        )


@asynccontextmanager
async def watching(repo: Path, **options: Any) -> AsyncIterator[tuple[WorkspaceWatcher, Recorder]]:
    """A running watcher on ``repo`` whose watches exist; stopped (and checked) on the way out."""
    rec = Recorder()
    watcher = WorkspaceWatcher(
        Workspace.find(repo),
        settle=options.pop("settle", SETTLE),
        on_settled=rec.on_settled,
        on_activity=rec.on_activity,
        on_flapping=rec.on_flapping,
        **options,
    )
    task = asyncio.create_task(watcher.run())
    ready = asyncio.create_task(watcher.wait_ready())
    await asyncio.wait({task, ready}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # raises what went wrong
        raise AssertionError("the watcher stopped before its watches were set up")
    assert ready.done(), "the watcher did not set up its watches within 15 s"
    try:
        yield watcher, rec
    finally:
        watcher.stop()
        await asyncio.wait_for(task, 5)


async def quiet(seconds: float = SETTLE + 0.3) -> None:
    """Long enough for a burst that was going to fire to have fired."""
    await asyncio.sleep(seconds)


async def test_a_change_fires_once_after_settle_with_its_path(repo: Path) -> None:
    async with watching(repo) as (_, rec):
        write(repo, "src/app.py")
        changed_at = time.monotonic()
        await rec.wait_fires(1)
        await quiet()
    assert rec.paths == [("src/app.py",)]
    fired_after = rec.fires[0][0] - changed_at
    assert SETTLE * 0.9 <= fired_after < SETTLE + 2.0
    assert rec.activity >= 1


async def test_a_burst_of_50_writes_fires_once(repo: Path) -> None:
    # A settle time well above the gaps between writes, even on a loaded machine.
    async with watching(repo, settle=0.6) as (_, rec):
        for i in range(50):
            write(repo, f"src/mod{i:02d}.py", f"x = {i}\n")
            await asyncio.sleep(0.004)
        await rec.wait_fires(1, timeout=5)
        await quiet(0.9)
    assert len(rec.fires) == 1
    assert rec.paths[0] == tuple(sorted(f"src/mod{i:02d}.py" for i in range(50)))


async def test_ignored_paths_git_dir_and_state_dir_never_fire(
    repo: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(repo, ".gitignore", "*.tmp\nbuild/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    monkeypatch.setenv("PAELLA_STATE_DIR", str(repo / ".paella-state"))
    write(repo, ".paella-state/runs/current", "old\n")
    write(repo, "build/old.o")
    async with watching(repo, ignore=["*.log", "logs/"]) as (watcher, rec):
        assert watcher.plan is not None
        assert {".git", ".paella-state", "build"} <= set(watcher.plan.pruned)
        write(repo, "scratch.tmp")
        write(repo, "src/deep/cache.tmp")
        write(repo, "build/out.o")
        write(repo, "build/new/dir/x.o")
        write(repo, "debug.log")
        write(repo, "src/trace.log")
        write(repo, "logs/today.txt")
        write(repo, ".git/paella/runs/r1/events.jsonl", "{}\n")
        write(repo, ".git/info/scratch")
        write(repo, ".paella-state/runs/r1/events.jsonl", "{}\n")
        write(repo, "src/vendored/.git/HEAD", "ref: refs/heads/main\n")
        await quiet()
        # A relevant change after all that: had any of it counted, it would be in this burst
        # or in one before it.
        write(repo, "src/ok.py")
        await rec.wait_fires(1)
        await quiet()
    assert rec.paths == [("src/ok.py",)]


async def test_a_tracked_file_matching_gitignore_still_fires(repo: Path, git: GitRunner) -> None:
    write(repo, ".gitignore", "*.cfg\n")
    write(repo, "app.cfg", "debug = false\n")
    git(repo, "add", ".gitignore")
    git(repo, "add", "-f", "app.cfg")
    git(repo, "commit", "-q", "-m", "config")
    async with watching(repo) as (_, rec):
        write(repo, "other.cfg")  # untracked and ignored: not a change
        write(repo, "app.cfg", "debug = true\n")
        await rec.wait_fires(1)
        await quiet()
    assert rec.paths == [("app.cfg",)]


async def test_a_gitignore_that_ignores_itself_fires_one_in_an_ignored_folder_does_not(
    repo: Path, git: GitRunner
) -> None:
    """A rule file counts whether or not the rules ignore it, unless git never reads it (in a
    folder the rules ignore whole: ``node_modules/``)."""
    write(repo, ".gitignore", "node_modules/\n.gitignore\n")
    write(repo, ".venv/pyvenv.cfg")
    write(repo, "node_modules/pkg/index.js")
    async with watching(repo) as (_, rec):
        write(repo, "node_modules/pkg/.gitignore", "*\n")
        await quiet()
        write(repo, ".venv/.gitignore", "*\n")  # a venv's: ignores itself and all beside it
        await rec.wait_fires(1)
        await quiet()
        write(repo, "sub/.gitignore", "*.dat\n")  # ignored by the top one's ".gitignore"
        await rec.wait_fires(2)
        await quiet()
        os.unlink(repo / ".venv/.gitignore")
        await rec.wait_fires(3)
        await quiet()
    assert rec.paths == [(".venv/.gitignore",), ("sub/.gitignore",), (".venv/.gitignore",)]


async def test_flapping_pauses_until_resumed(repo: Path) -> None:
    async with watching(repo, settle=0.1, flaps=FlapGuard(2, 60)) as (watcher, rec):
        for n in (1, 2):
            write(repo, "src/gen.py", f"n = {n}\n")
            await rec.wait_fires(n)
        write(repo, "src/gen.py", "n = 3\n")
        # The third change pauses the watcher when its event is read (a loaded machine reads
        # it later than any fixed quiet time).
        await wait_until_async(lambda: watcher.paused, "the watcher to pause", timeout=5)
        await quiet()
        assert len(rec.fires) == 2
        assert watcher.paused
        assert len(rec.flaps) == 1
        assert "src/gen.py" in rec.flaps[0] and "paused" in rec.flaps[0]

        write(repo, "src/other.py")
        await quiet()
        assert len(rec.fires) == 2 and len(rec.flaps) == 1  # still paused, said once

        watcher.resume()
        assert not watcher.paused
        # What changed while paused is reported once watching resumes.
        await rec.wait_fires(3)
        assert rec.paths[2] == ("src/gen.py", "src/other.py")
        write(repo, "src/gen.py", "n = 4\n")
        await rec.wait_fires(4)
    assert rec.paths[3] == ("src/gen.py",)


async def test_a_pause_ends_by_itself_once_the_workspace_is_quiet(repo: Path) -> None:
    """Nobody may be there to press g (a headless run, a person away for hours): a paused
    watcher resumes once nothing relevant changed for ``quiet_resume`` seconds, not while the
    writes go on, and then reports what changed meanwhile as one burst."""
    resumed: list[float] = []
    async with watching(
        repo,
        settle=0.1,
        flaps=FlapGuard(1, 60, quiet_resume=2.0),
        on_resumed=lambda: resumed.append(time.monotonic()),
    ) as (watcher, rec):
        write(repo, "src/gen.py", "n = 1\n")
        await rec.wait_fires(1)
        write(repo, "src/gen.py", "n = 2\n")
        await wait_until_async(lambda: watcher.paused, "the watcher to pause", timeout=5)
        # Writes every 0.4 s for 2 s: never quiet for two seconds, so still paused.
        for n in range(5):
            write(repo, "src/other.py", f"m = {n}\n")
            last_write = time.monotonic()
            await asyncio.sleep(0.4)
        assert watcher.paused and resumed == [] and len(rec.fires) == 1
        await wait_until_async(lambda: bool(resumed), "the pause to end by itself", timeout=10)
        assert resumed[0] - last_write >= 1.95
        await rec.wait_fires(2)
        assert rec.paths[1] == ("src/gen.py", "src/other.py")
        assert not watcher.paused and len(rec.flaps) == 1


async def test_writes_no_gate_reads_are_reported_but_never_flapping(repo: Path) -> None:
    """An agent writing its notes every few seconds while the gates read only src/: each burst
    is still reported (a step, the scope check), but only a burst a gate reads counts towards
    the flapping guard, so watching never pauses for the notes."""
    from paella_tui.supervisor.contract.model import Gate
    from paella_tui.supervisor.judge.gate_cache import reads_any

    gates = [Gate(name="t", argv=("true",), cmd="true", timeout=9, retries=0, paths=("src/**",))]
    async with watching(
        repo,
        settle=0.1,
        flaps=FlapGuard(2, 60, reruns_gates=lambda paths: reads_any(gates, paths)),
    ) as (watcher, rec):
        for n in range(1, 5):
            write(repo, "notes.md", f"note {n}\n")
            await rec.wait_fires(n)
        assert not watcher.paused and rec.flaps == []
        for n in (5, 6):
            write(repo, "src/gen.py", f"n = {n}\n")
            await rec.wait_fires(n)
        write(repo, "src/gen.py", "n = 7\n")
        await wait_until_async(lambda: watcher.paused, "the watcher to pause", timeout=5)
        assert len(rec.flaps) == 1 and "src/gen.py" in rec.flaps[0]


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
async def test_one_thread_watches_the_flat_and_the_deep_folders(
    repo: Path, git: GitRunner, polling: bool
) -> None:
    # An ignored folder makes the root a flat watch and src a deep one: two watches, one thread.
    write(repo, ".gitignore", "build/\n")
    write(repo, "build/out.o")
    write(repo, "src/deep/app.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "app")
    async with watching(repo, force_polling=polling) as (watcher, rec):
        plan = watcher.plan
        assert plan is not None and plan.flat and plan.deep
        names = [t.name for t in threading.enumerate()]
        assert names.count("paella-watch") == 1
        assert not [
            n
            for n in names
            if n.startswith("paella-watch-") and not n.startswith("paella-watch-git")
        ]
        write(repo, "top.txt")  # seen by the flat watch
        await rec.wait_fires(1)
        # Seen by the deep one. A new file, not a rewrite: notify's poll watcher compares
        # whole-second mtimes, so a rewrite within the second of the commit can go unseen.
        write(repo, "src/deep/other.py")
        await rec.wait_fires(2)
        write(repo, "src/deep/new/module.py")  # a new folder inside the deep watch
        await rec.wait_fires(3)
        await quiet()
    assert rec.paths == [("top.txt",), ("src/deep/other.py",), ("src/deep/new/module.py",)]


async def test_an_ignored_node_modules_of_3000_folders_is_not_watched(
    repo: Path, git: GitRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    write(repo, ".gitignore", "node_modules/\n")
    write(repo, "src/index.js", "module.exports = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "app")
    for i in range(3000):
        folder = repo / "node_modules" / f"pkg{i // 50}" / f"lib{i % 50}"
        folder.mkdir(parents=True)
        (folder / "index.js").write_text("x\n")
    started = time.monotonic()
    async with watching(repo) as (watcher, rec):
        ready_after = time.monotonic() - started
        plan = watcher.plan
        assert plan is not None and "node_modules" in plan.pruned
        watched = [Path(folder).relative_to(repo).as_posix() for folder in plan.flat + plan.deep]
        assert not any(folder.startswith("node_modules") for folder in watched)
        write(repo, "node_modules/pkg1/lib1/index.js", "y\n")
        write(repo, "src/index.js", "module.exports = 2\n")
        await rec.wait_fires(1)
        await quiet()
    assert rec.paths == [("src/index.js",)]
    with capsys.disabled():
        print(
            f"\n[watcher] 3,000 ignored folders: ready after {ready_after * 1000:.0f} ms "
            f"(setup {watcher.setup_seconds * 1000 if watcher.setup_seconds else 0:.0f} ms), "
            f"mode {watcher.mode}"
        )


async def test_a_big_ignored_folder_created_later_is_unwatched(repo: Path, git: GitRunner) -> None:
    write(repo, ".gitignore", "node_modules/\n")
    write(repo, "web/src/app.js")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "web")
    async with watching(repo) as (watcher, rec):
        for i in range(150):  # an npm install inside a watched folder
            write(repo, f"web/node_modules/pkg{i}/index.js")
        await wait_until_async(
            lambda: watcher.plan is not None and "web/node_modules" in watcher.plan.pruned,
            "web/node_modules to be unwatched",
            timeout=5,
            show=lambda: watcher.plan,
        )
        write(repo, "web/node_modules/pkg1/index.js", "changed\n")
        write(repo, "web/src/app.js", "changed\n")
        await rec.wait_fires(1)
        await quiet()
    assert rec.paths == [("web/src/app.js",)]


async def test_a_new_top_level_folder_and_an_unignored_folder_are_watched(
    repo: Path, git: GitRunner
) -> None:
    write(repo, ".gitignore", "build/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore build")
    write(repo, "build/a.txt")
    async with watching(repo) as (watcher, rec):
        # A new folder where only its parent is watched: its files are found, and it is
        # watched from then on.
        write(repo, "pkg/first.py")
        await rec.wait_fires(1)
        await quiet()
        assert rec.paths == [("pkg/first.py",)]
        assert watcher.plan is not None and str(repo / "pkg") in watcher.plan.deep
        write(repo, "pkg/sub/second.py")
        await rec.wait_fires(2)
        assert rec.paths[1] == ("pkg/sub/second.py",)

        # Un-ignoring build/ makes it watched from then on.
        write(repo, ".gitignore", "")
        await rec.wait_fires(3)
        assert ".gitignore" in rec.paths[2]
        await quiet()
        write(repo, "build/a.txt", "changed\n")
        await rec.wait_fires(4)
    assert rec.paths[3] == ("build/a.txt",)


async def test_a_file_name_that_is_not_utf8_does_not_stop_watching(repo: Path) -> None:
    write(repo, "src/keep.py")
    async with watching(repo) as (watcher, rec):
        # watchfiles ends its watch on such a name; the watcher restarts it and finds the file.
        with open(os.path.join(os.fsencode(repo), b"src", b"caf\xe9.py"), "w") as handle:
            handle.write("x = 1\n")
        write(repo, "src/other.py")
        await rec.wait_fires(1)
        await quiet()
        # The catch-up looks back a second more (coarse file system clocks): files written just
        # before the test may come along.
        assert len(rec.fires) == 1
        assert {os.fsdecode(b"src/caf\xe9.py"), "src/other.py"} <= set(rec.paths[0])
        write(repo, "src/later.py")
        await rec.wait_fires(2)
        assert rec.paths[1] == ("src/later.py",)
        assert watcher.mode == "inotify"


async def test_polling_mode_says_so_and_still_sees_changes(repo: Path) -> None:
    async with watching(repo, force_polling=True) as (watcher, rec):
        assert watcher.mode == "polling"
        assert watcher.warning and "0.5 s" in watcher.warning
        write(repo, "src/app.py")
        await rec.wait_fires(1)
    assert rec.paths == [("src/app.py",)]


# Runs a watcher in a user namespace whose inotify watch limit is set low: the limit is per
# namespace, so this exercises the real limit without touching anyone else's watches.
_LIMITED_WATCHER = """
import asyncio, json, sys, time
from pathlib import Path
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher
from paella_tui.supervisor.store.workspace import Workspace

root, limit, new_folders = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with open("/proc/sys/user/max_inotify_watches", "w") as handle:
    handle.write(limit)

async def main():
    fired = []
    watcher = WorkspaceWatcher(Workspace.find(root), settle=0.2, on_settled=fired.append)
    task = asyncio.create_task(watcher.run())
    await asyncio.wait_for(watcher.wait_ready(), 10)
    mode_at_start = watcher.mode
    for i in range(new_folders):
        (root / "src" / f"new{i}").mkdir()
    await asyncio.sleep(0.6)
    late = root / "src" / (f"new{new_folders - 1}" if new_folders else "d0") / "late.py"
    late.write_text("x")
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    watcher.stop()
    await task
    print(json.dumps({"start": mode_at_start, "mode": watcher.mode,
                      "warning": watcher.warning, "fired": fired}))

asyncio.run(main())
"""


def _can_limit_inotify() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            "echo 1000 > /proc/sys/user/max_inotify_watches",
        ],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


limited_inotify = pytest.mark.skipif(
    not _can_limit_inotify(), reason="needs unshare --user to lower the inotify watch limit"
)


def run_limited(repo: Path, *, limit: int, new_folders: int) -> dict[str, Any]:
    """Run the watcher under an inotify watch limit of ``limit``; its final state and calls."""
    proc = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            sys.executable,
            "-c",
            _LIMITED_WATCHER,
            str(repo),
            str(limit),
            str(new_folders),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def make_folders(repo: Path, git: GitRunner, n: int) -> None:
    for i in range(n):
        write(repo, f"src/d{i}/mod.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "folders")


@limited_inotify
def test_watch_limit_at_setup_falls_back_to_polling(repo: Path, git: GitRunner) -> None:
    make_folders(repo, git, 120)
    result = run_limited(repo, limit=50, new_folders=0)
    assert result["start"] == "polling" and result["mode"] == "polling"
    assert "limit" in result["warning"] and "polled every 0.5 s" in result["warning"]
    assert result["fired"] == [["src/d0/late.py"]]


@limited_inotify
def test_watch_limit_reached_later_falls_back_to_polling(repo: Path, git: GitRunner) -> None:
    make_folders(repo, git, 120)
    # About 122 watches are needed at the start; 60 new folders go past 150.
    result = run_limited(repo, limit=150, new_folders=60)
    assert result["start"] == "inotify" and result["mode"] == "polling"
    assert "no watch on the new folder" in result["warning"]
    assert result["fired"] == [["src/new59/late.py"]]


def _inotify_handles() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "inotify" in os.readlink(f"/proc/self/fd/{fd}"):
                count += 1
        except OSError:
            pass
    return count


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
async def test_cancellation_leaves_no_thread_or_inotify_handle(repo: Path, polling: bool) -> None:
    threads_before = set(threading.enumerate())
    handles_before = _inotify_handles()
    os_threads_before = _os_threads()
    rec = Recorder()
    watcher = WorkspaceWatcher(
        Workspace.find(repo), settle=SETTLE, on_settled=rec.on_settled, force_polling=polling
    )
    task = asyncio.create_task(watcher.run())
    await asyncio.wait_for(watcher.wait_ready(), 10)
    assert set(threading.enumerate()) > threads_before
    write(repo, "src/app.py")
    await rec.wait_fires(1)

    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - cancelled_at < 1.0
    assert set(threading.enumerate()) == threads_before
    assert _inotify_handles() == handles_before
    # notify's own (non-Python) threads end right after their watch is closed.
    deadline = time.monotonic() + 3
    while _os_threads() > os_threads_before and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    # At most as many as before: a thread of an earlier test in this worker may end meanwhile.
    assert _os_threads() <= os_threads_before


async def test_stop_ends_run(repo: Path) -> None:
    rec = Recorder()
    watcher = WorkspaceWatcher(Workspace.find(repo), settle=SETTLE, on_settled=rec.on_settled)
    task = asyncio.create_task(watcher.run())
    await asyncio.wait_for(watcher.wait_ready(), 10)
    watcher.stop()
    await asyncio.wait_for(task, 2)
    assert rec.fires == []
