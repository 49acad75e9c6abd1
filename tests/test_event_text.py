"""One ``describe(event)`` says every event, for the headless printer and ``paella log``: each
event type has its line (or is a sample with none), and a ledger record of an event reads back to
the very line the printer printed for it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from paella_tui import headless, ledger_text
from paella_tui.event_text import describe
from paella_tui.supervisor.run import events
from paella_tui.supervisor.run.events import (
    AgentSession,
    AgentStarted,
    AgentStats,
    DriftDetected,
    EvaluationStarted,
    Event,
    GateStarted,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RetryScheduled,
    RunDone,
    RunStopped,
    WatchPaused,
)

SILENT = {AgentStats, GateStarted}
"""Samples: their outcome has its own event and line."""

SAMPLES: list[Event] = [
    AgentStarted(attempt=2, pid=41, create_time=1.0, argv=("claude", "-p", "fix it")),
    EvaluationStarted(tree="0123456789abcdef", reason="3 file(s) changed", gates=("unit",)),
    DriftDetected(drift="scope", message="src/x.py is outside the scope"),
    WatchPaused(reason="flapping"),
    RetryScheduled(attempt=1, failures=1, wait_s=30.0, resume_at=1_700_000_000.0, reason="429"),
    RecoveryChosen(choice="rollback", target="1", by="policy"),
    HandoffWritten(path="/x/handoff.md", size=1234),
    RunDone(tree="t", gates=("unit", "lint")),
    RunStopped(reason="quit by you"),
]
"""Events whose record is their fields (a session's record says its attempt instead, a notice is
not recorded)."""


def _event_types() -> list[type[Event]]:
    return [
        cls
        for _, cls in inspect.getmembers(events, inspect.isclass)
        if issubclass(cls, Event) and cls is not Event
    ]


def test_every_event_type_has_a_line_or_is_a_sample() -> None:
    from paella_tui.event_text import _LINES

    types = set(_event_types())
    assert len(types) >= 20
    assert types - SILENT == set(_LINES), "an event type with no line (or a line for no type)"


def test_the_printer_and_the_log_share_one_describe() -> None:
    assert headless.describe_event is describe
    assert ledger_text.describe_event is describe


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_a_recorded_event_reads_back_as_the_printer_said_it(event: Event) -> None:
    line = describe(event)
    assert line
    assert event.kind is not None
    record: dict[str, Any] = {"t": "2026-12-01T15:00:00Z", "kind": event.kind, **event.record()}
    assert ledger_text.describe(record) == line


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (Notice(message="a [bracket] stays", level="warning"), "⚠ a [bracket] stays"),
        (AgentSession(attempt=1, session_id="abc"), "  agent session abc (a resume continues it)"),
    ],
)
def test_the_printer_says_events_the_log_says_otherwise(event: Event, line: str) -> None:
    assert describe(event) == line


@pytest.mark.parametrize("sample", [AgentStats, GateStarted])
def test_samples_have_no_line(sample: type[Event]) -> None:
    event = (
        AgentStats(attempt=1, cpu_percent=1.0, rss_bytes=1, descendants=0, uptime_s=1.0)
        if sample is AgentStats
        else GateStarted(gate="unit", tree="t")
    )
    assert describe(event) is None
