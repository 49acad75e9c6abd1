"""The one run model (issue 14) and its kept fold (issue 17): every ledger record maps to one typed
event and back; folding a real ledger incrementally (as the run loop does, one record at a time),
in one go, or from the ``state.json`` kept beside it gives the same state; a kept state that
disagrees with the ledger, or that is not a state at all, is rebuilt; and the rules (regression
with the same-tree exception, the base after a rollback, cumulative episodes) match plain
reference models over random histories.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    BisectFinished,
    BisectStarted,
    BreakPoint,
    CheckpointTaken,
    DriftDetected,
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
    Usage,
    WatchPaused,
)
from paella_tui.supervisor.run.ledger import Ledger, ledger_time
from paella_tui.supervisor.run.ledger_events import (
    LedgerRecord,
    RecoveryAsked,
    RollbackDone,
    RunStarted,
    StepKept,
    StepsPruned,
    SupervisorResumed,
    record_of,
)
from paella_tui.supervisor.run.ledger_schema import SCHEMAS
from paella_tui.supervisor.run.record_events import event_of
from paella_tui.supervisor.run.state import (
    ContractSpec,
    Phase,
    RunState,
    complete_episodes,
    initial,
)
from paella_tui.supervisor.run.state_handlers import apply
from paella_tui.supervisor.run.state_store import FORMAT, STATE_FILE, StateStore
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

TREES = [f"{i:040x}" for i in range(1, 7)]


def _write(ledger: Ledger, event: Event) -> dict[str, Any]:
    """Append ``event``'s record through the engine's writer."""
    kind, fields = record_of(event)
    return ledger.append(kind, **fields)


GATES = ("one", "two")


def snapshot(
    kind: str, n: int, tree: str, episode: Any = None, green: tuple[str, ...] = ()
) -> SnapshotRecord:
    """A checkpoint (or salvage) record as the engine writes it."""
    ref = f"refs/paella/r/{kind}/{n}"
    return SnapshotRecord(
        kind=kind,  # type: ignore[arg-type]
        n=n,
        ref=ref,
        commit=f"{n:040x}",
        tree=tree,
        head=None,
        branch="main",
        t="2026-12-01T10:00:00.000Z",
        episode=episode,
        gates_green=green,
        label="x" if kind == "checkpoints" else "",
        reason="" if kind == "checkpoints" else "rollback",
    )


EVERY_KIND: list[Event] = [
    RunStarted(
        run_id="20261201-100000-abc", contract={"path": "p", "sha256": "0" * 64}, paella_pid=7
    ),
    SupervisorResumed(paella_pid=8),
    AgentStarted(attempt=1, pid=42, create_time=1.5, argv=("a", "b"), resumed=True),
    AgentStats(
        attempt=1, cpu_percent=3.5, rss_bytes=10, descendants=2, uptime_s=4.0, usage=Usage(turns=2)
    ),
    AgentSession(attempt=1, session_id="s-1"),
    AgentExited(
        attempt=1, exit_code=1, signal=None, tail=("x",), usage=Usage(turns=3), signals=("e",)
    ),
    EvaluationStarted(tree=TREES[0], reason="settled", gates=GATES),
    GateStarted(gate="one", tree=TREES[0]),
    EvaluationFinished(tree=TREES[0], results=(), complete_episodes=1, stale=True),
    GateFinished(
        result=GateResult(
            gate="one", status="fail", tree=TREES[0], log_path="l", failed_tests=("t",)
        )
    ),
    CheckpointTaken(record_=snapshot("checkpoints", 1, TREES[0], 1, ("one",))),
    CheckpointTaken(record_=snapshot("salvage", 1, TREES[1])),
    DriftDetected(drift="scope", message="m", path="p"),
    WatchPaused(reason="flapping"),
    RetryScheduled(
        attempt=1, failures=1, wait_s=2.0, resume_at=9.0, reason="r", pattern="p", line="l"
    ),
    RecoveryAsked(ending="crash", how="exit 1, attempt 1", attempt=1, base=1, regressions=("one",)),
    RecoveryChosen(choice="rollback", target="1", by="policy"),
    HandoffWritten(path="/h", size=3),
    RunDone(tree=TREES[0], gates=GATES),
    RunStopped(reason="stopped", resume_after=99.0),
    BisectStarted(gate="one", tree=TREES[0], steps=4),
    BisectFinished(point=BreakPoint(gate="one", verdict="found", step=3, files=(("a", 1, 0),))),
    RollbackDone(
        id="x", target_ref="refs/paella/r/checkpoints/1", target="1", tree=TREES[0], salvage=1
    ),
    StepKept(n=3, fields={"tree": TREES[0], "files": []}),
    StepsPruned(refs=3, kept_s=60.0),
    LedgerRecord(record_kind="bisect-probe", fields={"gate": "one", "step": 2}),
]


@pytest.mark.parametrize("event", EVERY_KIND, ids=lambda e: type(e).__name__)
def test_every_record_maps_to_one_event_and_back(tmp_path: Path, event: Event) -> None:
    """Written through the engine's writer and read back, a record is the same event again."""
    ledger = Ledger(tmp_path / "events.jsonl")
    written = _write(ledger, event)
    (read,) = ledger.read().records
    assert read == json.loads(json.dumps(written))
    again = event_of(read, ledger_time(read["t"]))
    assert type(again) is type(event)
    assert record_of(again) == record_of(event)


