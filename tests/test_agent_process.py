"""Tests of the agent process layer with real subprocesses: scripted agents in tests/agents/.

Every test that starts an agent checks afterwards that no process of its tree is left
(zombies we should have reaped count as left) and, where the agent dies by itself, that
the death was noticed quickly.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import importlib.util
import json
import os
import signal
import stat
import sys
import time
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from paella_tui.supervisor.agent.agent_launch import AgentStartError
from paella_tui.supervisor.agent.agent_process import AgentProcess, ExitInfo
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import (
    ProcessTree,
    TrackedProcess,
    become_subreaper,
)

AGENTS = Path(__file__).parent / "agents"
NOTICE_LIMIT_S = 2.0  # generous: real latency belongs to a benchmark


def _load_agent_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"agent_{name}", AGENTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def start(
    tmp_path: Path, script: str, *args: str, tty: bool = True, **kwargs: object
) -> AgentProcess:
    return await AgentProcess.start(
        [sys.executable, str(AGENTS / script), *args],
        cwd=tmp_path,
        env=dict(os.environ),
        tty=tty,
        log_path=tmp_path / "agent.log",
        **kwargs,  # type: ignore[arg-type]
    )


async def wait_for_output(proc: AgentProcess, needle: str, timeout: float = 10.0) -> str:
    """Return the first output line containing `needle`, polling the tail like a UI does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in proc.tail.plain_lines():
            if needle in line:
                return line
        await asyncio.sleep(0.02)
    raise AssertionError(f"{needle!r} never appeared; tail: {proc.tail.plain_lines()[-10:]}")


def _still_there(process: TrackedProcess) -> bool:
    try:
        proc = psutil.Process(process.pid)
        if proc.create_time() != process.create_time:
            return False  # the pid was reused by an unrelated process
        # A zombie whose parent is someone else (init) gets reaped by that parent; one
        # that is our child means we failed to reap it.
        return proc.status() != psutil.STATUS_ZOMBIE or proc.ppid() == os.getpid()
    except psutil.NoSuchProcess:
        return False


def assert_tree_gone(proc: AgentProcess, *extra_pids: int) -> None:
    seen = proc.tree.seen()
    assert seen and seen[0].pid == proc.pid
    left = [p for p in seen if _still_there(p)]
    assert not left, f"processes of the agent's tree are still there: {left}"
    for pid in extra_pids:
        assert pid in {p.pid for p in seen}, f"pid {pid} was never tracked"


def assert_noticed_quickly(info: ExitInfo, died_at: float) -> None:
    latency = info.ended_at - died_at
    assert 0 <= latency < NOTICE_LIMIT_S, f"death noticed after {latency:.3f}s"


def _time_in(line: str) -> float:
    return float(line.rsplit(" ", 1)[1])


async def test_prints_lines_and_exits_zero(tmp_path: Path) -> None:
    chunks: list[bytes] = []
    proc = await start(tmp_path, "print_lines.py", "5", on_output=chunks.append)
    info = await asyncio.wait_for(proc.wait(), 10)

    assert (info.exit_code, info.signal, info.leftovers, info.stopped) == (0, None, (), False)
    assert info.tail == tuple(f"line {n}" for n in range(1, 6))
    assert proc.returncode == 0
    log = (tmp_path / "agent.log").read_bytes()
    assert log == b"".join(f"line {n}\n".encode() for n in range(1, 6))
    assert b"".join(chunks) == log
    assert stat.S_IMODE((tmp_path / "agent.log").stat().st_mode) == 0o600
    assert_tree_gone(proc)


async def test_log_is_appended_across_attempts(tmp_path: Path) -> None:
    for count in ("2", "3"):
        proc = await start(tmp_path, "print_lines.py", count)
        await asyncio.wait_for(proc.wait(), 10)
        assert_tree_gone(proc)
    assert (tmp_path / "agent.log").read_text() == "line 1\nline 2\nline 1\nline 2\nline 3\n"


async def test_exit_code_is_reported(tmp_path: Path) -> None:
    proc = await start(tmp_path, "exit_code.py", "3")
    info = await asyncio.wait_for(proc.wait(), 10)
    assert (info.exit_code, info.signal) == (3, None)
    assert info.tail[-1] == "exiting with 3"
    assert proc.returncode == 3
    assert_tree_gone(proc)


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
async def test_death_by_signal_is_classified_and_noticed_at_once(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = await start(tmp_path, "self_signal.py", sig.name)
    info = await asyncio.wait_for(proc.wait(), 10)
    assert (info.exit_code, info.signal) == (None, sig)
    assert proc.returncode == -sig
    assert_noticed_quickly(info, _time_in(info.tail[-1]))
    assert_tree_gone(proc)


async def test_death_is_noticed_without_pidfd_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "pidfd_open is not available")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    proc = await start(tmp_path, "self_signal.py", "SIGKILL")
    info = await asyncio.wait_for(proc.wait(), 10)
    assert info.signal == signal.SIGKILL
    assert_noticed_quickly(info, _time_in(info.tail[-1]))
    assert_tree_gone(proc)


