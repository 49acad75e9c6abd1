"""Start ticks read from ``/proc`` and the system scan they make cheap.

``start_ticks`` must agree with psutil's start time (whatever the command name holds), and so
must ``process_alive`` (``paella status``'s liveness of the run's agent) with what psutil says of
a live process, a zombie, one that has ended and pids that name none; and a tree's system scan, which now rules out processes born long before the root by their ticks,
must still take every marker carrier born during the tree and nothing born before it. The
carriers here are grandchildren of the test (children of a helper), in sessions of their own:
only the scan can find them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import ProcessTree
from paella_tui.supervisor.agent.tree_roots import spawning_root
from paella_tui.supervisor.base.start_ticks import TICKS_PER_SECOND, born_before, start_ticks
from paella_tui.supervisor.run.run_view import alive_by_psutil, process_alive

SLEEP = shutil.which("sleep") or "/bin/sleep"

# A helper that starts one marked sleeper in a session of its own, says its pid, and holds it as
# its own child until its stdin closes: the sleeper is not ours, nor in any tree's session.
CARRIER = f"""\
import os, subprocess, sys
kid = subprocess.Popen([{SLEEP!r}, "300"], start_new_session=True,
                       env={{sys.argv[1]: sys.argv[2]}})
print(kid.pid, flush=True)
sys.stdin.read()
kid.kill()
kid.wait()
"""


@contextlib.contextmanager
def carrier(marker: tuple[str, str]) -> Iterator[int]:
    """A marked process that is a grandchild of ours; yields its pid, stops it after."""
    helper = subprocess.Popen(
        [sys.executable, "-c", CARRIER, *marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert helper.stdout is not None and helper.stdin is not None
    try:
        yield int(helper.stdout.readline())
    finally:
        helper.stdin.close()
        helper.wait(10)


def _psutil_ticks(pid: int) -> float:
    return (psutil.Process(pid).create_time() - psutil.boot_time()) * TICKS_PER_SECOND


@pytest.mark.parametrize("name", ["sleep", "a) b (c", "x)) ((y", "with space"])
def test_start_ticks_agree_with_psutil_whatever_the_command_name(tmp_path: Path, name: str) -> None:
    program = tmp_path / name
    shutil.copy(SLEEP, program)
    proc = subprocess.Popen([str(program), "30"])
    try:
        ticks = start_ticks(proc.pid)
        assert ticks is not None
        assert abs(ticks - _psutil_ticks(proc.pid)) <= 1, (ticks, _psutil_ticks(proc.pid))
        assert psutil.Process(proc.pid).name() == name[:15]
    finally:
        proc.kill()
        proc.wait()


def test_a_process_born_later_has_later_ticks_and_a_gone_one_has_none() -> None:
    first = subprocess.Popen([SLEEP, "30"])
    second = subprocess.Popen([SLEEP, "30"])
    try:
        before, after = start_ticks(first.pid), start_ticks(second.pid)
        assert before is not None and after is not None and before <= after
        assert not born_before(first.pid, before)
        assert born_before(first.pid, before + 1)
        assert not born_before(first.pid, None), "unknown: never ruled out"
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()
    assert start_ticks(2**22 + 7) is None, "no such pid"


# The reference: ``process_alive`` as psutil answers it (what it was until it read /proc, and
# what it still is where /proc cannot tell).
_psutil_alive = alive_by_psutil


def test_process_alive_says_what_psutil_says() -> None:
    live = subprocess.Popen([SLEEP, "30"])
    zombie = subprocess.Popen([SLEEP, "0"])
    ended = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
    ended.wait()
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        started = psutil.Process(live.pid).create_time()
        cases = [(pid, None) for pid in (os.getpid(), 1, live.pid, zombie.pid, ended.pid)]
        cases += [(live.pid, started), (live.pid, started + 0.9), (live.pid, started - 0.9)]
        cases += [(live.pid, started + 1.5), (live.pid, started - 30), (os.getpid(), 0.0)]
        cases += [(2**22 + 7, None), (2**40, None), (0, None)]
        for pid, create_time in cases:
            expected = bool(pid) and _psutil_alive(pid, create_time)
            assert process_alive(pid, create_time) == expected, (pid, create_time)
        assert process_alive(live.pid, started) and not process_alive(zombie.pid, None)
    finally:
        live.kill()
        for proc in (live, zombie):
            proc.wait()
    with pytest.raises(ValueError):  # as psutil refuses it
        process_alive(-5, None)


def test_a_status_asks_whether_its_agent_lives_without_psutil() -> None:
    probe = (
        "import os, sys\n"
        "from paella_tui.supervisor.run.run_view import process_alive\n"
        "print(process_alive(os.getpid(), None), process_alive(os.getppid(), None),"
        " 'psutil' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "False"]


def test_the_scan_takes_a_marker_carrier_born_during_the_tree_and_none_born_long_before() -> None:
    marker = ("PAELLA_GATE_TOKEN", f"scan-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with carrier(marker) as old:
        # Born over a second before the root: the scan must leave it alone, as it always did.
        # (by the kernel's clock: psutil's start times are off by up to a second of boot time)
        born = start_ticks(old)
        assert born is not None
        deadline = time.monotonic() + 10
        while (
            time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS_PER_SECOND - born
            < 1.5 * TICKS_PER_SECOND
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with spawning_root() as register:
            gate = subprocess.Popen(
                [SLEEP, "30"], start_new_session=True, env={**os.environ, marker[0]: marker[1]}
            )
            register(gate.pid)
        tree = ProcessTree(gate.pid, marker=marker)
        gate_born = start_ticks(gate.pid)
        assert gate_born is not None and gate_born - born > TICKS_PER_SECOND + 1, (born, gate_born)
        with carrier(marker) as escape:
            assert psutil.Process(escape).ppid() != os.getpid()
            tree.refresh()
            assert escape not in {p.pid for p in tree.alive()}, "only the scan can find it"
            stopped = stop_tree(tree, 2.0)
            gate.wait(5)
            assert sorted(p.pid for p in stopped) == sorted([gate.pid, escape]), (stopped, old)
        assert psutil.Process(old).is_running(), "born before the root: not the tree's"