def test_every_kind_the_schema_knows_has_its_event() -> None:
    """No record kind of the ledger falls through to the untyped catch-all unless on purpose."""
    # The protected-files decisions (issue 11) are the frozen judge's to read, not the state's.
    untyped = {
        "run-tree",
        "rollback-refused",
        "rollback-intent",
        "rollback-failed",
        "leftovers",
        "protected-accepted",
        "protected-reverted",
    }
    typed = {record_of(e)[0] for e in EVERY_KIND if not isinstance(e, LedgerRecord)}
    assert set(SCHEMAS) - typed == untyped


# --- random histories ----------------------------------------------------------------------------

_STATUS = st.sampled_from(["pass", "flaky", "fail", "timeout", "error"])


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """A random run: attempts, gate verdicts on a few trees (stale ones too), checkpoints,
    salvage and rollbacks to them (or to a step), drift, bisects, recoveries, an end."""
    events: list[Event] = [RunStarted(run_id="20261201-100000-abc", paella_pid=1)]
    snapshots: list[SnapshotRecord] = []
    attempt = 0
    for _ in range(draw(st.integers(1, 40))):
        step = draw(st.integers(0, 9))
        tree = draw(st.sampled_from(TREES))
        if step == 0:
            attempt += 1
            events.append(
                AgentStarted(attempt=attempt, pid=100 + attempt, create_time=1.0, argv=("a",))
            )
        elif step == 1 and attempt:
            events.append(
                AgentExited(attempt=attempt, exit_code=draw(st.sampled_from([0, 1])), signal=None)
            )
        elif step in (2, 3, 4):
            gate = draw(st.sampled_from(GATES))
            events.append(GateStarted(gate=gate, tree=tree))
            result = GateResult(gate=gate, status=draw(_STATUS), tree=tree)
            events.append(GateFinished(result=result, stale=draw(st.booleans()) and step == 4))
        elif step == 5:
            kind = draw(st.sampled_from(["checkpoints", "salvage"]))
            n = 1 + sum(s.kind == kind for s in snapshots)
            episode = draw(st.sampled_from([1, 2, "manual"])) if kind == "checkpoints" else None
            green = tuple(draw(st.lists(st.sampled_from(GATES), unique=True)))
            record = snapshot(kind, n, tree, episode, green)
            snapshots.append(record)
            events.append(CheckpointTaken(record_=record))
        elif step == 6 and snapshots:
            target = draw(st.sampled_from(snapshots))
            ref = target.ref if draw(st.booleans()) else "refs/paella/r/steps/5"
            events.append(RollbackDone(id="r", target_ref=ref, tree=target.tree))
        elif step == 7:
            events.append(DriftDetected(drift="regression", gate="one", message="m"))
        elif step == 8:
            events.append(BisectStarted(gate="one", tree=tree, steps=3))
        else:
            events.append(RecoveryAsked(ending="crash", how="exit 1", attempt=attempt))
    if draw(st.booleans()):
        events.append(RunDone(tree=TREES[0], gates=GATES))
    return events


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=histories(), cut=st.integers(0, 100))
def test_the_fold_of_a_real_ledger_is_one_state_however_it_is_read(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], cut: int
) -> None:
    """Live (caught up after every append, as the run loop does), in one fold, through the kept
    state.json after a part, or after the kept file was damaged: always the same state."""
    folder = tmp_path_factory.mktemp("ledger")
    ledger = Ledger(folder / "events.jsonl")
    store = StateStore(ledger.path)
    live = store.empty()
    split = len(events) * cut // 100
    for i, event in enumerate(events):
        _write(ledger, event)
        live = store.catch_up(live)
        if i + 1 == split:
            store.load()  # keeps state.json for the first part
    fresh = store.catch_up(store.empty())
    assert fresh.state == live.state and fresh.position == live.position
    assert store.load().state == live.state  # the kept part plus the rest
    assert store.load(save=False).position == live.position
    (folder / STATE_FILE).write_text(json.dumps({"format": FORMAT, "state": {"phase": "done"}}))
    assert store.load().state == live.state  # not a state: rebuilt


