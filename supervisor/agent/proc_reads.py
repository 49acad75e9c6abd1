"""What ``/proc`` tells of a process, read with care: its environment (unknown mid-exec, never
empty by mistake), its children, whether it still runs and is the same process, its name.

Between the start of an ``exec`` and the new program's stack being laid out, the kernel shows a
process with an empty environment: ``/proc/<pid>/environ`` reads empty. A caller that starts a
child learns it has exec'd when the close-on-exec descriptors close, which the kernel does
*before* that layout, so a look right after such a start (or at a re-parented orphan that is
exec'ing) can read an empty environment that is no answer. Taking it for one made a gate's tree
claim an orphan that carried the agent's marker (the rare failure of
``test_an_orphan_marked_by_a_stopped_tree_is_anyones_to_stop``).

The layout (``create_elf_tables``) sets the command line's end, then fills in the environment's
pointers and only then its end, and ``load_elf_binary`` sets the code's end (``endcode`` in
``/proc/<pid>/stat``, zero in the new memory until then) after that. So a command line already
there does not mean the environment is (a large environment keeps that window open for
milliseconds: read then, it was empty one time in five); a code end is the sign the layout is
done. A process that really has an empty environment (a daemon that scrubbed it) has one, and
so does every process but a kernel thread, which has no memory and no environment at all, and
one that is ending (its memory already gone): both are known, and empty.
"""

from __future__ import annotations

import os
from typing import Final, Literal

import psutil

from paella_tui.supervisor.base.start_ticks import stat_fields

_HAS_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


LATER: Final = "later"
""":func:`environ_state`'s word for an environment not there yet (mid-exec): ask again soon."""
UNREADABLE: Final = "unreadable"
""":func:`environ_state`'s word for an environment not ours to read (another user's process)."""

_PF_EXITING = 0x00000004
_PF_KTHREAD = 0x00200000
_FLAGS_FIELD = 6
"""Index of ``flags`` among the fields after the command name (field 9 of proc(5))."""
_END_CODE_FIELD = 24
"""Index of ``endcode`` among the fields after the command name (field 27 of proc(5))."""


def environ_of(proc: psutil.Process) -> dict[str, str] | None:
    """``proc``'s environment, or None when it cannot be known now: unreadable, or read empty
    (or refused, psutil then calling it a zombie) while the process has not ended (mid-exec);
    ask again later. An ended or ending process's (a zombie's too) is empty, and so is a kernel
    thread's."""
    env = environ_state(proc)
    return env if isinstance(env, dict) else None


def environ_state(proc: psutil.Process) -> dict[str, str] | Literal["later", "unreadable"]:
    """``proc``'s environment; :data:`LATER` while it is being laid out (an ``exec`` under
    way: it will be there within moments), :data:`UNREADABLE` when it is not ours to read."""
    try:
        env: dict[str, str] | None = proc.environ()
    except psutil.AccessDenied:
        return UNREADABLE
    except psutil.NoSuchProcess:  # gone, a zombie, a kernel thread; or psutil's word for refused
        env = None
    except psutil.Error:
        return UNREADABLE
    if env:
        return env
    fields = stat_fields(proc.pid)
    if fields is None:
        return _without_stat(proc, env)
    if fields[0] in (b"Z", b"X"):
        return {}  # ended: known, and empty
    try:
        flags = int(fields[_FLAGS_FIELD])
        laid_out = int(fields[_END_CODE_FIELD]) != 0
    except (IndexError, ValueError):
        return LATER
    if flags & (_PF_KTHREAD | _PF_EXITING):
        return {}  # a kernel thread has no environment; an ending process has lost it
    if env is None or not laid_out:
        return LATER
    return _read_again(proc)


def _read_again(proc: psutil.Process) -> dict[str, str] | Literal["later", "unreadable"]:
    """The environment of a process known to be laid out (the first read may have come before,
    so this one is the answer)."""
    try:
        env: dict[str, str] = proc.environ()
    except psutil.AccessDenied:
        return UNREADABLE
    except psutil.Error:
        return LATER
    return env


def _without_stat(
    proc: psutil.Process, env: dict[str, str] | None
) -> dict[str, str] | Literal["later", "unreadable"]:
    """As :func:`environ_state` where ``/proc/<pid>/stat`` cannot be read: the process has
    gone, or this is not Linux (where a command line is the best sign of a finished exec)."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return {}
        if env is None or not proc.cmdline():
            return LATER
    except psutil.NoSuchProcess:
        return {}  # gone
    except psutil.Error:
        return LATER
    return _read_again(proc)


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
