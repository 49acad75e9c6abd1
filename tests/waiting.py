"""One way for a test to wait for something: poll a condition until it holds or a deadline passes,
and fail with what was being waited for and what the world looked like.

Tests wait on real processes (agents, gates, tmux panes, the App), never on a fixed sleep: a
condition polled every ``interval`` returns as soon as it holds, and the timeout is only the
bound for a broken run (a loaded 2-core machine can be many times slower than an idle one, so
timeouts are generous and intervals short).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# The default bound: long enough for a loaded machine, short enough that a hang fails the test.
TIMEOUT_S = 30.0
# How often a condition is polled: short, so that a wait ends soon after the condition holds.
INTERVAL_S = 0.02


class WaitTimeout(AssertionError):
    """The condition never held within the timeout."""


def _failure(what: str, timeout: float, show: Callable[[], object] | None) -> WaitTimeout:
    shown = f":\n{show()}" if show is not None else ""
    return WaitTimeout(f"timed out after {timeout:g}s waiting for {what}{shown}")


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    show: Callable[[], object] | None = None,
) -> None:
    """Poll ``condition()`` (in this thread) until it is truthy; raise ``WaitTimeout`` naming
    ``what`` (and ``show()``, the state to read) if it is not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise _failure(what, timeout, show)
        time.sleep(interval)


async def wait_until_async(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    show: Callable[[], object] | None = None,
    pause: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """``wait_until`` for a coroutine: the event loop runs between polls. ``pause`` is how to
    let it run (``asyncio.sleep``, or a Textual ``pilot.pause`` so that the App's messages are
    processed too)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise _failure(what, timeout, show)
        await pause(interval)
