"""History: what the commands cost as a run's ledger grows to a day of records (issue 17, Build 1).

One run grows a real ledger through the engine's own writer (``Ledger.append_soon``, as the run
loop hands its records over: chained and fsynced by the writer thread, in batches when they come
fast; the records the run loop writes: evaluations, gates started and finished, the agent's
stats), with a real checkpoint (``take_checkpoint``, its record fsynced before it returns) every
100 records: 1,000 of them at 100,000 records. Each size ends as a person's stop leaves a run
(the attempt's exit, ``run-stopped``). At 1k, 10k and 100k records (``--sizes``) it times, as
whole processes and warm (after one untimed run), interleaved round-robin with the same on a
fresh run of the same workspace (its first records and one checkpoint):

- ``paella status`` (also ``--tmux`` against its floor, and after ``state.json`` was removed),
  ``paella status --json``, ``paella checkpoints``, ``paella checkpoint`` (each adds one
  checkpoint), ``paella log | tail -n 5``, with the peak RSS of each (``/usr/bin/time``);
- ``paella resume`` in the TUI on a pseudo-terminal (:mod:`benchmarks.tui_resume`): the time to
  the board painted with the run's state and to the agent's first line on screen, and its peak
  RSS; each resume is quit with ``q``, ``y``;
- in this process, the evaluator's seed from the ``gate-finished`` records (the old path of a
  resumed run, which now adopts the kept state instead).

Bytecode is cached (``PYTHONPYCACHEPREFIX`` in the work folder) as an installation has it.
Targets (issue 17): ``status``, ``checkpoints`` and ``checkpoint`` within 1.3 × a fresh run at
100k records and 1,000 checkpoints, the TUI's resume painted within 1.5 ×; RSS under 80 MB.
Prints Markdown tables; exits 0 either way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import commit_workspace, log, new_repo, work_folder
from benchmarks.machine import cores_line, git_version, python_line
from benchmarks.stats import median, ms
from benchmarks.tui_resume import ResumeTimes, terminal_env, time_resume
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    AgentStats,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    GateFinished,
    GateResult,
    GateStarted,
    RunStopped,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

AGENT_LINE = "paella-bench-agent-line"
"""What the agent prints first: the TUI has shown the agent's line once this is on screen."""
CONTRACT = {
    "run": {"prompt": "build it", "agent": ["sh", "-c", f"echo {AGENT_LINE}; exec sleep 3600"]},
    "gate": [
        {"name": "unit", "cmd": ["true"], "timeout": "60s"},
        {"name": "lint", "cmd": ["true"], "timeout": "60s"},
    ],
    "episode": [
        {"name": "first", "goal": "unit passes", "gates": ["unit"]},
        {"name": "second", "goal": "lint passes too", "gates": ["unit", "lint"]},
    ],
}
CHECKPOINT_EVERY = 100
COMMANDS = {
    "paella status --tmux": "paella status --tmux",
    "floor: python -c pass; git rev-parse": f"{sys.executable} -c pass; git rev-parse --git-dir",
    "paella status": "paella status",
    "paella status --json": "paella status --json",
    "paella checkpoints": "paella checkpoints",
    "paella checkpoint": "paella checkpoint --label bench",
    "paella log, piped to tail -n 5": "paella log | tail -n 5",
    # The kept state removed first: what the first command after an upgrade (or after the
    # agent damaged state.json) pays to fold the whole ledger again.
    "paella status, state.json removed": "rm -f .git/paella/runs/*/state.json; paella status",
}


def _record(run: Run, event: Event) -> None:
    """Hand ``event`` to the ledger's writer as the run loop does (``append_soon``: its kind
    and fields, chained and fsynced by the writer thread, in batches when they come fast)."""
    kind = event.kind or "agent-stats"
    run.ledger.append_soon(kind, **event.record())


