"""A burst of new files that git does not ignore: paella's watcher against one ``git add -A``.

Side by side in one run, on a repository of ``--tracked`` committed files: a child process runs
the engine's ``WorkspaceWatcher`` (settle 1 s), this process writes ``--files`` new files
(100 a folder, in ``vendor<round>/``), waits until the watcher has reported the settled burst, then
deletes them and waits again; ``--rounds`` times. What the burst cost the watcher is its
process's CPU (its own and its git children's, psutil) from before the first write to the
settled report. The baseline is one ``git add -A`` of the same files into a copy of the index
(its CPU from ``getrusage``), and for the deletion ``git add -A`` after the files are gone.
Target (issue 17): paella ≤ 1.5 × the baseline, on the median of the rounds. Where the cost
went: each thread's CPU (``/proc/<pid>/task``; the child names its threads) and the git
processes the watcher started, by subcommand. Prints Markdown tables; exits 0 either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# Run as a script (``python benchmarks/burst.py``, as its children are), Python puts only this
# folder on sys.path, and the editable install maps only paella_tui: add the repository root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import clean_env, git, log, new_repo
from benchmarks.machine import cores_line, git_version, python_line

CHILD = r"""
import asyncio, collections, ctypes, json, sys, threading, time
from paella_tui.supervisor.store import gitcli
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher
from paella_tui.supervisor.watch.flapping import FlapGuard
from paella_tui.supervisor.store.workspace import Workspace

# Each thread carries its Python name in the kernel (``comm``), so that the benchmark can read
# its CPU from /proc by name; and each git process the watcher starts is counted by subcommand.
_prctl = ctypes.CDLL(None).prctl
_start = threading.Thread._bootstrap_inner
def _named(self):
    _prctl(15, self.name[:15].encode(), 0, 0, 0)
    _start(self)
threading.Thread._bootstrap_inner = _named
GIT = collections.Counter()
_run = gitcli.Git.run
def _counted(self, args, *rest, **kw):
    GIT[args[0]] += 1
    return _run(self, args, *rest, **kw)
gitcli.Git.run = _counted

