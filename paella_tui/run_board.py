"""The run as the TUI shows it: the run's state (:mod:`paella_tui.supervisor.run.state`) plus
what only the screen keeps, turned into what each widget displays.

The App hands every event of the run loop, with the run's state after it, to
:meth:`RunBoard.apply` (and, for a resumed run, seeds the board from the ledger's fold first);
the main screen reads the board's rows and sets them on its widgets. The board never applies a
rule of its own (regression, base, episode completion): those are the state's. It holds no
Textual objects, so a test can build any screen state from a fixed sequence of events (folded
by the same :func:`~paella_tui.supervisor.run.state_handlers.apply`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    AgentStats,
    BisectFinished,
    BreakPoint,
    DriftDetected,
    Event,
    GateFinished,
    RecoveryChosen,
    RecoveryFacts,
    RecoveryNeeded,
    RetryScheduled,
    RunStopped,
    Usage,
    WatchPaused,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.state import (
    ContractSpec,
    GateNow,
    Phase,
    RunState,
    complete_episodes,
    initial,
)
from paella_tui.supervisor.run.state_handlers import apply as apply_event
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.rows import EpisodeRow, EpisodeState, GateRow

CPU_SAMPLES = 60
"""CPU samples kept for the sparkline (about a minute)."""
MAX_DRIFT = 200
"""Drift warnings kept on screen (the ledger keeps them all)."""


@dataclass
class RunBoard:
    """Everything the main screen shows: the run's state (the engine's one fold) plus what only
    the screen keeps (the CPU sparkline, the live sample, the drift feed's wording)."""

    contract: Contract
    run_id: str
    run: RunState = field(default_factory=initial)
    """The run's state: handed over by the run loop, or folded here by the same rules."""
    state: str = "starting"
    """The header's word: the run's phase, or what the app is doing (starting, resuming,
    stopping, error)."""
    stats: AgentStats | None = None
    """The newest live sample of the running attempt (not every sample reaches the ledger)."""
    cpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=CPU_SAMPLES))
    drift: deque[DriftDetected] = field(default_factory=lambda: deque(maxlen=MAX_DRIFT))
    """Newest first."""
    tails: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The last output lines of each gate's newest run (live only)."""
    detail: str = ""
    """A short note for the header: how the agent ended, why the run stopped."""
    facts: RecoveryFacts | None = None
    version: int = 0
    """Bumped by every change (the screen redraws only when it moved)."""

    @property
    def name(self) -> str:
        """The run's name, from the contract."""
        return self.contract.run.name

    @property
    def attempt(self) -> int:
        """The newest attempt's number."""
        return self.run.attempt

    @property
    def pid(self) -> int | None:
        """The running agent's pid (None once it ended, or when the run ended)."""
        agent = self.run.agent
        running = agent is not None and self.run.last_exit is None
        ended = self.run.phase in (Phase.DONE, Phase.STOPPED)
        return agent.pid if running and not ended and agent is not None else None

    @property
    def agent_started(self) -> float | None:
        """When the running agent's process started."""
        return self.run.agent.create_time if self.run.agent is not None else None

    @property
    def retry_at(self) -> float | None:
        """When the next attempt starts, during a wait."""
        retry = self.run.retry
        return retry.until if retry is not None and self.run.phase is Phase.RETRY_WAIT else None

    @property
    def gates(self) -> Mapping[str, GateNow]:
        """The newest word on each gate that has one."""
        return self.run.gates

    @property
    def ever_green(self) -> set[str]:
        """Gates green on some tree since the start or the last rollback."""
        return {name for name, trees in self.run.green_on.items() if trees}

    @property
    def regressed(self) -> frozenset[str]:
        """Gates regressed (the run state's rule)."""
        return self.run.regressed

    @property
    def base(self) -> SnapshotRecord | None:
        """The last green checkpoint."""
        return self.run.base

    @property
    def checkpoints(self) -> tuple[SnapshotRecord, ...]:
        """Every checkpoint, oldest first."""
        return self.run.checkpoints

    @property
    def salvage(self) -> tuple[SnapshotRecord, ...]:
        """Every salvage snapshot, oldest first."""
        return self.run.salvage

    @property
    def done_gates(self) -> tuple[str, ...] | None:
        """The gates green on the final tree, once the run is done."""
        return self.run.done_gates

    @property
    def handoff_path(self) -> str | None:
        """The newest handoff written."""
        return self.run.handoff_path

    @property
    def session_id(self) -> str | None:
        """The agent's own session id, as its stream last named it."""
        return self.run.session_id

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt, the live one included (None: no stream
        ever reported any)."""
        by_attempt = dict(self.run.usage_by_attempt)
        live = self.stats
        if live is not None and live.usage is not None:
            by_attempt[live.attempt] = live.usage
        return sum(by_attempt.values(), Usage()) if by_attempt else None

    # --- folding --------------------------------------------------------------------------

    def apply(self, event: Event, state: RunState | None = None) -> None:
        """Take in one engine event: the run's ``state`` after it (folded here when not given)
        and what only the screen keeps."""
        self.version += 1
        self.run = state if state is not None else apply_event(self.run, event)
        self.state = _word(self.state, self.run.phase)
        handler = _UI.get(type(event))
        if handler is not None:
            handler(self, event)

    def _agent_started(self, event: AgentStarted) -> None:
        self.facts = None
        self.detail = "resumed with the handoff" if event.resumed else ""
        self.stats = None
        self.cpu_history.clear()

    def _agent_stats(self, event: AgentStats) -> None:
        if event.attempt == self.attempt:
            self.stats = event
            self.cpu_history.append(event.cpu_percent)

    def _agent_exited(self, event: AgentExited) -> None:
        # The attempt's final count replaces its live samples (stats go with them).
        self.stats = None
        who = " (stopped by you)" if event.stopped_by_user else ""
        self.detail = f"attempt {event.attempt} ended: {event.describe()}{who}"

    def _gate_finished(self, event: GateFinished) -> None:
        if not event.stale:
            self.tails[event.result.gate] = event.result.tail

    def _drift_detected(self, event: DriftDetected) -> None:
        self.drift.appendleft(event)

    def _retry(self, event: RetryScheduled) -> None:
        self.detail = f"transient failure {event.failures}: {event.reason}"

    def _recovery_needed(self, event: RecoveryNeeded) -> None:
        self.facts = event.facts
        self.detail = event.facts.how_and_attempt

    def _recovery_chosen(self, event: RecoveryChosen) -> None:
        where = f" to {event.target}" if event.target else ""
        self.detail = f"recovery: {event.choice}{where} ({event.by})"

    def _note(self, event: WatchPaused | RunStopped) -> None:
        if isinstance(event, WatchPaused):
            self.detail = f"watching paused: {event.reason}"
        else:
            self.detail = event.reason

    def _bisected(self, event: BisectFinished) -> None:
        _say_where_it_broke(self.drift, event.point)

    def seed(self, view: RunView) -> None:
        """Start from what the ledger says (a resumed run shows its history at once)."""
        self.version += 1
        self.run = view.run_state
        self.drift.clear()
        for drift in view.run_state.drift[-MAX_DRIFT:]:
            self.drift.appendleft(drift)
        for point in view.run_state.breaks.values():
            _say_where_it_broke(self.drift, point)
        # The ledger counts every attempt so far: a live sample kept from before would count twice.
        self.stats = None
        if self.run.phase is Phase.DONE:
            self.state = "done"

    # --- what the widgets show --------------------------------------------------------------

    def gate_rows(self) -> tuple[GateRow, ...]:
        """The gate table's rows, in contract order."""
        rows = []
        for gate in self.contract.gates:
            now = self.run.gates.get(gate.name) or GateNow(gate.name)
            # A run started before this paella shows its last verdict, not "running".
            status = "pending" if now.status == "running" and not now.running else now.status
            rows.append(
                GateRow(
                    name=gate.name,
                    status=status,
                    duration_s=now.duration_s,
                    finished_at=now.t,
                    ever_green=self.run.ever_green(gate.name),
                    regressed=self.run.is_regressed(gate.name) and now.red,
                    message=now.message,
                    rerunning=now.running and status != "running",
                )
            )
        return tuple(rows)

    def episode_rows(self) -> tuple[EpisodeRow, ...]:
        """The episode list's rows: cumulative completion (SPEC 2), the current one, the broken."""
        spec = ContractSpec.of(self.contract)
        green = self.run.green_now
        done = complete_episodes(spec, green)
        rows: list[EpisodeRow] = []
        current_found = False
        for k, episode in enumerate(self.contract.episodes, start=1):
            needed = spec.episodes[k - 1][1]
            completing = self.run.checkpoint_of_episode(k)
            checkpoint = completing.n if completing is not None else None
            state: EpisodeState
            if k <= done:
                state = "complete"
            elif checkpoint is not None and any(g in self.run.regressed for g in needed):
                state = "broken"
            else:
                # The first episode neither complete nor broken is the one being worked on.
                state = "pending" if current_found else "current"
                current_found = True
            rows.append(
                EpisodeRow(
                    n=k,
                    name=episode.name,
                    goal=episode.goal,
                    state=state,
                    gates_green=sum(g in green for g in episode.gates),
                    gates_total=len(episode.gates),
                    checkpoint=checkpoint,
                )
            )
        return tuple(rows)

    def gate_tail(self, name: str) -> tuple[str, ...]:
        """The last output lines of a gate's newest run."""
        return self.tails.get(name, ())


