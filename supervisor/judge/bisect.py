"""Bisect: the first step of a run on which a gate is red, found by running the gate on old steps.

Between the newest step where the gate is known green and the step where it is red, a binary
search runs the gate on the steps' trees in a :class:`~paella_tui.supervisor.store.scratch_tree.ScratchTree`
(never in the user's work tree), at low CPU priority and never more gates at once than
``[gates] jobs``, so the live gates are barely slowed. Every result is kept in the ledger
(``bisect-probe``) and cached by (gate definition, tree) like every gate result: a tree judged
once, live or by a bisect, is not run again.

A gate that passes and fails on one tree is flaky, and a flaky gate is not bisected to a wrong
step: the verdict says "flaky". That is known when the gate's own retries turned a failure into a
pass, when two results on one tree disagree, or when the first red step, judged once more
(the one run a search spends beyond ⌈log2 n⌉), passes.

A step is judged as the run judges (:mod:`frozen`): the gate is the frozen contract's, and the
protected files are at their frozen content (:meth:`FrozenFiles.judged`), so an agent that
weakened a protected check in step 12 does not make steps 12 and later pass the check it wrote.
The probes' cache key holds the frozen tree too: a result judged with other protected content
(or, in an older paella, with none) is not reused. A manual run (no frozen contract, nothing
frozen) judges each step's tree as it is: there is no other content to hold it to.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.gates import log_tail, next_log_path, run_gate
from paella_tui.supervisor.run.events import GREEN, RED, BreakPoint, GateResult
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.scratch_tree import ScratchSlot
from paella_tui.supervisor.store.steps import StepRecord

if TYPE_CHECKING:  # the frozen files' machinery loads only where a run has some
    from paella_tui.supervisor.judge.frozen import FrozenFiles

NICE = 10
"""How much lower than paella's the CPU priority of a bisect's gates is."""

Known = dict[str, list[str]]
"""tree -> the statuses the gate had on it, oldest first."""


def max_runs(candidates: int) -> int:
    """The most gate runs a bisect over ``candidates`` steps makes once both ends are known."""
    return math.ceil(math.log2(candidates)) + 1 if candidates > 1 else 1


def probe_key(gate: Gate, files: FrozenFiles | None) -> str:
    """What a probe's result depends on besides the tree: the gate's definition, and the frozen
    content of the protected files it was judged with (none: the tree as it is)."""
    key = gate.definition_key()
    return key if files is None else f"{key}:frozen:{files.tree}"


def known_results(
    records: Sequence[Mapping[str, Any]],
    gate: Gate,
    *,
    frozen: Gate | None,
    files: FrozenFiles | None = None,
) -> Known:
    """What the ledger already knows of ``gate`` on each tree: live results (when the run's
    frozen gate has the same definition) and earlier bisects' results with the same definition
    and the same frozen protected files (``files``)."""
    key = probe_key(gate, files)
    live = frozen is not None and frozen.definition_key() == gate.definition_key()
    known: Known = {}
    for record in records:
        kind = record.get("kind")
        if record.get("gate") != gate.name:
            continue
        status, tree = record.get("status"), record.get("tree")
        if not isinstance(tree, str) or status not in GREEN | RED:
            continue
        if (kind == "gate-finished" and live and not record.get("stale")) or (
            kind == "bisect-probe" and record.get("key") == key
        ):
            known.setdefault(tree, []).append(str(status))
    return known


@dataclass
class Bisection:
    """One search for where ``gate`` broke, over ``steps`` (oldest first)."""

    run: Run
    gate: Gate
    steps: Sequence[StepRecord]
    known: Known
    links: tuple[str, ...] = ()
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    """Shared by every bisect of a run: never more of their gates at once than ``jobs``."""
    record: Callable[[dict[str, Any]], None] | None = None
    """Called with each probe's ledger fields (kind ``bisect-probe``); None: not recorded."""
    bad_tree: str | None = None
    """The tree known red now (the regression's); the newest step when None."""
    files: FrozenFiles | None = None
    """The run's protected files as frozen: each step is judged with them (None: as it is)."""
    runs: int = 0
    """Gate runs so far."""
    _scratch: ScratchSlot | None = None
    _last: dict[str, GateResult] = field(default_factory=dict)

    async def find(self) -> BreakPoint:
        """Search, and return the verdict (``found``, ``flaky``, ``red-from-start``, ...)."""
        try:
            return await self._find()
        finally:
            if self._scratch is not None:
                await asyncio.to_thread(self._scratch.close)

    def _point(self, verdict: Any, message: str, **fields: Any) -> BreakPoint:
        return BreakPoint(
            gate=self.gate.name, verdict=verdict, runs=self.runs, message=message, **fields
        )

    async def _find(self) -> BreakPoint:
        steps = list(self.steps)
        if not steps:
            return self._point("error", f'gate "{self.gate.name}": the run has no steps to search')
        for tree, statuses in self.known.items():
            if {"pass", "flaky"} & set(statuses) and RED & set(statuses):
                return self._flaky(tree, "it passed and failed on the same tree")
        bad, stop = await self._bad_end(steps)
        if stop is not None:
            return stop
        good, stop = await self._good_end(steps, bad)
        if stop is not None:
            return stop
        # The oldest step known red after the good one is as bad as the newest, and closer.
        bad = next(
            i for i in range(good + 1, bad + 1) if i == bad or self._status(steps[i].tree) in RED
        )
        return await self._search(steps, good, bad)

    async def _bad_end(self, steps: list[StepRecord]) -> tuple[int, BreakPoint | None]:
        """The step the search ends on, red now; or the verdict when it is not red there."""
        # The step of the tree known red now, else the newest step known red, else the newest
        # step, judged now.
        bad = _index_of(steps, self.bad_tree) if self.bad_tree else None
        if bad is None:
            reds = [i for i, s in enumerate(steps) if self._status(s.tree) in RED]
            bad = reds[-1] if reds else len(steps) - 1
        status, stop = await self._judge_or_stop(steps[bad])
        if stop is None and status not in RED:
            stop = self._point(
                "not-reproduced",
                f'gate "{self.gate.name}" passes on step {steps[bad].n}: nothing broke it there',
            )
        return bad, stop

    async def _good_end(self, steps: list[StepRecord], bad: int) -> tuple[int, BreakPoint | None]:
        """The step the search starts from, green; or the verdict when there is none."""
        # The newest step before the bad one known green, else step 0 judged now.
        greens = [i for i in range(bad) if self._status(steps[i].tree) in GREEN]
        if greens:
            return greens[-1], None
        name = self.gate.name
        if bad == 0:
            return 0, self._point("red-from-start", f'gate "{name}" is red from step 0 on')
        status, stop = await self._judge_or_stop(steps[0])
        if stop is None and status not in GREEN:
            stop = self._point(
                "red-from-start", f'gate "{name}" was already red at step 0, when the run started'
            )
        return 0, stop

    async def _search(self, steps: list[StepRecord], lo: int, hi: int) -> BreakPoint:
        """Halve the steps between a green ``lo`` and a red ``hi`` down to the breaking step."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            status, stop = await self._judge_or_stop(steps[mid])
            if stop is not None:
                return stop
            if status in GREEN:
                lo = mid
            else:
                hi = mid
        # Judge the first red step once more: a gate that passes there now is flaky, and the
        # step a search of a flaky gate lands on means nothing.
        again = await self._judge(steps[hi], force=True)
        if again in GREEN:
            return self._flaky(steps[hi].tree, f"it failed and then passed on step {steps[hi].n}")
        breaking = steps[hi]
        result = self._last.get(breaking.tree)
        return BreakPoint(
            gate=self.gate.name,
            verdict="found",
            step=breaking.n,
            t=breaking.t,
            last_green_step=steps[lo].n,
            files=breaking.files,
            added=breaking.added,
            removed=breaking.removed,
            runs=self.runs,
            tail=result.tail if result is not None else (),
            message=f'gate "{self.gate.name}" broke in step {breaking.n}',
        )

    async def _judge_or_stop(self, step: StepRecord) -> tuple[str, BreakPoint | None]:
        """The gate's status on ``step``, and the verdict that ends the search when it was
        flaky there or could not run."""
        status = await self._judge(step)
        if status == "flaky":
            return status, self._flaky(step.tree, "it passed only on a retry")
        if status == "error":
            return status, self._error(step)
        return status, None

    def _flaky(self, tree: str, why: str) -> BreakPoint:
        step = next((s.n for s in self.steps if s.tree == tree), None)
        where = f"step {step}" if step is not None else f"tree {tree[:12]}"
        return self._point(
            "flaky",
            f'gate "{self.gate.name}" is flaky: {why} ({where}); a search cannot say where it '
            "broke. Make it deterministic, or give it `retries`.",
        )

    def _error(self, step: StepRecord) -> BreakPoint:
        result = self._last.get(step.tree)
        why = result.message if result is not None and result.message else "it could not run"
        return self._point(
            "error",
            f'gate "{self.gate.name}" could not be judged on step {step.n}: {why}. '
            "Does it need an ignored path? List it in [steps] link.",
        )

    def _status(self, tree: str) -> str | None:
        statuses = self.known.get(tree)
        return statuses[-1] if statuses else None

    async def _judge(self, step: StepRecord, *, force: bool = False) -> str:
        """The gate's status on ``step``: cached, else run in the scratch tree."""
        if not force:
            cached = self._status(step.tree)
            if cached is not None:
                return cached
        async with self.slots:
            result = await self._run_on(step)
        self.runs += 1
        self._last[step.tree] = result
        self.known.setdefault(step.tree, []).append(result.status)
        if self.record is not None:
            self.record(
                {
                    "gate": self.gate.name,
                    "key": probe_key(self.gate, self.files),
                    "step": step.n,
                    "tree": step.tree,
                    "status": result.status,
                    "duration_s": round(result.duration_s, 3),
                    "exit_code": result.exit_code,
                    "log": result.log_path,
                    "message": result.message,
                }
            )
        return result.status

    async def _run_on(self, step: StepRecord) -> GateResult:
        if self._scratch is None:
            # Made and filled in a worker thread that a cancelled search abandons: the slot
            # makes nothing after its close, which waits for a checkout in progress.
            self._scratch = ScratchSlot(self.run.workspace, links=self.links)
        judged = step.tree
        if self.files is not None:
            judged = (await asyncio.to_thread(self.files.judged, step.tree)).tree
        where = await asyncio.to_thread(self._scratch.checkout, judged)
        if not _startable(self.gate.argv[0], where):
            # `nice` would turn "not found" into exit 127, a red that is no verdict on the tree.
            return GateResult(
                gate=self.gate.name,
                status="error",
                tree=step.tree,
                message=f"cannot start {self.gate.argv[0]!r} in the scratch tree",
            )
        log_path = await asyncio.to_thread(next_log_path, self.run.dir / "bisect", self.gate.name)
        env = dict(os.environ)
        env.update(PAELLA_BISECT="1", PAELLA_STEP=str(step.n))
        result = await run_gate(
            _niced(self.gate), tree=step.tree, cwd=where, log_path=log_path, env=env
        )
        if not result.tail and result.log_path:
            result = replace(result, tail=log_tail(result.log_path))
        return replace(result, gate=self.gate.name)


