"""The run as the TUI shows it: the engine's events folded into what each widget displays.

The App feeds every event of the run loop to :meth:`RunBoard.apply` (and, for a resumed run,
seeds the board from the ledger first); the main screen reads the board's rows and sets them on
its widgets. The board holds no Textual objects, so a test can build any screen state from a
fixed sequence of events.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.breaks import breaks_of
from paella_tui.supervisor.run.events import (
    GREEN,
    RED,
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    BisectFinished,
    BreakPoint,
    CheckpointTaken,
    DriftDetected,
    Event,
    GateFinished,
    GateStarted,
    HandoffWritten,
    RecoveryChosen,
    RecoveryFacts,
    RecoveryNeeded,
    RetryScheduled,
    RolledBack,
    RunDone,
    RunStopped,
    Usage,
    WatchPaused,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.rows import EpisodeRow, GateRow

CPU_SAMPLES = 60
"""CPU samples kept for the sparkline (about a minute)."""
MAX_DRIFT = 200
"""Drift warnings kept on screen (the ledger keeps them all)."""


def ledger_time(iso: str | None) -> float | None:
    """Seconds since the epoch from a ledger ``t`` (``…Z``), or None."""
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class GateState:
    """The newest verdict of one gate."""

    status: str = "pending"
    duration_s: float | None = None
    finished_at: float | None = None
    message: str = ""
    tail: tuple[str, ...] = ()
    rerunning: bool = False
    """Running again: ``status`` is still the last verdict, shown with a re-run mark."""


@dataclass
class RunBoard:
    """Everything the main screen shows, kept current from the run loop's events."""

    contract: Contract
    run_id: str
    state: str = "starting"
    """starting | running | evaluating | retry-wait | recovering | resuming | done | stopped | error."""
    attempt: int = 0
    pid: int | None = None
    agent_started: float | None = None
    stats: AgentStats | None = None
    cpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=CPU_SAMPLES))
    retry_at: float | None = None
    gates: dict[str, GateState] = field(default_factory=dict)
    ever_green: set[str] = field(default_factory=set)
    regressed: set[str] = field(default_factory=set)
    checkpoints: list[SnapshotRecord] = field(default_factory=list)
    salvage: list[SnapshotRecord] = field(default_factory=list)
    base: SnapshotRecord | None = None
    drift: deque[DriftDetected] = field(default_factory=lambda: deque(maxlen=MAX_DRIFT))
    """Newest first."""
    done_gates: tuple[str, ...] | None = None
    detail: str = ""
    """A short note for the header: how the agent ended, why the run stopped."""
    facts: RecoveryFacts | None = None
    handoff_path: str | None = None
    usage_before: Usage | None = None
    """What the agent's stream reported in the attempts that ended (None: no stream reported)."""
    session_id: str | None = None
    """The agent's own session id, as its stream last named it."""
    version: int = 0
    """Bumped by every change (the screen redraws only when it moved)."""

    @property
    def name(self) -> str:
        """The run's name, from the contract."""
        return self.contract.run.name

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt, the live one included (None: no stream
        ever reported any)."""
        live = self.stats.usage if self.stats is not None else None
        known = [u for u in (self.usage_before, live) if u is not None]
        return sum(known, Usage()) if known else None

    # --- folding --------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold one engine event into the board."""
        self.version += 1
        if isinstance(event, AgentStarted):
            self.state = "running"
            self.attempt = event.attempt
            self.pid = event.pid
            self.agent_started = event.create_time
            self.retry_at = None
            self.done_gates = None
            self.facts = None
            self.detail = "resumed with the handoff" if event.resumed else ""
            self.stats = None
            self.cpu_history.clear()
        elif isinstance(event, AgentStats):
            if event.attempt == self.attempt:
                self.stats = event
                self.cpu_history.append(event.cpu_percent)
        elif isinstance(event, AgentSession):
            self.session_id = event.session_id
        elif isinstance(event, AgentExited):
            self.pid = None
            # The attempt's final count replaces its live samples (stats go with them).
            self.stats = None
            if event.usage is not None:
                self.usage_before = (self.usage_before or Usage()) + event.usage
            who = " (stopped by you)" if event.stopped_by_user else ""
            self.detail = f"attempt {event.attempt} ended: {event.describe()}{who}"
            if self.state not in ("stopping", "done"):
                self.state = "evaluating"
        elif isinstance(event, GateStarted):
            gate = self.gates.setdefault(event.gate, GateState())
            if gate.status in GREEN | RED:
                gate.rerunning = True  # the last verdict stays on screen while it re-runs
            else:
                gate.status = "running"
        elif isinstance(event, GateFinished):
            self._gate_finished(event)
        elif isinstance(event, CheckpointTaken):
            record = event.record_
            self.checkpoints.append(record)
            if isinstance(record.episode, int):
                self.base = record
        elif isinstance(event, DriftDetected):
            self.drift.appendleft(event)
            if event.drift == "regression" and event.gate:
                self.regressed.add(event.gate)
        elif isinstance(event, WatchPaused):
            self.detail = f"watching paused: {event.reason} (g resumes)"
        elif isinstance(event, RetryScheduled):
            self.state = "retry-wait"
            self.retry_at = event.resume_at
            self.detail = f"transient failure {event.failures}: {event.reason}"
        elif isinstance(event, RecoveryNeeded):
            self.state = "recovering"
            self.facts = event.facts
            self.detail = event.facts.how_and_attempt
        elif isinstance(event, RecoveryChosen):
            where = f" to {event.target}" if event.target else ""
            self.detail = f"recovery: {event.choice}{where} ({event.by})"
            if event.choice != "stop":
                self.state = "resuming"
        elif isinstance(event, RolledBack):
            self.salvage.append(event.salvage)
            target = event.target
            restored = target.kind == "checkpoints" and isinstance(target.episode, int)
            if target.kind == "steps":
                # A step keeps the base it came after (as in the engine).
                self.ever_green = set(self.base.gates_green) if self.base else set()
            else:
                self.base = target if restored else None
                # What counts as "was green" restarts at the restored checkpoint (as in the engine).
                self.ever_green = set(target.gates_green) if target.kind == "checkpoints" else set()
            self.regressed.clear()
        elif isinstance(event, HandoffWritten):
            self.handoff_path = event.path
        elif isinstance(event, BisectFinished):
            _say_where_it_broke(self.drift, event.point)
        elif isinstance(event, RunDone):
            self.state = "done"
            self.done_gates = event.gates
            self.pid = None
            self.retry_at = None
        elif isinstance(event, RunStopped):
            self.state = "stopped"
            self.detail = event.reason
            self.pid = None
            self.retry_at = None

    def _gate_finished(self, event: GateFinished) -> None:
        result = event.result
        gate = self.gates.setdefault(result.gate, GateState())
        gate.rerunning = False
        if event.stale:
            # Never used for a regression or a checkpoint: only shown as stale.
            gate.status = "stale"
            return
        gate.status = result.status
        gate.duration_s = result.duration_s
        gate.finished_at = event.at
        gate.message = result.message
        gate.tail = result.tail
        if result.status in GREEN:
            self.ever_green.add(result.gate)
            self.regressed.discard(result.gate)
        elif result.status in RED and result.gate in self.ever_green:
            self.regressed.add(result.gate)

    def seed(self, view: RunView) -> None:
        """Start from what the ledger says (a resumed run shows its history at once)."""
        self.version += 1
        self.checkpoints = view.checkpoints
        self.salvage = view.salvage
        self.base = view.last_green_checkpoint
        self.ever_green = view.ever_green()
        self.regressed.clear()
        self.drift.clear()
        for name, result in view.gate_results().items():
            self.gates[name] = GateState(
                status=result["status"] if result["status"] != "running" else "pending",
                duration_s=result.get("duration_s"),
            )
            if result.get("regressed"):
                self.regressed.add(name)
        for record in view.of_kind("gate-finished"):
            gate = self.gates.get(record.get("gate", ""))
            if gate is not None and not record.get("stale"):
                gate.finished_at = ledger_time(record.get("t"))
        for record in view.of_kind("drift")[-MAX_DRIFT:]:
            self.drift.appendleft(_drift_from(record))
        for point in breaks_of(view.records).values():
            _say_where_it_broke(self.drift, point)
        # The ledger counts every attempt so far, the last sample of one paella did not see end
        # included: a live sample kept from before would count twice.
        self.usage_before = view.usage()
        self.stats = None
        self.session_id = view.session_id()
        agent = view.agent()
        self.attempt = int(agent.get("attempt") or 0)
        state = view.state()
        if state == "done":
            self.state = "done"

    # --- what the widgets show --------------------------------------------------------------

    def gate_rows(self) -> tuple[GateRow, ...]:
        """The gate table's rows, in contract order."""
        rows = []
        for gate in self.contract.gates:
            state = self.gates.get(gate.name, GateState())
            rows.append(
                GateRow(
                    name=gate.name,
                    status=state.status,
                    duration_s=state.duration_s,
                    finished_at=state.finished_at,
                    ever_green=gate.name in self.ever_green,
                    regressed=gate.name in self.regressed and state.status in RED,
                    message=state.message,
                    rerunning=state.rerunning,
                )
            )
        return tuple(rows)

    def episode_rows(self) -> tuple[EpisodeRow, ...]:
        """The episode list's rows: cumulative completion (SPEC 2), the current one, the broken."""
        green = {name for name, g in self.gates.items() if g.status in GREEN}
        rows: list[EpisodeRow] = []
        current_found = False
        for k, episode in enumerate(self.contract.episodes, start=1):
            needed = self.contract.episode_gates(k)
            complete = bool(needed) and all(g in green for g in needed)
            completing = [c.n for c in self.checkpoints if c.episode == k]
            checkpoint = completing[-1] if completing else None
            if complete:
                state = "complete"
            elif checkpoint is not None and any(g in self.regressed for g in needed):
                state = "broken"
            elif not current_found:
                state = "current"
                current_found = True
            else:
                state = "pending"
            own = episode.gates
            rows.append(
                EpisodeRow(
                    n=k,
                    name=episode.name,
                    goal=episode.goal,
                    state=state,  # type: ignore[arg-type]
                    gates_green=sum(g in green for g in own),
                    gates_total=len(own),
                    checkpoint=checkpoint,
                )
            )
        return tuple(rows)

    def gate_tail(self, name: str) -> tuple[str, ...]:
        """The last output lines of a gate's newest run."""
        state = self.gates.get(name)
        return state.tail if state else ()


def _say_where_it_broke(drift: deque[DriftDetected], point: BreakPoint) -> None:
    """Add "broke at 02:31 in step 17: files, +a −b" to the gate's newest regression warning."""
    if point.verdict != "found":
        return
    for i, warning in enumerate(drift):
        if warning.drift == "regression" and warning.gate == point.gate:
            message = warning.message.split(" — broke at ")[0]
            drift[i] = replace(warning, message=f"{message} — {point.headline()}")
            return


def _drift_from(record: dict[str, Any]) -> DriftDetected:
    """A ledger ``drift`` record as the event it was."""
    return DriftDetected(
        drift=record.get("drift", "regression"),
        message=record.get("message", ""),
        gate=record.get("gate"),
        path=record.get("path"),
        at=ledger_time(record.get("t")) or 0.0,
    )