async def main():
    def settled(paths):
        print(json.dumps({"settled": len(paths), "t": time.time(), "git": GIT}), flush=True)
    watcher = WorkspaceWatcher(Workspace.find(), settle=1.0, on_settled=settled, flaps=FlapGuard(10**6))
    task = asyncio.ensure_future(watcher.run())
    await watcher.wait_ready()
    print(json.dumps({"ready": True, "git": GIT}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    watcher.stop()
    await task

asyncio.run(main())
"""


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its name and CPU seconds (utime + stime, 10 ms ticks)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            name = "MainThread" if name == "python" else name
            found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return found


def _by_name(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU each thread name took between two readings (threads of one name add up; a thread
    that ended meanwhile, a replaced watch, is missing: the process total has it)."""
    spent: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        spent[name] = spent.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    return spent


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _write(top: Path, files: int) -> None:
    for i in range(files):
        folder = top / f"p{i // 10000}" / f"d{i // 100}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        # New content each round: git skips writing an object it already has.
        (folder / f"f{i}.c").write_text(f"int {top.name}_f{i}(void) {{ return {i}; }}\n")


def _wait_settled(
    child: subprocess.Popen[str], quiet: float = 3.0
) -> tuple[int, float, dict[str, int]]:
    """Read settled reports until none comes for ``quiet`` seconds; (paths, time of the last,
    the git counts it gave)."""
    assert child.stdout is not None
    total, last = 0, 0.0
    counts: dict[str, int] = {}
    os.set_blocking(child.stdout.fileno(), False)
    deadline = time.monotonic() + 600
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if line:
            report = json.loads(line)
            total += report.get("settled", 0)
            last = report.get("t", last)
            counts = report.get("git", counts)
            idle_since = time.monotonic()
        elif total and time.monotonic() - idle_since > quiet:
            break
        else:
            time.sleep(0.05)
    return total, last, counts


def _baseline(repo: Path, index: Path) -> tuple[float, float]:
    """(CPU, wall) of ``git add -A`` into ``index``."""
    env = {**clean_env(), "GIT_INDEX_FILE": str(index)}
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    return _children_cpu() - cpu0, time.perf_counter() - wall0


@dataclass
class Burst:
    """What one burst cost, in the watcher's process and in the baseline."""

    what: str
    own: float
    git: float
    baseline: float
    reported: int
    threads: dict[str, float]
    git_calls: dict[str, int]
    settled_after: float

    @property
    def ratio(self) -> float:
        """paella's total against the baseline."""
        return (self.own + self.git) / self.baseline if self.baseline else float("inf")


def _build(repo: Path, tracked: int) -> None:
    new_repo(repo)
    for i in range(tracked):
        folder = repo / "src" / f"m{i // 1000}" / f"s{i // 50}"
        if i % 50 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"t{i}.py").write_text(f"X = {i}\n")
    (repo / ".gitignore").write_text("build/\nnode_modules/\n*.log\n__pycache__/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")


def _bursts(repo: Path, index: Path, files: int, rounds: int) -> list[Burst]:
    """Run the watcher in a child; create and delete ``files`` files ``rounds`` times."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert child.stdout is not None and child.stdin is not None
    counts: dict[str, int] = json.loads(child.stdout.readline())["git"]  # ready
    proc = psutil.Process(child.pid)
    found: list[Burst] = []
    try:
        for n in range(rounds):
            shutil.copy(repo / ".git" / "index", index)
            for what in ("create", "delete"):
                own0, kids0 = _cpu(proc)
                threads0 = _threads(child.pid)
                log(f"round {n + 1}, {what}: {files:,} files")
                # A new folder each round keeps the rounds alike (a watched folder deleted and
                # made again is watched again now: tests/test_watcher_rewatch.py).
                top = repo / f"vendor{n}"
                if what == "create":
                    _write(top, files)
                else:
                    shutil.rmtree(top)
                written = time.time()
                total, last, after = _wait_settled(child)
                own1, kids1 = _cpu(proc)
                threads1 = _threads(child.pid)
                base_cpu, _wall = _baseline(repo, index)
                threads = _by_name(threads0, threads1)
                calls = {k: v - counts.get(k, 0) for k, v in after.items() if v > counts.get(k, 0)}
                counts = after or counts
                found.append(
                    Burst(
                        what,
                        own1 - own0,
                        kids1 - kids0,
                        base_cpu,
                        total,
                        threads,
                        calls,
                        last - written,
                    )
                )
    finally:
        child.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(10)
        if child.poll() is None:
            child.kill()
    return found


def _report(bursts: list[Burst], files: int, tracked: int) -> None:
    print(f"{cores_line()}\n{python_line()}\n- git {git_version()}")
    print(f"- {tracked:,} tracked files; a burst of {files:,} new files, not ignored\n")
    print(
        "| burst | paella's own CPU | its git children | paella total "
        "| `git add -A` (baseline) CPU | ratio | git processes | paths reported "
        "| settled report after the last write |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for b in bursts:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(b.git_calls.items())) or "none"
        print(
            f"| {b.what} | {b.own:.2f} s | {b.git:.2f} s | {b.own + b.git:.2f} s "
            f"| {b.baseline:.2f} s | {b.ratio:.2f} × | {calls} | {b.reported:,} "
            f"| {b.settled_after:+.1f} s |"
        )
    print("\n| burst | median ratio (rounds) | target | verdict |\n|---|---:|---|---|")
    for what in ("create", "delete"):
        ratios = [b.ratio for b in bursts if b.what == what]
        ratio = statistics.median(ratios)
        verdict = "PASS" if ratio <= 1.5 else "**FAIL**"
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"| {what} | {ratio:.2f} × ({shown}) | ≤ 1.5 × | {verdict} |")
    names = sorted({k for b in bursts for k, v in b.threads.items() if v > 0})
    print("\nThe watcher's own CPU by thread (seconds, each burst):\n")
    print("| burst | " + " | ".join(f"`{n}`" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    for b in bursts:
        print(f"| {b.what} | " + " | ".join(f"{b.threads.get(n, 0.0):.2f}" for n in names) + " |")


def main() -> int:
    """Build the repository, run the bursts, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--tracked", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="paella-burst-") as tmp:
        repo = Path(tmp) / "repo"
        log(f"building a repository of {args.tracked:,} files")
        _build(repo, args.tracked)
        bursts = _bursts(repo, Path(tmp) / "index.copy", args.files, args.rounds)
    _report(bursts, args.files, args.tracked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
