"""How each event changes a run's state: one pure function per event type, the table
:func:`apply` (below) dispatches on. The rules they apply (regression,
the base after a rollback) are :mod:`paella_tui.supervisor.run.state`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from paella_tui.supervisor.run.ledger import ledger_iso
from paella_tui.supervisor.run.state import (
    EMPTY,
    TAIL_KEPT,
    VERDICT_TREES,
    AgentNow,
    AttemptEnd,
    GateNow,
    Phase,
    RecoveryNote,
    Retry,
    RunState,
    Turn,
    add_green_tree,
    base_after_rollback,
    green_after_rollback,
    is_regression,
)
from paella_tui.supervisor.run.state_events import (
    GREEN,
    BreakPoint,
    CheckpointTaken,
    DriftDetected,
    Event,
    LedgerRecord,
    RollbackDone,
    RunStarted,
)
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord


def _set(mapping: Mapping[str, Any], key: str, value: Any) -> Mapping[str, Any]:
    return MappingProxyType({**mapping, key: value})


def _run_started(state: RunState, event: Any, _trusted: bool) -> RunState:
    info = state.contract_info if state.contract_info is not None else event.contract
    return replace(
        state,
        contract_info=info,
        supervisor_pid=event.paella_pid or state.supervisor_pid,
        ended_at=None,
    )


def _resumed(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(
        state,
        phase=Phase.RUNNING,
        supervisor_pid=event.paella_pid or state.supervisor_pid,
        ended_at=None,
    )


def _agent_started(state: RunState, event: Any, _trusted: bool) -> RunState:
    agent = AgentNow(
        attempt=event.attempt,
        pid=event.pid,
        create_time=event.create_time,
        started_at=event.at,
        resumed=event.resumed,
    )
    return replace(
        state,
        phase=Phase.RUNNING,
        ended_at=None,
        attempt=event.attempt,
        agent=agent,
        last_exit=None,
        retry=None,
        done_gates=None,
        last_rollback=None,
        turn=Turn("agent-started", event.attempt),
    )


def _agent_stats(state: RunState, event: Any, _trusted: bool) -> RunState:
    if state.agent is None or event.attempt != state.agent.attempt:
        return state
    agent = replace(
        state.agent,
        cpu_percent=event.cpu_percent,
        rss_bytes=event.rss_bytes,
        descendants=event.descendants,
    )
    usage = state.usage_by_attempt
    if event.usage is not None:
        usage = MappingProxyType({**usage, event.attempt: event.usage})
    return replace(state, agent=agent, usage_by_attempt=usage)


def _agent_session(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(state, session_id=event.session_id or None)


def _agent_exited(state: RunState, event: Any, _trusted: bool) -> RunState:
    end = AttemptEnd(
        attempt=event.attempt,
        exit_code=event.exit_code,
        signal=event.signal,
        stopped_by_user=event.stopped_by_user,
        false_success=event.false_success,
        exit_meaning=event.exit_meaning,
        ended_at=event.at,
        tail=tuple(event.tail[-TAIL_KEPT:]),
    )
    usage = state.usage_by_attempt
    if event.usage is not None:
        usage = MappingProxyType({**usage, event.attempt: event.usage})
    phase = state.phase if state.phase is Phase.DONE else Phase.EVALUATING
    turn = Turn("agent-exited", event.attempt)
    return replace(state, last_exit=end, usage_by_attempt=usage, phase=phase, turn=turn)


def _gate_started(state: RunState, event: Any, _trusted: bool) -> RunState:
    prior = state.gates.get(event.gate)
    if prior is not None and prior.status not in ("running", "stale", "pending"):
        # A re-run keeps the last verdict on screen (counters never drop to 0 meanwhile).
        now = replace(prior, running=True)
    else:
        now = GateNow(event.gate, status="running", tree=event.tree, running=True)
    return replace(state, gates=_set(state.gates, event.gate, now))


def _gate_finished(state: RunState, event: Any, _trusted: bool) -> RunState:
    r = event.result
    if event.stale:
        # Shown as stale; never used for a regression, a checkpoint or "was green".
        prior = state.gates.get(r.gate) or GateNow(r.gate)
        now = replace(prior, status="stale", tree=r.tree, running=False, t=event.at)
        return replace(state, gates=_set(state.gates, r.gate, now))
    now = GateNow(
        r.gate,
        status=r.status,
        tree=r.tree,
        duration_s=r.duration_s,
        t=event.at,
        message=r.message,
        exit_code=r.exit_code,
        log=r.log_path,
        attempts=r.attempts,
        failed_tests=r.failed_tests,
    )
    state = replace(state, gates=_set(state.gates, r.gate, now))
    if r.tree in state.verdicts_at:
        # A snapshot's tree judged again: what a rollback to it shows at once.
        at = _set(state.verdicts_at[r.tree], r.gate, now)
        state = replace(state, verdicts_at=_set(state.verdicts_at, r.tree, at))
    trees = state.green_on.get(r.gate, frozenset())
    if r.status in GREEN:
        return replace(
            state,
            green_on=_set(state.green_on, r.gate, add_green_tree(trees, r.tree)),
            regressed=state.regressed - {r.gate},
        )
    if is_regression(trees, r.status, r.tree):
        return replace(state, regressed=state.regressed | {r.gate})
    return state


def _snapshot(state: RunState, event: Any, trusted: bool) -> RunState:
    record: SnapshotRecord = event.record_
    untrusted = state.untrusted_refs if trusted else state.untrusted_refs | {record.ref}
    verdicts = {name: gate for name, gate in state.gates.items() if gate.tree == record.tree}
    at = {**state.verdicts_at}
    at[record.tree] = MappingProxyType({**at.pop(record.tree, {}), **verdicts})
    while len(at) > VERDICT_TREES:
        del at[next(iter(at))]  # the oldest snapshot's: a rollback to it shows pending at first
    if record.kind == "salvage":
        return replace(
            state,
            salvage=(*state.salvage, record),
            untrusted_refs=untrusted,
            verdicts_at=MappingProxyType(at),
        )
    base, line = state.base, state.base_line
    if trusted and isinstance(record.episode, int):
        base, line = record, (*line, record.ref)
    return replace(
        state,
        checkpoints=(*state.checkpoints, record),
        base=base,
        base_line=line,
        untrusted_refs=untrusted,
        verdicts_at=MappingProxyType(at),
    )


def _rollback_done(state: RunState, event: Any, _trusted: bool) -> RunState:
    to_step = "/steps/" in event.target_ref
    target = next(
        (
            c
            for c in reversed(state.checkpoints)
            if c.ref == event.target_ref and c.ref not in state.untrusted_refs
        ),
        None,
    )
    base = base_after_rollback(state.base, target, to_step=to_step)
    # A rollback restores a tree whose green verdicts are known (its checkpoint's): the gates
    # shown after it are that tree's, or pending, never the abandoned tree's.
    known = state.verdicts_at.get(event.tree or "", EMPTY)
    gates = {name: known.get(name) or GateNow(name, tree=event.tree) for name in state.gates}
    pending = state.pending_rollback
    line = state.base_line if to_step else ((base.ref,) if base is not None else ())
    return replace(
        state,
        base=base,
        base_line=line,
        last_rollback=event,
        pending_rollback=None if pending and pending.get("id") == event.id else pending,
        green_on=MappingProxyType(green_after_rollback(base if to_step else target)),
        regressed=frozenset(),
        gates=MappingProxyType(gates),
        breaks=EMPTY,
    )


def _rolled_back(state: RunState, event: Any, trusted: bool) -> RunState:
    """The in-process event of a rollback: its salvage and its ``rollback-done`` records."""
    state = _snapshot(state, CheckpointTaken(record_=event.salvage), trusted)
    done = RollbackDone(id="", target_ref=event.target.ref, tree=event.target.tree)
    return _rollback_done(state, done, trusted)


def _recovery_facts(state: RunState, event: Any, trusted: bool) -> RunState:
    """The in-process event of a recovery, as its ``recovery-needed`` record says it."""
    from paella_tui.supervisor.run.ledger_events import RecoveryAsked

    f = event.facts
    asked = RecoveryAsked(
        ending=f.ending,
        how=f.how,
        attempt=f.attempt or 0,
        tail=tuple(f.tail[-20:]),
        regressions=f.regressions,
        base=f.base.n if f.base is not None else None,
        default=f.default,
    )
    return _recovery_needed(state, asked, trusted)


def _other(state: RunState, event: Any, _trusted: bool) -> RunState:
    """A rollback's intent and its failure (an interrupted rollback is one with no end)."""
    if event.record_kind == "run-tree" and state.start_tree is None:
        tree = event.fields.get("tree")
        return replace(state, start_tree=tree) if isinstance(tree, str) else state
    if event.record_kind == "protected-accepted":
        return replace(state, accepted=(*state.accepted, MappingProxyType(dict(event.fields))))
    if event.record_kind == "rollback-intent":
        intent = {**event.fields, "t": event.at}
        return replace(state, pending_rollback=MappingProxyType(intent))
    pending = state.pending_rollback
    if (
        event.record_kind == "rollback-failed"
        and pending
        and pending.get("id") == event.fields.get("id")
    ):
        return replace(state, pending_rollback=None)
    return state


