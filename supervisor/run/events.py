"""The run loop's typed events: frozen dataclasses that the headless printer and the TUI both consume.

Each event knows its ledger ``kind`` and the fields it records, so the run loop persists every
event in one place and ``paella status`` from another process folds the same facts back. Events
whose record is written by the code that made it (checkpoints and salvage snapshots are recorded
by :mod:`paella_tui.supervisor.store.checkpoints` before anyone hears of them) have ``kind = None`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

# Re-exported: they were defined here first, and the event consumers import them from here.
from paella_tui.supervisor.agent.usage import Usage as Usage
from paella_tui.supervisor.agent.usage import compact_count as compact_count

# The events a run's kept state is made of, defined where a fold finds them without loading the
# run loop's (``state_events``), and re-exported: every event is imported from here.
from paella_tui.supervisor.run.state_events import GREEN as GREEN
from paella_tui.supervisor.run.state_events import RED as RED
from paella_tui.supervisor.run.state_events import BisectVerdict as BisectVerdict
from paella_tui.supervisor.run.state_events import BreakPoint as BreakPoint
from paella_tui.supervisor.run.state_events import CheckpointTaken as CheckpointTaken
from paella_tui.supervisor.run.state_events import DriftDetected as DriftDetected
from paella_tui.supervisor.run.state_events import DriftKind as DriftKind
from paella_tui.supervisor.run.state_events import Ending as Ending
from paella_tui.supervisor.run.state_events import Event as Event
from paella_tui.supervisor.run.state_events import GateStatus as GateStatus
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord


@dataclass(frozen=True, kw_only=True)
class AgentStarted(Event):
    """An attempt launched the agent."""

    kind: ClassVar[str | None] = "agent-started"
    attempt: int
    pid: int
    create_time: float | None
    """The process's start time as psutil tells it (None in a ledger that did not record it)."""
    argv: tuple[str, ...]
    resumed: bool = False
    tty: bool = True


@dataclass(frozen=True, kw_only=True)
class AgentStats(Event):
    """Resource use of the agent's whole process tree (sampled about once a second; not persisted)."""

    kind: ClassVar[str | None] = None
    attempt: int
    cpu_percent: float
    rss_bytes: int
    descendants: int
    uptime_s: float
    usage: Usage | None = None
    """What this attempt's stream reported so far (None: no stream is decoded)."""


@dataclass(frozen=True, kw_only=True)
class AgentSession(Event):
    """The agent's stream named its own session (the `{session_id}` a resume continues); an
    empty id records that paella dropped it (the agent said the session no longer exists)."""

    kind: ClassVar[str | None] = "agent-session"
    attempt: int
    session_id: str


@dataclass(frozen=True, kw_only=True)
class AgentExited(Event):
    """An attempt ended: how, the last output lines, and the leftovers that were stopped."""

    kind: ClassVar[str | None] = "agent-exited"
    attempt: int
    exit_code: int | None
    signal: int | None
    tail: tuple[str, ...] = ()
    leftovers: tuple[str, ...] = ()
    stopped_by_user: bool = False
    false_success: str | None = None
    """Why an exit 0 is really a failure, by the agent's profile (its stream said error)."""
    exit_meaning: str | None = None
    """The agent's own name for its exit code (Gemini CLI's 53: turn limit reached)."""
    usage: Usage | None = None
    """What this attempt's stream reported spending (None: no stream was decoded)."""
    signals: tuple[str, ...] | None = None
    """What the agent said about itself when its stream was decoded: the stream's error
    messages and the lines that were not records (stderr), in order. None: no stream, the
    tail is all there is. The model's own words are left out: a reply that discusses rate
    limits or a 401 handler is not the agent failing."""

    def evidence(self) -> tuple[str, ...]:
        """The lines an ending is judged from: the agent's signals (else the tail), and the
        false-success reason."""
        lines = self.signals if self.signals is not None else self.tail
        return (*lines, self.false_success) if self.false_success else lines

    def describe(self) -> str:
        """``exit 0``, ``exit 53 (turn limit reached)``, ``killed by SIGKILL``, or a false success."""
        if self.false_success:
            return self.false_success
        if self.exit_meaning and self.signal is None:
            return f"exit {self.exit_code} ({self.exit_meaning})"
        if self.signal is not None:
            import signal as _signal

            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        return f"exit {self.exit_code}"


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """The verdict of one gate on one tree."""

    gate: str
    status: GateStatus
    tree: str
    duration_s: float = 0.0
    exit_code: int | None = None
    attempts: int = 1
    log_path: str | None = None
    tail: tuple[str, ...] = ()
    """The last lines of the gate's output (for the handoff and the recovery screen)."""
    cached: bool = False
    """The result was judged earlier on the same tree (or on a tree equal under ``paths``)."""
    message: str = ""
    """Why, in words, for ``error`` (command not found) and ``timeout``."""
    failed_tests: tuple[str, ...] = ()
    """The failing test ids the output names (pytest, unittest, cargo, go), for a red gate."""

    @property
    def green(self) -> bool:
        """Passed (flaky counts: it passed on a retry)."""
        return self.status in GREEN


