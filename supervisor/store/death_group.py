"""A process group whose members die with paella: the git writes that may join it start with no
wrapper and no fork of paella, and a keeper kills the group the moment paella is gone.

Why. A writing git must not outlive paella (``gitcli``'s docstring). Giving each one the death
signal through ``setpriv`` (and ``/bin/sh`` for the parent check) costs two more program starts
per write: 1.0 ms of CPU for a ``store`` write and 1.7 ms for a ``checked`` one, a checkpoint's
handful of writes and the private index's ``update-index`` and ``write-tree`` on every snapshot
(``benchmarks/git_start.py``). Joining a process group costs nothing: ``subprocess`` sets it
between its vfork and exec (``process_group=``).

How. Once per paella process, two small programs start, each in a process group of its own (so
that no terminal signal and no kill of paella's own group reaches them), both reading the one
pipe whose only write end paella holds (close-on-exec: no child of paella inherits it):

- the group's leader, ``cat``, which only holds the group open; it ends by itself when the pipe
  closes, so it never outlives paella;
- the keeper, ``/bin/sh``: when the pipe closes (paella ended, however: a ``kill -9`` closes it
  too), it sends SIGKILL to the whole group, then again every 20 ms for 100 ms, so that a git
  paella was starting in its last moment (between its fork and joining the group) dies too.

A git joins the group before it runs (``setpgid`` in the child, before ``exec``): if paella is
already gone the group may be too, and then it cannot join and never runs. Before each start the
keeper is checked alive (one ``waitpid``); one found dead (whatever killed it) means a new group.
A start that cannot join (the leader gone) makes a new group once; without ``/bin/sh`` or ``cat``,
or off POSIX, :func:`group` answers None and ``gitcli`` gives the death signal as before.

Neither the keeper's kill nor setpriv's signal comes before the end of a git's piped input: the
kernel closes paella's descriptors before it sends the death signal (``git_start``), and the
keeper is woken by that same close, then needs a scheduling moment to kill. A git that wins that
race finishes what it was given, whole (git writes an index or a pack beside it and renames it
in): a private index updated with part of a snapshot's paths (another index than the memo saw:
the next snapshot scans in full), objects nobody names, part of a prune's deletions of paella's
refs. None of these is the user's; the user's writes keep setpriv, whose window is the rest of
the kernel's exit rather than a scheduling moment (and paella feeds none of them any input).

Which writes join (``gitcli.Git.how_to_start``): objects and paella's refs, and the private
index's own writes. Writes to the user's index, work tree or branches, and anything that talks to
a remote, keep ``setpriv``'s death signal in paella's own process group: a git in a group of its
own is not sent the terminal's Ctrl-C (so it would not remove its lock on the user's index as it
dies) and would be stopped if it asked the terminal for a password.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from dataclasses import dataclass

_KEEPER = (
    'read _ || :; i=0; while [ "$i" -lt 5 ]; do kill -s KILL -- "-$1" 2>/dev/null; '
    "sleep 0.02; i=$((i + 1)); done"
)
"""The keeper's script: wait for the pipe to close, then kill group ``$1`` five times."""

disabled = False
"""Set (in tests and benchmarks) to make :func:`group` answer None: the writes then take
``setpriv``'s route, as where no group can be made."""


def _running(pid: int) -> bool:
    """Whether our child ``pid`` still runs (one that ended is reaped here)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # reaped elsewhere (a test's reaper): it ended
        return False


@dataclass(frozen=True)
class _Group:
    owner: int
    """The pid of the paella that made it (a forked child makes its own)."""
    leader: int
    keeper: int
    pipe: int
    """The write end paella holds; closing it (paella's end) wakes the keeper."""

    def alive(self) -> bool:
        return _running(self.keeper) and _running(self.leader)

    def close(self) -> None:
        """End it now (a new group replaces it): the keeper kills what is left in it."""
        with contextlib.suppress(OSError):
            os.close(self.pipe)
        for pid in (self.leader, self.keeper):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # both end within 100 ms of the pipe's close


_lock = threading.Lock()
_current: _Group | None = None
_unusable: set[int] = set()
"""Processes in which a group could not be made: they never try again."""


def group() -> int | None:
    """The process group a write git joins so that it dies with this process, made on first
    use; None where none can be made (or :data:`disabled`)."""
    global _current
    if disabled or os.name != "posix":
        return None
    pid = os.getpid()
    current = _current
    if current is not None and current.owner == pid and current.alive():
        return current.leader
    with _lock:
        if pid in _unusable:
            return None
        current = _current
        if current is not None and current.owner == pid:
            if current.alive():
                return current.leader
            current.close()
        _current = _make(pid)
        if _current is None:
            _unusable.add(pid)
            return None
        return _current.leader


def renew(stale: int) -> int | None:
    """A new group in place of ``stale``, which a start could not join (its leader gone)."""
    global _current
    with _lock:
        current = _current
        if current is not None and current.owner == os.getpid() and current.leader == stale:
            current.close()
            _current = None
    return group()


def members() -> tuple[int, ...]:
    """The pids of this process's leader and keeper (none yet: empty): paella's own, never
    anyone's leftovers."""
    current = _current
    if current is None or current.owner != os.getpid():
        return ()
    return (current.leader, current.keeper)


def _make(owner: int) -> _Group | None:
    # Found where the system keeps them, not on the (agent-writable, test-changed) PATH.
    shell, cat = "/bin/sh", shutil.which("cat", path=os.defpath)
    if cat is None or not os.access(shell, os.X_OK):
        return None
    read_end, write_end = os.pipe()  # both close-on-exec: only what is passed as stdin gets one
    io = [
        (os.POSIX_SPAWN_DUP2, read_end, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    leader = None
    try:
        leader = os.posix_spawn(cat, [cat], os.environ, file_actions=io, setpgroup=0)
        argv = [shell, "-c", _KEEPER, "sh", str(leader)]
        keeper = os.posix_spawn(shell, argv, os.environ, file_actions=io, setpgroup=0)
    except OSError:
        os.close(write_end)
        if leader is not None:
            os.waitpid(leader, 0)  # its pipe is closed now: it ends
        return None
    finally:
        os.close(read_end)
    return _Group(owner, leader, keeper, write_end)
