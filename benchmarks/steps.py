"""Steps and bisect benchmark (issue 16, SPEC 13): what keeping every settled change costs, what a
bisect saves, and what 2,000 steps do to ``paella status`` and the TUI's start.

Three parts, one command, one report:

1. **a step against a checkpoint** on the 20,000-file, ~160 MiB repository of ``checkpoint.py``
   (built or reused with its helpers, ``--keep DIR``), interleaved round-robin after a one-file
   change before each repetition: a checkpoint through the Python API (``take_checkpoint``), a
   step as the run takes it at a settle (a snapshot, then ``take_step``), and a step of a snapshot
   already taken (the evaluation's; what a step costs on top of the gates' own snapshot). Target:
   a step costs no more than a checkpoint.
2. **bisect against the gate once per step**: 30 steps on that repository, the gate (``sleep``
   then a ``grep`` of the file the history breaks at step 17) known green at step 0 and red at
   step 30, as a regression leaves it. The bisect (``Bisection.find``: scratch tree, binary
   search, one confirmation) against a linear scan that runs the gate on every step in the same
   kind of scratch tree. Both timed; the gate runs counted by the gate itself.
3. **2,000 steps against none**: two runs in small repositories with the same history (gate
   results, drift), one with 2,000 real steps (``take_step``: refs and records); the real
   ``paella status`` and ``paella status --json`` as subprocesses; the TUI's start, as a whole
   process (import the App, start it headless, fold the ledger into its board, paint) and its
   engine side alone in this process (``RunView.load``, ``RunBoard.seed``, ``RunLoop(...)``),
   interleaved. Target: within 1.5 × of none.

It prints a Markdown table and the targets with PASS or FAIL, and exits 0 once it has measured.

Usage::

    python benchmarks/steps.py [--keep DIR] [--repeat 7] [--steps 2000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.checkpoint import (
    Bench,
    api_checkpoint,
    clean_env,
    find_paella,
    git,
    machine,
    make_layout,
    prepare_repo,
)
from benchmarks.harness import log
from benchmarks.stats import median, ms, p90
from paella_tui.run_board import RunBoard
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.bisect import Bisection, max_runs
from paella_tui.supervisor.run.events import GateFinished, GateResult
from paella_tui.supervisor.run.run_loop import RunLoop, policy
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.scratch_tree import ScratchTree
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import StepRecord, records, take_step
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace

STATUS_RATIO_TARGET = 1.5
BISECT_STEPS = 30
BREAK_AT = 17
GATE_SLEEP_S = 0.3


# --- 1. a step against a checkpoint -----------------------------------------------------------


class StepBench:
    """The measures of part 1 on the big repository."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.workspace = Workspace.find(bench.root)
        self.run = RunStore(self.workspace).current_or_manual("benchmark steps")
        self.previous: StepRecord | None = None

    def checkpoint(self) -> None:
        self.bench.touch_one()
        started = time.perf_counter()
        api_checkpoint(self.bench.root, f"benchmark {self.bench.edits}")
        self.bench.record("checkpoint (Python API, warm)", time.perf_counter() - started)

    def step_at_settle(self) -> None:
        self.bench.touch_one()
        started = time.perf_counter()
        # What StepKeeper does at a settle: snapshot under the lock, keep the tree as a step.
        tree = Snapshotter(self.workspace).take_locked("a step").tree
        self.previous = take_step(self.run, tree, previous=self.previous) or self.previous
        self.bench.record("step at a settle (snapshot + step)", time.perf_counter() - started)

    def step_of_known_tree(self) -> None:
        self.bench.touch_one()
        tree = Snapshotter(self.workspace).take_locked("a step").tree  # the evaluation's
        started = time.perf_counter()
        self.previous = take_step(self.run, tree, previous=self.previous) or self.previous
        self.bench.record("step of the evaluation's snapshot", time.perf_counter() - started)


