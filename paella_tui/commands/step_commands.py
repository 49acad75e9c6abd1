"""``paella steps``, ``paella bisect GATE``, and the ``step:N`` / ``before-break`` targets of
``paella diff`` and ``paella rollback``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from paella_tui.commands.context import Context, use_color
from paella_tui.schemas import SCHEMA_VERSION
from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import CONTRACT_FILE, Gate
from paella_tui.supervisor.contract.problems import ContractError
from paella_tui.supervisor.judge.breaks import breaks_of, since_rollback
from paella_tui.supervisor.run.events import GREEN, RED, BreakPoint
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store import steps as step_store
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.steps import StepRecord

if TYPE_CHECKING:
    from paella_tui.supervisor.judge.frozen import FrozenFiles

BEFORE_BREAK = "before-break"
"""The rollback target: the last step before the break where every base gate still passes."""

_MARK = {"pass": "✓", "flaky": "✓", "fail": "✗", "timeout": "✗", "error": "✗"}


def _clock(t: str) -> str:
    """``02:31:07``, local time, from a ledger time."""
    try:
        return datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return t


def known_by_tree(records: tuple[dict[str, Any], ...]) -> dict[str, dict[str, str]]:
    """tree -> {gate: newest status} from live results and bisect probes."""
    known: dict[str, dict[str, str]] = {}
    for record in records:
        if record.get("kind") not in ("gate-finished", "bisect-probe") or record.get("stale"):
            continue
        status, tree, gate = record.get("status"), record.get("tree"), record.get("gate")
        if isinstance(tree, str) and isinstance(gate, str) and status in GREEN | RED:
            known.setdefault(tree, {})[gate] = str(status)
    return known


def before_break(run: Run, records: tuple[dict[str, Any], ...] | None = None) -> SnapshotRecord:
    """The step the newest bisect named as the last good one (a UsageError when none did)."""
    records = run.ledger.read().records if records is None else records
    n = None
    for record in since_rollback(records):
        if record.get("kind") == "bisect":
            n = record.get("before_break", n)
    if not isinstance(n, int):
        raise UsageError(
            "no bisect of this run has found a step before a break",
            hint="run `paella bisect GATE` for the gate that regressed, then roll back again.",
        )
    return step_store.find(run, f"step:{n}", step_store.steps_of(records)).as_target()


def resolve_target(run: Run, name: str) -> SnapshotRecord | None:
    """``step:N`` or ``before-break`` as a target; None for other names (checkpoints decide)."""
    if name.strip() == BEFORE_BREAK:
        return before_break(run)
    if name.strip().startswith("step:"):
        records = run.ledger.read().records
        if step_store.pruned(records):
            raise UsageError(
                f"the steps of run {run.run_id} were pruned ([steps] keep)",
                hint="checkpoints are kept: see `paella checkpoints`.",
            )
        return step_store.find(run, name, step_store.steps_of(records)).as_target()
    return None


def step_diff(run: Run, name: str, *, stat: bool) -> int:
    """``paella diff step:N``: the change step N made (from the step before it)."""
    step = step_store.find(run, name)
    if step.parent_tree is None:
        print(f"step {step.n} is where the run started: it changed nothing")
        return 0
    options = ["--stat"] if stat else []
    color = ["--color=always"] if use_color() else ["--no-color"]
    git = run.workspace.git
    output = git.run(["diff", *color, *options, "--no-renames", step.parent_tree, step.tree]).stdout
    print(f"step {step.n} at {_clock(step.t)}: {step.summary()}")
    sys.stdout.flush()
    sys.stdout.buffer.write(output)
    return 0


def _step_json(step: StepRecord, gates: dict[str, str], checkpoint: int | None) -> dict[str, Any]:
    data = step.to_json()
    data.update(gates=gates, checkpoint=checkpoint)
    return data


def steps(args: argparse.Namespace) -> int:
    """List the newest run's steps: time, files, lines, and the gates known on each."""
    ctx = Context.open()
    run = ctx.current_run(required=not args.json)
    if run is None:
        empty: dict[str, Any] = {"run_id": None, "pruned": False, "steps": [], "breaks": []}
        print(json.dumps({"schema_version": SCHEMA_VERSION, **empty}))
        return 0
    records = run.ledger.read().records
    known = known_by_tree(records)
    checkpoint_of = {r.get("tree"): r.get("n") for r in records if r.get("kind") == "checkpoint"}
    found = breaks_of(records)
    broke_in = {p.step: p.gate for p in found.values() if p.verdict == "found"}
    listed = step_store.steps_of(records)
    pruned = step_store.pruned(records)
    if args.json:
        data = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run.run_id,
            "pruned": pruned,
            "steps": [
                _step_json(s, known.get(s.tree, {}), checkpoint_of.get(s.tree)) for s in listed
            ],
            "breaks": [p.to_json() for p in found.values()],
        }
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(f"run {run.run_id}: {len(listed)} step(s)" + (" (refs pruned)" if pruned else ""))
    if not listed:
        print("  no steps yet: every settled change of a run is kept as one")
    lines = []
    for s in listed:
        gates = " ".join(f"{_MARK[st]}{g}" for g, st in sorted(known.get(s.tree, {}).items()))
        marks = []
        if s.tree in checkpoint_of:
            marks.append(f"● checkpoint {checkpoint_of[s.tree]}")
        if s.n in broke_in:
            marks.append(f"⚠ {broke_in[s.n]} broke here")
        extra = f"  {'  '.join(marks)}" if marks else ""
        what = "run start" if s.parent_tree is None else s.summary()
        lines.append(f" {s.n:>4}  {s.t[11:19]}  {what}" + (f"  [{gates}]" if gates else "") + extra)
    print("\n".join(lines))
    for point in found.values():
        print(f"⚠ {point.gate} {point.headline()}")
    return 0