@dataclass(frozen=True, kw_only=True)
class EvaluationStarted(Event):
    """The gates are about to be judged on ``tree``."""

    kind: ClassVar[str | None] = "evaluation-started"
    tree: str
    reason: str
    gates: tuple[str, ...]
    frozen: tuple[str, ...] = ()
    """Protected paths the workspace changed: the gates judge them at their frozen content, on a
    scratch tree (empty: the gates judge the work tree as it is)."""

    def record(self) -> dict[str, Any]:
        """The fields, ``frozen`` only when the gates do not judge the work tree as it is."""
        data: dict[str, Any] = {"tree": self.tree, "reason": self.reason, "gates": self.gates}
        if self.frozen:
            data["frozen"] = self.frozen
        return data


@dataclass(frozen=True, kw_only=True)
class GateStarted(Event):
    """One gate started on ``tree``."""

    kind: ClassVar[str | None] = "gate-started"
    gate: str
    tree: str


@dataclass(frozen=True, kw_only=True)
class GateFinished(Event):
    """One gate finished; ``stale`` when the tree moved underneath it."""

    kind: ClassVar[str | None] = "gate-finished"
    result: GateResult
    stale: bool = False

    def record(self) -> dict[str, Any]:
        """Flatten the result into the ledger record ``paella status`` reads."""
        r = self.result
        return {
            "gate": r.gate,
            "status": r.status,
            "tree": r.tree,
            "duration_s": round(r.duration_s, 3),
            "exit_code": r.exit_code,
            "attempts": r.attempts,
            "log": r.log_path,
            "cached": r.cached,
            "stale": self.stale,
            "message": r.message,
            "failed_tests": list(r.failed_tests),
        }


@dataclass(frozen=True, kw_only=True)
class EvaluationFinished(Event):
    """All gates of an evaluation finished."""

    kind: ClassVar[str | None] = "evaluation-finished"
    tree: str
    results: tuple[GateResult, ...]
    complete_episodes: int
    """How many episodes are complete on ``tree`` (0 when stale)."""
    stale: bool = False
    frozen: tuple[str, ...] = ()
    """Protected paths judged at their frozen content, not as the workspace has them."""

    def record(self) -> dict[str, Any]:
        """Summarise the evaluation (per-gate details are in their own records)."""
        data: dict[str, Any] = {
            "tree": self.tree,
            "complete_episodes": self.complete_episodes,
            "stale": self.stale,
            "green": [r.gate for r in self.results if r.green],
            "red": [r.gate for r in self.results if r.status in RED],
        }
        if self.frozen:
            data["frozen"] = list(self.frozen)
        return data


@dataclass(frozen=True, kw_only=True)
class WatchPaused(Event):
    """The watcher stopped re-triggering gates (flapping); ``g``, or 15 s of quiet, resumes it."""

    kind: ClassVar[str | None] = "watch-paused"
    reason: str


@dataclass(frozen=True, kw_only=True)
class RetryScheduled(Event):
    """A transient failure: the next attempt starts at ``resume_at`` (wall clock)."""

    kind: ClassVar[str | None] = "retry-scheduled"
    attempt: int
    """The attempt that failed."""
    failures: int
    """Transient failures so far in this run."""
    wait_s: float
    resume_at: float
    reason: str
    """The wait in words: until the reset the agent printed, or the backoff."""
    pattern: str | None = None
    """The transient pattern that matched."""
    line: str | None = None
    """The line it matched in."""


