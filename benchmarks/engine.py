"""Engine benchmark (SPEC 7, 13): death notice, settle to gate start, idle cost, an output flood.

Measures the supervisor engine (``supervisor/``, no Textual) on real processes, real git
repositories under a temporary folder and real file events, side by side with a plain-asyncio
baseline in the same run:

1. **agent exit → death noticed.** An agent writes ``time.time()`` to a file just before
   ``os._exit``. Timed to ``AgentProcess.wait()``'s ``ExitInfo.ended_at`` (under a pty and with
   pipes) and to ``wait()`` returning; baseline ``asyncio.create_subprocess_exec(...).wait()``;
   interleaved round-robin. Then for a whole ``RunLoop`` whose agent crashes (exit 3), having
   changed nothing or one file: the ``AgentExited`` and ``RecoveryNeeded`` events (what the
   recovery screen shows), with the timeline of every event after the exit; and, for
   information, the same with a gate that takes 1 s.
2. **last change + settle → gate started.** A ``RunLoop`` with ``settle = 1s`` supervises a
   sleeping agent; a file is written, and the time to the ``GateStarted`` event and to the gate
   process's own first instruction (``date +%s.%N``) is taken. Baseline, interleaved: a bare
   ``watchfiles.awatch`` with the same debounce and step, a ``call_later(settle)`` and a spawn.
3. **supervisor CPU and RSS while the agent sleeps** (60 s; 15 s with ``--quick``). A
   ``RunLoop`` with a contract of two tiny gates supervises ``sleep``, in a child process of its
   own that does nothing else; this process samples its CPU time (psutil, and the threads'
   ``schedstat`` for 1 s intervals and a per-thread breakdown) and RSS, so the sampling costs
   the measured process nothing. Baseline, sampled at the same time: a child with the same
   imports that runs ``sleep`` through ``asyncio.create_subprocess_exec``.
4. **an agent flooding 1,000,000 lines (~100 MB).** The agent writes deterministic lines, then
   the sha256 of what it wrote. Measured in a child process per supervisor: the agent's start to
   the end of ``wait()`` (agent.log complete), the peak RSS (``VmHWM``), agent.log byte-exact,
   and the event loop's lateness (a coroutine sleeping 10 ms in a loop) during the flood: the
   engine-level stand-in for "keys answered within 200 ms (p95)". For a ``RunLoop`` under a pty
   (the default) and with pipes; baselines, one per transport: a bare pty reader and asyncio
   pipes, each copying 64 KiB reads into a file.

It prints the machine, a Markdown table (measure | median | p95 | × baseline | target |
verdict; latency verdicts are on the p95) and says which SPEC 13 target was missed. It exits 0
once it has measured: it is a report, not a test. Everything is built in a temporary folder
(``--keep DIR`` keeps it) and nothing in ``supervisor/`` is changed; the only knob turned is
the watcher's flapping limit in measure 2, whose ten rounds would otherwise pause it.

Usage::

    python benchmarks/engine.py [--quick] [--lines 1000000] [--files 500] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import pty
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import watchfiles

# Run as a script (``python benchmarks/engine.py``, as its children are), Python puts only this
# folder on sys.path, and the editable install maps only paella_tui: add the repository root,
# last, so that a child given another tree on PYTHONPATH (``--against``) imports that tree.
if not __package__:
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import (
    AGENT_PRELUDE,
    clean_env,
    commit_workspace,
    log,
    new_repo,
    work_folder,
)
from benchmarks.machine import cores_line, git_version, nproc, python_line
from benchmarks.probes import (
    children_cpu,
    lateness_monitor,
    process_cpu,
    sha256_file,
    thread_schedstat,
    vm_status,
)
from benchmarks.stats import median, ms, p95
from paella_tui.supervisor.agent.agent_process import AgentProcess
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.decisions import policy
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    Event,
    GateStarted,
    RecoveryNeeded,
)
from paella_tui.supervisor.run.run_loop import RunLoop, install_signal_handlers
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace
from paella_tui.supervisor.watch.watcher import DEBOUNCE_MS, STEP_MS

DEATH_TARGET_S = 0.250
SETTLE_S = 1.0
SETTLE_MARGIN_S = 0.200
IDLE_CPU_TARGET = 1.0  # % of one core
IDLE_RSS_TARGET_MB = 120.0
FLOOD_RSS_TARGET_MB = 200.0
KEYS_TARGET_S = 0.200
SLOW_GATE_S = 1.0
SLOW_LABEL = "changed a file, gate b takes 1 s"
MB = 1024 * 1024

# The scripted agent: harness.AGENT_PRELUDE (``stamp``, ``flood``, ...), then its modes:
#   exit GO STAMP CODE [TOUCH]  wait until GO exists (or GO is a number: sleep that long),
#                               optionally write TOUCH, write time.time() to STAMP, os._exit(CODE)
#   flood N DIR                 write N lines to stdout, then DIR/flood.json (sha256, bytes,
#                               start and end times)
#   sleep S                     sleep S seconds
AGENT = (
    AGENT_PRELUDE
    + r"""
mode = sys.argv[1]
if mode == "exit":
    go, out, code = sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        time.sleep(float(go))
    except ValueError:
        while not os.path.exists(go):
            time.sleep(0.005)
    if len(sys.argv) > 5:
        with open(sys.argv[5], "w") as handle:
            handle.write("work %d\n" % time.time_ns())
    stamp(out)
    os._exit(code)
elif mode == "flood":
    n, folder = int(sys.argv[2]), sys.argv[3]
    started = time.time()
    digest = hashlib.sha256()
    size = flood(n, digest)
    record_flood(os.path.join(folder, "flood.json"), digest, size, started)
