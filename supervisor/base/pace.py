"""How often a housekeeping loop wakes: often while something happens, seldom while all is quiet.

The run's housekeeping (the agent's CPU and memory sample, the search for new processes in its
tree) wakes every second or half second; with the agent quiet (no output, nothing changed in the
work tree) those wake-ups are most of what an idle TUI costs (issue 17, item 5). A :class:`Pace`
gives such a loop its next sleep: the base period while activity is recent, then twice as long
at each quiet wake-up, up to a ceiling; at the first activity (:meth:`Pace.stir`) a long sleep
ends at once and the base period is back. Nothing a person sees waits on a backed-off pace: the
agent's death comes through its own descriptor, output and file changes through theirs, and
they are what stir the pace.

A pace belongs to one event loop: :meth:`stir` is called from that loop's thread (the output
reader, the watcher's callbacks), and costs a comparison when nobody sleeps long.
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class Pace:
    """The sleeps of one housekeeping loop: ``base`` while busy, doubling to ``ceiling`` once
    nothing happened for ``quiet_after`` seconds, back to ``base`` at the first activity."""

    def __init__(self, base: float, ceiling: float, *, quiet_after: float) -> None:
        if not 0 < base <= ceiling:
            raise ValueError(f"a pace needs 0 < base <= ceiling, not {base} and {ceiling}")
        self.base = base
        self.ceiling = ceiling
        self.quiet_after = quiet_after
        self.last_activity = time.monotonic()
        """When something last happened (``time.monotonic()``)."""
        self.period = base
        """The length of the next sleep."""
        self._wake: asyncio.Event | None = None
        """Set while a sleep longer than ``base`` runs: activity ends it."""

    def stir(self) -> None:
        """Something happened now: back to the base period, and a long sleep ends at once."""
        self.last_activity = time.monotonic()
        self.period = self.base
        if self._wake is not None:
            self._wake.set()

    async def sleep(self) -> None:
        """Sleep one period, then work out the next (longer while quiet)."""
        period = self.period
        if period <= self.base:
            await asyncio.sleep(period)
        else:
            wake = self._wake = asyncio.Event()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), period)
            finally:
                self._wake = None
        quiet = time.monotonic() - self.last_activity >= self.quiet_after
        self.period = min(self.ceiling, self.period * 2) if quiet else self.base
