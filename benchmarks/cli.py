"""``paella --help`` start-up time (SPEC 13: ≤ 300 ms; Textual is imported only when the TUI starts).

Side by side in one run, interleaved: a bare ``python -c pass`` (the floor), ``paella --help``
through the console script, and ``python -c "import textual.app"`` (what the TUI would add).
Prints a Markdown table and the verdict; exits 0 either way.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
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
    times: dict[str, list[float]] = {name: [] for name in measures}
    for argv in measures.values():
        _time(argv)  # warm the page cache and any bytecode cache
    for _ in range(args.repeat):
        for name, argv in measures.items():
            times[name].append(_time(argv))
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