def _drift(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(state, drift=(*state.drift, event))


def _bisect_started(state: RunState, event: Any, _trusted: bool) -> RunState:
    point = BreakPoint(gate=event.gate, verdict="running")
    return replace(state, breaks=_set(state.breaks, event.gate, point))


def _bisect_finished(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(state, breaks=_set(state.breaks, event.point.gate, event.point))


def _retry(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(state, phase=Phase.RETRY_WAIT, retry=Retry(event.resume_at, event.reason))


def _recovery_needed(state: RunState, event: Any, _trusted: bool) -> RunState:
    note = RecoveryNote(
        ending=event.ending,
        how=event.how,
        attempt=event.attempt or state.attempt,
        regressions=tuple(event.regressions),
        base=event.base,
        default=event.default,
    )
    turn = Turn("recovery-needed", event.attempt or 0, event.how, event.tail)
    return replace(state, phase=Phase.RECOVERING, recovery=note, turn=turn)


def _recovery_chosen(state: RunState, event: Any, _trusted: bool) -> RunState:
    note = state.recovery
    if note is not None:
        note = replace(note, choice=event.choice, by=event.by)
    phase = state.phase if event.choice == "stop" else Phase.RESUMING
    return replace(state, recovery=note, phase=phase, turn=Turn("recovery-chosen"))


def _handoff(state: RunState, event: Any, _trusted: bool) -> RunState:
    return replace(state, handoff_path=event.path)


def _run_done(state: RunState, event: Any, trusted: bool) -> RunState:
    if not trusted:
        return state  # a "done" written after the chain broke proves nothing
    return replace(
        state, phase=Phase.DONE, ended_at=event.at, done_gates=tuple(event.gates), retry=None
    )


def _run_stopped(state: RunState, event: Any, _trusted: bool) -> RunState:
    stop = Retry(event.resume_after, event.reason)
    return replace(state, phase=Phase.STOPPED, ended_at=event.at, stop=stop, retry=None)


def _step(state: RunState, event: Any, _trusted: bool) -> RunState:
    newest = state.steps.newest
    if isinstance(event.n, int):
        # The record as the ledger has it (its time back from the event's: exact to the ms).
        newest = MappingProxyType({**event.fields, "n": event.n, "t": ledger_iso(event.at)})
    steps = replace(state.steps, count=state.steps.count + 1, last=event.n, newest=newest)
    return replace(state, steps=steps)


def _steps_pruned(state: RunState, _event: Any, _trusted: bool) -> RunState:
    return replace(state, steps=replace(state.steps, pruned=True))


Handler = Callable[[RunState, Any, bool], RunState]

HANDLERS: dict[type, Handler] = {
    RunStarted: _run_started,
    CheckpointTaken: _snapshot,
    RollbackDone: _rollback_done,
    DriftDetected: _drift,
    LedgerRecord: _other,
}
"""Each event type's function: those of :mod:`~paella_tui.supervisor.run.state_events` from the
start, the run loop's added by :func:`_handler` once one of its events comes (issue 17)."""


def _run_loop_handlers() -> dict[type, Handler]:
    """The functions of the run loop's events and the ledger's other records (an event of one
    of these types exists only once its module is loaded: importing it here costs nothing)."""
    from paella_tui.supervisor.run.events import (
        AgentExited,
        AgentSession,
        AgentStarted,
        AgentStats,
        BisectFinished,
        BisectStarted,
        GateFinished,
        GateStarted,
        HandoffWritten,
        RecoveryChosen,
        RecoveryNeeded,
        RetryScheduled,
        RolledBack,
        RunDone,
        RunStopped,
    )
    from paella_tui.supervisor.run.ledger_events import (
        RecoveryAsked,
        StepKept,
        StepsPruned,
        SupervisorResumed,
    )

    return {
        SupervisorResumed: _resumed,
        AgentStarted: _agent_started,
        AgentStats: _agent_stats,
        AgentSession: _agent_session,
        AgentExited: _agent_exited,
        GateStarted: _gate_started,
        GateFinished: _gate_finished,
        BisectStarted: _bisect_started,
        BisectFinished: _bisect_finished,
        RetryScheduled: _retry,
        RecoveryAsked: _recovery_needed,
        RecoveryNeeded: _recovery_facts,
        RolledBack: _rolled_back,
        RecoveryChosen: _recovery_chosen,
        HandoffWritten: _handoff,
        RunDone: _run_done,
        RunStopped: _run_stopped,
        StepKept: _step,
        StepsPruned: _steps_pruned,
    }


_all_handlers = False


def _handler(cls: type) -> Handler | None:
    """The function of events of type ``cls`` (None: the event changes no state)."""
    global _all_handlers
    handler = HANDLERS.get(cls)
    if handler is None and not _all_handlers:
        HANDLERS.update(_run_loop_handlers())
        _all_handlers = True
        handler = HANDLERS.get(cls)
    return handler


def apply(state: RunState, event: Event, *, trusted: bool = True) -> RunState:
    """The state after ``event`` (``trusted``: the event's record comes before any chain break).
    The rules are :mod:`paella_tui.supervisor.run.state`'s; this picks the event's function."""
    state = replace(state, folded=state.folded + 1)
    if not trusted and not state.chain_broken:
        state = replace(state, chain_broken=True)
    handler = _handler(type(event))
    return handler(state, event, trusted) if handler is not None else state


def fold(state: RunState, events: Iterable[tuple[Event, bool]]) -> RunState:
    """Apply each (event, trusted) in order."""
    for event, trusted in events:
        state = apply(state, event, trusted=trusted)
    return state
