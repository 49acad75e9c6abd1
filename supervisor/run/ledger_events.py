"""The ledger as an event log: each record maps to one typed event (:func:`event_of`) and back
(:func:`record_of`), so a run's state is the fold of its ledger.

The run loop's own events (:mod:`paella_tui.supervisor.run.events`) are their records' events;
the records other parts of the engine write (a resume, steps, and in
:mod:`~paella_tui.supervisor.run.state_events` the run's start, checkpoints and salvage, a
finished rollback) get the typed events defined here. A record of a kind this version does not
fold becomes a :class:`LedgerRecord` carrying its fields, so nothing is lost. :data:`READERS`
reads the kinds whose events are the run loop's: the fold imports this module only when it meets
one (:func:`~paella_tui.supervisor.run.state_events.event_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    BisectFinished,
    BisectStarted,
    BreakPoint,
    CheckpointTaken,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    GateFinished,
    GateResult,
    GateStarted,
    HandoffWritten,
    RecoveryChosen,
    RetryScheduled,
    RunDone,
    RunStopped,
    WatchPaused,
)

# Re-exported: every reader of the ledger's events imports them from here.
from paella_tui.supervisor.run.state_events import LedgerRecord as LedgerRecord
from paella_tui.supervisor.run.state_events import Reader, strs
from paella_tui.supervisor.run.state_events import RollbackDone as RollbackDone
from paella_tui.supervisor.run.state_events import RunStarted as RunStarted


@dataclass(frozen=True, kw_only=True)
class SupervisorResumed(Event):
    """A paella process took the run over again (``paella resume``)."""

    kind: ClassVar[str | None] = "resumed"
    paella_pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class RecoveryAsked(Event):
    """The ledger's form of :class:`~paella_tui.supervisor.run.events.RecoveryNeeded`: the
    facts it keeps (the base by number, the ending and the attempt as fields)."""

    kind: ClassVar[str | None] = "recovery-needed"
    ending: str
    how: str = ""
    attempt: int = 0
    tail: tuple[str, ...] = ()
    base: int | None = None
    regressions: tuple[str, ...] = ()
    changed_files: tuple[str, ...] = ()
    default: str = "continue"


@dataclass(frozen=True, kw_only=True)
class StepKept(Event):
    """A settled change kept as a numbered step (issue 16); its other fields ride along."""

    kind: ClassVar[str | None] = "step"
    n: int | None
    fields: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The step's fields as the ledger keeps them."""
        return {**self.fields, "n": self.n}


@dataclass(frozen=True, kw_only=True)
class StepsPruned(Event):
    """Old steps' refs were pruned."""

    kind: ClassVar[str | None] = "steps-pruned"
    refs: int = 0
    kept_s: float | None = None


def _usage(value: object) -> Usage | None:
    return None if value is None else Usage.from_record(value)


def _gate_finished(r: Mapping[str, Any]) -> Event:
    result = GateResult(
        gate=r["gate"],
        status=r["status"],
        tree=r["tree"],
        duration_s=float(r.get("duration_s") or 0.0),
        exit_code=r.get("exit_code"),
        attempts=int(r.get("attempts") or 1),
        log_path=r.get("log"),
        cached=bool(r.get("cached")),
        message=r.get("message") or "",
        failed_tests=strs(r.get("failed_tests")),
    )
    return GateFinished(result=result, stale=bool(r.get("stale")))


def _agent_exited(r: Mapping[str, Any]) -> Event:
    return AgentExited(
        attempt=r["attempt"],
        exit_code=r.get("exit_code"),
        signal=r.get("signal"),
        tail=strs(r.get("tail")),
        leftovers=strs(r.get("leftovers")),
        stopped_by_user=bool(r.get("stopped_by_user")),
        false_success=r.get("false_success"),
        exit_meaning=r.get("exit_meaning"),
        usage=_usage(r.get("usage")),
        signals=strs(r["signals"]) if isinstance(r.get("signals"), list) else None,
    )


def _agent_stats(r: Mapping[str, Any]) -> Event:
    return AgentStats(
        attempt=r["attempt"],
        cpu_percent=r.get("cpu_percent") or 0.0,
        rss_bytes=r.get("rss_bytes") or 0,
        descendants=r.get("descendants") or 0,
        uptime_s=r.get("uptime_s") or 0.0,
        usage=_usage(r.get("usage")),
    )


