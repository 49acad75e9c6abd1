"""Tracking and stopping a whole process tree: the agent's, or a gate's.

`ProcessTree` remembers every process of a tree it has ever seen (by pid *and* start time,
so a reused pid is never mistaken for a member), including ones that left the process
group or the session and ones that were orphaned and re-parented to us. It finds them
three ways: walking `/proc/<pid>/task/*/children` from the known members (cheap enough
to run every second), looking at our own children for an environment marker (orphans
re-parented to us once we are a child subreaper), and, when stopping, scanning the system
for members of the root's session or carriers of the marker. A child of ours in another
session, born while the tree ran, is taken as an escape of its own (a double fork that
scrubbed the marker), unless another tree of ours tracks it or it carries another tree's
marker: an agent's daemons are re-parented to us the moment the agent ends, while a gate may be
looking, and they are the agent's to stop and name.

Stopping a tree (SIGTERM, a grace period, SIGKILL, reaping) is `process_stop.stop_tree`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

import psutil

from paella_tui.supervisor.agent.proc_reads import (
    LATER,
    children_of,
    environ_of,
    environ_state,
    is_running,
    name_and_command,
    same_process,
)
from paella_tui.supervisor.agent.process_cage import Cage
from paella_tui.supervisor.agent.tree_roots import SPAWNING, is_root, register_root
from paella_tui.supervisor.base.start_ticks import TICKS_PER_SECOND, born_before, start_ticks

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_HISTORY = 10_000
_UNKNOWN_WAIT_S = 5.0
"""How long the stop's scan asks a process mid-exec for its environment (an exec stuck that
long, on a hung disk say, is not waited for)."""
_UNKNOWN_PAUSE_S = 0.01
_TREES: weakref.WeakSet[ProcessTree] = weakref.WeakSet()
"""Every tree of this process: a process one of them tracks, or one carrying its marker,
belongs to it, and is no escaped orphan of another."""
_TREES_LOCK = threading.Lock()
"""Guards adding to `_TREES` against a copy being taken (a set must not grow while read)."""


@dataclass(frozen=True)
class LeftoverProcess:
    """A process of a tree that was still running and had to be stopped."""

    pid: int
    name: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class TrackedProcess:
    """A member of a tree as first seen: its pid and start time identify it."""

    pid: int
    create_time: float
    name: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class ProcessStats:
    """Resource use of a whole process tree at one moment."""

    pid: int
    """The root's pid."""
    alive: bool
    """Whether the root is running (a zombie is not)."""
    cpu_percent: float
    """CPU use summed over the tree since the previous `stats()` call (100 = one core)."""
    rss_bytes: int
    """Resident memory summed over the tree."""
    descendants: int
    """Running descendants of the root, including ones that left its group or session."""
    started: float
    """When the root started, seconds since the epoch."""


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux), so orphaned descendants are re-parented to it.

    Best effort: returns False where that is not possible. A subreaper must reap the
    orphans it inherits; `ProcessTree` reaps the members of the trees it tracks.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[ProcessTree, _P], _R],
) -> Callable[Concatenate[ProcessTree, _P], _R]:
    """Run a ProcessTree method under its lock: a UI may ask for stats from a worker thread."""

    @functools.wraps(method)
    def locked(self: ProcessTree, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class _Member:
    """A tracked process with what was learnt about it when it was first seen."""

    __slots__ = ("info", "proc", "sent")

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.info = TrackedProcess(proc.pid, proc.create_time(), *name_and_command(proc))
        self.sent: int | None = None


class ProcessTree:
    """Every process of the tree rooted at `root_pid` ever seen, and how to reach them."""

    def __init__(
        self,
        root_pid: int,
        *,
        marker: tuple[str, str] | None = None,
        cage: Cage | None = None,
    ) -> None:
        """Start tracking `root_pid`; `marker` is an environment (name, value) only the tree has,
        `cage` a cgroup that holds the whole tree (every process in it is a member).

        Raises psutil.NoSuchProcess if the root is already gone (reaped).
        """
        self._lock = threading.RLock()
        self._root_pid = root_pid
        self._marker = marker
        self.cage = cage if cage is not None and cage.holds(root_pid) else None
        """The tree's cgroup, when the root is really in it."""
        self._my_pid = os.getpid()
        self._members: dict[int, _Member] = {}
        self._history: deque[TrackedProcess] = deque(maxlen=_HISTORY)
        self._not_ours: set[tuple[int, float]] = set()
        self._group_sent: set[int] = set()
        self._last_refresh = 0.0
        self.stopped = False
        """Set once `stop_tree` is done with it; from then on it claims no orphan."""
        root = self._add(psutil.Process(root_pid))
        self._root = root
        born = start_ticks(root_pid)  # read now: by the scan at its end the pid may be reused
        self._marker_since_ticks = None if born is None else born - TICKS_PER_SECOND - 1
        register_root(root_pid, root.info.create_time)
        with _TREES_LOCK:
            _TREES.add(self)
        # Signal the group or scan the session only where the root leads them: a root that
        # shares our group or session must never make us signal ourselves or our terminal.
        self._pgid = _leader_of(os.getpgid, root_pid, os.getpgrp())
        self._sid = _leader_of(os.getsid, root_pid, os.getsid(0))

    @property
    def root_pid(self) -> int:
        """The pid of the tree's root."""
        return self._root_pid

    @property
    def started(self) -> float:
        """When the root started, seconds since the epoch."""
        return self._root.info.create_time

    @property
    def last_refresh(self) -> float:
        """`time.monotonic()` of the last refresh."""
        return self._last_refresh

    @_locked
    def seen(self) -> tuple[TrackedProcess, ...]:
        """Every member ever seen (the root first), dead or alive; bounded to the newest 10,000."""
        return tuple(self._history)

    @_locked
    def refresh(self) -> None:
        """Find new members below the known ones and among our own orphaned children."""
        self._last_refresh = time.monotonic()
        for member in list(self._members.values()):
            if not same_process(member.proc):
                del self._members[member.proc.pid]
        queue = list(self._members)
        if self.cage is not None:
            # The cgroup lists every member, whatever it did to its session, group or
            # environment, and whoever it was re-parented to.
            queue.extend(
                pid for pid in self.cage.pids() if pid not in self._members and self._try_add(pid)
            )
        if self._marker is not None:
            queue.extend(self._adopt_marked_children())
        while queue:
            for child_pid in children_of(queue.pop()):
                if child_pid not in self._members and self._try_add(child_pid):
                    queue.append(child_pid)
        self.reap()

    @_locked
    def scan_system(self) -> None:
        """Look at every process for members of the root's session or carriers of the marker.

        Costs a few milliseconds per hundred processes: meant for stopping, not polling.
        """
        marker_since = self.started - 1.0
        candidates: list[psutil.Process] = []  # born since the root: may carry the marker
        for pid in psutil.pids():
            if pid in self._members or pid == self._my_pid:
                continue
            if self._sid is not None:
                try:
                    if os.getsid(pid) == self._sid:
                        self._try_add(pid)
                        continue
                except OSError:
                    continue
            # Born over a second before the root (kernel ticks, a tick of margin): no marker.
            if self._marker is not None and not born_before(pid, self._marker_since_ticks):
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    if proc.create_time() >= marker_since:
                        candidates.append(proc)
        if candidates:
            self._take_carriers(candidates)
        self.refresh()

    def _take_carriers(self, candidates: list[psutil.Process]) -> None:
        """Take those of ``candidates`` that carry the marker, each asked again until it
        answers: a carrier caught mid-exec would otherwise escape the stop. Its exec lays the
        environment out within a millisecond of running, but under load it waits its turn, for
        longer than a fixed count of short pauses may add up to (it was ten of 10 ms), so the
        bound is a time, long enough only for an exec that is stuck. A process that is not ours
        to read is not asked again, and one with no environment (a kernel thread) answers."""
        assert self._marker is not None
        name, value = self._marker
        deadline = time.monotonic() + _UNKNOWN_WAIT_S
        while True:
            asked, candidates = candidates, []
            for proc in asked:
                env = environ_state(proc)
                if env == LATER:
                    candidates.append(proc)
                elif isinstance(env, dict) and env.get(name) == value:
                    self._try_add(proc.pid)
            if not candidates or time.monotonic() >= deadline:
                break
            time.sleep(_UNKNOWN_PAUSE_S)
        for proc in candidates:
            log.warning(
                "process %d was still starting after %.0f s: not stopped", proc.pid, _UNKNOWN_WAIT_S
            )

    @_locked
    def alive(self) -> list[psutil.Process]:
        """Members that are running now (zombies are not)."""
        return [member.proc for member in self._members.values() if is_running(member.proc)]

    @_locked
    def describe(self, proc: psutil.Process) -> LeftoverProcess:
        """Name a member for a report, from what was seen of it if it is gone now."""
        member = self._members.get(proc.pid)
        seen = member.info if member is not None and member.proc is proc else None
        # A process first seen right after fork carried its parent's command line: prefer
        # a fresh look while it still runs.
        name, cmdline = name_and_command(proc)
        if seen is not None:
            name = name if name != "?" else seen.name
            cmdline = cmdline or seen.cmdline
        return LeftoverProcess(proc.pid, name, cmdline)

    @_locked
    def stats(self) -> ProcessStats:
        """CPU (since the previous call), memory and descendants of the whole tree."""
        self.refresh()
        cpu = 0.0
        rss = 0
        descendants = 0
        root_alive = False
        for pid, member in list(self._members.items()):
            proc = member.proc
            try:
                with proc.oneshot():
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            if pid == self._root_pid:
                root_alive = True
            else:
                descendants += 1
        return ProcessStats(self._root_pid, root_alive, cpu, rss, descendants, self.started)

    @_locked
    def signal(self, sig: int) -> list[psutil.Process]:
        """Send `sig` (SIGTERM or SIGKILL) to the root's group and each running member; once.

        A member is sent SIGTERM only once, however often this is called: many tools take
        a second SIGTERM as "skip the clean shutdown". Returns the running members.
        """
        targets = self.alive()
        # The group id stays reserved while a member (or the unreaped root) exists;
        # otherwise the number may belong to someone else by now.
        if (
            self._pgid is not None
            and (sig == signal.SIGKILL or sig not in self._group_sent)
            and (same_process(self._root.proc) or self._group_has_members(targets))
        ):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pgid, sig)
                self._group_sent.add(sig)
                for proc in targets:
                    if self._in_group(proc):
                        self._mark_sent(proc, sig)
        for proc in targets:
            member = self._members.get(proc.pid)
            if member is not None and _strength(member.sent) >= _strength(sig):
                continue
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
            self._mark_sent(proc, sig)
        if sig != signal.SIGKILL:
            # A stopped (^Z) process acts on SIGTERM only once continued.
            for proc in targets:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGCONT)
        return targets

    def _mark_sent(self, proc: psutil.Process, sig: int) -> None:
        member = self._members.get(proc.pid)
        if member is not None and _strength(sig) > _strength(member.sent):
            member.sent = sig

    def _in_group(self, proc: psutil.Process) -> bool:
        try:
            return os.getpgid(proc.pid) == self._pgid
        except OSError:
            return False

    @_locked
    def reap(self) -> None:
        """Collect dead members that are our children (re-parented orphans); never the root."""
        for pid, member in list(self._members.items()):
            if pid == self._root_pid:
                continue  # the root belongs to whoever started it (its Popen)
            try:
                if member.proc.status() != psutil.STATUS_ZOMBIE:
                    continue
                if member.proc.ppid() != self._my_pid:
                    continue
            except psutil.Error:
                continue
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    def _group_has_members(self, procs: Iterable[psutil.Process]) -> bool:
        return any(self._in_group(proc) for proc in procs)

    def _adopt_marked_children(self) -> Iterator[int]:
        with SPAWNING:  # no root may be between its fork and its registration meanwhile
            found = list(self._marked_children())
        yield from found

    def _marked_children(self) -> Iterator[int]:
        current: set[tuple[int, float]] = set()
        for pid in children_of(self._my_pid):
            if pid in self._members:
                continue
            try:
                proc = psutil.Process(pid)
                key = (pid, proc.create_time())
            except psutil.Error:
                continue
            current.add(key)
            if key in self._not_ours:
                continue
            ours = self._has_marker(proc)
            if ours is None:
                continue  # its environment cannot be known now (mid-exec): asked again next time
            if not ours and self._escaped_orphan(proc):
                if self._belongs_elsewhere(proc, key[1]):
                    continue  # asked again next time: its owner may end without it
                ours = True
            if ours and self._try_add(pid):
                yield pid
            else:
                self._not_ours.add(key)
        self._not_ours &= current

    def _escaped_orphan(self, proc: psutil.Process) -> bool:
        """A child of ours we never started, born while this tree ran, outside our session.

        Without a cgroup this is how a double fork that scrubbed the marker and called setsid
        is still found: as a child subreaper we inherit it. Our own helpers (git) share our
        session; the roots we start are registered.
        """
        if self.cage is not None:
            return False
        try:
            born = proc.create_time()
            return (
                not is_root(proc.pid, born)
                and born >= self.started - 1.0
                and os.getsid(proc.pid) != os.getsid(0)
            )
        except (psutil.Error, OSError):
            return False

    def _belongs_elsewhere(self, proc: psutil.Process, born: float) -> bool:
        """Whether another tree of ours, not yet stopped, tracks ``proc`` or marked it: an
        agent's daemon is re-parented to us when the agent ends, and a gate running then must
        not take it (it would stop it and name it as its own; the agent's end would name
        nothing). What a stopped tree missed is anyone's to stop."""
        env = environ_of(proc)
        with _TREES_LOCK:
            others = list(_TREES)
        for other in others:
            if other is self or other.stopped:
                continue
            if env is None and other._marker is not None:
                return True  # its environment cannot be known now: asked again next time
            # Read without the other tree's lock (taking it here could deadlock two trees that
            # refresh at once): a dict look-up is atomic, and a stale answer is the old one.
            member = other._members.get(proc.pid)
            if member is not None and member.info.create_time == born:
                return True
            if other._marker is not None and env and env.get(other._marker[0]) == other._marker[1]:
                return True
        return False

    def _has_marker(self, proc: psutil.Process) -> bool | None:
        """Whether ``proc`` carries this tree's marker; None when that cannot be known now."""
        assert self._marker is not None
        env = environ_of(proc)
        return None if env is None else env.get(self._marker[0]) == self._marker[1]

    def _try_add(self, pid: int) -> bool:
        try:
            self._add(psutil.Process(pid))
        except psutil.Error:
            return False
        return True

    def _add(self, proc: psutil.Process) -> _Member:
        member = _Member(proc)
        self._members[proc.pid] = member
        self._history.append(member.info)
        return member


def _strength(sig: int | None) -> int:
    if sig == signal.SIGKILL:
        return 2
    return 1 if sig == signal.SIGTERM else 0


def _leader_of(getter: Callable[[int], int], pid: int, own: int) -> int | None:
    try:
        leader = getter(pid)
    except OSError:
        return None
    return pid if leader == pid and leader != own else None