elif mode == "sleep":
    time.sleep(float(sys.argv[2]))
"""
)


# ----------------------------------------------------------------------------------------------
# Small helpers


def read_float(path: Path) -> float:
    """The number a stamp file holds."""
    return float(path.read_text().strip())


# ----------------------------------------------------------------------------------------------
# Workspaces


@dataclass(frozen=True)
class Bench:
    """The temporary folder everything lives in, and the scripted agent in it."""

    root: Path
    files: int

    @property
    def agent(self) -> Path:
        """The scripted agent."""
        return self.root / "agent.py"

    def python_agent(self, *args: str) -> list[str]:
        """argv that runs the scripted agent."""
        return [sys.executable, "-S", str(self.agent), *args]


def make_workspace(
    bench: Bench,
    name: str,
    *,
    agent: list[str],
    tty: bool = True,
    settle: float = SETTLE_S,
    gate_b_sleep: float = 0.0,
) -> Path:
    """A committed git repository with ``bench.files`` small files and a paella.toml.

    The contract has two tiny gates, ``a`` and ``b``: each appends ``date +%s.%N`` (the moment it
    runs) to ``<stamps>/gate-<name>``, outside the work tree (``b`` then sleeps
    ``gate_b_sleep`` seconds, when asked). One episode needs both.
    """
    root = bench.root / name
    stamps = bench.root / f"{name}-stamps"
    stamps.mkdir(parents=True)
    new_repo(root)
    for i in range(bench.files):
        folder = root / "src" / f"pkg{i % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod_{i:05d}.py").write_text(
            f'"""Module {i}."""\n\n' + "".join(f"VALUE_{j} = {i * j}\n" for j in range(40))
        )
    contract: dict[str, Any] = {
        "run": {"prompt": "benchmark", "agent": agent, "tty": tty, "stall_after": "2h"},
        "watch": {"settle": f"{settle:g}s"},
        "gate": [
            {
                "name": gate,
                "cmd": [
                    "sh",
                    "-c",
                    f"date +%s.%N >> {stamps / f'gate-{gate}'}"
                    + (f"; sleep {gate_b_sleep:g}" if gate == "b" and gate_b_sleep else ""),
                ],
                "timeout": "1m",
            }
            for gate in ("a", "b")
        ],
        "episode": [{"name": "bench", "gates": ["a", "b"]}],
    }
    commit_workspace(root, contract)
    return root


def gate_stamps(workspace: Path) -> list[float]:
    """Every start time the two gates of ``workspace`` recorded so far, sorted."""
    stamps = workspace.parent / f"{workspace.name}-stamps"
    found: list[float] = []
    for path in stamps.glob("gate-*"):
        found += [float(line) for line in path.read_text().split() if line]
    return sorted(found)


class Recorder:
    """An event consumer that notes when each event arrived (``time.time()``)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Event]] = []
        self.arrived = asyncio.Event()

    def __call__(self, event: Event, _state: object = None) -> None:
        self.events.append((time.time(), event))
        self.arrived.set()

    def first(self, kind: type[Event], after: float = 0.0) -> float | None:
        """When the first event of ``kind`` arrived after ``after``, or None."""
        return next((t for t, e in self.events if isinstance(e, kind) and t >= after), None)

    async def wait_for(self, kind: type[Event], after: float = 0.0, timeout: float = 60.0) -> float:
        """Wait until an event of ``kind`` arrived after ``after``; return when it did."""
        deadline = time.monotonic() + timeout
        while (found := self.first(kind, after)) is None:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {kind.__name__} within {timeout:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)
        return found


def open_run(workspace: Path) -> tuple[Any, Any]:
    """A new run of the workspace's contract: (run, contract)."""
    ws = Workspace.find(workspace)
    contract = load_contract(workspace / "paella.toml")
    return RunStore(ws).create(contract, manual=False), contract


async def start_loop(
    workspace: Path, recorder: Recorder, *, flap_limit: int | None = None
) -> tuple[RunLoop, asyncio.Task[int]]:
    """Start a RunLoop on a new run; return once the agent runs, watches exist and gates are idle."""
    run, contract = open_run(workspace)
    loop = RunLoop(run=run, contract=contract, emit=recorder, decide=policy("stop"))
    if flap_limit is not None:
        # Ten settled bursts a minute would pause the watcher (flapping): not what is measured.
        loop.watcher.flaps.limit = flap_limit
    task = asyncio.create_task(loop.run(), name="bench-run-loop")
    await recorder.wait_for(AgentStarted)
    await loop.watcher.wait_ready()
    await loop.evaluator.idle()
    return loop, task


# ----------------------------------------------------------------------------------------------
# 1. agent exit -> death noticed


async def death_agent_process(bench: Bench, tty: bool, k: int) -> tuple[float, float]:
    """One AgentProcess run: (exit → ended_at, exit → wait() returned)."""
    out = bench.root / f"death-{k}.stamp"
    proc = await AgentProcess.start(
        bench.python_agent("exit", "0.15", str(out), "0"),
        cwd=bench.root,
        env=clean_env(),
        tty=tty,
        log_path=bench.root / "death-agent.log",
    )
    info = await proc.wait()
    returned = time.time()
    exited = read_float(out)
    return info.ended_at - exited, returned - exited


