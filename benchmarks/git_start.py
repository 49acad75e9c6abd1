"""What starting one git process costs paella, by how it gets its death signal and by paella's
size (issue 14 item 7, issue 17 item 4).

A Python ``preexec_fn`` makes ``subprocess`` fork() paella instead of vfork()ing it: the page
tables are copied and paella then takes a copy-on-write fault on every page it writes. Each size
runs in a child process of its own that holds (and keeps writing) that much memory, as the
engine's does between starts, and starts ``git --version`` the ways ``gitcli`` can, interleaved
in rounds: CPU per start is the child's own plus its reaped children's (``getrusage``).

    python -m benchmarks.git_start [--sizes 10,40,120,250] [--starts 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

# Run as a script, Python puts only this folder on sys.path: add the repository root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import log
from benchmarks.machine import cores_line, python_line
from benchmarks.stats import median

WAYS = {
    "plain": "vfork, no death signal (the read-only commands)",
    "hook": "fork, the preexec_fn hook: prctl, then the parent check (every write before; "
    "the fallback now)",
    "setpriv": "vfork, `setpriv --pdeathsig KILL -- git` (the `store` writes: objects, "
    "paella's refs)",
    "setpriv+sh": "vfork, setpriv then /bin/sh's parent check, then git (the `checked` writes: "
    "the user's work tree, index and refs; the private index's without a death group)",
    "group": "vfork, joining the death group (objects, paella's refs, the private index)",
}


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(megabytes: int, starts: int, rounds: int) -> None:
    """Hold ``megabytes`` of written memory; print one JSON line of CPU and wall ms per start."""
    from paella_tui.supervisor.store import death_group
    from paella_tui.supervisor.store.git_start import (
        death_signal_program,
        die_with_parent,
        start_argv,
    )
    from paella_tui.supervisor.store.gitcli import git_program

    held = [bytearray(4096) for _ in range(megabytes * 256)]
    git = [git_program(None), "--version"]
    began = time.perf_counter()
    cpu = _cpu_s()
    setpriv = death_signal_program(None)
    probe = {"cpu_ms": (_cpu_s() - cpu) * 1000, "wall_ms": (time.perf_counter() - began) * 1000}
    if setpriv is None:
        raise SystemExit("no setpriv with --pdeathsig on PATH: nothing to compare")
    group = death_group.group()
    if group is None:
        raise SystemExit("no death group can be made here: nothing to compare")
    argv = {
        "plain": (git, None, None),
        "hook": (git, die_with_parent(), None),
        "setpriv": (*start_argv(git, "store", None), None),
        "setpriv+sh": (*start_argv(git, "checked", None), None),
        "group": (git, None, group),
    }
    cpu_ms: dict[str, list[float]] = {way: [] for way in WAYS}
    wall_ms: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way, (command, hook, pgid) in argv.items():
            cpu, began = _cpu_s(), time.perf_counter()
            for i in range(starts):
                subprocess.run(
                    command,
                    stdout=subprocess.DEVNULL,
                    preexec_fn=hook,
                    process_group=pgid,
                    check=True,
                )
                held[i % len(held)][0] = i & 0xFF  # paella keeps working between starts
            wall_ms[way].append((time.perf_counter() - began) / starts * 1000)
            cpu_ms[way].append((_cpu_s() - cpu) / starts * 1000)
    rows = {way: {"cpu_ms": median(cpu_ms[way]), "wall_ms": median(wall_ms[way])} for way in WAYS}
    print(json.dumps({"mb": megabytes, "ways": rows, "probe": probe}))


def main() -> None:
    """Run each size in its own process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,40,120,250", help="MB held, comma-separated")
    parser.add_argument("--starts", type=int, default=200, help="git starts per way per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the median is shown)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.starts, args.rounds)
        return
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        log(f"{size} MB: {args.rounds} rounds of {args.starts} starts each way")
        command = [sys.executable, "-m", "benchmarks.git_start", "--child", str(size)]
        out = subprocess.run(
            [*command, "--starts", str(args.starts), "--rounds", str(args.rounds)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        results.append(json.loads(out.stdout))
    print("## git_start: one git start, by way and by paella's size\n")
    print(cores_line())
    print(python_line())
    print(f"- setpriv: {shutil.which('setpriv')}; {args.rounds} rounds × {args.starts} starts\n")
    print("CPU ms per start (paella's own + the child's), median of the rounds; wall ms after /\n")
    print("| held | " + " | ".join(WAYS) + " | setpriv tried on its own |")
    print("|---|" + "---|" * (len(WAYS) + 1))
    for row in results:
        cells = [f"{w['cpu_ms']:.2f} / {w['wall_ms']:.2f}" for w in row["ways"].values()]
        probe = f"{row['probe']['cpu_ms']:.1f} / {row['probe']['wall_ms']:.1f}"
        print(f"| {row['mb']} MB | " + " | ".join(cells) + f" | {probe} |")
    print()
    for way, what in WAYS.items():
        print(f"- {way}: {what}")


if __name__ == "__main__":
    main()
