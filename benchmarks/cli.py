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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _time(argv: list[str], cwd: str | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


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
        times: dict[str, list[float]] = {name: [] for name in [*measures, *in_workspace]}
        for argv in [*measures.values(), *in_workspace.values()]:
            _time(argv, workspace)  # warm the page cache and any bytecode cache
        for _ in range(args.repeat):
            for name, argv in measures.items():
                times[name].append(_time(argv))
            for name, argv in in_workspace.items():
                times[name].append(_time(argv, workspace))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    print(
        f"- machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    )
    print(f"- {args.repeat} interleaved repetitions each\n")
    print("| measure | median | p95 | target | verdict |")
    print("|---|---:|---:|---|---|")
    for name, values in times.items():
        median, p95 = statistics.median(values), _p95(values)
        target, verdict = (
            ("≤ 300 ms", "PASS" if median <= 300 else "FAIL")
            if name == "paella --help"
            else ("", "")
        )
        print(f"| {name} | {median:.1f} ms | {p95:.1f} ms | {target} | {verdict} |")
    floor = statistics.median(times["python -c pass (floor)"]) + statistics.median(
        times["git rev-parse --show-toplevel (in the workspace)"]
    )
    tmux = statistics.median(times["paella status --tmux (in the workspace)"])
    verdict = "PASS" if tmux <= 1.5 * floor else "FAIL"
    print(
        f"\n| `paella status --tmux` ≤ 1.5 × (python start + rev-parse = {floor:.1f} ms) "
        f"| {tmux / floor:.2f} × | {verdict} |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
