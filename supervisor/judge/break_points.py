"""Where each gate broke, as the ledger tells it: the folds ``paella status`` and the views read.

Kept apart from :mod:`paella_tui.supervisor.judge.breaks` (which runs the bisects) so that reading a
run's verdicts loads no bisect, gate or process machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from paella_tui.supervisor.run.events import BreakPoint


def since_rollback(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records after the last completed rollback: the history that counts now."""
    start = 0
    for i, record in enumerate(records):
        if record.get("kind") == "rollback-done":
            start = i + 1
    return list(records[start:])


def breaks_of(records: Sequence[dict[str, Any]]) -> dict[str, BreakPoint]:
    """The newest bisect verdict of each gate since the last rollback."""
    found: dict[str, BreakPoint] = {}
    for record in since_rollback(records):
        if record.get("kind") == "bisect":
            point = BreakPoint.from_json(record)
            found[point.gate] = point
        elif record.get("kind") == "bisect-started" and isinstance(record.get("gate"), str):
            found[record["gate"]] = BreakPoint(gate=record["gate"], verdict="running")
    return found