def _gate(ctx: Context, run: Run, name: str) -> tuple[Gate, Gate | None]:
    """The gate to bisect: the run's frozen one (the agent may have edited the live
    paella.toml), else the live paella.toml's (a gate added later); and the frozen one, whose
    live results count only when its definition is the same."""
    frozen_contract = run.load_contract()
    frozen = None
    if frozen_contract is not None:
        frozen = next((g for g in frozen_contract.gates if g.name == name), None)
    live = None
    path = ctx.workspace.root / CONTRACT_FILE
    if path.exists():
        try:
            live_contract = load_contract(path, default_name=ctx.workspace.root.name)
            live = next((g for g in live_contract.gates if g.name == name), None)
        except ContractError:
            live = None
    gate = frozen or live
    if gate is None:
        names = sorted({g.name for g in (frozen_contract.gates if frozen_contract else ())})
        raise UsageError(
            f"no gate {name!r} in paella.toml or in the run's frozen contract",
            hint=f"gates: {', '.join(names) or 'none'}",
        )
    return gate, frozen


def bisect(args: argparse.Namespace) -> int:
    """Find the step where GATE turned red, running it on old steps in a scratch tree."""
    from paella_tui.supervisor.judge.bisect import Bisection, known_results
    from paella_tui.supervisor.judge.frozen import FrozenFiles
    from paella_tui.supervisor.run.events import BisectFinished, BisectStarted
    from paella_tui.supervisor.run.state_store import StateStore

    ctx = Context.open()
    run = ctx.current_run()
    assert run is not None
    gate, frozen = _gate(ctx, run, args.gate)
    all_records = run.ledger.read().records
    if step_store.pruned(all_records):
        raise UsageError(
            f"the steps of run {run.run_id} were pruned ([steps] keep), so there is nothing to search",
            hint="steps are kept for [steps] keep after a run ends; raise it to bisect later.",
        )
    records = since_rollback(all_records)
    listed = step_store.steps_of(records)
    if len(listed) < 2:
        raise UsageError(
            f"run {run.run_id} has {len(listed)} step(s): nothing to search between",
            hint="steps are kept at every settled change of a `paella run`.",
        )
    contract = run.load_contract()
    links = contract.steps.link if contract is not None else ()
    jobs = contract.gates_config.jobs if contract is not None else 1
    # Each step judged as the run judges: protected files at their frozen content.
    files = FrozenFiles.of_state(run, contract, StateStore(run.ledger.path).load().state)

    # With --json, stdout holds the verdict alone; the progress goes to stderr.
    out = sys.stderr if args.json else sys.stdout

    def progress(fields: dict[str, Any]) -> None:
        run.ledger.append("bisect-probe", **fields)
        mark = _MARK.get(fields["status"], "◌")
        print(
            f"  step {fields['step']:>4}: {mark} {fields['status']} ({fields['duration_s']:.1f}s)",
            file=out,
            flush=True,
        )

    started = BisectStarted(gate=gate.name, tree=None, steps=len(listed))
    run.ledger.append(started.kind or "", **started.record())
    print(f"bisecting gate {gate.name!r} over {len(listed)} steps of run {run.run_id}", file=out)
    search = Bisection(
        run=run,
        gate=gate,
        steps=listed,
        known=known_results(records, gate, frozen=frozen, files=files),
        links=links,
        slots=asyncio.Semaphore(jobs),
        record=progress,
        files=files,
    )
    point = asyncio.run(search.find())
    before = _before(run, listed, point, links, jobs, files)
    finished = BisectFinished(point=point, before_break=before)
    run.ledger.append(finished.kind or "", **finished.record())
    if args.json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, **finished.record()}, indent=2))
    else:
        _print_verdict(point, before)
    return 0 if point.verdict == "found" else 1


def _before(
    run: Run,
    listed: list[StepRecord],
    point: BreakPoint,
    links: tuple[str, ...],
    jobs: int,
    files: FrozenFiles | None,
) -> SnapshotRecord | None:
    """The last step before the break where every gate green at the last green checkpoint
    passes (judged from what is known; the rest run in a scratch tree)."""
    from paella_tui.supervisor.judge.bisect import known_results, last_good_step
    from paella_tui.supervisor.run.run_view import RunView

    if point.verdict != "found":
        return None
    view = RunView.load(run)
    base = view.last_green_checkpoint
    contract = view.contract
    names = set(base.gates_green) if base is not None else {point.gate}
    gates = [g for g in (contract.gates if contract else ()) if g.name in names]
    if not gates:
        return None
    records = since_rollback(view.records)
    known = {g.name: known_results(records, g, frozen=g, files=files) for g in gates}

    def record(fields: dict[str, Any]) -> None:
        run.ledger.append("bisect-probe", **fields)

    step = asyncio.run(
        last_good_step(
            run,
            gates,
            listed,
            [point],
            known=known,
            links=links,
            slots=asyncio.Semaphore(jobs),
            record=record,
            files=files,
        )
    )
    return step.as_target() if step is not None else None


def _print_verdict(point: BreakPoint, before: SnapshotRecord | None) -> None:
    runs = f"{point.runs} gate run(s)"
    if point.verdict != "found":
        print(f"✗ {point.message} ({runs})")
        return
    print(f"⚠ {point.gate} {point.headline()} ({runs})")
    for path, added, removed in point.files[:10]:
        lines = f"+{added} −{removed}" if added is not None else "binary"
        print(f"    {path}  {lines}")
    if point.tail:
        print("  the gate's output there:")
        for line in point.tail[-8:]:
            print(f"    {line}")
    print(f"  see the change: paella diff step:{point.step}")
    if before is not None:
        print(f"  roll back to just before it: paella rollback {before.name}")
