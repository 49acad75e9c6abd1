"""Rollback against ``git read-tree -u --reset`` of the same two trees (issue 17).

Builds (or reuses, with ``--keep DIR``) the repository of ``benchmarks/checkpoint.py`` (~20,000
tracked files, 160 MiB), takes one checkpoint, then for each scenario (``--changes``, default 100
and 5,000 paths: four in five edited, one in ten deleted, one in ten new) repeats, interleaved:

* the agent's damage, then paella's rollback to the checkpoint through the Python API, as
  ``paella rollback`` does it (salvage snapshot and its mirror copy, restore, HEAD and index,
  verification), with every git process paella starts counted;
* the same damage, then ``paella rollback N --yes`` as a whole process (Python's start, the
  imports, the trust checks, the rollback, the mirror's copy of the ledger after it), with
  compiled bytecode cached as an installation has it;
* the same damage salvaged by git alone (a copy of the user's index, ``git add -A``,
  ``git write-tree``: the floor of any salvage), then ``git read-tree -u --reset <checkpoint
  tree>`` from an index that holds the damaged tree with fresh stat data (as git's own checkout
  would leave it): git restoring the same trees with nothing else (no verification, no
  byte-exactness, no mirror).

Each measure of a round gets the same paths with bytes of its own, so that no salvage finds its
blobs already written by another's.

It prints a Markdown table per scenario (median, p90, ratios to ``read-tree`` and to the git
floor, git processes) and
the targets: at most 2 × ``read-tree`` at 100 changes, under 1 s at 5,000 restored paths. It
exits 0 once it has measured: it is a report.

Usage::

    python -m benchmarks.rollback [--files 20000] [--size-mb 160] [--repeat 5]
                                  [--changes 100,5000] [--keep DIR] [--before DIR]

``--before DIR`` also times the rollback of the paella checkout in ``DIR`` (for instance
``git archive <commit> | tar -x -C DIR``), interleaved in the same rounds, in a process of its
own (timed inside it, from the same point) and with a mirror of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.checkpoint import (
    clean_env,
    find_paella,
    git,
    git_out,
    make_layout,
    prepare_repo,
)
from benchmarks.harness import log
from benchmarks.machine import cores_line, git_version, python_line
from benchmarks.stats import median, ms, p90
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace

RATIO_TARGET = 2.0
"""Rollback of 100 changes on 20,000 files: at most this × ``git read-tree -u --reset``."""
MANY = 5000
ABSOLUTE_TARGET_S = 1.0
"""Rollback with 5,000 restored paths: under this."""


@contextlib.contextmanager
def counting_git(counter: list[int]) -> Iterator[None]:
    """Count every git process paella starts in this process while the block runs."""
    run, popen = Git.run, Git.popen

    def counted_run(self: Git, args: Sequence[str], **kwargs: Any) -> Any:
        counter[0] += 1
        return run(self, args, **kwargs)

    def counted_popen(self: Git, args: Sequence[str]) -> Any:
        counter[0] += 1
        return popen(self, args)

    Git.run = counted_run  # type: ignore[method-assign]
    Git.popen = counted_popen  # type: ignore[method-assign]
    try:
        yield
    finally:
        Git.run = run  # type: ignore[method-assign]
        Git.popen = popen  # type: ignore[method-assign]


class Damage:
    """The agent's changes of one scenario: the same paths every round, new bytes each round."""

    def __init__(self, root: Path, tracked: list[str], count: int) -> None:
        self.root = root
        step = max(1, len(tracked) // count)
        chosen = tracked[::step][:count]
        tenth = max(1, count // 10)
        self.deleted = chosen[:tenth]
        self.edited = chosen[tenth : count - tenth]
        self.new = [f"bench_rollback/new_{i:05d}.txt" for i in range(count - len(chosen) + tenth)]

    def apply(self, round_: int, variant: int = 0) -> None:
        """Edit, delete and create this scenario's paths (deterministic for ``round_`` and
        ``variant``: each measure of a round gets bytes of its own, so none finds the blobs
        another measure's salvage already wrote)."""
        for rel in self.edited:
            with open(self.root / rel, "ab") as handle:
                handle.write(f"# rollback round {round_}.{variant}\n".encode())
        for rel in self.deleted:
            (self.root / rel).unlink()
        if self.new:
            (self.root / "bench_rollback").mkdir(exist_ok=True)
        for rel in self.new:
            (self.root / rel).write_text(f"new in round {round_}.{variant}\n")

    @property
    def paths(self) -> int:
        """How many paths a rollback restores."""
        return len(self.edited) + len(self.deleted) + len(self.new)


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """CPU seconds (user + system) used so far by this process (``RUSAGE_SELF``) or by its
    waited-for children (``RUSAGE_CHILDREN``): steadier than wall time on a loaded machine."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def all_cpu() -> float:
    """CPU seconds of this process and its waited-for children (paella's git processes)."""
    return cpu_seconds() + cpu_seconds(resource.RUSAGE_CHILDREN)


def paella_rollback(root: Path, target: SnapshotRecord) -> tuple[float, int, str, int, float]:
    """Seconds, git processes, the salvage tree, paths changed, CPU seconds (with git's)."""
    counter = [0]
    cpu = all_cpu()
    started = time.perf_counter()
    with counting_git(counter):
        workspace = Workspace.find(root)
        run = RunStore(workspace).current_or_manual("benchmark rollback")
        result = rollback(run, target, snapshotter=Snapshotter(workspace))
    elapsed = time.perf_counter() - started
    return elapsed, counter[0], result.salvage.tree, result.changed, all_cpu() - cpu


BEFORE_WORKER = """
import resource, sys, time
from pathlib import Path
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.mirror import Mirror
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

root = Path(sys.argv[1])
if sys.argv[2] == "mirror":
    problem = Mirror.for_workspace(Workspace.find(root)).ensure()
    sys.exit(1 if problem else 0)
target = checkpoints.find(RunStore(Workspace.find(root)).current(), sys.argv[2])
def cpu():
    return sum(
        u.ru_utime + u.ru_stime
        for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
used = cpu()
started = time.perf_counter()
workspace = Workspace.find(root)
run = RunStore(workspace).current_or_manual("benchmark rollback")
result = rollback(run, target, snapshotter=Snapshotter(workspace))
print(time.perf_counter() - started, result.salvage.tree, result.changed, cpu() - used)
"""
"""The same rollback with another checkout's code (``--before``): timed inside the process, from
the same point as :func:`paella_rollback`, so Python's start and imports are left out of both."""


def before_rollback(root: Path, target: SnapshotRecord, before: Path) -> tuple[float, float]:
    """Seconds and CPU seconds of the ``--before`` checkout's rollback (its own mirror)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(before),
        "XDG_STATE_HOME": os.path.join(os.environ["XDG_STATE_HOME"], "before"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", BEFORE_WORKER, str(root), target.name],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the --before rollback failed: {proc.stderr[-2000:]}")
    seconds, _tree, _changed, cpu = proc.stdout.split()
    return float(seconds), float(cpu)


def before_rollback_mirror(root: Path, before: Path) -> None:
    """Create the ``--before`` checkout's mirror (untimed)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(before),
        "XDG_STATE_HOME": os.path.join(os.environ["XDG_STATE_HOME"], "before"),
    }
    subprocess.run([sys.executable, "-c", BEFORE_WORKER, str(root), "mirror"], env=env, check=True)


def cli_rollback(root: Path, target: SnapshotRecord) -> tuple[float, float]:
    """Seconds and CPU seconds (with its git children's) of one ``paella rollback N --yes``."""
    env = clean_env()
    # As installed, python finds compiled bytecode; kept in the benchmark repository's .git.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / ".git" / "bench-pycache")
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [*find_paella(), "rollback", target.name, "--yes"],
        cwd=root,
        env=env,
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"paella rollback failed ({proc.returncode}): {proc.stderr.decode()}")
    return elapsed, cpu_seconds(resource.RUSAGE_CHILDREN) - cpu


def git_salvage(root: Path, index: Path) -> tuple[float, str, float]:
    """Seconds, tree and CPU seconds of the salvage done as simply as git allows: a copy of the user's index,
    ``git add -A`` (hashing and writing the changed files), ``git write-tree``."""
    env = {**clean_env(), "GIT_INDEX_FILE": str(index)}
    cpu = all_cpu()
    started = time.perf_counter()
    shutil.copyfile(root / ".git" / "index", index)
    git(root, "add", "-A", env=env)
    tree = git_out(root, "write-tree", env=env).strip()
    return time.perf_counter() - started, tree, all_cpu() - cpu


def git_read_tree(root: Path, from_tree: str, to_tree: str, index: Path) -> tuple[float, float]:
    """Seconds and CPU seconds of ``git read-tree -u --reset to_tree`` from an index of ``from_tree`` (refreshed)."""
    env = {**clean_env(), "GIT_INDEX_FILE": str(index)}
    git(root, "read-tree", from_tree, env=env)
    git(root, "update-index", "-q", "--refresh", env=env, check=False)
    dirty = git(root, "diff-files", "--quiet", env=env, check=False).returncode
    if dirty:
        raise SystemExit("the damage did not reproduce the salvage tree: the measure is not fair")
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    git(root, "read-tree", "-u", "--reset", to_tree, env=env)
    return time.perf_counter() - started, cpu_seconds(resource.RUSAGE_CHILDREN) - cpu


def scenario(
    root: Path, target: SnapshotRecord, damage: Damage, repeat: int, before: Path | None
) -> list[str]:
    """Time the measures ``repeat`` rounds, interleaved; the scenario's table."""
    paella: list[float] = []
    earlier: list[float] = []
    read_tree: list[float] = []
    whole: list[float] = []
    floor: list[float] = []
    cpu: dict[str, list[float]] = {"paella": [], "whole": [], "before": [], "git": [], "floor": []}
    processes: list[int] = []
    changed = 0
    with tempfile.TemporaryDirectory(prefix="paella-rb-index-") as tmp:
        index = Path(tmp) / "index"
        for round_ in range(1, repeat + 1):
            damage.apply(round_, 0)
            seconds, count, _salvage_tree, changed, used = paella_rollback(root, target)
            paella.append(seconds)
            cpu["paella"].append(used)
            processes.append(count)
            if before is not None:
                damage.apply(round_, 1)
                seconds, used = before_rollback(root, target, before)
                earlier.append(seconds)
                cpu["before"].append(used)
            damage.apply(round_, 2)
            seconds, used = cli_rollback(root, target)
            whole.append(seconds)
            cpu["whole"].append(used)
            damage.apply(round_, 3)
            salvaged, salvage_tree, salvage_cpu = git_salvage(root, Path(tmp) / "salvage-index")
            seconds, used = git_read_tree(root, salvage_tree, target.tree, index)
            read_tree.append(seconds)
            floor.append(salvaged + seconds)
            cpu["git"].append(used)
            cpu["floor"].append(salvage_cpu + used)
            log(
                f"  round {round_}: paella {ms(paella[-1])} ({count} git), "
                + f"CLI {ms(whole[-1])}, "
                + (f"before {ms(earlier[-1])}, " if earlier else "")
                + f"git {ms(read_tree[-1])} (+ salvage {ms(floor[-1] - read_tree[-1])})"
            )
    base = median(read_tree)
    least = median(floor)
    rows = [
        f"### {damage.paths:,} paths restored ({changed:,} changed), {repeat} rounds",
        "",
        "| measure | median | p90 | × read-tree | × git floor | git processes | CPU (with git's) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| `git read-tree -u --reset` (same trees) | {ms(base)} | {ms(p90(read_tree))} | 1.00 | "
        f"{base / least:.2f} | 1 | {ms(median(cpu['git']))} |",
        f"| paella rollback (Python API) | {ms(median(paella))} | {ms(p90(paella))} | "
        f"{median(paella) / base:.2f} | {median(paella) / least:.2f} | {median(processes):g} | "
        f"{ms(median(cpu['paella']))} |",
        f"| `paella rollback N --yes` (whole process) | {ms(median(whole))} | {ms(p90(whole))} | "
        f"{median(whole) / base:.2f} | {median(whole) / least:.2f} | | {ms(median(cpu['whole']))} |",
    ]
    if earlier:
        rows.append(
            f"| paella rollback, `--before` (Python API) | {ms(median(earlier))} | "
            f"{ms(p90(earlier))} | {median(earlier) / base:.2f} | {median(earlier) / least:.2f} | | "
            f"{ms(median(cpu['before']))} |"
        )
    rows.append(
        f"| git floor: salvage (`add -A`, `write-tree`) + `read-tree -u --reset` | {ms(least)} | "
        f"{ms(p90(floor))} | {least / base:.2f} | 1.00 | 4 | {ms(median(cpu['floor']))} |"
    )
    return [*rows, ""]


def main(argv: Sequence[str] | None = None) -> int:
    """Build or reuse the repository, run the scenarios, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=20_000, help="tracked files (default 20000)")
    parser.add_argument("--size-mb", type=int, default=160, help="MiB of tracked files (160)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per scenario (default 5)")
    parser.add_argument("--changes", default=f"100,{MANY}", help="paths per scenario (100,5000)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build in DIR and keep it")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also time the rollback of the paella checkout in DIR, interleaved (its own mirror)",
    )
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.changes.split(",") if c.strip()]
    if args.files < 1000 or args.repeat < 1 or not counts or max(counts) * 2 > args.files:
        parser.error("need --files ≥ 1000, --repeat ≥ 1, changes ≤ half the files")
    os.environ.pop(STATE_DIR_ENV, None)
    with contextlib.ExitStack() as stack:
        state = stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-rb-state-"))
        os.environ["XDG_STATE_HOME"] = state  # the mirror goes there, not in the home folder
        if args.keep is not None:
            root = args.keep.resolve()
        else:
            temp = stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-rb-"))
            root = Path(temp) / "repo"
        prepare_repo(root, make_layout(args.files, args.size_mb, 300))
        workspace = Workspace.find(root)
        run = RunStore(workspace).current_or_manual("benchmark rollback")
        target = checkpoints.take_checkpoint(run, Snapshotter(workspace), label="rollback bench")
        before = args.before.resolve() if args.before else None
        if before is not None:
            # Its mirror is made before the rounds, as this version's is by the checkpoint.
            before_rollback_mirror(root, before)
        tracked = git_out(root, "ls-files", "--", "*.py", "*.md", "*.txt").splitlines()
        lines = [f"## Rollback on {args.files:,} tracked files", ""]
        results: dict[int, list[str]] = {}
        for count in counts:
            log(f"scenario: {count} paths")
            damage = Damage(root, tracked, count)
            results[count] = scenario(root, target, damage, args.repeat, before)
            lines += results[count]
        lines += targets(results)
        lines.append(f"machine: {cores_line()}; {python_line()}; {git_version()}")
    print("\n".join(lines), flush=True)
    return 0


def targets(results: dict[int, list[str]]) -> list[str]:
    """The issue's two targets, PASS or FAIL, read back from the tables' rows."""
    out = ["| target | measured | met |", "|---|---:|:---:|"]
    for count, table in results.items():
        row = table[5].split("|")
        median_ms = float(row[2].strip().split()[0].replace(",", ""))
        ratio = float(row[4])
        if count <= 100:
            out.append(
                f"| rollback ≤ {RATIO_TARGET:g} × read-tree ({count} paths) | {ratio:.2f} × | "
                f"{'PASS' if ratio <= RATIO_TARGET else 'FAIL'} |"
            )
        whole = table[6].split("|")
        out.append(
            f"| (for information) the same, `paella rollback` whole process ({count:,} paths) | "
            f"{whole[2].strip()} = {float(whole[4]):.2f} × | |"
        )
        if count >= MANY:
            out.append(
                f"| rollback < {ABSOLUTE_TARGET_S:g} s ({count:,} paths) | {median_ms:,.0f} ms | "
                f"{'PASS' if median_ms < ABSOLUTE_TARGET_S * 1000 else 'FAIL'} |"
            )
    return [*out, ""]


if __name__ == "__main__":
    sys.exit(main())