def grow(
    run: Run, snapshotter: Snapshotter, target: int, count: int, cycle: int
) -> tuple[int, int]:
    """Append cycles of ten records until the ledger holds ``target``; (records, cycles)."""
    while count < target:
        tree = f"{cycle:040x}"
        _record(run, EvaluationStarted(tree=tree, reason="settled", gates=("unit", "lint")))
        results = []
        for gate in ("unit", "lint"):
            _record(run, GateStarted(gate=gate, tree=tree))
            status = "fail" if (cycle + len(gate)) % 7 == 0 else "pass"
            result = GateResult(gate=gate, status=status, tree=tree, duration_s=1.5, exit_code=0)
            results.append(result)
            _record(run, GateFinished(result=result))
        _record(run, EvaluationFinished(tree=tree, results=tuple(results), complete_episodes=1))
        for _ in range(4):
            _record(
                run,
                AgentStats(
                    attempt=1, cpu_percent=12.5, rss_bytes=200_000_000, descendants=3, uptime_s=9.0
                ),
            )
        count += 10
        cycle += 1
        if cycle % (CHECKPOINT_EVERY // 10) == 0:
            take_checkpoint(run, snapshotter, episode=1, gates_green=("unit",), label="bench")
            count += 1
    return count, cycle


def _time(command: str, cwd: Path, scratch: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes of its largest process) of ``command`` in a shell.

    The RSS comes from ``/usr/bin/time``: a child forked from this process would inherit this
    process's high-water mark in ``ru_maxrss``, the small ``time`` passes on none.
    """
    report = scratch / "rss"
    start = time.perf_counter()
    subprocess.run(
        ["/usr/bin/time", "-f", "%M", "-o", str(report), "sh", "-c", command],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        env=terminal_env(scratch / "pycache"),
        check=True,
    )
    elapsed = time.perf_counter() - start
    return elapsed, int(report.read_text().split()[-1]) * 1024


def stop(run: Run) -> None:
    """End the attempt as a person's stop does (its exit and the run's stop, recorded): the next
    ``paella resume`` has nothing left to decide and starts the agent at once."""
    _record(run, AgentExited(attempt=1, exit_code=None, signal=15, stopped_by_user=True))
    _record(run, RunStopped(reason="stopped by you"))
    run.ledger.flush()


def paella_status(repo: Path, scratch: Path) -> None:
    """One ``paella status`` (it keeps the run's folded state beside the ledger)."""
    subprocess.run(
        ["paella", "status"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        env=terminal_env(scratch / "pycache"),
        check=True,
    )


def seed_seconds(run: Run, snapshotter: Snapshotter) -> float:
    """Time the evaluator's seed from the run's ledger (what a resumed run did first)."""
    contract = run.load_contract()
    assert contract is not None
    history = RunView.load(run).of_kind("gate-finished")

    async def build() -> float:
        start = time.perf_counter()
        evaluator = Evaluator(
            run=run,
            contract=contract,
            snapshotter=snapshotter,
            emit=lambda _e, _s: None,
            history=history,
        )
        elapsed = time.perf_counter() - start
        await evaluator.close()
        return elapsed

    return asyncio.run(build())


Row = tuple[int, int, str, float, float, int, int]
"""records, checkpoints, measure, fresh median (s), grown median (s), fresh RSS, grown RSS"""


def time_commands(
    spaces: dict[str, Path], root: Path, repeat: int, commands: dict[str, str]
) -> dict[str, Row]:
    """Every command of ``commands`` in both workspaces, warm, interleaved round-robin."""
    times: dict[tuple[str, str], list[float]] = {}
    rss: dict[tuple[str, str], int] = {}
    for command in commands.values():
        for repo in spaces.values():
            _time(command, repo, root)  # warm
    for _ in range(repeat):
        for name, command in commands.items():
            for where, repo in spaces.items():
                elapsed, peak = _time(command, repo, root)
                times.setdefault((name, where), []).append(elapsed)
                rss[(name, where)] = max(rss.get((name, where), 0), peak)
    return {
        name: (
            0,
            0,
            name,
            median(times[(name, "fresh")]),
            median(times[(name, "grown")]),
            rss[(name, "fresh")],
            rss[(name, "grown")],
        )
        for name in commands
    }


TUI_PAINTED = "TUI resume: board painted"
TUI_AGENT = "TUI resume: the agent's line shown"


def time_tui(spaces: dict[str, Path], root: Path, repeat: int) -> dict[str, Row]:
    """``paella resume`` in the TUI in both workspaces, interleaved, after one untimed each."""
    env = terminal_env(root / "pycache")
    found: dict[str, list[ResumeTimes]] = {where: [] for where in spaces}
    for timed in [False] + [True] * repeat:  # one untimed round first
        for where, repo in spaces.items():
            run = RunStore(Workspace.find(repo)).current()
            assert run is not None
            count = len(RunView.load(run).checkpoints)
            times = time_resume(repo, checkpoints=count, agent_line=AGENT_LINE, env=env, root=root)
            if timed:
                found[where].append(times)
    rows = {}
    for name, pick in ((TUI_PAINTED, "painted"), (TUI_AGENT, "agent_line")):
        fresh = median([getattr(t, pick) for t in found["fresh"]])
        grown = median([getattr(t, pick) for t in found["grown"]])
        peaks = {w: max(t.peak_rss for t in found[w]) for w in spaces}
        rows[name] = (0, 0, name, fresh, grown, peaks["fresh"], peaks["grown"])
    for where, results in found.items():
        log(f"  TUI resume, {where}: stopped by {results[-1].stopped}")
    return rows


def make_spaces(root: Path) -> dict[str, tuple[Path, Run, Snapshotter]]:
    """The fresh and the grown workspace, each with a run opened through the engine."""
    spaces = {}
    for name in ("fresh", "grown"):
        repo = root / name
        new_repo(repo)
        for i in range(200):
            (repo / "src" / f"m{i}.py").write_text(f"X = {i}\n")
        commit_workspace(repo, CONTRACT)
        workspace = Workspace.find(repo)
        contract = load_contract(repo / "paella.toml")
        run = RunStore(workspace).create(contract, manual=False)
        _record(run, AgentStarted(attempt=1, pid=1, create_time=0.0, argv=("sleep", "3600")))
        spaces[name] = (repo, run, Snapshotter(workspace))
    return spaces


def commands_of(args: argparse.Namespace, root: Path) -> dict[str, str]:
    """The commands timed: ``COMMANDS``, and with ``--before`` the other checkout's checkpoint
    and status (each version with its own mirror)."""
    commands = dict(COMMANDS)
    if args.before is not None:
        before = f"PYTHONPATH={args.before.resolve()} XDG_STATE_HOME={root / 'state-before'}"
        commands["paella checkpoint, --before"] = f"{before} paella checkpoint --label bench"
        commands["paella status, --before"] = f"{before} paella status"
    return commands


def measure(
    args: argparse.Namespace, root: Path
) -> tuple[list[Row], list[tuple[int, float, float]]]:
    """Grow the ledger size after size; at each, the commands and the TUI resume, side by side."""
    spaces = make_spaces(root)
    fresh_repo, fresh_run, fresh_snap = spaces["fresh"]
    grown_repo, grown_run, grown_snap = spaces["grown"]
    grow(fresh_run, fresh_snap, 20, 2, 0)
    take_checkpoint(fresh_run, fresh_snap, episode=1, gates_green=("unit",), label="bench")
    stop(fresh_run)
    count, cycle = 2, 0
    repos = {"fresh": fresh_repo, "grown": grown_repo}
    rows: list[Row] = []
    seeds: list[tuple[int, float, float]] = []
    for size in [int(s) for s in args.sizes.split(",")]:
        started = time.perf_counter()
        count, cycle = grow(grown_run, grown_snap, size, count, cycle)
        stop(grown_run)
        ledger = grown_run.ledger.path.stat().st_size
        log(f"{count:,} records ({ledger / 1e6:.1f} MB) in {time.perf_counter() - started:.0f} s")
        checkpoints = len(RunView.load(grown_run).checkpoints)
        paella_status(grown_repo, root)  # the kept state, as any command after the growth leaves it
        measured = {}
        if not args.tui_only:
            measured |= time_commands(repos, root, args.repeat, commands_of(args, root))
        if not args.no_tui:
            measured |= time_tui(repos, root, args.repeat)
        for name, row in measured.items():
            rows.append((count, checkpoints, *row[2:]))
            # Said as it comes: a long run shows its curve before it ends.
            log(
                f"  {name}: fresh {ms(row[3])}, grown {ms(row[4])} ({row[4] / row[3]:.2f} ×), "
                f"RSS {row[6] / 1e6:.1f} MB"
            )
        if not args.tui_only:
            seeds.append(
                (count, seed_seconds(fresh_run, fresh_snap), seed_seconds(grown_run, grown_snap))
            )
    return rows, seeds


TARGETS = {
    "paella status": 1.3,
    "paella checkpoints": 1.3,
    "paella checkpoint": 1.3,
    TUI_PAINTED: 1.5,
}


def report(
    args: argparse.Namespace, rows: list[Row], seeds: list[tuple[int, float, float]]
) -> None:
    """The tables: the curve, the evaluator's seed, the targets at the largest size."""
    load = os.getloadavg()
    print(f"{cores_line()}\n{python_line()}\n- git {git_version()}")
    print(f"- load average at the end: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}")
    print(f"- medians of {args.repeat} interleaved runs each, after one warm-up\n")
    print(
        "| records | checkpoints | measure | fresh run | grown run | ratio | RSS fresh | RSS grown |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for count, checkpoints, name, fresh, grown, rss_fresh, rss_grown in rows:
        print(
            f"| {count:,} | {checkpoints:,} | {name} | {ms(fresh)} | {ms(grown)} "
            f"| {grown / fresh:.2f} × | {rss_fresh / 1e6:.1f} MB | {rss_grown / 1e6:.1f} MB |"
        )
    if seeds:
        print("\n| records | evaluator seed, fresh run | evaluator seed, grown run |")
        print("|---:|---:|---:|")
        for count, fresh, grown in seeds:
            print(f"| {count:,} | {ms(fresh)} | {ms(grown)} |")
    last = [r for r in rows if r[0] == rows[-1][0]]
    print("\n| target (at the largest size) | measured | verdict |")
    print("|---|---|---|")
    for _count, _c, name, fresh, grown, _rf, rss_grown in last:
        bound = TARGETS.get(name)
        if bound is not None:
            ratio = grown / fresh
            verdict = "PASS" if ratio <= bound else "**FAIL**"
            print(f"| {name} ≤ {bound} × a fresh run | {ratio:.2f} × | {verdict} |")
        verdict = "PASS" if rss_grown < 80e6 else "**FAIL**"
        print(f"| {name}: RSS < 80 MB | {rss_grown / 1e6:.1f} MB | {verdict} |")


def main() -> int:
    """Grow the ledger, time the commands and the TUI's resume at each size, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="DIR",
        help="also time `paella checkpoint` and `paella status` of the paella checkout in DIR "
        "(`git archive <commit> | tar -x -C DIR`), interleaved, each version with its own mirror",
    )
    parser.add_argument("--no-tui", action="store_true", help="the commands only")
    parser.add_argument("--tui-only", action="store_true", help="the TUI's resume only")
    args = parser.parse_args()
    if not shutil.which("/usr/bin/time"):
        print("/usr/bin/time is needed for the RSS (apt-get install time)", file=sys.stderr)
        return 2
    if not shutil.which("paella"):
        print("paella is not on PATH: activate the project's virtual environment", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        root = work_folder(stack, args.keep, "paella-history-")
        # The mirrors go there, not in the home folder; a --before checkout has its own.
        os.environ["XDG_STATE_HOME"] = str(root / "state")
        rows, seeds = measure(args, root)
    report(args, rows, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