async def death_baseline(bench: Bench, k: int) -> float:
    """One plain asyncio subprocess: exit → ``wait()`` returned."""
    out = bench.root / f"death-{k}.stamp"
    proc = await asyncio.create_subprocess_exec(
        *bench.python_agent("exit", "0.15", str(out), "0"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    await proc.wait()
    returned = time.time()
    return returned - read_float(out)


async def death_run_loop(bench: Bench, workspace: Path, k: int, touch: bool) -> dict[str, float]:
    """One RunLoop whose agent crashes (exit 3), after changing a file when ``touch``."""
    go = bench.root / f"go-{k}"
    out = bench.root / f"death-loop-{k}.stamp"
    args = ["exit", str(go), str(out), "3"]
    if touch:
        args.append(str(workspace / "src" / "work.txt"))
    # The contract's agent reads its arguments from a file the benchmark rewrites each time.
    (bench.root / "loop-agent.json").write_text(json.dumps(args))
    recorder = Recorder()
    loop, task = await start_loop(workspace, recorder)
    go.touch()
    await task
    exited = read_float(out)
    found = {
        "AgentExited": recorder.first(AgentExited),
        "RecoveryNeeded": recorder.first(RecoveryNeeded),
    }
    result = {name: t - exited for name, t in found.items() if t is not None}
    # The timeline after the exit, for "where the time goes": each event's first arrivals.
    assert loop.agent is not None
    result["@ death noticed (ExitInfo.ended_at)"] = (await loop.agent.wait()).ended_at - exited
    seen: dict[str, int] = {}
    for t, event in recorder.events:
        if t >= exited:
            name = type(event).__name__
            seen[name] = seen.get(name, 0) + 1
            suffix = f" #{seen[name]}" if seen[name] > 1 else ""
            result[f"@ {name}{suffix}"] = t - exited
    return result


async def measure_death(bench: Bench, n: int, n_loop: int) -> dict[str, list[float]]:
    """Measure 1, interleaved round-robin: every variant once per round, rotating the order."""
    samples: dict[str, list[float]] = {}

    async def direct(tty: bool, k: int) -> None:
        noticed, returned = await death_agent_process(bench, tty, k)
        kind = "pty" if tty else "pipes"
        samples.setdefault(f"AgentProcess ({kind}): ExitInfo.ended_at", []).append(noticed)
        samples.setdefault(f"AgentProcess ({kind}): wait() returned", []).append(returned)

    async def baseline(k: int) -> None:
        samples.setdefault("baseline", []).append(await death_baseline(bench, k))

    variants: list[Callable[[int], Any]] = [
        lambda k: direct(True, k),
        lambda k: direct(False, k),
        baseline,
    ]
    await death_agent_process(bench, True, -1)  # warm-up: imports, page cache
    for r in range(n):
        for i in range(len(variants)):
            await variants[(r + i) % len(variants)](r * 10 + i)
    # The RunLoop: a wrapper agent reads its arguments from loop-agent.json.
    wrapper = bench.root / "loop_agent.py"
    wrapper.write_text(
        "import json, os, sys\n"
        f"args = json.load(open({str(bench.root / 'loop-agent.json')!r}))\n"
        f"os.execv(sys.executable, [sys.executable, '-S', {str(bench.agent)!r}, *args])\n"
    )
    agent = [sys.executable, "-S", str(wrapper)]
    quick = make_workspace(bench, "death", agent=agent)
    slow = make_workspace(bench, "death-slow-gate", agent=agent, gate_b_sleep=SLOW_GATE_S)
    loops = [(quick, False, "changed nothing"), (quick, True, "changed a file")]
    for r in range(n_loop):
        rotated = [*loops[r % 2 :], *loops[: r % 2]]
        if r < max(3, n_loop // 2):
            rotated.append((slow, True, SLOW_LABEL))
        for i, (workspace, touch, label) in enumerate(rotated):
            found = await death_run_loop(bench, workspace, 1000 + r * 10 + i, touch)
            for name, value in found.items():
                samples.setdefault(f"RunLoop ({label}): {name}", []).append(value)
    return samples


# ----------------------------------------------------------------------------------------------
# 2. last change + settle -> gate started


class BareSettle:
    """The baseline: watchfiles.awatch, a settle timer, then a spawn; nothing else."""

    def __init__(self, folder: Path, stamp: Path, settle: float) -> None:
        self.folder = folder
        self.stamp = stamp
        self.settle = settle
        self.spawned: list[float] = []
        self.done = asyncio.Event()
        self._stop = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, ready: asyncio.Event) -> None:
        """Watch until stopped."""
        loop = asyncio.get_running_loop()
        first = True
        async for changes in watchfiles.awatch(
            self.folder,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            rust_timeout=100,
            yield_on_timeout=True,
        ):
            if first:
                first = False
                ready.set()
            if not changes:
                continue
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(self.settle, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self.spawned.append(time.time())
        task = asyncio.get_running_loop().create_task(self._spawn())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            "sh", "-c", f"date +%s.%N >> {self.stamp}", start_new_session=True
        )
        await proc.wait()
        self.done.set()

    def stop(self) -> None:
        """End :meth:`run`."""
        self._stop.set()


def write_change(path: Path, k: int) -> float:
    """Write a new content to ``path``; return the time the write was done."""
    with path.open("w") as handle:
        handle.write(f"change {k} {time.time_ns()}\n")
    return time.time()


async def measure_settle(bench: Bench, n: int) -> dict[str, list[float]]:
    """Measure 2: a RunLoop with settle = 1 s and a bare baseline, interleaved."""
    workspace = make_workspace(
        bench, "settle", agent=bench.python_agent("sleep", "3600"), settle=SETTLE_S
    )
    bare_folder = bench.root / "bare-settle"
    bare_folder.mkdir()
    bare_stamp = bench.root / "bare-settle.stamps"
    recorder = Recorder()
    loop, task = await start_loop(workspace, recorder, flap_limit=1_000_000)
    bare = BareSettle(bare_folder, bare_stamp, SETTLE_S)
    bare_ready = asyncio.Event()
    bare_task = asyncio.create_task(bare.run(bare_ready))
    await bare_ready.wait()
    samples: dict[str, list[float]] = {}
    try:
        for r in range(n + 1):  # the first round is a warm-up
            for which in ("paella", "bare") if r % 2 == 0 else ("bare", "paella"):
                await asyncio.sleep(0.5)
                if which == "paella":
                    before = len(gate_stamps(workspace))
                    written = write_change(workspace / "src" / "edit.txt", r)
                    event = await recorder.wait_for(GateStarted, after=written)
                    await asyncio.sleep(0.05)
                    await loop.evaluator.idle()
                    started = gate_stamps(workspace)[before:]
                    if r > 0:
                        samples.setdefault("GateStarted event", []).append(event - written)
                        samples.setdefault("gate process running", []).append(
                            min(started) - written
                        )
                else:
                    bare.done.clear()
                    before = len(bare.spawned)
                    written = write_change(bare_folder / "edit.txt", r)
                    await asyncio.wait_for(bare.done.wait(), 30)
                    if r > 0:
                        samples.setdefault("baseline: spawn called", []).append(
                            bare.spawned[before] - written
                        )
                        samples.setdefault("baseline: gate process running", []).append(
                            max(float(x) for x in bare_stamp.read_text().split()) - written
                        )
    finally:
        bare.stop()
        await bare_task
        loop.request_stop("benchmark done")
        await task
    return samples


# ----------------------------------------------------------------------------------------------
# 3 and 4: child processes (a supervisor alone in its process)


def emit_json(data: dict[str, Any]) -> None:
    """One JSON line on stdout, for the parent."""
    print(json.dumps(data), flush=True)


def emit_ready() -> None:
    """Tell the parent the idle window may start, with our threads' names by native id."""
    threads = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    emit_json(
        {
            "ready": True,
            "rss": psutil.Process().memory_info().rss,
            "threads": threads,
            "engine": str(sys.modules[RunLoop.__module__].__file__),
        }
    )


async def child_idle(workspace: Path) -> None:
    """A RunLoop supervising ``sleep``; say when ready, run until SIGTERM."""
    recorder = Recorder()
    loop, task = await start_loop(workspace, recorder)
    install_signal_handlers(asyncio.get_running_loop(), loop)
    await asyncio.sleep(1.5)  # the first stats and ticks
    emit_ready()
    code = await task
    emit_json({"code": code, "hwm": vm_status("VmHWM")})


async def child_idle_baseline() -> None:
    """``sleep`` through asyncio; say when ready, run until SIGTERM."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    proc = await asyncio.create_subprocess_exec("sleep", "3600", start_new_session=True)
    await asyncio.sleep(1.5)
    emit_ready()
    await stop.wait()
    proc.terminate()
    await proc.wait()
    emit_json({"code": 0, "hwm": vm_status("VmHWM")})


async def child_flood(workspace: Path) -> None:
    """A RunLoop whose agent floods; report times, lateness and where agent.log is."""
    samples: list[tuple[float, float]] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(lateness_monitor(samples, stop))
    recorder = Recorder()
    run, contract = open_run(workspace)
    loop = RunLoop(run=run, contract=contract, emit=recorder, decide=policy("stop"))
    task = asyncio.create_task(loop.run())
    await recorder.wait_for(AgentStarted)
    assert loop.agent is not None
    info = await loop.agent.wait()
    drained = time.time()
    code = await task
    stop.set()
    await monitor
    emit_json(
        {
            "code": code,
            "drained": drained,
            "ended_at": info.ended_at,
            "exited_event": recorder.first(AgentExited),
            "log": str(run.dir / "agent.log"),
            "tail_bytes": loop.tail.total_bytes,
            "hwm": vm_status("VmHWM"),
            "lateness": samples,
        }
    )


async def read_pty_into(proc: subprocess.Popen[bytes], read_fd: int, log_fd: int) -> None:
    """Copy a pty's output into a file from a loop reader (64 KiB reads) until it ends."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        while True:
            try:
                data = os.read(read_fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError:  # EIO: every slave end is closed
                data = b""
            if not data:
                loop.remove_reader(read_fd)
                done.set_result(None)
                return
            os.write(log_fd, data)

    loop.add_reader(read_fd, readable)
    await done
    await asyncio.to_thread(proc.wait)


async def child_flood_baseline(bench_root: Path, lines: int, tty: bool) -> None:
    """The same flood copied into a file by plain asyncio: pipes (streams) or a bare pty reader."""
    samples: list[tuple[float, float]] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(lateness_monitor(samples, stop))
    kind = "pty" if tty else "pipes"
    out = bench_root / f"flood-baseline-{kind}-agent"
    out.mkdir(exist_ok=True)
    log_path = bench_root / f"flood-baseline-{kind}.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    argv = [sys.executable, "-S", str(bench_root / "agent.py"), "flood", str(lines), str(out)]
    if tty:
        read_fd, child_fd = pty.openpty()
        attrs = termios.tcgetattr(child_fd)
        attrs[1] &= ~termios.ONLCR  # as paella does: the log holds exactly what was written
        termios.tcsetattr(child_fd, termios.TCSANOW, attrs)
        popen = subprocess.Popen(
            argv, stdin=child_fd, stdout=child_fd, stderr=child_fd, start_new_session=True
        )
        os.close(child_fd)
        os.set_blocking(read_fd, False)
        await read_pty_into(popen, read_fd, fd)
        os.close(read_fd)
        code = popen.returncode
    else:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(64 * 1024):
            os.write(fd, chunk)
        code = await proc.wait()
    os.close(fd)
    drained = time.time()
    stop.set()
    await monitor
    emit_json(
        {"code": code, "drained": drained, "log": str(log_path), "hwm": vm_status("VmHWM")}
        | {"lateness": samples}
    )


def child_main(args: argparse.Namespace) -> int:
    """Run one child scenario (``--child``)."""
    if args.child == "idle":
        asyncio.run(child_idle(args.workspace))
    elif args.child == "idle-baseline":
        asyncio.run(child_idle_baseline())
    elif args.child == "flood":
        asyncio.run(child_flood(args.workspace))
    elif args.child in ("flood-baseline-pty", "flood-baseline-pipes"):
        tty = args.child == "flood-baseline-pty"
        asyncio.run(child_flood_baseline(args.workspace, args.lines, tty))
    return 0


def spawn_child(
    mode: str, workspace: Path, lines: int = 0, tree: Path | None = None
) -> subprocess.Popen[str]:
    """This script as a child running one scenario, its stdout a pipe of JSON lines; with
    ``tree``, importing that tree's engine (and benchmark helpers) instead of this one's."""
    env = clean_env()
    script = Path(__file__).resolve()
    if tree is not None:
        # Ahead of the editable install's path entry for this repository.
        env["PYTHONPATH"] = str(tree)
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--child",
            mode,
            "--workspace",
            str(workspace),
            "--lines",
            str(lines),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def export_tree(bench: Bench, ref: str) -> Path:
    """The files of ``ref`` in this repository, in a folder of the run (``git archive``)."""
    repo = Path(__file__).resolve().parent.parent
    tree = bench.root / f"tree-{ref.replace('/', '-')}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=repo, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def read_json_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line a child printed (raises if it ended without one)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child {proc.args!r} ended (exit {proc.wait()}) without a report")
    result: dict[str, Any] = json.loads(line)
    return result


@dataclass
class IdleResult:
    """What sampling one idle child gave."""

    cpu_percent: float
    """psutil CPU time over the window / the window, in % of one core: the verdict."""
    schedstat_percent: float
    """The same from the threads' schedstat (ns resolution), as a cross-check."""
    per_interval: list[float]
    """CPU % of each 1 s interval (schedstat)."""
    rss_samples: list[int]
    hwm: int
    threads: dict[str, float] = field(default_factory=dict)
    """CPU seconds over the window by thread (Python thread names where known)."""
    children_cpu: float = 0.0
    """CPU seconds of child processes reaped during the window (gates, git)."""

    @property
    def rss_peak(self) -> int:
        """The largest RSS sampled."""
        return max(self.rss_samples)


def measure_idle(
    bench: Bench, seconds: float, against: Path | None, warmup: float = 0.0
) -> dict[str, IdleResult]:
    """Measure 3: the paella child and the baseline child (and the child of the code in
    ``against``, in a workspace of its own), sampled at the same time, ``warmup`` seconds after
    they said they were ready."""
    workspace = make_workspace(bench, "idle", agent=["sleep", "3600"])
    kids = {
        "paella": spawn_child("idle", workspace),
        "baseline": spawn_child("idle-baseline", workspace),
    }
    if against is not None:
        other = make_workspace(bench, "idle-against", agent=["sleep", "3600"])
        kids["against"] = spawn_child("idle", other, tree=against)
    try:
        ready = {name: read_json_line(proc) for name, proc in kids.items()}
        for name, said in ready.items():
            if "engine" in said:
                log(f"  {name}: the run loop of {said['engine']}")
        if warmup:
            log(f"  warm-up: {warmup:g} s")
            time.sleep(warmup)
        ps = {name: psutil.Process(proc.pid) for name, proc in kids.items()}
        start_wall = last_wall = time.monotonic()
        start_cpu = {n: process_cpu(p) for n, p in ps.items()}
        start_children = {n: children_cpu(p) for n, p in ps.items()}
        start_threads = {n: thread_schedstat(p.pid) for n, p in ps.items()}
        last = {n: sum(t.values()) for n, t in start_threads.items()}
        intervals: dict[str, list[float]] = {n: [] for n in ps}
        rss: dict[str, list[int]] = {n: [] for n in ps}
        while (now := time.monotonic()) - start_wall < seconds - 0.01:
            time.sleep(min(1.0, seconds - (now - start_wall)))
            wall = time.monotonic()
            for name, p in ps.items():
                spent = sum(thread_schedstat(p.pid).values())
                intervals[name].append(max(0.0, spent - last[name]) / (wall - last_wall) * 100)
                last[name] = spent
                rss[name].append(p.memory_info().rss)
            last_wall = wall
        window = time.monotonic() - start_wall
        results: dict[str, IdleResult] = {}
        for name, p in ps.items():
            known = {int(k): v for k, v in ready[name].get("threads", {}).items()}
            end_threads = thread_schedstat(p.pid)
            threads: dict[str, float] = {}
            for tid, spent in end_threads.items():
                label = known.get(tid, f"thread {tid}")
                threads[f"{label} ({tid})"] = spent - start_threads[name].get(tid, 0.0)
            results[name] = IdleResult(
                cpu_percent=(process_cpu(p) - start_cpu[name]) / window * 100,
                schedstat_percent=(sum(end_threads.values()) - sum(start_threads[name].values()))
                / window
                * 100,
                per_interval=intervals[name],
                rss_samples=rss[name],
                hwm=vm_status("VmHWM", p.pid),
                threads=threads,
                children_cpu=children_cpu(p) - start_children[name],
            )
    finally:
        for proc in kids.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in kids.values():
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    return results


@dataclass
class FloodResult:
    """One flood: how long, how big, exact or not, how late the loop was."""

    wall: float
    """The agent's start to wait() returned (agent.log complete)."""
    agent_wall: float
    """The agent's start to its last write returning."""
    hwm: int
    exact: bool
    log_bytes: int
    lateness: list[float]


def measure_flood(bench: Bench, mode: str, lines: int) -> FloodResult:
    """Measure 4 for one supervisor: ``pty``, ``pipes`` (RunLoop), or a ``baseline-*``."""
    if mode.startswith("baseline-"):
        proc = spawn_child(f"flood-{mode}", bench.root, lines)
        stamps = bench.root / f"flood-{mode}-agent"
    else:
        name = f"flood-{mode}"
        stamps = bench.root / f"{name}-agent"
        stamps.mkdir()
        workspace = make_workspace(
            bench,
            name,
            agent=bench.python_agent("flood", str(lines), str(stamps)),
            tty=mode == "pty",
        )
        proc = spawn_child("flood", workspace, lines)
    report = read_json_line(proc)
    proc.wait()
    wrote = json.loads((stamps / "flood.json").read_text())
    digest, size = sha256_file(Path(report["log"]))
    window = (wrote["started"], report["drained"])
    lateness = [late for t, late in report["lateness"] if window[0] <= t <= window[1]]
    return FloodResult(
        wall=report["drained"] - wrote["started"],
        agent_wall=wrote["ended"] - wrote["started"],
        hwm=report["hwm"],
        exact=digest == wrote["sha256"] and size == wrote["bytes"],
        log_bytes=size,
        lateness=lateness or [0.0],
    )


# ----------------------------------------------------------------------------------------------
# The report


@dataclass
class Row:
    """One line of the results table."""

    measure: str
    median: str
    p95: str = ""
    ratio: str = ""
    target: str = ""
    ok: bool | None = None
    """PASS, FAIL, or None for a line with no target."""
    counts: bool = True
    """False for a "(for information)" line: its verdict is shown, never counted as missed."""


def ratio(value: float, base: float) -> str:
    """``value / base`` as ``1.23 ×``."""
    return f"{value / base:.2f} ×" if base > 0 else "—"


def fsync_probe(folder: Path, n: int = 30) -> str:
    """The file system ``folder`` is on, and the median time of a ledger-like append + fsync."""
    mount = max(
        (p for p in psutil.disk_partitions(all=True) if str(folder).startswith(p.mountpoint)),
        key=lambda p: len(p.mountpoint),
        default=None,
    )
    path = folder / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times: list[float] = []
    try:
        for _ in range(n):
            started = time.perf_counter()
            os.write(fd, b"x" * 200 + b"\n")
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    where = f"{mount.fstype} on {mount.device}" if mount else "?"
    return f"- {folder}: {where}; an append + fsync (one ledger record) takes {ms(median(times))}"


def load_line(before: float) -> str:
    """The 1-minute load average before and after the run, and what a high one means."""
    after = os.getloadavg()[0]
    busy = (
        " (over nproc: other work competed for the cores)" if max(before, after) > nproc() else ""
    )
    return f"- load average (1 min): {before:.2f} before the run, {after:.2f} after{busy}"


def machine() -> list[str]:
    """The machine, as Markdown bullet lines."""
    return [
        cores_line(),
        python_line(),
        f"- kernel: {platform.system()} {platform.release()}",
        f"- git: {git_version()}; watchfiles {watchfiles.__version__}; psutil {psutil.__version__}",
    ]


def timing_rows(
    samples: dict[str, list[float]],
    key: str,
    label: str,
    base: list[float] | None,
    target: float | None,
    target_text: str = "",
) -> Row:
    """A row for one timed measure: median, p95, ratio of the medians; the verdict is on the p95."""
    values = samples[key]
    med = median(values)
    return Row(
        measure=f"{label} (n={len(values)})",
        median=ms(med),
        p95=ms(p95(values)),
        ratio=ratio(med, median(base)) if base else "",
        target=target_text,
        ok=None if target is None else p95(values) <= target,
    )


def build_rows(
    death: dict[str, list[float]],
    settle: dict[str, list[float]],
    idle: dict[str, IdleResult],
    idle_seconds: float,
    floods: dict[str, FloodResult],
    lines: int,
    against: str | None = None,
) -> list[Row]:
    """Every row of the table, in the order of the SPEC (the parts that ran)."""
    rows: list[Row] = []
    if death:
        rows += death_rows(death)
    if settle:
        rows += settle_rows(settle)
    if idle:
        rows += idle_rows(idle, idle_seconds, against)
    if floods:
        rows += flood_rows(floods, lines)
    return rows


def death_rows(death: dict[str, list[float]]) -> list[Row]:
    """Part 1's rows."""
    rows: list[Row] = []
    base = death["baseline"]
    rows.append(
        Row(
            f"**1. agent exit → noticed.** baseline: asyncio `create_subprocess_exec().wait()` (n={len(base)})",
            ms(median(base)),
            ms(p95(base)),
            "1.00 ×",
        )
    )
    for kind in ("pty", "pipes"):
        rows.append(
            timing_rows(
                death,
                f"AgentProcess ({kind}): ExitInfo.ended_at",
                f"AgentProcess ({kind}): death noticed (`ExitInfo.ended_at`)",
                base,
                DEATH_TARGET_S,
                "≤ 250 ms",
            )
        )
        rows.append(
            timing_rows(
                death,
                f"AgentProcess ({kind}): wait() returned",
                f"AgentProcess ({kind}): `wait()` returned (output drained, leftovers checked)",
                base,
                None,
            )
        )
    for label in ("changed nothing", "changed a file", SLOW_LABEL):
        for name, what in (
            ("AgentExited", "`AgentExited` event"),
            ("RecoveryNeeded", "`RecoveryNeeded` event (recovery screen's facts)"),
        ):
            key = f"RunLoop ({label}): {name}"
            if key in death:
                info = label == SLOW_LABEL
                row = timing_rows(
                    death,
                    key,
                    f"{'(for information) ' if info else ''}RunLoop, agent crashed having "
                    f"{label}: {what}",
                    base,
                    DEATH_TARGET_S,
                    "≤ 250 ms (SPEC: recovery screen shown)",
                )
                row.counts = not info
                rows.append(row)
    return rows


def settle_rows(settle: dict[str, list[float]]) -> list[Row]:
    """Part 2's rows."""
    rows: list[Row] = []
    bound = SETTLE_S + SETTLE_MARGIN_S
    bare = settle["baseline: spawn called"]
    rows.append(
        Row(
            f"**2. last write → gate started, settle 1 s.** baseline: bare `awatch` + "
            f"`call_later` + spawn: spawn called (n={len(bare)})",
            ms(median(bare)),
            ms(p95(bare)),
            "1.00 ×",
        )
    )
    rows.append(
        timing_rows(
            settle,
            "baseline: gate process running",
            "baseline: gate process running",
            bare,
            None,
        )
    )
    for key, label in (
        ("GateStarted event", "RunLoop: `GateStarted` event"),
        ("gate process running", "RunLoop: gate process running (its own `date`)"),
    ):
        rows.append(timing_rows(settle, key, label, bare, bound, "≤ settle + 200 ms = 1,200 ms"))
    return rows


def idle_rows(idle: dict[str, IdleResult], idle_seconds: float, against: str | None) -> list[Row]:
    """Part 3's rows (with the code at ``against`` beside this one's, when it ran)."""
    rows: list[Row] = []
    base_idle = idle["baseline"]
    measured = [
        ("baseline: asyncio + `sleep`, same imports", base_idle, False),
        ("RunLoop (two gates, watcher, ticker)", idle["paella"], True),
    ]
    if "against" in idle:
        measured.append((f"RunLoop of `{against}` (the same)", idle["against"], True))
    for name, result, counts in measured:
        prefix = "" if counts else f"**3. idle {idle_seconds:g} s.** "
        rows.append(
            Row(
                f"{prefix}{name}: CPU, % of one core (median/p95 of 1 s intervals; whole window "
                f"{result.cpu_percent:.2f} % psutil, {result.schedstat_percent:.2f} % schedstat)",
                f"{median(result.per_interval):.2f} %",
                f"{p95(result.per_interval):.2f} %",
                ratio(result.schedstat_percent, base_idle.schedstat_percent),
                "≤ 1 % (whole window, psutil)" if counts else "",
                result.cpu_percent <= IDLE_CPU_TARGET if counts else None,
            )
        )
        rss = [s / MB for s in result.rss_samples]
        rows.append(
            Row(
                f"{name}: RSS (median and max of 1 s samples; VmHWM {result.hwm / MB:.1f} MB)",
                f"{median(rss):.1f} MB",
                f"{max(rss):.1f} MB (max)",
                ratio(result.rss_peak, base_idle.rss_peak),
                "≤ 120 MB" if counts else "",
                result.rss_peak <= IDLE_RSS_TARGET_MB * MB if counts else None,
            )
        )
    return rows


def flood_rows(floods: dict[str, FloodResult], lines: int) -> list[Row]:
    """Part 4's rows."""
    rows: list[Row] = []
    for mode, label in (
        ("baseline-pty", "baseline: bare pty reader (loop reader, 64 KiB reads) into a file"),
        ("pty", "RunLoop, pty (default)"),
        ("baseline-pipes", "baseline: asyncio pipes (streams, 64 KiB reads) into a file"),
        ("pipes", "RunLoop, pipes (`tty = false`)"),
    ):
        flood = floods[mode]
        counts = not mode.startswith("baseline-")
        baseline_flood = floods[mode if not counts else f"baseline-{mode}"]
        prefix = f"**4. flood of {lines:,} lines.** " if mode == "baseline-pty" else ""
        rows.append(
            Row(
                f"{prefix}{label}: agent start → agent.log complete (agent's own writing took "
                f"{flood.agent_wall:.1f} s)",
                f"{flood.wall:.2f} s",
                "",
                ratio(flood.wall, baseline_flood.wall),
                "",
                None,
            )
        )
        rows.append(
            Row(
                f"{label}: peak RSS (VmHWM)",
                f"{flood.hwm / MB:.1f} MB",
                "",
                ratio(flood.hwm, baseline_flood.hwm),
                "≤ 200 MB" if counts else "",
                flood.hwm <= FLOOD_RSS_TARGET_MB * MB if counts else None,
            )
        )
        rows.append(
            Row(
                f"{label}: agent.log byte-exact ({flood.log_bytes:,} bytes)",
                "yes" if flood.exact else "**no**",
                "",
                "",
                "byte-exact" if counts else "",
                flood.exact if counts else None,
            )
        )
        late = flood.lateness
        rows.append(
            Row(
                f"{label}: loop lateness of a 10 ms sleep during the flood (n={len(late)}, "
                f"max {ms(max(late))})",
                ms(median(late)),
                ms(p95(late)),
                ratio(p95(late), p95(baseline_flood.lateness)) if counts else "",
                "p95 ≤ 200 ms (keys answered)" if counts else "",
                p95(late) <= KEYS_TARGET_S if counts else None,
            )
        )
    return rows


def timeline(death: dict[str, list[float]]) -> list[str]:
    """After a crash under a RunLoop: when each event arrived (median ms after the exit)."""
    labels = ["changed nothing", "changed a file", SLOW_LABEL]
    points: dict[str, dict[str, float]] = {}
    for key, values in death.items():
        for label in labels:
            prefix = f"RunLoop ({label}): @ "
            if key.startswith(prefix):
                points.setdefault(key.removeprefix(prefix), {})[label] = median(values)
    order = sorted(points, key=lambda p: points[p].get(labels[1], min(points[p].values())))
    lines = [
        "After the crash, under a RunLoop: when each event reached the consumer (median ms "
        "after the agent's exit; the ledger record of each is written and fsynced before):",
        "",
        "| event | " + " | ".join(f"agent {label}" for label in labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for point in order:
        cells = [
            f"{points[point][label] * 1000:,.1f}" if label in points[point] else ""
            for label in labels
        ]
        lines.append(f"| {point} | " + " | ".join(cells) + " |")
    return lines


def short(row: Row) -> str:
    """A row's measure without its sample count and "(for information)"."""
    return row.measure.split(" (n=")[0].removeprefix("(for information) ")


def render(rows: list[Row]) -> list[str]:
    """The table as Markdown lines."""
    lines = [
        "| measure | median | p95 | × baseline | target | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        if row.ok is None:
            verdict = ""
        elif row.ok:
            verdict = "PASS"
        else:
            verdict = "**FAIL**" if row.counts else "FAIL (information)"
        lines.append(
            f"| {row.measure} | {row.median} | {row.p95} | {row.ratio} | {row.target} | {verdict} |"
        )
    return lines


# ----------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions and a 15 s idle window (default: N=20/10, 60 s)",
    )
    parser.add_argument(
        "--lines", type=int, default=1_000_000, help="lines the flooding agent writes"
    )
    parser.add_argument(
        "--files", type=int, default=500, help="files in each benchmark workspace (default 500)"
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="build everything in DIR (new) and keep it"
    )
    parser.add_argument(
        "--only",
        choices=["settle", "idle"],
        help="run part 2 alone (last change + settle → gate started), or part 3 (idle)",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="part 3 also runs the RunLoop of the code at REF (a commit of this repository, "
        "`git archive`d into the run's folder), side by side, in a workspace of its own",
    )
    parser.add_argument(
        "--idle-warmup",
        type=float,
        default=0.0,
        metavar="S",
        help="part 3 samples this many seconds after the children are ready (default 0)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


async def latency_measures(
    bench: Bench, quick: bool, only: str | None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Measures 1 and 2 (or 2 alone), in this process."""
    n_death, n_loop, n_settle = (6, 3, 4) if quick else (20, 10, 10)
    death: dict[str, list[float]] = {}
    if only is None:
        log(f"1. agent exit → death noticed: {n_death} rounds of 3, then {n_loop * 2} RunLoops")
        death = await measure_death(bench, n_death, n_loop)
    log(f"2. last change + settle → gate started: {n_settle} rounds")
    settle = await measure_settle(bench, n_settle)
    return death, settle


def thread_line(label: str, idle: IdleResult) -> str:
    """Where one idle child's CPU went, thread by thread."""
    return (
        f"Idle CPU by thread ({label}, CPU seconds over the window): "
        + ", ".join(
            f"{name} {spent:.3f} s"
            for name, spent in sorted(idle.threads.items(), key=lambda kv: -kv[1])
            if spent > 0
        )
        + f"; child processes reaped {idle.children_cpu:.3f} s."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every measure and print the report (exit 0 either way)."""
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    os.environ.pop(STATE_DIR_ENV, None)
    idle_seconds = 15.0 if args.quick else 60.0
    with contextlib.ExitStack() as stack:
        root = work_folder(stack, args.keep, "paella-engine-")
        bench = Bench(root=root, files=args.files)
        bench.agent.write_text(AGENT)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        death: dict[str, list[float]] = {}
        settle: dict[str, list[float]] = {}
        if args.only in (None, "settle"):
            death, settle = asyncio.run(latency_measures(bench, args.quick, args.only))
        idle: dict[str, IdleResult] = {}
        if args.only in (None, "idle"):
            against = export_tree(bench, args.against) if args.against else None
            log(f"3. idle supervisor: {idle_seconds:g} s, RunLoop and baseline side by side")
            idle = measure_idle(bench, idle_seconds, against, args.idle_warmup)
        floods: dict[str, FloodResult] = {}
        for mode in ("baseline-pty", "pty", "baseline-pipes", "pipes") if not args.only else ():
            log(f"4. flood of {args.lines:,} lines: {mode}")
            floods[mode] = measure_flood(bench, mode, args.lines)
        rows = build_rows(death, settle, idle, idle_seconds, floods, args.lines, args.against)
        lines = [
            f"## Engine benchmark ({time.strftime('%Y-%m-%d %H:%M %Z')})",
            "",
            *machine(),
            fsync_probe(root),
            load_line(load_before),
            f"- workspaces: {args.files} files each; contract: two gates (`sh -c 'date ...'`), "
            f"settle {SETTLE_S:g} s; {'--quick' if args.quick else 'full run'}"
            f"{f', --only {args.only}' if args.only else ''}"
            f"{f', idle warm-up {args.idle_warmup:g} s' if args.idle_warmup else ''}, "
            f"{time.monotonic() - started:.0f} s",
            "",
            *render(rows),
            "",
        ]
        missed = [short(r) for r in rows if r.ok is False and r.counts]
        informed = [short(r) for r in rows if r.ok is False and not r.counts]
        if missed:
            lines.append("**Missed:** " + "; ".join(missed) + ".")
        else:
            lines.append("Every SPEC 13 engine target is met.")
        if informed:
            lines.append("Over the bound, for information: " + "; ".join(informed) + ".")
        if death:
            lines += ["", *timeline(death)]
        for key, label in (("paella", "RunLoop child"), ("against", f"RunLoop of {args.against}")):
            if key in idle:
                lines += ["", thread_line(label, idle[key])]
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
