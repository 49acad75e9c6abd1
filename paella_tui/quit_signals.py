"""SIGTERM, SIGINT and SIGHUP while the TUI supervises a run: each one ends the run like a quit.

SIGTERM and SIGINT are handled on the event loop. SIGHUP (the pane or the terminal closed) needs
more: the terminal is gone, and Textual's threads still read and write it. A hangup also sends
SIGCONT, which Textual answers by redrawing, and Python runs signal handlers in signal order, so
a plain SIGHUP handler runs first and leaves the dead terminal alone before anything draws:
stdout and stderr go to /dev/null, stdin becomes a pipe nobody writes, the App's writes are
muted. Then the run is stopped through the run loop, as a quit would, and recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

LOOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Handled on the event loop; SIGHUP is handled at once (see :meth:`QuitSignals._on_hangup`)."""


def detach_from_terminal() -> int | None:
    """Point stdin, stdout and stderr away from a terminal that hung up.

    /dev/null takes the output; the input becomes a pipe nobody writes, so Textual's input
    thread waits quietly instead of failing. Returns the pipe's write end (closing it ends the
    input), or None if the descriptors could not be replaced.
    """
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        read_end, write_end = os.pipe()
        os.dup2(read_end, 0)
        os.close(read_end)
    except OSError:
        return None
    return write_end


def mute_driver(driver: Any) -> None:
    """The terminal hung up: nothing may wait on it (Textual's writer thread has a bounded queue,
    and the thread may have died on the closed terminal). ``driver``: the App's, or None."""
    if driver is not None:
        driver.write = lambda _data: None
        driver.flush = lambda: None


class QuitSignals:
    """Takes over the quit signals for the life of a supervised run, and gives them back."""

    def __init__(self, on_signal: Callable[[int], None], *, mute: Callable[[], None]) -> None:
        """``on_signal(sig)`` runs on the event loop; ``mute()`` silences the App's output."""
        self._on_signal = on_signal
        self._mute = mute
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}
        self._stdin_hold: int | None = None
        self.terminal_lost = False
        """The terminal hung up: nothing may be drawn or waited on it any more."""

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handle SIGTERM and SIGINT on ``loop``, SIGHUP and SIGCONT at once."""
        self._loop = loop
        for sig in LOOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._previous = {
            signal.SIGHUP: signal.signal(signal.SIGHUP, self._on_hangup),
            signal.SIGCONT: signal.signal(signal.SIGCONT, self._on_continue),
        }

    def restore(self) -> None:
        """Give every signal back (idempotent)."""
        self.release_stdin()
        loop, self._loop = self._loop, None
        if loop is None:
            return
        for sig in LOOP_SIGNALS:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        for signum, handler in self._previous.items():
            with contextlib.suppress(Exception):
                signal.signal(signum, handler)
        self._previous = {}

    def release_stdin(self) -> None:
        """End the stand-in input of a lost terminal, so Textual's input thread can finish."""
        if self._stdin_hold is not None:
            with contextlib.suppress(OSError):
                os.close(self._stdin_hold)
            self._stdin_hold = None

    def _on_hangup(self, _signum: int, _frame: object) -> None:
        if not self.terminal_lost:
            self.terminal_lost = True
            self._stdin_hold = detach_from_terminal()
            self._mute()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_signal, signal.SIGHUP)

    def _on_continue(self, signum: int, frame: object) -> None:
        previous = self._previous.get(signal.SIGCONT)
        if not self.terminal_lost and callable(previous):
            previous(signum, frame)
