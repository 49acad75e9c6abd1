"""The headless consumer of the run loop: one plain, timestamped line per event.

For CI logs, pipes and ``NO_COLOR`` terminals; the TUI consumes the same event stream. The words
are :func:`paella_tui.event_text.describe`'s, the same ``paella log`` says.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from paella_tui.event_text import describe
from paella_tui.supervisor.run.events import Event

if TYPE_CHECKING:
    from paella_tui.supervisor.run.state import RunState

describe_event = describe
"""The line for an event (:func:`paella_tui.event_text.describe`, shared with ``paella log``)."""


def printer(stream: TextIO | None = None) -> Callable[[Event, RunState | None], None]:
    """An event consumer that prints each event's line with its local time (a line is the
    event's alone: the state the loop hands beside it is not needed to say what happened)."""

    closed = False

    def emit(event: Event, state: RunState | None = None) -> None:
        nonlocal closed
        line = describe_event(event)
        if line is None or closed:
            return
        out = stream or sys.stdout
        clock = time.strftime("%H:%M:%S", time.localtime(event.at))
        try:
            print(
                "\n".join(
                    f"{clock}  {part}" if i == 0 else f"          {part}"
                    for i, part in enumerate(line.split("\n"))
                ),
                file=out,
                flush=True,
            )
        except (BrokenPipeError, ValueError):
            # Whoever read the lines went away (`| head`): the run goes on, supervised and
            # recorded in the ledger; only the printing stops.
            closed = True
            silence_stdout()

    return emit


def silence_stdout() -> None:
    """Point stdout at /dev/null, so a closed pipe fails no later write (nor the exit flush)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