@dataclass(frozen=True, kw_only=True)
class RecoveryFacts:
    """What a person (or the headless policy) needs to decide a recovery (SPEC 9)."""

    ending: Ending
    how: str
    """How it ended, in words: ``exit 1``, ``killed by SIGSEGV``, ``stopped by you``."""
    attempt: int | None = None
    """The number of the attempt that ended (None in a ledger written before it was recorded)."""
    tail: tuple[str, ...]
    base: SnapshotRecord | None
    """The last green checkpoint (the base), if any."""
    gates_now: tuple[GateResult, ...]
    regressions: tuple[str, ...]
    changed_files: tuple[str, ...]
    """Files changed since the base (or since run start)."""
    lines_added: int
    lines_removed: int
    default: Literal["rollback", "continue"]
    """The default choice: roll back when a regression is present, else continue."""
    gates_final: bool = True
    """False when the gates were still running on the final tree: ``gates_now`` are the newest
    results known, and the gate table fills in the rest."""
    breaks: tuple[BreakPoint, ...] = ()
    """Where each regressed gate broke, as far as the bisects have found out (issue 16)."""
    before_break: SnapshotRecord | None = None
    """The last step where every gate green at the base still passes: a finer last good state."""
    tree: str | None = None
    """The tree these facts describe (the final one): only a verdict on it makes them final."""

    @property
    def how_and_attempt(self) -> str:
        """``exit 1, attempt 2``: how it ended and which attempt, for one line of text."""
        return self.how if self.attempt is None else f"{self.how}, attempt {self.attempt}"


@dataclass(frozen=True, kw_only=True)
class RecoveryNeeded(Event):
    """An attempt ended without the run being done: a choice is needed."""

    kind: ClassVar[str | None] = "recovery-needed"
    facts: RecoveryFacts

    def record(self) -> dict[str, Any]:
        """The facts, compactly."""
        f = self.facts
        return {
            "ending": f.ending,
            "how": f.how,
            "attempt": f.attempt,
            "tail": list(f.tail[-20:]),
            "base": f.base.n if f.base else None,
            "regressions": list(f.regressions),
            "changed_files": list(f.changed_files[:200]),
            "default": f.default,
        }


@dataclass(frozen=True, kw_only=True)
class RecoveryChosen(Event):
    """The choice made: ``rollback`` (to ``target``), ``continue``, ``stop`` or ``accept``; and
    by whom."""

    kind: ClassVar[str | None] = "recovery-chosen"
    choice: Literal["rollback", "continue", "stop", "accept"]
    target: str | None = None
    by: str = "user"


@dataclass(frozen=True, kw_only=True)
class RolledBack(Event):
    """A rollback finished (its records are in the ledger already)."""

    target: SnapshotRecord
    salvage: SnapshotRecord


@dataclass(frozen=True, kw_only=True)
class HandoffWritten(Event):
    """The handoff was written to ``path``."""

    kind: ClassVar[str | None] = "handoff-written"
    path: str
    size: int


@dataclass(frozen=True, kw_only=True)
class RunDone(Event):
    """Every contract gate is green on the final tree: done, because the gates say so."""

    kind: ClassVar[str | None] = "run-done"
    tree: str
    gates: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RunStopped(Event):
    """The run ended not done (stopped, handoff written, or out of retries)."""

    kind: ClassVar[str | None] = "run-stopped"
    reason: str
    resume_after: float | None = None
    """Wall-clock time before which a resume is pointless (the agent's limit resets then);
    `paella resume` waits or refuses until then unless told `--now`."""


@dataclass(frozen=True, kw_only=True)
class Notice(Event):
    """A line worth showing that changes no state (not persisted)."""

    kind: ClassVar[str | None] = None
    message: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True, kw_only=True)
class BisectStarted(Event):
    """A bisect began looking for the step where ``gate`` turned red."""

    kind: ClassVar[str | None] = "bisect-started"
    gate: str
    tree: str | None
    """The tree known red (the regression's), or None: the newest step."""
    steps: int
    """How many steps the search may look at."""


@dataclass(frozen=True, kw_only=True)
class BisectFinished(Event):
    """A bisect's verdict: where ``point.gate`` broke, or why that cannot be said."""

    kind: ClassVar[str | None] = "bisect"
    point: BreakPoint
    before_break: SnapshotRecord | None = None
    """The last step where every gate green at the base still passes (a step target), if known."""

    def record(self) -> dict[str, Any]:
        """The break point, flat; its step's time as ``t_step`` (``t`` is the record's own)."""
        data = self.point.to_json()
        data["t_step"] = data.pop("t")
        data["before_break"] = self.before_break.n if self.before_break is not None else None
        return data
