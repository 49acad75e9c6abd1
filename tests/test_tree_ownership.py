"""Which tree an orphan belongs to, when several trees of one paella run at once.

An agent's daemons are re-parented to paella (a child subreaper) the moment the agent ends; a gate
that refreshes or stops its own tree just then sees children of paella's in another session, born
while it ran: what an escape of its own looks like. It used to take them, stop them and name them
as its own, and the agent's end then named nothing (test_run_loop's leftover test, now and then
under the full suite). A process another tree tracks, or one carrying another tree's marker, is
that tree's. And a pid is reused (``pid_max`` is 32768 on many machines): a root paella started
long ago must not shield a real escape that was given its pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_start_ticks import carrier
from waiting import wait_until

from paella_tui.supervisor.agent.proc_reads import environ_of
from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import ProcessTree, become_subreaper
from paella_tui.supervisor.agent.tree_roots import spawning_root

SLEEP = shutil.which("sleep") or "/bin/sleep"

# The agent leaves three daemons: one in its session and one in a session of its own (both
# carrying its marker, inherited), and one in its own session with an empty environment (no
# marker: only the agent's tree, having seen it, can tell it is the agent's). It stays until its
# stdin closes, so the test can let its tree look first.
LEAVE_DAEMONS = f"""\
import subprocess, sys
kids = [
    subprocess.Popen([{SLEEP!r}, "300"]),
    subprocess.Popen([{SLEEP!r}, "300"], start_new_session=True),
    subprocess.Popen([{SLEEP!r}, "300"], start_new_session=True, env={{}}),
]
print(" ".join(str(kid.pid) for kid in kids), flush=True)
sys.stdin.read()
"""


def _unique(name: str) -> str:
    """A marker no other test sees: parallel workers run the same test at once, and a tree takes
    what carries its own marker (two workers sharing one took each other's gate)."""
    return f"{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _root(argv: list[str], marker: tuple[str, str], **kwargs: object) -> subprocess.Popen[bytes]:
    with spawning_root() as register:
        popen = subprocess.Popen(  # type: ignore[call-overload]
            argv, start_new_session=True, env={**os.environ, marker[0]: marker[1]}, **kwargs
        )
        register(popen.pid)
    return popen  # type: ignore[no-any-return]


@contextlib.contextmanager
def _killed_after(pids: list[int]) -> Iterator[None]:
    """Whatever the assertions say, nothing the test started outlives it."""
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(psutil.Error, ChildProcessError):
                proc = psutil.Process(pid)
                proc.kill()
                proc.wait(5)


@pytest.mark.parametrize("gate_looks", ["refresh", "stop"])
def test_an_agents_daemons_are_stopped_and_named_by_its_tree_never_by_a_gates(
    gate_looks: str,
) -> None:
    become_subreaper()
    agent_marker = ("PAELLA_AGENT_TOKEN", _unique("agent-of-this-test"))
    gate_marker = ("PAELLA_GATE_TOKEN", _unique("gate-of-this-test"))
    # The gate starts first: the daemons are born while it runs, as an escape of its own would be.
    gate = _root([SLEEP, "30"], gate_marker)
    gate_tree = ProcessTree(gate.pid, marker=gate_marker)
    agent = _root(
        [sys.executable, "-c", LEAVE_DAEMONS],
        agent_marker,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert agent.stdin is not None and agent.stdout is not None
    daemons = [int(pid) for pid in agent.stdout.readline().split()]
    with _killed_after([gate.pid, agent.pid, *daemons]):
        agent_tree = ProcessTree(agent.pid, marker=agent_marker)
        agent_tree.refresh()  # the agent's tree sees its children while the agent lives
        agent.stdin.close()
        agent.wait(10)
        agent.stdout.close()
        assert all(psutil.Process(pid).ppid() == os.getpid() for pid in daemons)

        # The gate looks at our children now: by its periodic refresh, or as it is stopped.
        if gate_looks == "refresh":
            gate_tree.refresh()
            assert {p.pid for p in gate_tree.alive()} == {gate.pid}
        gate_stopped = stop_tree(gate_tree, 2.0)
        gate.wait(5)
        assert [p.pid for p in gate_stopped] == [gate.pid]
        assert all(psutil.Process(pid).is_running() for pid in daemons)

        agent_stopped = stop_tree(agent_tree, 2.0)
        assert sorted(p.pid for p in agent_stopped) == sorted(daemons)
        for pid in daemons:
            assert not psutil.pid_exists(pid) or _zombie_of_someone_else(pid)


def test_an_escape_unseen_by_any_tree_is_still_taken_by_the_one_that_finds_it() -> None:
    # The control: an orphan with no marker that no tree has seen can say nothing of where it
    # came from; a tree that finds it as its escape takes it (better than letting it run).
    become_subreaper()
    marker = ("PAELLA_GATE_TOKEN", _unique("finder"))
    gate = _root([SLEEP, "30"], marker)
    tree = ProcessTree(gate.pid, marker=marker)
    escape = subprocess.Popen([SLEEP, "300"], start_new_session=True, env={})
    with _killed_after([gate.pid, escape.pid]):
        stopped = stop_tree(tree, 2.0)
        gate.wait(5)
        escape.wait(5)
        assert sorted(p.pid for p in stopped) == sorted([gate.pid, escape.pid])


def _zombie_of_someone_else(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() != os.getpid()
    except psutil.Error:
        return True


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _can_choose_pids() -> bool:
    try:
        with NS_LAST_PID.open("r+") as handle:
            handle.write(handle.read())
    except OSError:
        return False
    return True


# A child of ours forks a grandchild with exactly the pid given (ns_last_pid, retried while other
# processes of the machine take it first), which leaves our session and scrubs its environment,
# and exits: an escape that is re-parented to us with the pid of a root we started earlier.
FORK_AT_PID = f"""\
import os, sys
want = int(sys.argv[1])
for _ in range(2000):
    with open({str(NS_LAST_PID)!r}, "w") as handle:
        handle.write(str(want - 1))
    pid = os.fork()
    if pid == 0:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # the test reads our output to its end: the escape keeps none
        os.execve({SLEEP!r}, ["sleep", "300"], {{}})
    if pid == want:
        print(pid, flush=True)
        os._exit(0)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
os._exit(3)
"""


@pytest.mark.skipif(not _can_choose_pids(), reason="needs a writable ns_last_pid (root)")
def test_an_escape_given_the_pid_of_an_ended_root_is_still_adopted() -> None:
    become_subreaper()
    marker = ("PAELLA_GATE_TOKEN", _unique("reuse"))
    gate = _root([SLEEP, "30"], marker)
    tree = ProcessTree(gate.pid, marker=marker)
    escape_pid = None
    try:
        for _ in range(5):
            # A root that ends at once and is reaped: its pid is free for the next process.
            ended = _root(["true"], ("PAELLA_GATE_TOKEN", _unique("ended")))
            ended.wait(5)
            fork = subprocess.run(
                [sys.executable, "-c", FORK_AT_PID, str(ended.pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if fork.returncode == 0:
                escape_pid = int(fork.stdout)
                break
        assert escape_pid is not None, "the pid of the ended root was never given again"
        tree.refresh()
        assert escape_pid in {p.pid for p in tree.alive()}
        stopped = stop_tree(tree, 2.0)
        gate.wait(5)
        assert sorted(p.pid for p in stopped) == sorted([gate.pid, escape_pid])
    finally:
        with _killed_after([gate.pid, *([escape_pid] if escape_pid else [])]):
            pass


def test_an_orphan_marked_by_a_stopped_tree_is_anyones_to_stop() -> None:
    # While the agent's tree runs, an orphan carrying its marker is left to it (its stop finds
    # it by the marker); once that tree is stopped, one born later (a straggler) is taken by a
    # tree that finds it, as before: better than letting it run.
    become_subreaper()
    agent_marker = ("PAELLA_AGENT_TOKEN", _unique("agent-that-ends"))
    gate_marker = ("PAELLA_GATE_TOKEN", _unique("gate-still-running"))
    marked_env = {**os.environ, agent_marker[0]: agent_marker[1]}
    gate = _root([SLEEP, "30"], gate_marker)
    gate_tree = ProcessTree(gate.pid, marker=gate_marker)
    agent = _root([SLEEP, "30"], agent_marker)
    agent_tree = ProcessTree(agent.pid, marker=agent_marker)
    early = subprocess.Popen([SLEEP, "300"], start_new_session=True, env=marked_env)
    pids = [gate.pid, agent.pid, early.pid]
    with _killed_after(pids):
        gate_tree.refresh()
        assert early.pid not in {p.pid for p in gate_tree.alive()}
        agent_stopped = stop_tree(agent_tree, 2.0)
        agent.wait(5)
        early.wait(5)
        assert sorted(p.pid for p in agent_stopped) == sorted([agent.pid, early.pid])

        late = subprocess.Popen([SLEEP, "300"], start_new_session=True, env=marked_env)
        pids.append(late.pid)
        gate_tree.refresh()
        assert late.pid in {p.pid for p in gate_tree.alive()}
        gate_stopped = stop_tree(gate_tree, 2.0)
        gate.wait(5)
        late.wait(5)
        assert sorted(p.pid for p in gate_stopped) == sorted([gate.pid, late.pid])


# A child is known to have exec'd (its close-on-exec descriptors closed: Popen returns) before
# the kernel lays out its new stack: read then, its environment and command line are both empty
# (13 % of the reads right after Popen, measured under load). That empty read is no answer.
FRESH_STARTS = 150


def test_an_environment_read_mid_exec_is_unknown_never_empty() -> None:
    name, value = "PAELLA_FRESH_MARK", _unique("fresh")
    for _ in range(FRESH_STARTS):
        child = subprocess.Popen([SLEEP, "30"], env={**os.environ, name: value})
        try:
            env = environ_of(psutil.Process(child.pid))
            assert env is None or env.get(name) == value, f"read as {env!r}"
        finally:
            child.kill()
            child.wait()
    zombie = subprocess.Popen(["true"])
    try:
        proc = psutil.Process(zombie.pid)
        wait_until(lambda: proc.status() == psutil.STATUS_ZOMBIE, "the child to end, unreaped")
        assert environ_of(proc) == {}  # ended: known, and empty
    finally:
        zombie.wait()


def test_a_kernel_thread_is_known_to_have_no_environment() -> None:
    """Not "unknown" like a process mid-exec (both read empty, with no command line): the stop's
    scan would ask a kernel thread born during the tree again and again before giving up."""
    threads = [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == 2 or p.pid == 2]
    if not threads:
        pytest.skip("no kernel thread is visible here (a container's own pid namespace)")
    for thread in threads[:5]:
        with contextlib.suppress(psutil.NoSuchProcess):
            thread.cmdline()  # still there (kworkers come and go)
            assert environ_of(thread) == {}


def test_a_marked_orphan_fresh_from_exec_is_never_taken_by_another_tree() -> None:
    """The agent's marked orphan, looked at by a gate's tree the moment it starts: left to the
    agent's tree every time (it was taken when its environment read empty mid-exec)."""
    become_subreaper()
    agent_marker = ("PAELLA_AGENT_TOKEN", _unique("agent-running"))
    gate_marker = ("PAELLA_GATE_TOKEN", _unique("gate-looking"))
    gate = _root([SLEEP, "30"], gate_marker)
    agent = _root([SLEEP, "30"], agent_marker)
    gate_tree = ProcessTree(gate.pid, marker=gate_marker)
    agent_tree = ProcessTree(agent.pid, marker=agent_marker)
    marked_env = {**os.environ, agent_marker[0]: agent_marker[1]}
    pids = [gate.pid, agent.pid]
    with _killed_after(pids):
        for _ in range(FRESH_STARTS // 3):
            orphan = subprocess.Popen([SLEEP, "30"], start_new_session=True, env=marked_env)
            pids.append(orphan.pid)
            gate_tree.refresh()
            assert orphan.pid not in {p.pid for p in gate_tree.alive()}
            orphan.kill()
            orphan.wait()
        assert agent_tree.alive()


def test_a_marked_carrier_fresh_from_exec_is_found_by_the_stop_scan() -> None:
    """Not ours, in a session of its own, looked at by the stop's scan the moment it starts:
    still found (asked again until its environment is there), every time."""
    for _ in range(FRESH_STARTS // 10):
        marker = ("PAELLA_GATE_TOKEN", _unique("scan-fresh"))
        gate = _root([SLEEP, "30"], marker)
        tree = ProcessTree(gate.pid, marker=marker)
        with _killed_after([gate.pid]), carrier(marker) as fresh:
            stopped = stop_tree(tree, 2.0)
            gate.wait(5)
            assert sorted(p.pid for p in stopped) == sorted([gate.pid, fresh])