def part_steps(bench: Bench, repeat: int) -> list[tuple[str, list[float]]]:
    steps = StepBench(bench)
    measures: list[Callable[[], None]] = [
        steps.checkpoint,
        steps.step_at_settle,
        steps.step_of_known_tree,
    ]
    log("part 1: warm-up round")
    for measure in measures:
        measure()
    bench.samples.clear()
    for r in range(repeat):
        shift = r % len(measures)
        for measure in (*measures[shift:], *measures[:shift]):
            measure()
        log(f"  round {r + 1}/{repeat}")
    return list(bench.samples.items())


# --- 2. bisect against the gate once per step ----------------------------------------------------


def _history(bench: Bench) -> tuple[Run, list[StepRecord], str]:
    """30 steps, one hot file changed per step; the file changed at step 17 breaks the gate."""
    workspace = Workspace.find(bench.root)
    run = RunStore(workspace).create(None, manual=True, reason="benchmark bisect")
    snapshotter = Snapshotter(workspace)
    target = bench.layout.hot[0]
    previous: StepRecord | None = None
    for k in range(BISECT_STEPS + 1):
        if k == BREAK_AT:
            with (bench.root / target).open("ab") as handle:
                handle.write(b"# BROKEN\n")
        elif k:
            bench.touch_one()
        previous = take_step(run, snapshotter.take_locked().tree, previous=previous) or previous
    return run, records(run), target


def part_bisect(bench: Bench, counter: Path) -> dict[str, object]:
    log("part 2: 30 steps on the big repository, then a bisect and a linear scan")
    run, steps, target = _history(bench)
    script = (
        f'echo "$PAELLA_TREE" >> "{counter}"; sleep {GATE_SLEEP_S}; ! grep -q BROKEN \'{target}\''
    )
    gate = Gate(
        name="guard", argv=("sh", "-c", script), cmd=script, timeout=60, retries=0, paths=()
    )
    known = {steps[0].tree: ["pass"], steps[-1].tree: ["fail"]}
    counter.unlink(missing_ok=True)
    started = time.perf_counter()
    point = asyncio.run(
        Bisection(
            run=run, gate=gate, steps=steps, known=dict(known), slots=asyncio.Semaphore(2)
        ).find()
    )
    bisect_s = time.perf_counter() - started
    bisect_runs = len(counter.read_text().split())
    counter.unlink(missing_ok=True)
    started = time.perf_counter()
    first_red = None
    with ScratchTree(Workspace.find(bench.root)) as scratch:
        for step in steps:
            scratch.checkout(step.tree)
            env = {**os.environ, "PAELLA_TREE": step.tree}
            failed = subprocess.run(["sh", "-c", script], cwd=scratch.path, env=env).returncode
            if failed and first_red is None:
                first_red = step.n
    linear_s = time.perf_counter() - started
    linear_runs = len(counter.read_text().split())
    return {
        "found": (point.verdict, point.step),
        "linear_found": first_red,
        "bisect_s": bisect_s,
        "bisect_runs": bisect_runs,
        "linear_s": linear_s,
        "linear_runs": linear_runs,
    }


# --- 3. 2,000 steps against none ---------------------------------------------------------------

CONTRACT = """\
[run]
prompt = "benchmark"
agent = ["true"]

[[gate]]
name = "unit"
cmd = "true"

[[gate]]
name = "lint"
cmd = "true"

[[episode]]
name = "one"
gates = ["unit", "lint"]
"""


FOLD = "TUI start, engine side (RunView + RunBoard.seed + RunLoop)"
TUI = "TUI start, whole process (App painted with the run's board)"
# What `paella run` does before the board shows, without an agent: import the App, start it
# headless, fold the ledger into the board as its engine worker does, show the board.
TUI_START = """
import asyncio
from paella_tui.app import PaellaApp
from paella_tui.supervisor.run.run_loop import RunLoop, policy
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace

run = RunStore(Workspace.find()).current()
view = RunView.load(run)
app = PaellaApp(contract=view.contract, run=run, engine=False)

async def main():
    async with app.run_test(size=(100, 30)) as pilot:
        app.board.seed(RunView.load(run))
        app._show_board()
        await pilot.pause()

asyncio.run(main())
"""