@pytest.mark.parametrize("linger", ["0", "1.2"], ids=["exits-at-once", "lingers"])
async def test_leftover_grandchild_is_stopped_and_named(tmp_path: Path, linger: str) -> None:
    # The grandchild holds the pty open: death must be noticed without end-of-output.
    # Exiting at once, the agent is gone before a periodic refresh could see the
    # grandchild: it must be found as an orphan re-parented to us (or by the scan).
    proc = await start(tmp_path, "leave_grandchild.py", "--linger", linger)
    info = await asyncio.wait_for(proc.wait(), 10)
    grandchild = int((await wait_for_output(proc, "grandchild ")).split()[1])

    assert info.exit_code == 0
    assert_noticed_quickly(info, _time_in(info.tail[-1]))
    assert [p.pid for p in info.leftovers] == [grandchild]
    assert "sleeper.py" in " ".join(info.leftovers[0].cmdline)
    assert_tree_gone(proc, grandchild)


@pytest.mark.parametrize("tty", [True, False], ids=["pty", "pipes"])
async def test_leftover_that_left_the_session_is_stopped(tmp_path: Path, tty: bool) -> None:
    proc = await start(tmp_path, "leave_grandchild.py", "--setsid", tty=tty)
    info = await asyncio.wait_for(proc.wait(), 10)
    grandchild = int((await wait_for_output(proc, "grandchild ")).split()[1])

    assert_noticed_quickly(info, _time_in(info.tail[-1]))
    assert [p.pid for p in info.leftovers] == [grandchild]
    assert_tree_gone(proc, grandchild)


async def test_stop_escalates_to_sigkill_for_a_tree_that_ignores_sigterm(
    tmp_path: Path,
) -> None:
    proc = await start(tmp_path, "ignore_term.py")
    child = int((await wait_for_output(proc, "ready, child ")).split()[-1])
    began = time.monotonic()
    info = await asyncio.wait_for(proc.stop(grace=0.5), 10)
    elapsed = time.monotonic() - began

    assert elapsed < 0.5 + 2.0, f"stop took {elapsed:.2f}s with a 0.5s grace"
    assert (info.exit_code, info.signal, info.stopped) == (None, signal.SIGKILL, True)
    assert_tree_gone(proc, child)


async def test_stop_is_idempotent_and_stops_the_whole_tree(tmp_path: Path) -> None:
    proc = await start(tmp_path, "spawn_children.py", "2")
    children = [int(pid) for pid in (await wait_for_output(proc, "ready ")).split()[1:]]
    first, second = await asyncio.wait_for(
        asyncio.gather(proc.stop(grace=5), proc.stop(grace=5)), 10
    )
    again = await asyncio.wait_for(proc.stop(), 10)

    assert first is second is again
    assert (first.exit_code, first.signal, first.stopped) == (None, signal.SIGTERM, True)
    assert_tree_gone(proc, *children)


async def test_stop_after_the_end_returns_how_it_ended(tmp_path: Path) -> None:
    proc = await start(tmp_path, "exit_code.py", "4")
    ended = await asyncio.wait_for(proc.wait(), 10)
    assert await proc.stop() is ended
    assert not ended.stopped
    assert_tree_gone(proc)


async def test_stats_cover_the_whole_tree(tmp_path: Path) -> None:
    proc = await start(tmp_path, "spawn_children.py", "2")
    await wait_for_output(proc, "ready ")
    proc.stats()  # the first call sets the CPU baseline
    await asyncio.sleep(0.1)
    stats = proc.stats()

    assert (stats.pid, stats.alive, stats.descendants) == (proc.pid, True, 2)
    assert stats.rss_bytes > 3 * 1024 * 1024  # three Python interpreters
    assert stats.cpu_percent >= 0.0
    assert abs(stats.started - proc.started_at) < 5
    await asyncio.wait_for(proc.stop(grace=5), 10)
    after = proc.stats()
    assert (after.alive, after.descendants, after.rss_bytes) == (False, 0, 0)
    assert_tree_gone(proc)


@pytest.mark.parametrize("tty", [True, False], ids=["pty", "pipes"])
async def test_agent_sees_a_terminal_only_with_tty(tmp_path: Path, tty: bool) -> None:
    proc = await start(tmp_path, "isatty.py", tty=tty)
    info = await asyncio.wait_for(proc.wait(), 10)
    report = json.loads(next(line for line in info.tail if line.startswith("{")))

    assert report["stdin"] is report["stdout"] is report["stderr"] is tty
    assert report["controlling_tty"] is tty
    assert report["pgid_is_pid"] and report["sid_is_pid"]
    assert report["size"] == ([120, 36] if tty else None)
    if not tty:
        assert report["stdin_read"] == ""  # /dev/null, never our terminal
    assert "on stderr" in info.tail  # stderr is merged into the output
    assert_tree_gone(proc)


