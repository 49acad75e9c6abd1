"""The processes paella starts as roots of process trees (agents, gate runs), remembered so that
no tree mistakes one for an orphan that escaped from it.

A root is its own session's leader, a child of paella born while other trees run: exactly what an
escaped daemon re-parented to paella (a child subreaper) looks like. Each is registered by pid
*and* start time, as a pid is reused (within seconds where ``pid_max`` is 32768): a root that
ended long ago must not shield an escape that was given its pid.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import psutil

_ROOTS: set[tuple[int, float]] = set()
_PRUNE_AT = 256
"""Past this many entries, those of ended roots are dropped (their pids go to others)."""
SPAWNING = threading.Lock()
"""Held while paella starts a root and registers it, and while a tree decides which of our
children escaped: between fork and registration a new gate or agent (its own session, born
during the attempt) looks exactly like an escaped orphan, and would be adopted and killed."""


@contextlib.contextmanager
def spawning_root() -> Iterator[Callable[[int], None]]:
    """Start a tree root inside this block and register its pid with the function it yields."""
    with SPAWNING:
        yield register_root


def register_root(pid: int, create_time: float | None = None) -> None:
    """Remember a root paella started: an unreaped child of ours, so its start time is there."""
    with contextlib.suppress(psutil.Error):
        _ROOTS.add((pid, create_time if create_time is not None else _started(pid)))
    if len(_ROOTS) > _PRUNE_AT:
        for key in list(_ROOTS):
            with contextlib.suppress(psutil.Error):
                if _started(key[0]) == key[1]:
                    continue
            _ROOTS.discard(key)


def is_root(pid: int, create_time: float) -> bool:
    """Whether the process ``pid`` that started at ``create_time`` is a root paella started."""
    return (pid, create_time) in _ROOTS


def _started(pid: int) -> float:
    return float(psutil.Process(pid).create_time())
