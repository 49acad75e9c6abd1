"""A burst of new files that git does not ignore: paella's watcher against one ``git add -A``.

Side by side in one run, on a repository of ``--tracked`` committed files: a child process runs
the engine's ``WorkspaceWatcher`` (settle 1 s), this process writes ``--files`` new files
(100 a folder, in ``vendor/``), waits until the watcher has reported the settled burst, then
deletes them and waits again. What the burst cost the watcher is its process's CPU (its own
and its git children's, psutil) from before the first write to the settled report. The
baseline is one ``git add -A`` of the same files into a copy of the index (its CPU from
``getrusage``), and for the deletion ``git add -A`` after the files are gone. Target (issue 17):
paella ≤ 1.5 × the baseline. Prints a Markdown table; exits 0 either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.harness import clean_env, git, log, new_repo
from benchmarks.machine import cores_line, git_version, python_line

CHILD = r"""
import asyncio, json, sys, time
from paella_tui.supervisor.watch.watcher import WorkspaceWatcher
from paella_tui.supervisor.store.workspace import Workspace

async def main():
    def settled(paths):
        print(json.dumps({"settled": len(paths), "t": time.time()}), flush=True)
    watcher = WorkspaceWatcher(Workspace.find(), settle=1.0, on_settled=settled, flap_limit=10**6)
    task = asyncio.ensure_future(watcher.run())
    await watcher.wait_ready()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    watcher.stop()
    await task

asyncio.run(main())
"""


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _write(repo: Path, files: int) -> None:
    for i in range(files):
        folder = repo / "vendor" / f"p{i // 10000}" / f"d{i // 100}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.c").write_text(f"int f{i}(void) {{ return {i}; }}\n")


def _wait_settled(child: subprocess.Popen[str], quiet: float = 3.0) -> tuple[int, float]:
    """Read settled reports until none comes for ``quiet`` seconds; (paths, time of last)."""
    assert child.stdout is not None
    total, last = 0, 0.0
    os.set_blocking(child.stdout.fileno(), False)
    deadline = time.monotonic() + 600
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if line:
            report = json.loads(line)
            total += report.get("settled", 0)
            last = report.get("t", last)
            idle_since = time.monotonic()
        elif total and time.monotonic() - idle_since > quiet:
            break
        else:
            time.sleep(0.05)
    return total, last


def _baseline(repo: Path, index: Path) -> tuple[float, float]:
    """(CPU, wall) of ``git add -A`` into ``index``."""
    env = {**clean_env(), "GIT_INDEX_FILE": str(index)}
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    return _children_cpu() - cpu0, time.perf_counter() - wall0


def main() -> int:
    """Build the repository, run the bursts, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--tracked", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="paella-burst-") as tmp:
        repo = Path(tmp) / "repo"
        log(f"building a repository of {args.tracked:,} files")
        new_repo(repo)
        for i in range(args.tracked):
            folder = repo / "src" / f"m{i // 1000}" / f"s{i // 50}"
            if i % 50 == 0:
                folder.mkdir(parents=True, exist_ok=True)
            (folder / f"t{i}.py").write_text(f"X = {i}\n")
        (repo / ".gitignore").write_text("build/\nnode_modules/\n*.log\n__pycache__/\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "base")
        index = Path(tmp) / "index.copy"
        shutil.copy(repo / ".git" / "index", index)

        child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        assert child.stdout is not None and child.stdin is not None
        json.loads(child.stdout.readline())  # ready
        proc = psutil.Process(child.pid)
        rows: list[tuple[str, float, float, float, float, int]] = []
        try:
            for what in ("create", "delete"):
                own0, kids0 = _cpu(proc)
                start = time.time()
                log(f"{what}: {args.files:,} files")
                if what == "create":
                    _write(repo, args.files)
                else:
                    shutil.rmtree(repo / "vendor")
                written = time.time()
                total, last = _wait_settled(child)
                own1, kids1 = _cpu(proc)
                base_cpu, base_wall = _baseline(repo, index)
                rows.append((what, own1 - own0, kids1 - kids0, base_cpu, base_wall, total))
                log(
                    f"{what}: written in {written - start:.1f} s, settled report "
                    f"{last - written:+.1f} s after the last write"
                )
        finally:
            child.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)
            if child.poll() is None:
                child.kill()
    print(f"{cores_line()}\n{python_line()}\n- git {git_version()}")
    print(f"- {args.tracked:,} tracked files; a burst of {args.files:,} new files, not ignored\n")
    print(
        "| burst | paella's own CPU | its git children | paella total "
        "| `git add -A` (baseline) CPU | ratio | target | verdict | paths reported |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    for what, own, kids, base_cpu, _wall, total in rows:
        ratio = (own + kids) / base_cpu if base_cpu else float("inf")
        verdict = "PASS" if ratio <= 1.5 else "**FAIL**"
        print(
            f"| {what} | {own:.2f} s | {kids:.2f} s | {own + kids:.2f} s | {base_cpu:.2f} s "
            f"| {ratio:.2f} × | ≤ 1.5 × | {verdict} | {total:,} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
