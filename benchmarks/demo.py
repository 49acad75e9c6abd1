"""What ``paella demo --headless --fast`` costs: CPU of the whole process tree, per run.

The suite plays the fast demo about a dozen times (tests/test_demo.py, test_packaging.py, CI),
and it is what a newcomer runs first. Each run's CPU is read as the reaped children's rusage
around one ``paella demo`` process: paella itself, the scripted agent, every gate, every git.
It also counts the processes started (``strace -f -e trace=execve`` when strace is there, in a
run of its own so that tracing does not inflate the timed ones). Runs alternate between the
checkouts so that the machine's load falls on both alike.

    python -m benchmarks.demo [--runs 5] [--before DIR]

``--before DIR`` plays another checkout's code alongside (``git archive REV | tar -x -C DIR``
gives one; it runs with ``PYTHONPATH=DIR/pythonpath``).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.stats import median

ENV_DROP = ("TMUX", "TMUX_PANE", "PAELLA_NOTIFY")
DEMO = ("demo", "--headless", "--fast", "--dir")


def _env(checkout: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    env["NO_COLOR"] = "1"
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout / "pythonpath")
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def play(checkout: Path | None, prefix: list[str] | None = None) -> tuple[float, str]:
    """One fast headless demo in a fresh folder: (CPU seconds of its tree, its output)."""
    with tempfile.TemporaryDirectory(prefix="paella-bench-demo-") as tmp:
        before = _children_cpu()
        proc = subprocess.run(
            [*(prefix or []), sys.executable, "-m", "paella_tui", *DEMO, str(Path(tmp) / "demo")],
            env=_env(checkout),
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        cpu = _children_cpu() - before
    if proc.returncode != 0:
        raise SystemExit(f"the demo failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return cpu, proc.stdout


def processes(checkout: Path | None) -> Counter[str]:
    """The processes one demo starts, by kind (git, gate, agent, paella), from strace."""
    with tempfile.TemporaryDirectory(prefix="paella-bench-trace-") as tmp:
        trace = Path(tmp) / "trace"
        play(checkout, ["strace", "-f", "-qq", "-s", "300", "-e", "trace=execve", "-o", str(trace)])
        kinds: Counter[str] = Counter()
        for line in trace.read_text(errors="replace").splitlines():
            match = re.search(r'execve\("([^"]+)", \[(.*?)\]', line)
            if match is None or "= -1" in line:
                continue
            argv = match.group(2)
            if match.group(1).endswith("/git") or argv.startswith('"git"'):
                kinds["git"] += 1
            elif "check_" in argv:
                kinds["python check (gate or agent)"] += 1
            elif "agent.py" in argv:
                kinds["scripted agent"] += 1
            else:
                kinds["other"] += 1
        return kinds


def main() -> int:
    """Measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout, played alongside")
    args = parser.parse_args()
    sides: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.before is not None:
        sides.insert(0, (f"before ({args.before})", args.before.resolve()))
    cpu: dict[str, list[float]] = {name: [] for name, _ in sides}
    for i in range(args.runs):
        for name, checkout in sides:
            seconds, _ = play(checkout)
            cpu[name].append(seconds)
            print(f"run {i + 1}/{args.runs} {name}: {seconds:.2f} s CPU", file=sys.stderr)
    counts = (
        {name: processes(checkout) for name, checkout in sides} if shutil.which("strace") else {}
    )
    print(f"\n`paella demo --headless --fast`, CPU of the whole tree, {args.runs} runs each\n")
    print("| checkout | median CPU s | min | max | processes started |")
    print("|---|---:|---:|---:|---|")
    for name, _ in sides:
        kinds = counts.get(name)
        started = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) if kinds else "n/a"
        values = cpu[name]
        print(
            f"| {name} | {median(values):.2f} | {min(values):.2f} | {max(values):.2f} | {started} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
