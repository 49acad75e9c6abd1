"""Each ledger record as its typed event (:func:`event_of`): the one way a fold reads a record.

The records every command meets (a run's start, a checkpoint or salvage snapshot, a rollback's
end, a drift, and the kinds no rule reads) are read here, into
:mod:`~paella_tui.supervisor.run.state_events`' classes; the kinds of the run loop's events (an
agent, a gate, a recovery, a bisect, a step) by
:data:`paella_tui.supervisor.run.ledger_events.READERS`, imported only when a record of one of
them comes up (issue 17: ``paella checkpoint`` usually folds only the checkpoint before it, and
the ~30 classes of those modules were a tenth of its start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paella_tui.supervisor.run.state_events import (
    CheckpointTaken,
    DriftDetected,
    Event,
    LedgerRecord,
    Reader,
    RollbackDone,
    RunStarted,
    strs,
)
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord


def _rollback_done(r: Mapping[str, Any]) -> Event:
    return RollbackDone(
        id=r["id"],
        target_ref=r["target_ref"],
        target=r.get("target"),
        tree=r.get("tree"),
        salvage=r.get("salvage"),
        salvage_ref=r.get("salvage_ref"),
        changed_files=r.get("changed_files"),
        notes=strs(r.get("notes")),
    )


READERS: dict[str, Reader] = {
    "run-started": lambda r: RunStarted(
        run_id=r["run_id"],
        manual=bool(r.get("manual")),
        reason=r.get("reason") or "",
        contract=r.get("contract"),
        head=r.get("head"),
        branch=r.get("branch"),
        paella_pid=r.get("paella_pid"),
    ),
    "checkpoint": lambda r: CheckpointTaken(record_=SnapshotRecord.from_ledger(dict(r))),
    "salvage": lambda r: CheckpointTaken(record_=SnapshotRecord.from_ledger(dict(r))),
    "rollback-done": _rollback_done,
    "drift": lambda r: DriftDetected(
        drift=r["drift"], message=r["message"], gate=r.get("gate"), path=r.get("path")
    ),
}
"""How each record kind whose event is defined here becomes that event."""

MORE_KINDS = frozenset(
    {
        "resumed",
        "agent-started",
        "agent-stats",
        "agent-session",
        "agent-exited",
        "evaluation-started",
        "gate-started",
        "gate-finished",
        "evaluation-finished",
        "watch-paused",
        "retry-scheduled",
        "recovery-needed",
        "recovery-chosen",
        "handoff-written",
        "run-done",
        "run-stopped",
        "bisect-started",
        "bisect",
        "step",
        "steps-pruned",
    }
)
"""The kinds :mod:`~paella_tui.supervisor.run.ledger_events` reads (its ``READERS``, which a test
holds equal to this): only a record of one of these imports it and the run loop's events."""


_MORE: dict[str, Reader] = {}
"""``ledger_events.READERS`` once a record of theirs came up (empty before)."""


def _more_readers() -> dict[str, Reader]:
    # The run loop's event classes: imported at the first record of theirs.
    from paella_tui.supervisor.run.ledger_events import READERS as MORE

    _MORE.update(MORE)
    return _MORE


def event_of(record: Mapping[str, Any], at: float = 0.0) -> Event:
    """The typed event a (validated) ledger record stands for, at time ``at``."""
    kind = str(record.get("kind"))
    make = READERS.get(kind) or _MORE.get(kind)
    if make is None and kind in MORE_KINDS:
        make = _more_readers()[kind]
    if make is not None:
        try:
            event = make(record)
        except (KeyError, TypeError, ValueError):
            event = None  # a record the schema let through that this version cannot read
        if event is not None:
            object.__setattr__(event, "at", at)
            return event
    fields = {k: v for k, v in record.items() if k not in ("t", "kind", "prev")}
    return LedgerRecord(record_kind=kind, fields=fields, at=at)
