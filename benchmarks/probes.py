"""What the benchmarks read off the processes they measure.

Memory fields and per-thread CPU from ``/proc``, a process's own CPU time and its reaped
children's through psutil, how late an event loop wakes up, and the digest of a log it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from pathlib import Path

import psutil

READ_CHUNK = 1024 * 1024
LATENESS_TICK_S = 0.010


def vm_status(field: str, pid: int | str = "self") -> int:
    """A ``/proc/<pid>/status`` memory field (``VmHWM``, ``VmRSS``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def thread_schedstat(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of ``pid``, from ``/proc/<pid>/task/*/schedstat`` (ns)."""
    found: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text()
                found[int(tid)] = int(text.split()[0]) / 1e9
    return found


def process_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of the process itself, children excluded (psutil; 10 ms ticks)."""
    times = proc.cpu_times()
    return times.user + times.system


def children_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of the children ``proc`` has reaped so far (gates, git)."""
    times = proc.cpu_times()
    return times.children_user + times.children_system


async def lateness_monitor(samples: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """Sleep 10 ms in a loop on the running event loop; note how late each wake-up was
    (``time.time()``, lateness in seconds)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        started = loop.time()
        await asyncio.sleep(LATENESS_TICK_S)
        samples.append((time.time(), loop.time() - started - LATENESS_TICK_S))


def sha256_file(path: Path) -> tuple[str, int]:
    """The sha256 and size of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