async def test_messy_output_is_logged_byte_exact_and_shown_sensibly(tmp_path: Path) -> None:
    messy = _load_agent_module("messy")
    proc = await start(tmp_path, "messy.py")
    info = await asyncio.wait_for(proc.wait(), 10)

    assert info.exit_code == 0
    assert (tmp_path / "agent.log").read_bytes() == b"".join(messy.CHUNKS)
    plain = proc.tail.plain_lines()
    assert plain[:10] == [
        "plain start",
        "progress 100%",
        "green bold and red",
        "cleared screen",
        "cursor hidden",
        "spinner done",
        "bad utf8 \ufffd\ufffd here \ufffd cut euro € ok",
        "binary  junk",
        "crlf line",
        "split escape blue",
    ]
    assert plain[10] == "x" * 65536 + f" …[cut {1_000_000 - 65536} bytes]"
    coloured = proc.tail.lines()
    assert coloured[2] == "\x1b[1;32mgreen bold\x1b[0m and \x1b[31mred\x1b[0m"
    assert coloured[9] == "split escape \x1b[34mblue\x1b[0m"
    assert all("\x1b" not in line.replace("\x1b[", "") for line in coloured)
    assert_tree_gone(proc)


@pytest.mark.slow
async def test_flood_of_a_million_lines_is_logged_byte_exact_with_a_bounded_tail(
    tmp_path: Path,
) -> None:
    flood = _load_agent_module("flood")
    expected = hashlib.sha256()
    expected_size = 0
    for block in flood.flood_blocks(1_000_000):
        expected.update(block)
        expected_size += len(block)
    versions: list[int] = []
    proc = await start(tmp_path, "flood.py", "1000000")

    async def poll_like_a_ui() -> None:
        while True:
            versions.append(proc.tail.version)
            proc.tail.lines(50)
            await asyncio.sleep(0.1)

    ui = asyncio.create_task(poll_like_a_ui())
    info = await asyncio.wait_for(proc.wait(), 60)
    ui.cancel()

    assert info.exit_code == 0
    log = tmp_path / "agent.log"
    assert log.stat().st_size == expected_size
    actual = hashlib.sha256()
    with log.open("rb") as handle:
        while block := handle.read(1 << 20):
            actual.update(block)
    assert actual.hexdigest() == expected.hexdigest()
    tail = proc.tail
    assert (tail.total_bytes, tail.total_lines) == (expected_size, 1_000_000)
    assert len(tail.lines()) == tail.max_lines == 5000
    assert tail.lines()[-1].startswith("0999999 ")
    assert versions == sorted(versions)
    assert_tree_gone(proc)


async def test_a_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AgentStartError) as caught:
        await AgentProcess.start(
            ["no-such-agent-cli", "-p", "hi"],
            cwd=tmp_path,
            env=dict(os.environ),
            log_path=tmp_path / "agent.log",
        )
    message = str(caught.value)
    assert "'no-such-agent-cli' was not found" in message
    assert "check `agent` in paella.toml" in message


async def test_a_command_that_is_not_executable_is_a_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(AgentStartError, match="is not executable"):
        await AgentProcess.start(
            [str(script)], cwd=tmp_path, env=None, tty=False, log_path=tmp_path / "agent.log"
        )


def test_stop_tree_works_from_plain_sync_code(tmp_path: Path) -> None:
    import subprocess

    become_subreaper()
    gate = subprocess.Popen(
        [sys.executable, str(AGENTS / "spawn_children.py"), "2"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert gate.stdout is not None
    children = [int(pid) for pid in gate.stdout.readline().split()[1:]]
    tree = ProcessTree(gate.pid)
    stopped = stop_tree(tree, grace=2.0)
    gate.wait(5)
    gate.stdout.close()

    assert sorted(p.pid for p in stopped) == sorted([gate.pid, *children])
    assert gate.returncode == -signal.SIGTERM
    assert not [p for p in tree.seen() if _still_there(p)]


async def test_a_given_tail_is_fed(tmp_path: Path) -> None:
    tail = OutputTail(3)
    proc = await start(tmp_path, "print_lines.py", "10", tail=tail)
    info = await asyncio.wait_for(proc.wait(), 10)
    assert proc.tail is tail
    assert tail.plain_lines() == list(info.tail) == ["line 8", "line 9", "line 10"]
    assert_tree_gone(proc)
