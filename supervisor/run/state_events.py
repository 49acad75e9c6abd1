"""The events every reader of a run's state needs: the base :class:`Event`, the ones the kept
state holds (:class:`DriftDetected`, :class:`BreakPoint`, :class:`RollbackDone`), and the ones a
command meets folding what was written since the state was kept (a run's start, a checkpoint or
salvage snapshot, a rollback's end, the records no rule reads: :class:`LedgerRecord`).

The run loop's other events (:mod:`~paella_tui.supervisor.run.events`: an agent, a gate, a
recovery, a bisect) and the rest of the ledger's (:mod:`~paella_tui.supervisor.run.ledger_events`)
are ~25 frozen dataclasses more, each costing the compilation of its methods at import: ``paella
checkpoint``, which usually folds only the checkpoint before it, imports them only when a record
of theirs comes up (:mod:`~paella_tui.supervisor.run.record_events`; issue 17: each command
loads only what it uses). Both modules re-export what is defined here, so a consumer imports
every event from one place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal

from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

GateStatus = Literal["pending", "running", "pass", "fail", "timeout", "error", "stale", "flaky"]
GREEN: frozenset[str] = frozenset({"pass", "flaky"})
RED: frozenset[str] = frozenset({"fail", "timeout", "error"})

DriftKind = Literal[
    "regression", "protected", "contract", "scope", "stall", "claimed-done", "history", "flapping"
]

Ending = Literal["done", "claimed-done", "transient", "permanent", "crash", "signal", "stopped"]


@dataclass(frozen=True, kw_only=True)
class Event:
    """Something that happened in a run, at wall-clock time ``at``."""

    kind: ClassVar[str | None] = None
    """The ledger record kind; None when another module records it."""
    at: float = field(default_factory=time.time)

    def record(self) -> dict[str, Any]:
        """The fields the ledger keeps for this event (its ``t`` and ``kind`` are added there)."""
        data = asdict(self)
        data.pop("at", None)
        return data


@dataclass(frozen=True, kw_only=True)
class CheckpointTaken(Event):
    """A checkpoint was taken (already in the ledger)."""

    record_: SnapshotRecord


@dataclass(frozen=True, kw_only=True)
class DriftDetected(Event):
    """Evidence that the run lost the thread (SPEC 8)."""

    kind: ClassVar[str | None] = "drift"
    drift: DriftKind
    message: str
    gate: str | None = None
    path: str | None = None


BisectVerdict = Literal["running", "found", "flaky", "red-from-start", "not-reproduced", "error"]


@dataclass(frozen=True, kw_only=True)
class BreakPoint:
    """Where a gate broke: the first step of the run on which it is red, found by a bisect."""

    gate: str
    verdict: BisectVerdict
    step: int | None = None
    """The first red step (``found``), else None."""
    t: str | None = None
    """When that step was taken (ISO 8601 UTC)."""
    last_green_step: int | None = None
    files: tuple[tuple[str, int | None, int | None], ...] = ()
    """The files the breaking step changed: (path, lines added, lines removed)."""
    added: int = 0
    removed: int = 0
    runs: int = 0
    """How many times the bisect ran the gate (cached results cost none)."""
    tail: tuple[str, ...] = ()
    """The gate's last output lines on the breaking step."""
    message: str = ""
    """The verdict in words (what flaked, why nothing was found)."""

    def headline(self, *, clock: str | None = None) -> str:
        """``broke at 02:31 in step 17: ledger/core.py, +3 −1`` (or the verdict in words)."""
        if self.verdict != "found" or self.step is None:
            return self.message or f"{self.gate}: {self.verdict}"
        when = clock if clock is not None else _hh_mm(self.t)
        names = ", ".join(path for path, _a, _r in self.files[:3])
        more = f" and {len(self.files) - 3} more" if len(self.files) > 3 else ""
        files = f": {names}{more}" if names else ""
        return f"broke at {when} in step {self.step}{files}, +{self.added} −{self.removed}"

    def to_json(self) -> dict[str, Any]:
        """The ledger's and ``status --json``'s shape."""
        data = asdict(self)
        data["files"] = [{"path": path, "added": a, "removed": r} for path, a, r in self.files]
        data["tail"] = list(self.tail)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BreakPoint:
        """Rebuild from :meth:`to_json` (a ledger ``bisect`` record)."""
        files = tuple(
            (str(f.get("path", "")), f.get("added"), f.get("removed"))
            for f in data.get("files") or ()
            if isinstance(f, dict)
        )
        return cls(
            gate=str(data.get("gate", "")),
            verdict=data.get("verdict", "error"),
            step=data.get("step"),
            t=data.get("t_step") or data.get("t"),
            last_green_step=data.get("last_green_step"),
            files=files,
            added=int(data.get("added") or 0),
            removed=int(data.get("removed") or 0),
            runs=int(data.get("runs") or 0),
            tail=tuple(str(x) for x in data.get("tail") or ()),
            message=str(data.get("message") or ""),
        )


def _hh_mm(t: str | None) -> str:
    """``02:31``, local time (as the drift feed and the clock show it), from a ledger time."""
    if not t:
        return "?"
    try:
        return datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone().strftime("%H:%M")
    except ValueError:
        return t


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    """A run began (written by the run store when it creates the run)."""

    kind: ClassVar[str | None] = "run-started"
    run_id: str
    manual: bool = False
    reason: str = ""
    contract: Mapping[str, Any] | None = None
    head: str | None = None
    branch: str | None = None
    paella_pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class RollbackDone(Event):
    """A rollback finished: the work tree is ``tree``, the snapshot ``target_ref``'s."""

    kind: ClassVar[str | None] = "rollback-done"
    id: str
    target_ref: str
    target: str | None = None
    tree: str | None = None
    salvage: int | None = None
    salvage_ref: str | None = None
    changed_files: int | None = None
    notes: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The fields the record holds (the unknown ones left out, as the rollback writes it)."""
        return {k: v for k, v in super().record().items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class LedgerRecord(Event):
    """A record no rule folds (a probe, an intent, a mirror failure): kept as it was."""

    kind: ClassVar[str | None] = None
    record_kind: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The record's own fields."""
        return dict(self.fields)


Reader = Callable[[Mapping[str, Any]], Event]
"""How one kind of ledger record becomes its typed event."""


def strs(value: object) -> tuple[str, ...]:
    """A record's list of words as a tuple of strings (anything else: empty)."""
    return tuple(str(x) for x in value) if isinstance(value, list | tuple) else ()