_UI: dict[type, Any] = {
    AgentStarted: RunBoard._agent_started,
    AgentStats: RunBoard._agent_stats,
    AgentExited: RunBoard._agent_exited,
    GateFinished: RunBoard._gate_finished,
    DriftDetected: RunBoard._drift_detected,
    RetryScheduled: RunBoard._retry,
    RecoveryNeeded: RunBoard._recovery_needed,
    RecoveryChosen: RunBoard._recovery_chosen,
    WatchPaused: RunBoard._note,
    RunStopped: RunBoard._note,
    BisectFinished: RunBoard._bisected,
}


def _word(current: str, phase: Phase) -> str:
    """The header's word after an event: the phase, except while the app stops the run."""
    if phase is Phase.STARTING or (current == "stopping" and phase is Phase.EVALUATING):
        return current
    return phase.value


def _say_where_it_broke(drift: deque[DriftDetected], point: BreakPoint) -> None:
    """Add "broke at 02:31 in step 17: files, +a −b" to the gate's newest regression warning."""
    if point.verdict != "found":
        return
    for i, warning in enumerate(drift):
        if warning.drift == "regression" and warning.gate == point.gate:
            message = warning.message.split(" — broke at ")[0]
            drift[i] = replace(warning, message=f"{message} — {point.headline()}")
            return
