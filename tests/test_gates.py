"""Tests of running one gate: real commands, real process groups, real log files."""

from __future__ import annotations

import asyncio
import os
import shlex
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from waiting import wait_until_async

from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.gates import TAIL_LINES, log_tail, next_log_path, run_gate
from paella_tui.supervisor.run.events import GateResult

SCRIPTS = Path(__file__).parent / "gate_scripts"
TREE = "0123456789abcdef0123456789abcdef01234567"


def make_gate(
    argv: Sequence[str], *, name: str = "unit", timeout: float = 10.0, retries: int = 0
) -> Gate:
    return Gate(name, tuple(argv), shlex.join(argv), timeout, retries, ())


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def script(name: str, *args: object) -> list[str]:
    return [sys.executable, str(SCRIPTS / name), *map(str, args)]


async def judge(gate: Gate, tmp_path: Path) -> tuple[GateResult, str]:
    """Run the gate in tmp_path/work; return the result and its log's text."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    log_path = next_log_path(tmp_path / "run", gate.name)
    result = await run_gate(gate, tree=TREE, cwd=work, log_path=log_path)
    return result, log_path.read_bytes().decode(errors="replace")


def is_gone(pid: int) -> bool:
    """Not running (a zombie waiting for init to reap it is not running)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pids: Sequence[int], timeout: float = 5.0) -> list[int]:
    """The pids still running after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if not is_gone(pid)]
        if not alive:
            return []
        await asyncio.sleep(0.05)
    return [pid for pid in pids if not is_gone(pid)]


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


async def test_pass_gets_env_and_writes_a_private_log(tmp_path: Path) -> None:
    code = (
        "import os, sys; print('gate', os.environ['PAELLA_GATE']);"
        "print('tree', os.environ['PAELLA_TREE']); print('to stderr', file=sys.stderr);"
        "print('cwd', os.getcwd()); print('stdin', repr(sys.stdin.read()))"
    )
    result, text = await judge(make_gate(py(code)), tmp_path)
    assert result.status == "pass" and result.green
    assert result.exit_code == 0 and result.attempts == 1 and not result.cached
    assert result.tree == TREE and result.duration_s > 0
    assert "gate unit" in text and f"tree {TREE}" in text and "to stderr" in text
    assert f"cwd {tmp_path / 'work'}" in text and "stdin ''" in text
    assert result.tail[:2] == ("gate unit", f"tree {TREE}")
    log_path = Path(result.log_path or "")
    assert log_path == tmp_path / "run" / "gates" / "unit" / "1.log"
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "run" / "gates").stat().st_mode) == 0o700


async def test_fail_keeps_exit_code_and_only_the_last_lines(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"
    result, text = await judge(make_gate(py(code)), tmp_path)
    assert result.status == "fail" and not result.green
    assert result.exit_code == 3
    assert len(result.tail) == TAIL_LINES
    assert result.tail[-1] == "line 99" and result.tail[0] == f"line {100 - TAIL_LINES}"
    assert "line 0\n" in text and "exit 3" in text


async def test_undecodable_output_is_replaced_not_fatal(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'bad \\xff\\xfe bytes\\n'); sys.exit(1)"
    result, _ = await judge(make_gate(py(code)), tmp_path)
    assert result.status == "fail"
    assert result.tail == ("bad \ufffd\ufffd bytes",)


async def test_timeout_kills_the_whole_tree_even_what_left_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    gate = make_gate(script("hang_with_children.py", pidfile), timeout=1.0)
    started = time.monotonic()
    result, text = await judge(gate, tmp_path)
    took = time.monotonic() - started
    assert result.status == "timeout" and not result.green
    assert result.exit_code is None
    assert "timed out after 1s" in result.message and "timeout" in result.message
    assert took < 5.0, "the timeout must not wait for the gate's own 60 s sleep"
    assert result.tail == ("started children",)
    assert "stopped what it left running" in text
    assert await wait_gone(read_pids(pidfile)) == []


async def test_what_a_passing_gate_leaves_running_is_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    result, text = await judge(make_gate(script("leave_running.py", pidfile)), tmp_path)
    assert result.status == "pass"
    # stopped before run_gate returned: the next gate finds the port free
    assert [pid for pid in read_pids(pidfile) if not is_gone(pid)] == []
    assert "stopped what it left running: sleep" in text


async def test_missing_command_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    result, text = await judge(make_gate(["paella-no-such-command-xyz", "--flag"]), tmp_path)
    assert result.status == "error" and result.exit_code is None
    assert "paella-no-such-command-xyz" in result.message
    assert "not found" in result.message and "paella.toml" in result.message
    assert "Traceback" not in text and result.message in text


async def test_a_file_that_is_not_executable_is_an_error(tmp_path: Path) -> None:
    tool = tmp_path / "check.sh"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o644)
    result, _ = await judge(make_gate([str(tool)], retries=2), tmp_path)
    assert result.status == "error"
    assert "check.sh" in result.message and "chmod +x" in result.message
    assert result.attempts == 1, "a command that cannot start is not retried"


async def test_pass_after_a_failure_is_flaky_with_both_runs_in_one_log(tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    gate = make_gate(script("flaky.py", marker), retries=1)
    result, text = await judge(gate, tmp_path)
    assert result.status == "flaky" and result.green
    assert result.attempts == 2 and result.exit_code == 0
    assert result.tail == ("second try: pass",)
    first, second = text.index("first try: fail"), text.index("second try: pass")
    assert first < text.index("----- paella: retry 1 of 1 -----") < second
    assert list((tmp_path / "run" / "gates" / "unit").iterdir()) == [Path(result.log_path or "")]


async def test_retries_run_out(tmp_path: Path) -> None:
    result, text = await judge(make_gate(py("print('nope'); exit(1)"), retries=2), tmp_path)
    assert result.status == "fail" and result.attempts == 3
    assert text.count("\nnope\n") == 3


async def test_log_files_are_numbered_per_gate(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert next_log_path(run_dir, "lint").name == "1.log"
    assert next_log_path(run_dir, "lint").name == "2.log"
    assert next_log_path(run_dir, "unit").name == "1.log"
    (run_dir / "gates" / "lint" / "7.log").write_text("")
    path = next_log_path(run_dir, "lint")
    assert path.name == "8.log" and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for gate in ("lint", "unit"):
        result = await run_gate(
            make_gate(py(f"print('{gate} ran')"), name=gate),
            tree=TREE,
            cwd=tmp_path,
            log_path=next_log_path(run_dir, gate),
        )
        assert f"{gate} ran" in Path(result.log_path or "").read_text()
    assert sorted(p.name for p in (run_dir / "gates" / "lint").iterdir()) == [
        "1.log",
        "2.log",
        "7.log",
        "8.log",
        "9.log",
    ]
    assert log_tail(run_dir / "gates" / "lint" / "9.log") == ("lint ran",)


async def test_cancelling_a_gate_kills_its_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    task = asyncio.create_task(judge(make_gate(script("hang_with_children.py", pidfile)), tmp_path))
    await wait_until_async(pidfile.exists, "the gate's pid file", timeout=10)
    pids = read_pids(pidfile)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_gone(pids) == []


async def test_env_argument_is_the_base_environment(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "ONLY_HERE": "yes"}
    code = "import os; print(os.environ.get('ONLY_HERE'), os.environ.get('HOME'))"
    result = await run_gate(
        make_gate(py(code)),
        tree=TREE,
        cwd=tmp_path,
        log_path=next_log_path(tmp_path / "run", "unit"),
        env=env,
    )
    assert result.tail == ("yes None",)
