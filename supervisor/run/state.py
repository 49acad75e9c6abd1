"""The one model of a run: a frozen :class:`RunState` and its rules; the pure fold ``apply``
(each event's function) is :func:`paella_tui.supervisor.run.state_handlers.apply`.

Every reader of a run (``paella status``, the TUI board, the recovery screen, the handoff, the
evaluator of a resumed run) derives what it shows from this state, and each rule about a run
lives here once:

- **regression** (:func:`is_regression`): a gate red now that was green on *another* tree since
  the run started or the last rollback. A red on the very tree the gate passed on is flakiness
  (a forced re-run that failed), not a regression.
- **episode completion** (:func:`complete_episodes`): cumulative, episode k is complete when every
  gate of episodes 1..k is green now; the current episode is the first one that is not.
- **the base** (:func:`base_after_rollback`): the newest trusted green (episode) checkpoint since
  the run started; a rollback makes the restored checkpoint the base (none for a salvage or a
  manual checkpoint); a rollback to a step keeps the base it came after.

The ledger is the event log: :mod:`paella_tui.supervisor.run.ledger_events` maps each record to
one typed event, so folding the ledger from disk gives exactly the state the run loop holds (the
loop's state *is* that fold, current with every event: :mod:`~paella_tui.supervisor.run.live_state`). The two in-process events that stand
for records written elsewhere (``RolledBack``, ``RecoveryNeeded``) fold as those records do, so a
view fed only events (a test) holds the same state.
Folding is O(1) per event (the trees a gate was green on are kept as a set of at most two:
enough to decide the same-tree exception), so catching up costs what the new records cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.run.state_events import (
    GREEN,
    RED,
    BreakPoint,
    DriftDetected,
    RollbackDone,
)
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

if TYPE_CHECKING:
    # The run loop's events, for two methods' answers: imported where they are made, so that
    # reading a kept state never loads them (issue 17).
    from paella_tui.supervisor.run.events import GateResult

VERDICT_TREES = 32
"""Snapshot trees whose verdicts the state keeps (the newest): a rollback to an older one shows
its gates pending until they are judged again (at once, from the evaluator's cache)."""
TAIL_KEPT = 40
"""The last output lines of an attempt the state keeps (the handoff shows at most 20)."""


class Phase(StrEnum):
    """Where a run is, as its events tell it (the one vocabulary of the engine and the views)."""

    STARTING = "starting"
    RUNNING = "running"
    EVALUATING = "evaluating"
    RETRY_WAIT = "retry-wait"
    RECOVERING = "recovering"
    RESUMING = "resuming"
    DONE = "done"
    STOPPED = "stopped"


@dataclass(frozen=True)
class GateNow:
    """The newest word on one gate: its verdict (or running / pending / stale)."""

    name: str
    status: str = "pending"
    tree: str | None = None
    duration_s: float | None = None
    running: bool = False
    """Running again: ``status`` is still the last verdict, shown with a re-run mark."""
    t: float | None = None
    """When the verdict came (epoch seconds)."""
    message: str = ""
    exit_code: int | None = None
    log: str | None = None
    attempts: int = 1
    failed_tests: tuple[str, ...] = ()

    @property
    def green(self) -> bool:
        """Passed (flaky counts)."""
        return self.status in GREEN

    @property
    def red(self) -> bool:
        """Failed, timed out or could not run."""
        return self.status in RED

    def result(self) -> GateResult:
        """The verdict as the evaluator holds one (a resumed run's; its output is in its log)."""
        from paella_tui.supervisor.run.events import GateResult

        return GateResult(
            gate=self.name,
            status=self.status,  # type: ignore[arg-type]
            tree=self.tree or "",
            duration_s=self.duration_s or 0.0,
            exit_code=self.exit_code,
            attempts=self.attempts,
            log_path=self.log,
            message=self.message,
        )


@dataclass(frozen=True)
class AttemptEnd:
    """How the newest attempt ended, as typed fields (never a sentence to parse back)."""

    attempt: int
    exit_code: int | None
    signal: int | None
    stopped_by_user: bool = False
    false_success: str | None = None
    exit_meaning: str | None = None
    ended_at: float = 0.0
    """When it ended (epoch seconds)."""
    tail: tuple[str, ...] = ()
    """Its last output lines (at most :data:`TAIL_KEPT`)."""

    def describe(self) -> str:
        """``exit 1``, ``killed by SIGKILL``, ``stopped by you`` (as the agent event says it)."""
        if self.stopped_by_user:
            return "stopped by you"
        from paella_tui.supervisor.run.events import AgentExited

        return AgentExited(
            attempt=self.attempt,
            exit_code=self.exit_code,
            signal=self.signal,
            false_success=self.false_success,
            exit_meaning=self.exit_meaning,
        ).describe()


@dataclass(frozen=True)
class AgentNow:
    """The newest attempt's agent process, as recorded (liveness is checked by a reader)."""

    attempt: int
    pid: int | None
    create_time: float | None
    started_at: float
    resumed: bool = False
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    descendants: int | None = None


@dataclass(frozen=True)
class Retry:
    """Until when the next attempt waits, and why."""

    until: float | None
    reason: str


@dataclass(frozen=True)
class RecoveryNote:
    """The newest recovery the run asked for, and the choice made (typed facts)."""

    ending: str
    how: str
    attempt: int
    regressions: tuple[str, ...]
    base: int | None
    default: str
    choice: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class StepsSummary:
    """How many steps the run kept, the newest, and whether their refs were pruned."""

    count: int = 0
    last: int | None = None
    pruned: bool = False
    newest: Mapping[str, Any] | None = None
    """The newest numbered step's record (its fields, ``t`` included): where a resumed run's
    steps go on from, without reading the ledger."""


TurnKind = Literal["agent-started", "agent-exited", "recovery-needed", "recovery-chosen"]


@dataclass(frozen=True)
class Turn:
    """The newest of an attempt's start, its exit, a recovery asked and the choice made: a
    resume that finds a start or an unanswered recovery last decides the attempt a crash of
    paella left undecided."""

    kind: TurnKind
    attempt: int = 0
    """The record's attempt (0: it named none)."""
    how: str = ""
    tail: tuple[str, ...] = ()
    """A recovery's: the attempt's last output lines, as the record kept them."""


@dataclass(frozen=True)
class ContractSpec:
    """What of the contract the rules need: gate names in order and each episode's gates."""

    gates: tuple[str, ...] = ()
    episodes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(name, the gates episode k needs green: those of episodes 1..k)."""
    known: bool = False
    """Set from a contract (a manual run's has no gates, and is known too)."""

    @classmethod
    def of(cls, contract: Any) -> ContractSpec:
        """From a :class:`~paella_tui.supervisor.contract.model.Contract` (None: no contract)."""
        if contract is None:
            return cls(known=True)
        return cls(
            known=True,
            gates=tuple(g.name for g in contract.gates),
            episodes=tuple(
                (e.name, contract.episode_gates(k))
                for k, e in enumerate(contract.episodes, start=1)
            ),
        )


EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return EMPTY


@dataclass(frozen=True)
class RunState:
    """Everything known about a run, folded from its events (frozen: :func:`apply` makes a new one)."""

    spec: ContractSpec = field(default_factory=ContractSpec, compare=False)
    """The contract's gates and episodes, for the derived facts (set by a reader; the fold
    does not depend on it)."""
    phase: Phase = Phase.STARTING
    ended_at: float | None = None
    """When the run ended (its trusted ``run-done`` or its ``run-stopped``), None while it may go
    on: a resume, a new attempt or a new start clears it."""
    folded: int = 0
    """How many events were folded in."""
    chain_broken: bool = False
    """A record broke the ledger's hash chain: what follows is not trusted."""
    contract_info: Mapping[str, Any] | None = None
    supervisor_pid: int | None = None
    attempt: int = 0
    agent: AgentNow | None = None
    last_exit: AttemptEnd | None = None
    """How the newest attempt ended (None while it runs, or before any)."""
    session_id: str | None = None
    usage_by_attempt: Mapping[int, Usage] = field(default_factory=_empty)
    gates: Mapping[str, GateNow] = field(default_factory=_empty)
    green_on: Mapping[str, frozenset[str]] = field(default_factory=_empty)
    """Trees each gate was green on since the start or the last rollback (at most two are kept:
    a red is a regression when the gate was green on another tree than its own)."""
    regressed: frozenset[str] = frozenset()
    verdicts_at: Mapping[str, Mapping[str, GateNow]] = field(default_factory=_empty)
    """The gates' verdicts on the newest snapshots' trees (checkpoint or salvage, at most
    :data:`VERDICT_TREES`): what a rollback to one shows at once."""
    base: SnapshotRecord | None = None
    base_line: tuple[str, ...] = ()
    """The refs that were the base since the start or the last rollback, oldest first: a reader
    that finds the newest unconfirmed by the mirror takes the newest one it confirms."""
    checkpoints: tuple[SnapshotRecord, ...] = ()
    salvage: tuple[SnapshotRecord, ...] = ()
    untrusted_refs: frozenset[str] = frozenset()
    """Snapshots recorded after a break of the hash chain: never a base."""
    drift: tuple[DriftDetected, ...] = ()
    breaks: Mapping[str, BreakPoint] = field(default_factory=_empty)
    """The newest bisect verdict of each gate since the last rollback."""
    retry: Retry | None = None
    stop: Retry | None = None
    """Why the run stopped, and before when a resume is pointless (``until``)."""
    recovery: RecoveryNote | None = None
    handoff_path: str | None = None
    pending_rollback: Mapping[str, Any] | None = None
    """A rollback that recorded its intent and no end yet (paella died in it): its intent."""
    last_rollback: RollbackDone | None = None
    """The rollback done since the newest attempt started (None once another starts)."""
    done_gates: tuple[str, ...] | None = None
    steps: StepsSummary = field(default_factory=StepsSummary)
    turn: Turn | None = None
    """The newest attempt start, exit, recovery asked or chosen (see :class:`Turn`)."""
    start_tree: str | None = None
    """The tree the run started on, as its first ``run-tree`` record says."""
    accepted: tuple[Mapping[str, Any], ...] = ()
    """The protected-files decisions that accepted a change (``protected-accepted`` records'
    fields, oldest first): the frozen judge confirms them with the mirror; no rule here reads
    them."""

    # --- derived, by the rules above ------------------------------------------------------

    @property
    def green_now(self) -> frozenset[str]:
        """The gates green now."""
        return frozenset(name for name, gate in self.gates.items() if gate.green)

    @property
    def complete_episodes(self) -> int:
        """How many episodes are complete now (cumulatively)."""
        return complete_episodes(self.spec, self.green_now)

    @property
    def current_episode(self) -> int | None:
        """The first episode not complete (None when all are, or without episodes)."""
        done = self.complete_episodes
        return done + 1 if done < len(self.spec.episodes) else None

    def ever_green(self, gate: str) -> bool:
        """Whether ``gate`` was green on some tree since the start or the last rollback."""
        return bool(self.green_on.get(gate))

    def is_regressed(self, gate: str) -> bool:
        """Whether ``gate`` is a regression now (red after green on another tree)."""
        return gate in self.regressed

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt (None: no stream ever reported)."""
        if not self.usage_by_attempt:
            return None
        return sum(self.usage_by_attempt.values(), Usage())

    def checkpoint_of_episode(self, k: int) -> SnapshotRecord | None:
        """The newest checkpoint that completed episode ``k``."""
        return next((c for c in reversed(self.checkpoints) if c.episode == k), None)

    def next_number(self, kind: str) -> int:
        """The number the next checkpoint (or salvage) takes."""
        records = self.checkpoints if kind == "checkpoints" else self.salvage
        return max((r.n for r in records), default=0) + 1


# --- the rules ------------------------------------------------------------------------------


def complete_episodes(spec: ContractSpec, green: Iterable[str]) -> int:
    """Episodes complete (cumulatively) when exactly the gates in ``green`` are green."""
    green = set(green)
    complete = 0
    for k, (_name, needed) in enumerate(spec.episodes, start=1):
        if not all(name in green for name in needed):
            break
        complete = k
    return complete


def was_green_elsewhere(trees: frozenset[str] | Iterable[str], tree: str) -> bool:
    """Whether a gate green on ``trees`` was green on a tree other than ``tree``."""
    return any(t != tree for t in trees)


def is_regression(trees: frozenset[str] | Iterable[str], status: str, tree: str) -> bool:
    """The regression rule: red now on ``tree`` after being green on another tree (a red on the
    very tree it passed on is flakiness)."""
    return status in RED and was_green_elsewhere(trees, tree)


def add_green_tree(trees: frozenset[str], tree: str) -> frozenset[str]:
    """``trees`` with ``tree`` added, keeping at most two (the newest and one other): the rule
    only asks whether the gate was green on a tree other than a given one."""
    if tree in trees:
        return trees
    if len(trees) < 2:
        return trees | {tree}
    return frozenset({tree, next(iter(trees))})


def base_after_rollback(
    base: SnapshotRecord | None, target: SnapshotRecord | None, *, to_step: bool
) -> SnapshotRecord | None:
    """The base once a rollback to ``target`` is done: a step keeps the base it came after; a
    green (episode) checkpoint becomes the base; anything else (salvage, manual) leaves none."""
    if to_step:
        return base
    if target is not None and target.kind == "checkpoints" and isinstance(target.episode, int):
        return target
    return None


def green_after_rollback(base: SnapshotRecord | None) -> dict[str, frozenset[str]]:
    """What counts as "was green" after a rollback: the restored base's gates on its tree."""
    if base is None:
        return {}
    return {g: frozenset({base.tree}) for g in base.gates_green}


# --- the fold -------------------------------------------------------------------------------


def initial() -> RunState:
    """A run before any event (the contract's :class:`ContractSpec` is set by a reader)."""
    return RunState()