def _small_run(root: Path, steps: int) -> tuple[Path, Run]:
    """A repository whose run has a typical history and ``steps`` real steps."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "bench")
    git(root, "config", "user.email", "bench@localhost")
    (root / "paella.toml").write_text(CONTRACT)
    (root / "src").mkdir()
    for i in range(50):
        (root / "src" / f"m{i}.py").write_text(f"X = {i}\n" * 20)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    workspace = Workspace.find(root)
    contract = load_contract(root / "paella.toml")
    run = RunStore(workspace).create(contract, manual=False)
    snapshotter = Snapshotter(workspace)
    tree = snapshotter.take_locked().tree
    # The same history in both runs: 200 evaluations' gate results and a drift warning.
    for _ in range(200):
        for name in ("unit", "lint"):
            result = GateResult(gate=name, status="pass", tree=tree, duration_s=0.5)
            run.ledger.append("gate-finished", **GateFinished(result=result).record())
    run.ledger.append("drift", drift="stall", message="quiet for a while", gate=None, path=None)
    previous: StepRecord | None = None
    for k in range(steps):
        (root / "src" / f"m{k % 50}.py").write_text(f"X = {k + 1000}\n" * 20)
        step = take_step(run, snapshotter.take_locked().tree, previous=previous)
        previous = step or previous
        if k and k % 500 == 0:
            log(f"  {k} steps")
    return root, run


def part_status(folder: Path, steps: int, repeat: int) -> list[tuple[str, list[float]]]:
    log(f"part 3: a run with {steps} steps and one with none")
    none_root, none_run = _small_run(folder / "none", 0)
    many_root, many_run = _small_run(folder / "many", steps)
    assert len(records(many_run)) == steps
    paella = find_paella()
    env = clean_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    samples: dict[str, list[float]] = {}

    def cli(label: str, root: Path, *args: str) -> Callable[[], None]:
        def measure() -> None:
            started = time.perf_counter()
            subprocess.run([*paella, *args], cwd=root, env=env, capture_output=True, check=True)
            samples.setdefault(label, []).append(time.perf_counter() - started)

        return measure

    def fold(label: str, run: Run) -> Callable[[], None]:
        def measure() -> None:
            started = time.perf_counter()
            view = RunView.load(run)
            assert view.contract is not None
            RunBoard(contract=view.contract, run_id=run.run_id).seed(view)
            RunLoop(
                run=run, contract=view.contract, emit=lambda _e, _s: None, decide=policy("stop")
            )
            samples.setdefault(label, []).append(time.perf_counter() - started)

        return measure

    def tui(label: str, root: Path) -> Callable[[], None]:
        def measure() -> None:
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", TUI_START],
                cwd=root,
                env=env,
                capture_output=True,
                check=True,
            )
            samples.setdefault(label, []).append(time.perf_counter() - started)

        return measure

    measures = [
        cli("paella status, no steps", none_root, "status"),
        cli(f"paella status, {steps} steps", many_root, "status"),
        cli("paella status --json, no steps", none_root, "status", "--json"),
        cli(f"paella status --json, {steps} steps", many_root, "status", "--json"),
        fold(FOLD + ", no steps", none_run),
        fold(f"{FOLD}, {steps} steps", many_run),
        tui(TUI + ", no steps", none_root),
        tui(f"{TUI}, {steps} steps", many_root),
    ]
    for measure in measures:
        measure()  # warm-up: bytecode, page cache
    samples.clear()
    for r in range(repeat * 2):
        shift = r % len(measures)
        for measure in (*measures[shift:], *measures[:shift]):
            measure()
    return list(samples.items())


# --- the report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--keep", type=Path, help="build or reuse the big repository here")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--quick", action="store_true", help="a smaller big repository (2,000 files)"
    )
    parser.add_argument(
        "--only", choices=("steps", "bisect", "status"), help="run one part (its targets only)"
    )
    args = parser.parse_args(argv)
    os.environ.pop(STATE_DIR_ENV, None)
    files, size = (2000, 16) if args.quick else (20000, 160)
    layout = make_layout(files, size, 300)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-steps-")))
        root = args.keep.resolve() if args.keep else tmp / "repo"
        step_samples: list[tuple[str, list[float]]] = []
        bisect: dict[str, object] = {}
        status_samples: list[tuple[str, list[float]]] = []
        if args.only in (None, "steps", "bisect"):
            prepare_repo(root, layout)
            bench = Bench(root=root, layout=layout, paella=find_paella())
            if args.only in (None, "steps"):
                step_samples = part_steps(bench, args.repeat)
            if args.only in (None, "bisect"):
                bisect = part_bisect(bench, tmp / "gate-runs.txt")
        if args.only in (None, "status"):
            status_samples = part_status(tmp / "status", args.steps, args.repeat)
    lines = [
        f"## Steps and bisect benchmark ({time.strftime('%Y-%m-%d %H:%M %Z')})",
        "",
        *machine(),
        f"- big repository: {files:,} tracked files, {size} MiB, 300 untracked; "
        f"{args.repeat} interleaved repetitions after a warm-up, one file changed before each",
        "",
        "| measure | median | p90 |",
        "|---|---:|---:|",
    ]
    for label, values in [*step_samples, *status_samples]:
        lines.append(f"| {label} | {ms(median(values))} | {ms(p90(values))} |")
    if bisect:
        lines += [
            f"| bisect of {BISECT_STEPS} steps (gate {GATE_SLEEP_S}s + scratch tree) | "
            f"{bisect['bisect_s']:.2f} s, {bisect['bisect_runs']} gate runs | |",
            f"| the gate once per step (same scratch tree) | "
            f"{bisect['linear_s']:.2f} s, {bisect['linear_runs']} gate runs | |",
        ]
    by = dict(step_samples) | dict(status_samples)
    targets = []
    if step_samples:
        checkpoint = median(by["checkpoint (Python API, warm)"])
        for label, what in (
            ("step at a settle (snapshot + step)", "while the gates run"),
            ("step of the evaluation's snapshot", "the gates idle: one snapshot serves both"),
        ):
            step = median(by[label])
            targets.append(
                (
                    f"a step ≤ a checkpoint (median), {what}",
                    f"{step / checkpoint:.2f} × ({ms(step)} vs {ms(checkpoint)})",
                    step <= checkpoint,
                )
            )
    if bisect:
        targets.append(
            (
                f"bisect names step {BREAK_AT} in ≤ ⌈log2 {BISECT_STEPS}⌉ + 1 = "
                f"{max_runs(BISECT_STEPS)} runs",
                f"{bisect['found']}, {bisect['bisect_runs']} runs (linear scan: step "
                f"{bisect['linear_found']})",
                bisect["found"] == ("found", BREAK_AT)
                and int(str(bisect["bisect_runs"])) <= max_runs(BISECT_STEPS),
            )
        )
    for what in ("paella status", "paella status --json", TUI, FOLD) if status_samples else ():
        none = median(by[f"{what}, no steps"])
        many = median(by[f"{what}, {args.steps} steps"])
        info = "(for information: a part of the line above) " if what == FOLD else ""
        targets.append(
            (
                f"{info}{what}: {args.steps} steps ≤ {STATUS_RATIO_TARGET} × none",
                f"{many / none:.2f} × ({ms(many)} vs {ms(none)})",
                many <= STATUS_RATIO_TARGET * none,
            )
        )
    lines += ["", "| target | measured | verdict |", "|---|---|---|"]
    for what, measured, ok in targets:
        lines.append(f"| {what} | {measured} | {'PASS' if ok else 'FAIL'} |")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
