"""Where the suite's temporary files live: a folder in memory when the machine has one with room.

Every test works in real files: git repositories, paella's state and mirrors, run ledgers that
paella fsyncs record by record, virtual environments. On a disk (this machine's is ext4 mounted
with ``discard``) each fsync waits for the device and each ``rmdir``/``unlink`` of a test's
folder costs ~0.5 ms of system time; on ``/dev/shm`` (tmpfs, in memory) the same calls return at
once. The files, the git processes and the code paths are the same (paella still calls fsync;
tmpfs just has nothing to flush), so no scenario changes: nine of the heaviest test files side by
side cost 42.3 s of CPU and 100 s of wall time on disk, 37.7 s and 80 s in memory.

The choice, made once before pytest-xdist starts its workers (they and every subprocess inherit
``TMPDIR``):

1. ``PAELLA_TEST_TMPDIR`` names the folder: it is used (made if missing).
2. ``TMPDIR`` set by whoever started pytest: that choice stands.
3. ``/dev/shm`` with at least ``ROOM`` free: ``/dev/shm/paella-tests-<uid>`` (mode 700).
4. Otherwise the system's temporary folder, as before.

The suite's own peak there is small (170 MB measured: a passed test's folder is emptied as it
ends), but a failed test keeps its files and pytest keeps three sessions' folders; ``ROOM`` leaves
room for that, and a machine whose ``/dev/shm`` is a container's 64 MB default keeps the disk.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

CHOICE_VARIABLE = "PAELLA_TEST_TMPDIR"
MEMORY = Path("/dev/shm")
ROOM = 2 * 1024**3
"""Free bytes an in-memory folder must have to be chosen."""


def free_bytes(folder: Path) -> int:
    """The bytes an unprivileged writer may still use in ``folder``'s file system (0 if unknown)."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


def chosen_temp_root(
    environ: Mapping[str, str], memory: Path = MEMORY, room: int = ROOM
) -> Path | None:
    """The folder the suite's temporary files should go to, or None to leave the default."""
    named = environ.get(CHOICE_VARIABLE, "").strip()
    if named:
        return Path(named)
    if environ.get("TMPDIR"):
        return None
    if not (memory.is_dir() and os.access(memory, os.W_OK | os.X_OK)):
        return None
    if free_bytes(memory) < room:
        return None
    return memory / f"paella-tests-{os.getuid()}"


def use_temp_root() -> Path | None:
    """Point this process, and every process it starts, at the chosen folder; the folder."""
    root = chosen_temp_root(os.environ)
    if root is None:
        return None
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None  # cannot make it: the default folder serves
    if not os.access(root, os.W_OK | os.X_OK):
        return None
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return root
