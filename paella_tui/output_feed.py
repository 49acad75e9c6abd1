"""Carries the engine's agent output to the log widget, as data: the engine's
:class:`~paella_tui.supervisor.agent.output_tail.OutputTail` says when it changed, and
:data:`POLL_S` after the first change the feed takes only the lines not shown yet and hands them
over in one :class:`~paella_tui.widgets.rows.OutputBatch` (an agent printing a million lines
costs at most one batch of the newest 5,000 lines per 100 ms, never a message per line; a quiet
agent costs nothing: no timer runs while the tail is unchanged)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.widgets.output_view import MAX_LINES
from paella_tui.widgets.rows import OutputBatch

POLL_S = 0.1
"""How long after new output it is handed over: output arriving within that is one batch."""


class OutputFeed:
    """One tail to one ``show``, from :meth:`start` (on the event loop) to :meth:`stop`."""

    def __init__(
        self,
        tail: OutputTail,
        show: Callable[[OutputBatch], None],
        *,
        max_lines: int = MAX_LINES,
        delay: float = POLL_S,
    ) -> None:
        self.tail = tail
        self._show = show
        self._max_lines = max_lines
        self._delay = delay
        self._seen_version = -1
        self._seen_total = 0
        self._pending: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def start(self) -> None:
        """Listen to the tail and hand over what it holds already (a new tail: all of it)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.tail.on_change = self._changed
        self.poll()

    def stop(self) -> None:
        """Stop listening (the tail outlives the view)."""
        if self.tail.on_change == self._changed:
            self.tail.on_change = None
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _changed(self) -> None:
        """The tail changed: hand it over ``delay`` after the first change."""
        loop = self._loop
        if self._pending is not None or loop is None:
            return
        if threading.get_ident() != self._loop_thread:
            # Fed from another thread (never by the engine, which feeds on the loop): hop over.
            loop.call_soon_threadsafe(self._changed)
            return
        self._pending = loop.call_later(self._delay, self._scheduled)

    def _scheduled(self) -> None:
        self._pending = None
        self.poll()

    def poll(self) -> None:
        """Hand over what the tail has that was not handed over yet (one batch)."""
        tail = self.tail
        if tail.version == self._seen_version:
            return
        self._seen_version = tail.version
        new = tail.total_lines - self._seen_total
        self._seen_total = tail.total_lines
        partial = tail.partial
        lines: list[str] = []
        if new > 0:
            wanted = min(new, self._max_lines)
            got = tail.lines(wanted + 1) if partial else tail.lines(wanted)
            lines = got[:-1] if partial else got
        self._show(OutputBatch(tuple(lines), partial))
