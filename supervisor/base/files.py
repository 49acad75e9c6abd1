"""Safe writes for paella's state: private modes, atomic whole-file replacement, a cross-process lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from paella_tui.supervisor.base.errors import WorkspaceError

FILE_MODE = 0o600
DIR_MODE = 0o700


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    A FIFO, a device (``/dev/zero``) or a folder would hang or exhaust memory: ValueError says
    which (OSError for what the system refuses, FileNotFoundError when it is missing). The file
    is opened without blocking, so a FIFO with no writer never stalls the check.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ValueError("it is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("it is not a regular file (a pipe, a device or a socket)")
        if info.st_size > limit:
            raise ValueError(f"it is {info.st_size:,} bytes, over the limit of {limit:,}")
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise ValueError(f"it is over the limit of {limit:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and its parents with mode 0700 where missing, and return it."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new file, never half of one.

    ``durable=False`` skips the two fsyncs, for a cache that is checked on every read and
    rebuilt when it is missing, stale or torn (a crash may leave the old file, or none)."""
    if isinstance(data, str):
        data = data.encode()
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, what: str, timeout: float = 60.0) -> Iterator[None]:
    """Hold an advisory lock on ``path`` across processes; wait up to ``timeout`` seconds for it.

    The lock dies with its holder (flock), so a paella killed with SIGKILL never leaves it stale.
    """
    ensure_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WorkspaceError(
                        f"another paella process is busy with {what} and did not finish "
                        f"within {timeout:.0f}s",
                        hint="wait for it (see `paella status`) and try again.",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