def _recovery(r: Mapping[str, Any]) -> Event:
    return RecoveryAsked(
        ending=r["ending"],
        how=r.get("how") or "",
        attempt=int(r.get("attempt") or 0),
        tail=strs(r.get("tail")),
        base=r.get("base"),
        regressions=strs(r.get("regressions")),
        changed_files=strs(r.get("changed_files")),
        default=r.get("default") or "continue",
    )


def _bisect(r: Mapping[str, Any]) -> Event:
    # The record's own time is not the breaking step's (``t_step``).
    return BisectFinished(point=BreakPoint.from_json({k: v for k, v in r.items() if k != "t"}))


READERS: dict[str, Reader] = {
    "resumed": lambda r: SupervisorResumed(
        paella_pid=r.get("paella_pid") if isinstance(r.get("paella_pid"), int) else None
    ),
    "agent-started": lambda r: AgentStarted(
        attempt=r["attempt"],
        pid=r["pid"],
        # None when paella could not read it: liveness is then judged by the pid alone.
        create_time=r.get("create_time"),
        argv=strs(r.get("argv")),
        resumed=bool(r.get("resumed")),
        tty=bool(r.get("tty", True)),
    ),
    "agent-stats": _agent_stats,
    "agent-session": lambda r: AgentSession(
        attempt=int(r.get("attempt") or 0), session_id=r["session_id"]
    ),
    "agent-exited": _agent_exited,
    "evaluation-started": lambda r: EvaluationStarted(
        tree=r["tree"], reason=r.get("reason") or "", gates=strs(r.get("gates"))
    ),
    "gate-started": lambda r: GateStarted(gate=r["gate"], tree=r["tree"]),
    "gate-finished": _gate_finished,
    "evaluation-finished": lambda r: EvaluationFinished(
        tree=r["tree"],
        results=(),
        complete_episodes=r["complete_episodes"],
        stale=bool(r.get("stale")),
    ),
    "watch-paused": lambda r: WatchPaused(reason=r.get("reason") or ""),
    "retry-scheduled": lambda r: RetryScheduled(
        attempt=r["attempt"],
        failures=int(r.get("failures") or 0),
        wait_s=float(r.get("wait_s") or 0.0),
        resume_at=float(r.get("resume_at") or 0.0),
        reason=r.get("reason") or "",
        pattern=r.get("pattern"),
        line=r.get("line"),
    ),
    "recovery-needed": _recovery,
    "recovery-chosen": lambda r: RecoveryChosen(
        choice=r["choice"], target=r.get("target"), by=r.get("by") or "user"
    ),
    "handoff-written": lambda r: HandoffWritten(path=r["path"], size=int(r.get("size") or 0)),
    "run-done": lambda r: RunDone(tree=r["tree"], gates=strs(r.get("gates"))),
    "run-stopped": lambda r: RunStopped(
        reason=r.get("reason") or "",
        resume_after=r.get("resume_after")
        if isinstance(r.get("resume_after"), int | float)
        else None,
    ),
    "bisect-started": lambda r: BisectStarted(
        gate=r["gate"], tree=r.get("tree"), steps=int(r.get("steps") or 0)
    ),
    "bisect": _bisect,
    "step": lambda r: StepKept(
        n=r.get("n") if isinstance(r.get("n"), int) else None,
        fields={k: v for k, v in r.items() if k not in ("t", "kind", "prev", "n")},
    ),
    "steps-pruned": lambda r: StepsPruned(refs=int(r.get("refs") or 0), kept_s=r.get("kept_s")),
}


def record_of(event: Event) -> tuple[str, dict[str, Any]]:
    """The ledger kind and fields of ``event`` (what :func:`event_of` reads back)."""
    if isinstance(event, CheckpointTaken):
        data = event.record_.to_json()
        data.pop("t", None)
        return ("checkpoint" if event.record_.kind == "checkpoints" else "salvage"), data
    if isinstance(event, LedgerRecord):
        return event.record_kind, event.record()
    if isinstance(event, AgentStats):
        return "agent-stats", event.record()
    return str(event.kind), event.record()
