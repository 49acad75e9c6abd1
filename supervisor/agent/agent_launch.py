"""Launching the agent: its own session and process group, in its cage from the first
instruction, under a pseudo-terminal (many CLIs buffer or change behaviour without one) or with
pipes; the output arrives on one non-blocking fd. `AgentProcess` supervises what this starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import termios
from collections.abc import Callable

from paella_tui.supervisor.agent.process_cage import Cage
from paella_tui.supervisor.agent.tree_roots import spawning_root

WINDOW_COLUMNS = 120
WINDOW_ROWS = 36
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_SIZE = 1024 * 1024


class AgentStartError(Exception):
    """The agent could not be started; the message says why and what to check."""


def spawn_agent(
    argv: list[str],
    *,
    cwd: str | os.PathLike[str],
    env: dict[str, str],
    tty: bool,
    cage: Cage | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the process (in ``cage`` from its first instruction) in its own session; return it
    and the non-blocking fd its output arrives on. Raises AgentStartError saying why not."""
    steps: list[Callable[[], None]] = [cage.enter] if cage is not None else []
    if tty:
        read_fd, child_fd = pty.openpty()
        _configure_pty(child_fd)
        stdin: int = child_fd
        steps.append(_take_controlling_terminal)
    else:
        read_fd, child_fd = os.pipe()
        with contextlib.suppress(OSError):
            # A bigger pipe means fewer wake-ups while the agent writes a lot.
            fcntl.fcntl(read_fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        stdin = subprocess.DEVNULL

    def run_steps() -> None:
        for step in steps:
            step()

    preexec: Callable[[], None] | None = run_steps if steps else None
    try:
        with spawning_root() as register:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=stdin,
                stdout=child_fd,
                stderr=child_fd,
                start_new_session=True,
                preexec_fn=preexec,
            )
            register(popen.pid)
    except BaseException as exc:
        os.close(read_fd)
        os.close(child_fd)
        if isinstance(exc, Exception):
            raise AgentStartError(_start_failure(argv[0], exc)) from None
        raise
    os.close(child_fd)
    os.set_blocking(read_fd, False)
    return popen, read_fd


def _start_failure(command: str, exc: Exception) -> str:
    """One line saying why `command` could not start, and where to fix it."""
    if isinstance(exc, FileNotFoundError):
        why = "was not found"
    elif isinstance(exc, PermissionError):
        why = "is not executable"
    elif isinstance(exc, OSError):
        why = f"could not be run ({exc.strerror or exc})"
    else:
        why = f"could not be run ({exc})"
    return f"cannot start the agent: {command!r} {why}; check `agent` in paella.toml"


def _configure_pty(fd: int) -> None:
    """The agent's terminal: bytes passed through untranslated, a fixed window size."""
    attrs = termios.tcgetattr(fd)
    # No "\n" -> "\r\n" translation: agent.log then holds exactly the bytes the agent wrote.
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", WINDOW_ROWS, WINDOW_COLUMNS, 0, 0))


def _take_controlling_terminal() -> None:
    """Run in the child after setsid(): make the pty on stdin its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