def _startable(command: str, cwd: Path) -> bool:
    """Whether ``command`` names a program that exists (on PATH, or as a path from ``cwd``)."""
    if "/" in command:
        path = Path(command) if os.path.isabs(command) else cwd / command
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(command) is not None


def _niced(gate: Gate) -> Gate:
    """The gate run at a lower CPU priority (where ``nice`` exists), its definition unchanged."""
    nice = shutil.which("nice")
    if nice is None:
        return gate
    return replace(gate, argv=(nice, "-n", str(NICE), *gate.argv))


def _index_of(steps: Sequence[StepRecord], tree: str) -> int | None:
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].tree == tree:
            return i
    return None


async def last_good_step(
    run: Run,
    gates: Sequence[Gate],
    steps: Sequence[StepRecord],
    breaks: Sequence[BreakPoint],
    *,
    known: Mapping[str, Known],
    links: tuple[str, ...] = (),
    slots: asyncio.Semaphore | None = None,
    record: Callable[[dict[str, Any]], None] | None = None,
    tries: int = 3,
    files: FrozenFiles | None = None,
) -> StepRecord | None:
    """The last step before the first break on which every gate in ``gates`` (those green at
    the base) passes: judged from what is known, the rest run in a scratch tree."""
    found = [b.step for b in breaks if b.verdict == "found" and b.step is not None]
    if not found:
        return None
    first_break = min(found)
    candidates = [s for s in steps if s.n < first_break][::-1][:tries]
    slots = slots or asyncio.Semaphore(1)
    for step in candidates:
        good = True
        for gate in gates:
            search = Bisection(
                run=run,
                gate=gate,
                steps=[step],
                known={t: list(v) for t, v in known.get(gate.name, {}).items()},
                links=links,
                slots=slots,
                record=record,
                files=files,
            )
            try:
                status = await search._judge(step)
            finally:
                if search._scratch is not None:
                    await asyncio.to_thread(search._scratch.close)
            if status not in GREEN:
                good = False
                break
        if good:
            return step
    return None