def _reference(events: list[Event]) -> tuple[set[str], int | None]:
    """The rules as first written, over whole lists: regressed gates and the base's number."""
    green_on: dict[str, list[str]] = {}
    regressed: set[str] = set()
    base: SnapshotRecord | None = None
    checkpoints: dict[str, SnapshotRecord] = {}
    for event in events:
        if isinstance(event, GateFinished) and not event.stale:
            r = event.result
            trees = green_on.setdefault(r.gate, [])
            if r.green:
                if r.tree not in trees:
                    trees.append(r.tree)
                regressed.discard(r.gate)
            elif any(t != r.tree for t in trees):
                regressed.add(r.gate)
        elif isinstance(event, CheckpointTaken) and event.record_.kind == "checkpoints":
            checkpoints[event.record_.ref] = event.record_
            if isinstance(event.record_.episode, int):
                base = event.record_
        elif isinstance(event, RollbackDone):
            if "/steps/" not in event.target_ref:
                target = checkpoints.get(event.target_ref)
                base = target if target is not None and isinstance(target.episode, int) else None
                restored = target
            else:
                restored = base
            green_on = {g: [restored.tree] for g in restored.gates_green} if restored else {}
            regressed = set()
    return regressed, base.n if base else None


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(events=histories())
def test_the_rules_match_the_reference_over_random_histories(events: list[Event]) -> None:
    """Regression (a red on the very tree it passed on is flakiness), the base after a rollback."""
    state = initial()
    for event in events:
        state = apply(state, event)
    regressed, base = _reference(events)
    assert set(state.regressed) == regressed
    assert (state.base.n if state.base else None) == base


def test_a_done_after_a_chain_break_proves_nothing_and_its_checkpoint_is_never_the_base(
    tmp_path: Path,
) -> None:
    """Records after an edit of the ledger are folded, but never as done or as the base."""
    ledger = Ledger(tmp_path / "events.jsonl")
    _write(ledger, (RunStarted(run_id="20261201-100000-abc")))
    _write(ledger, (CheckpointTaken(record_=snapshot("checkpoints", 1, TREES[0], 1))))
    data = ledger.path.read_bytes()
    forged = json.dumps(
        {"t": "2026-12-01T10:00:00.000Z", "kind": "run-done", "tree": TREES[1], "prev": "0" * 32}
    )
    ledger.path.write_bytes(data + forged.encode() + b"\n")
    _write(ledger, (CheckpointTaken(record_=snapshot("checkpoints", 2, TREES[1], 2))))
    folded = StateStore(ledger.path).load()
    assert folded.chain_break is not None and folded.chain_break.index == 2
    assert folded.state.phase is not Phase.DONE
    assert folded.state.base is not None and folded.state.base.n == 1
    assert "refs/paella/r/checkpoints/2" in folded.state.untrusted_refs


def test_a_kept_state_that_disagrees_with_the_ledger_is_rebuilt(tmp_path: Path) -> None:
    """An edited ledger line before the kept offset, a kept offset past the end, a forged
    type: each makes the reader fold the ledger again instead of trusting state.json."""
    ledger = Ledger(tmp_path / "events.jsonl")
    _write(ledger, (RunStarted(run_id="20261201-100000-abc")))
    for i in range(3):
        result = GateResult(gate="one", status="pass", tree=TREES[i])
        _write(ledger, (GateFinished(result=result)))
    store = StateStore(ledger.path)
    kept = store.load()
    truth = kept.state
    body = json.loads(store.path.read_text())
    body["state"]["phase"] = "no such phase"
    store.path.write_text(json.dumps(body))
    assert store.load().state == truth
    body = json.loads(store.path.read_text())
    body["position"]["offset"] += 10_000
    store.path.write_text(json.dumps(body))
    assert store.load().state == truth
    # The agent rewrites the last line (and its state.json, to look consistent): the chain hash
    # kept beside the offset no longer matches, so the ledger as it now is wins.
    lines = ledger.path.read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"pass"', b'"fail"')
    ledger.path.write_bytes(b"".join(lines))
    assert store.load().state.gates["one"].status == "fail"


def test_episodes_are_cumulative() -> None:
    """Episode k is complete when every gate of episodes 1..k is green; a gap stops the count."""
    spec = ContractSpec(
        gates=("a", "b", "c"), episodes=(("1", ("a",)), ("2", ("a", "b")), ("3", ("a", "b", "c")))
    )
    assert complete_episodes(spec, {"a", "c"}) == 1
    assert complete_episodes(spec, {"b", "c"}) == 0
    assert complete_episodes(spec, {"a", "b", "c"}) == 3
    state = RunState(spec=spec)
    assert state.current_episode == 1


# --- what a resume reads from the state instead of the ledger (issue 17) -------------------------


