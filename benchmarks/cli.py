"""Start-up: ``paella --help`` (SPEC 13: ≤ 300 ms) and ``paella status --tmux`` (issue 17).

Side by side in one run, interleaved: a bare ``python -c pass`` (the floor), ``paella --help``
through the console script, ``python -c "import textual.app"`` (what the TUI would add), and in
a workspace with a run (``paella init``, one ``paella checkpoint``): ``git rev-parse
--show-toplevel`` (the one git call a status needs) and ``paella status --tmux``, the line a tmux
status bar runs every few seconds. Targets: ``--help`` ≤ 300 ms; ``status --tmux`` ≤ 1.5 × (the
bare Python start + the ``rev-parse``), medians. Prints a Markdown table and the verdicts; exits
0 either way.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> Sample:
    """Wall and CPU milliseconds of one run (CPU: user + system, with the processes it waited
    for, which a loaded machine stretches far less than wall time)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return Sample((time.perf_counter() - start) * 1000, (_children_cpu() - cpu) * 1000)


class Sample(NamedTuple):
    """One run: wall and CPU milliseconds."""

    wall: float
    cpu: float


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    """Run the measures and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    paella = shutil.which("paella") or os.path.join(os.path.dirname(sys.executable), "paella")
    measures = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "paella --help": [paella, "--help"],
        "python -c 'import textual.app' (what the TUI adds)": [
            sys.executable,
            "-c",
            "import textual.app",
        ],
    }
    workspace = tempfile.mkdtemp(prefix="paella-cli-bench-")
    # As installed, python finds compiled bytecode: keep it in the workspace's .git, even where
    # PYTHONDONTWRITEBYTECODE is set (else every run compiles every module it imports).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(workspace, ".git", "bench-pycache")
    try:
        for setup in (
            ["git", "init", "-q"],
            [
                "git",
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@b",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "base",
            ],
            [paella, "init", "--agent", "true", "--gate", "unit=true"],
            [paella, "checkpoint", "--label", "bench"],
        ):
            subprocess.run(setup, cwd=workspace, capture_output=True, check=True)
        in_workspace = {
            "git rev-parse --show-toplevel (in the workspace)": [
                "git",
                "rev-parse",
                "--show-toplevel",
            ],
            "paella status --tmux (in the workspace)": [paella, "status", "--tmux"],
        }
        times: dict[str, list[Sample]] = {name: [] for name in [*measures, *in_workspace]}
        for argv in [*measures.values(), *in_workspace.values()]:
            _time(argv, workspace, env)  # warm the page cache and the bytecode cache
        for _ in range(args.repeat):
            for name, argv in measures.items():
                times[name].append(_time(argv, None, env))
            for name, argv in in_workspace.items():
                times[name].append(_time(argv, workspace, env))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    print(
        f"- machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    )
    print(f"- {args.repeat} interleaved repetitions each\n")
    print("| measure | median | p95 | CPU median | target | verdict |")
    print("|---|---:|---:|---:|---|---|")
    for name, samples in times.items():
        walls = [s.wall for s in samples]
        median, p95 = statistics.median(walls), _p95(walls)
        cpu = statistics.median(s.cpu for s in samples)
        target, verdict = (
            ("≤ 300 ms", "PASS" if median <= 300 else "FAIL")
            if name == "paella --help"
            else ("", "")
        )
        print(f"| {name} | {median:.1f} ms | {p95:.1f} ms | {cpu:.1f} ms | {target} | {verdict} |")
    print()
    for what in ("wall", "cpu"):
        floor = statistics.median(
            getattr(s, what) for s in times["python -c pass (floor)"]
        ) + statistics.median(
            getattr(s, what) for s in times["git rev-parse --show-toplevel (in the workspace)"]
        )
        tmux = statistics.median(
            getattr(s, what) for s in times["paella status --tmux (in the workspace)"]
        )
        verdict = "PASS" if tmux <= 1.5 * floor else "FAIL"
        if what == "cpu":
            verdict = f"(for information: CPU time) {verdict}"
        print(
            f"| `paella status --tmux` ≤ 1.5 × (python start + rev-parse = {floor:.1f} ms), "
            f"{'wall' if what == 'wall' else 'CPU'} medians | {tmux / floor:.2f} × | {verdict} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
