"""The data the widgets are handed: the rows the lists and tables show, and the agent's output in
batches. Plain frozen data (no Textual here), made by the board and the screens from the run's
state and the engine's output, so nothing outside ``widgets`` needs a widget module for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EpisodeState = Literal["complete", "current", "pending", "broken"]


@dataclass(frozen=True)
class GateRow:
    """One gate as the table shows it."""

    name: str
    status: str = "pending"
    """pending | running | pass | fail | timeout | error | stale | flaky."""
    duration_s: float | None = None
    finished_at: float | None = None
    """Wall-clock time of the last verdict, or None if it never ran."""
    ever_green: bool = False
    """Green on some tree of this run (since the last rollback)."""
    regressed: bool = False
    """Was green, is red now."""
    message: str = ""
    """Why, in words, for a timeout or a gate that could not run."""
    rerunning: bool = False
    """Running again; ``status`` is the last verdict, marked ``●``."""


@dataclass(frozen=True)
class EpisodeRow:
    """One episode as the list shows it."""

    n: int
    name: str
    state: EpisodeState
    gates_green: int = 0
    """How many of this episode's own gates are green now."""
    gates_total: int = 0
    checkpoint: int | None = None
    """The checkpoint that completed it (the newest one), if any."""
    goal: str = ""


@dataclass(frozen=True)
class OutputBatch:
    """New output of the agent for the log: complete lines (with their SGR colours), oldest
    first, and the unfinished last line as it stands (empty when the output ends a line)."""

    lines: tuple[str, ...]
    partial: str = ""
