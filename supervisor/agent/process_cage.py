"""A cgroup (v2) per supervised process tree, where the machine lets paella make one.

A process can leave its group and session (``setsid``), scrub its environment (``env -i``) and
be orphaned by a double fork, but it cannot leave its cgroup: every process the agent or a
gate starts is listed in the cage's ``cgroup.procs`` until it exits, and the whole cage is
killed at once (``cgroup.kill``, or SIGKILL to each member). Where cgroup v2 is not mounted or
not writable, or cages were not asked for (``PAELLA_CGROUPS=1``), :func:`Cage.create` returns
None and the tree falls back to the child subreaper and the sweep of re-parented orphans
(:mod:`process_tree`).

The child joins its cage itself, between fork and exec (``enter``), so not even its first
instruction runs outside it. That ``preexec_fn`` makes ``subprocess`` fork paella instead of
vforking it (3-14 ms more CPU a start at 40-250 MB: ``benchmarks/git_start.py``, its ``hook``
column against ``plain``). It is kept: it is paid only with cages on, once per gate run (a gate
starts vfork'ed without a cage; the agent on a pseudo-terminal needs a ``preexec_fn`` anyway, to
take its terminal), and the way around it, a shell that joins the cage and then ``exec``s the
command, would change how a command that cannot start is told: ``subprocess`` raises the exec's
own error, which a gate turns into an ``error`` verdict naming the fix, where a shell exits 126
or 127 (a ``fail``) and dash runs a file without ``#!`` as a script.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import time
from pathlib import Path

CAGES_ENV = "PAELLA_CGROUPS"
"""``1`` turns cages on. Off by default: once, under the full test suite (many paellas and
in-process runs at once), a SIGTERM reached processes outside any tree while cages were on. It
was not reproduced since (every signal logged over the process-heavy tests: each caged tree
signalled only members of its own cage), so its source is unknown; the README says why that
keeps cages opt-in. The subreaper sweep (:mod:`process_tree`) is the default."""

_counter = itertools.count(1)
_swept: list[bool] = []


def _sweep_stale(base: Path) -> None:
    """Remove the empty cages of paellas that are gone (killed before they could)."""
    with contextlib.suppress(OSError):
        for path in base.glob("paella-*"):
            pid = path.name.split("-")[1]
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            with contextlib.suppress(OSError):
                path.rmdir()  # fails, harmlessly, while anything is still in it


_base_cache: list[Path | None] = []


def _cgroup2_base() -> Path | None:
    """Our own cgroup's folder in the cgroup2 hierarchy, if one is mounted."""
    mount = None
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    mount = left.split()[4]
                    break
        with open("/proc/self/cgroup") as handle:
            own = next((ln.strip()[3:] for ln in handle if ln.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or own is None:
        return None
    return Path(mount) / own.lstrip("/")


def _base() -> Path | None:
    if not _base_cache:
        _base_cache.append(_cgroup2_base())
    return _base_cache[0]


class Cage:
    """One cgroup holding one process tree (the agent's, or one gate run's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._procs = str(path / "cgroup.procs")

    @classmethod
    def create(cls, name: str) -> Cage | None:
        """A fresh, empty cage, or None where cgroups cannot be used here."""
        if os.environ.get(CAGES_ENV) != "1":
            return None
        base = _base()
        if base is None:
            return None
        if not _swept:
            _swept.append(True)
            _sweep_stale(base)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
        # Random too: a pid is reused, and a cage left by a killed paella must never be met.
        path = base / f"paella-{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}-{safe}"
        try:
            path.mkdir()
        except OSError:
            return None
        cage = cls(path)
        if not os.access(cage._procs, os.W_OK):
            cage.remove()
            return None
        return cage

    def enter(self) -> None:
        """Move the calling process into the cage (for ``preexec_fn``: runs in the child)."""
        # Only async-signal-safe work here: an open and a write. A failure leaves the child
        # outside the cage; `holds` tells the parent, which then relies on the fallback.
        try:
            fd = os.open(self._procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is in the cage."""
        return pid in self.pids()

    def pids(self) -> list[int]:
        """Every process in the cage now."""
        try:
            with open(self._procs) as handle:
                return [int(line) for line in handle if line.strip()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """SIGKILL every process in the cage, new ones included."""
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
                return
        for _ in range(20):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Delete the cage once it is empty (a dying member may hold it a moment longer; one
        that outlives even SIGKILL leaves the cage, which is harmless and named by its pid)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
