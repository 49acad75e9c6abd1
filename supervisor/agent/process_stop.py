"""Stopping a whole process tree, the agent's or a gate's: SIGTERM, a grace period, SIGKILL
(the cage too, when there is one), then reaping, naming every process that had to be stopped.

`stop_tree` is plain synchronous code, so async callers run it in a thread and gates can use
it as is; `ProcessTree` finds the members, including those that left the group or session.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Iterable

import psutil

from paella_tui.supervisor.agent.process_tree import LeftoverProcess, ProcessTree

log = logging.getLogger(__name__)

_POLL_S = 0.05
# After SIGKILL a process is gone within milliseconds unless it is stuck in the kernel
# (uninterruptible I/O); do not wait for such a one forever.
_KILL_WAIT_S = 5.0


def stop_tree(target: ProcessTree | Iterable[int], grace: float) -> list[LeftoverProcess]:
    """Stop every process of a tree: SIGTERM, up to `grace` seconds, then SIGKILL; reap.

    `target` is a tracked tree or root pids (each tracked from now on). Returns the
    processes that were running and had to be stopped. Blocks: from asyncio, run it in a
    thread.
    """
    trees = [target] if isinstance(target, ProcessTree) else _trees_of(target)
    deadline = time.monotonic() + max(0.0, grace)
    stopped: dict[tuple[int, float], LeftoverProcess] = {}

    def sweep(sig: int) -> bool:
        """Signal what runs (new members too) and say whether anything still runs."""
        any_alive = False
        for tree in trees:
            tree.refresh()
            for proc in tree.signal(sig):
                any_alive = True
                with contextlib.suppress(psutil.Error):
                    stopped.setdefault((proc.pid, proc.create_time()), tree.describe(proc))
        return any_alive

    for tree in trees:
        tree.scan_system()
    alive = sweep(signal.SIGTERM)
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = sweep(signal.SIGTERM)
    if alive:
        for tree in trees:
            if tree.cage is not None:
                tree.cage.kill()
        kill_deadline = time.monotonic() + _KILL_WAIT_S
        while sweep(signal.SIGKILL) and time.monotonic() < kill_deadline:
            time.sleep(_POLL_S / 5)
        for tree in trees:
            for proc in tree.alive():
                log.warning("process %d did not die after SIGKILL", proc.pid)
    for tree in trees:
        tree.stopped = True
        tree.reap()
        if tree.cage is not None and not tree.cage.pids():
            tree.cage.remove()
    return list(stopped.values())


def _trees_of(pids: Iterable[int]) -> list[ProcessTree]:
    """A tree tracked from each root pid still running."""
    trees = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            trees.append(ProcessTree(pid))
    return trees
