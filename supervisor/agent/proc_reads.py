"""What ``/proc`` tells of a process, read with care: its environment (unknown mid-exec, never
empty by mistake), its children, whether it still runs and is the same process, its name.

Between the start of an ``exec`` and the new program's stack being laid out, the kernel shows a
process with neither environment nor command line: ``/proc/<pid>/environ`` reads empty. A caller
that starts a child learns it has exec'd when the close-on-exec descriptors close, which the
kernel does *before* that layout, so a look right after such a start (or at a re-parented orphan
that is exec'ing) can read an empty environment that is no answer. Taking it for one made a
gate's tree claim an orphan that carried the agent's marker (the rare failure of
``test_an_orphan_marked_by_a_stopped_tree_is_anyones_to_stop``). A process that really has an
empty environment (a daemon that scrubbed it) still has a command line.
"""

from __future__ import annotations

import os

import psutil

_HAS_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def environ_of(proc: psutil.Process) -> dict[str, str] | None:
    """``proc``'s environment, or None when it cannot be known now: unreadable, or read empty
    (or refused, psutil then calling it a zombie) while the process has not ended (mid-exec);
    ask again later. An ended process's (a zombie's too) is empty."""
    try:
        env: dict[str, str] = proc.environ()
        if env:
            return env
        if proc.cmdline():
            # Laid out now (both are set at once): the first read may have come before.
            again: dict[str, str] = proc.environ()
            return again
    except psutil.NoSuchProcess:  # ZombieProcess too: psutil's word for a refused read
        pass
    except psutil.Error:  # not ours to read now
        return None
    try:
        return {} if proc.status() == psutil.STATUS_ZOMBIE else None
    except psutil.NoSuchProcess:
        return {}  # gone
    except psutil.Error:
        return None


def name_and_command(proc: psutil.Process) -> tuple[str, tuple[str, ...]]:
    """Its name and command line (``?`` and empty when they cannot be read)."""
    try:
        name = proc.name()
    except psutil.Error:
        name = "?"
    try:
        cmdline = tuple(proc.cmdline())
    except psutil.Error:
        cmdline = ()
    return name, cmdline


def same_process(proc: psutil.Process) -> bool:
    """Whether `proc` still exists (zombie included) and is the same process, not a reused pid."""
    try:
        return proc.is_running()
    except psutil.Error:
        return False


def is_running(proc: psutil.Process) -> bool:
    """Whether it runs (a zombie does not)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def children_of(pid: int) -> list[int]:
    """The pids of its children, from ``/proc/<pid>/task/*/children`` where the kernel has it."""
    if not _HAS_PROC_CHILDREN:
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                children.extend(int(field) for field in handle.read().split())
        except OSError:
            continue
    return children