def _lost_reference(records: list[dict[str, Any]], attempt: int) -> tuple[int, str, tuple] | None:
    """``lost_attempt`` as it read the whole ledger: (attempt, how, tail) or None."""
    kinds = ("agent-started", "agent-exited", "recovery-needed", "recovery-chosen")
    turns = [r for r in records if r.get("kind") in kinds]
    if not turns or turns[-1]["kind"] not in ("agent-started", "recovery-needed"):
        return None
    last = turns[-1]
    attempt = int(last.get("attempt") or attempt)
    if last["kind"] == "recovery-needed":
        how = f"{last.get('how') or 'the attempt ended'}; paella was stopped before a choice"
        return attempt, how, tuple(last.get("tail") or ())
    return attempt, f"paella itself stopped while attempt {attempt} ran (its agent was stopped)", ()


@st.composite
def resumable_histories(draw: st.DrawFn) -> list[Event]:
    """A random history with what a resume looks for: attempts started and ended, recoveries
    asked (with output) and answered, steps, the start tree, accepted protected files,
    bisects, rollbacks, resumes by other paellas."""
    events = draw(histories())
    for _ in range(draw(st.integers(0, 25))):
        what = draw(st.integers(0, 8))
        tree = draw(st.sampled_from(TREES))
        n = draw(st.integers(0, 30))
        if what == 0:
            events.append(LedgerRecord(record_kind="run-tree", fields={"tree": tree}))
        elif what == 1:
            ref = f"refs/paella/20261201-100000-abc/frozen/{n}"
            fields = {"ref": ref, "commit": f"{n:040x}", "tree": tree, "paths": ["t"], "by": "u"}
            events.append(LedgerRecord(record_kind="protected-accepted", fields=fields))
        elif what == 2:
            files = [{"path": f"f{n}", "added": n, "removed": 1}]
            step = {"ref": f"refs/paella/r/steps/{n}", "commit": f"{n:040x}", "tree": tree}
            events.append(StepKept(n=n, fields={**step, "files": files, "tail": ["x"]}))
        elif what == 3:
            tail = tuple(draw(st.lists(st.sampled_from(["a", "b"]), max_size=3)))
            how = draw(st.sampled_from(["", "exit 1"]))
            attempt = draw(st.integers(0, 3))
            events.append(RecoveryAsked(ending="crash", how=how, attempt=attempt, tail=tail))
        elif what == 4:
            choice = draw(st.sampled_from(["rollback", "continue", "stop"]))
            events.append(RecoveryChosen(choice=choice, by="user"))
        elif what == 5:
            events.append(AgentStarted(attempt=n + 1, pid=n + 2, create_time=1.0, argv=("a",)))
        elif what == 6:
            events.append(AgentExited(attempt=n + 1, exit_code=1, signal=None))
        elif what == 7:
            point = BreakPoint(gate=draw(st.sampled_from(GATES)), verdict="found", step=n)
            events.append(BisectFinished(point=point))
        else:
            events.append(SupervisorResumed(paella_pid=draw(st.sampled_from([None, n + 5]))))
    return events


@pytest.mark.slow
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=resumable_histories(), attempt=st.integers(1, 4))
def test_what_a_resume_takes_from_the_state_is_what_the_ledger_says(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], attempt: int
) -> None:
    """The undecided attempt, the start tree, the newest step, the accepted protected files,
    the bisects' verdicts and the supervising paella, read from the kept state, equal what a
    whole read of the ledger gives."""
    from paella_tui.supervisor.judge.break_points import breaks_of
    from paella_tui.supervisor.run.attempt_end import lost_attempt
    from paella_tui.supervisor.store.steps import StepRecord, last_step

    folder = tmp_path_factory.mktemp("ledger")
    ledger = Ledger(folder / "events.jsonl")
    for event in events:
        _write(ledger, event)
    records = [dict(r) for r in ledger.read().records]
    state = StateStore(ledger.path).load().state
    lost = lost_attempt(state, attempt)
    found = (lost.attempt, lost.false_success, lost.tail) if lost is not None else None
    assert found == _lost_reference(records, attempt)
    trees = [r["tree"] for r in records if r["kind"] == "run-tree"]
    assert state.start_tree == (trees[0] if trees else None)
    newest = StepRecord.from_ledger(dict(state.steps.newest)) if state.steps.newest else None
    assert newest == last_step(records)
    accepted = [
        {k: v for k, v in r.items() if k not in ("t", "kind", "prev")}
        for r in records
        if r["kind"] == "protected-accepted"
    ]
    assert [dict(a) for a in state.accepted] == accepted
    assert {g: (p.verdict, p.step) for g, p in state.breaks.items()} == {
        g: (p.verdict, p.step) for g, p in breaks_of(records).items()
    }
    pids = [r.get("paella_pid") for r in records if r["kind"] in ("run-started", "resumed")]
    assert state.supervisor_pid == next((p for p in reversed(pids) if p), None)
