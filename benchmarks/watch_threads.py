"""What asking watchfiles' watches costs while nothing changes: ways of running a flat and a deep
watch from threads, each in its own process, all sampled at the same time (issue 17, idle).

Every child sets up the same two ``RustNotify`` watches on a small tree of its own (the root not
recursively, three folders recursively, as the watcher's plan does) and asks them the way its
variant says, until told to stop; the parent samples each child's CPU (the sum of its threads'
``/proc/<pid>/task/*/schedstat``) over the same window and prints a table. Nothing changes in the trees: this is the floor of each
way of asking, without the engine around it.

    python -m benchmarks.watch_threads [--window 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# Run as a script, Python puts only this folder on sys.path: add the repository root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import log
from benchmarks.machine import cores_line, python_line
from benchmarks.probes import thread_schedstat

STEP_MS = 50
DEBOUNCE_MS = 50

VARIANTS = {
    "two threads": "a thread per watch, watchfiles.watch (step 50 ms, rust_timeout 100 ms, "
    "stop event): the watcher before",
    "first port": "one thread: the deep watch for a step (stop event), then a 1 ms peek at the flat",
    "nested peek": "one thread: the deep watch for 1 s whose stop event's is_set peeks at the flat",
    "whole steps": "one thread: each watch in turn for a whole step (stop event)",
    "whole steps, no stop event": "one thread: each watch in turn for a whole step, no stop "
    "event: the watcher's quiet mode",
    "half steps, no stop event": "one thread: each watch in turn for half a step, no stop "
    "event: the watcher's mode while changes come",
    "one watch": "one thread, one watch (the deep) for a step at a time: the floor of one watch",
}


def child(variant: str) -> None:
    """Ask two watches the way ``variant`` says until SIGTERM; print "ready" first."""
    import watchfiles
    from watchfiles._rust_notify import RustNotify

    root = tempfile.mkdtemp(prefix="paella-watch-threads-")
    deep = [os.path.join(root, d) for d in ("a", "b", "c")]
    for folder in deep:
        os.makedirs(os.path.join(folder, "x"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads: list[threading.Thread] = []
    if variant == "two threads":

        def run(paths: list[str], recursive: bool) -> None:
            for _ in watchfiles.watch(
                *paths,
                watch_filter=None,
                debounce=DEBOUNCE_MS,
                step=STEP_MS,
                stop_event=stop,
                rust_timeout=100,
                yield_on_timeout=True,
                raise_interrupt=False,
                recursive=recursive,
            ):
                pass

        threads = [
            threading.Thread(target=run, args=([root], False)),
            threading.Thread(target=run, args=(deep, True)),
        ]
    else:
        flat_watch = RustNotify([root], False, False, 500, False, False)
        deep_watch = RustNotify(deep, False, False, 500, True, False)

        class Peek:
            """A stop event whose ``is_set`` first peeks at the flat watch (1 ms)."""

            def is_set(self) -> bool:
                flat_watch.watch(DEBOUNCE_MS, 1, 1, None)
                return stop.is_set()

        watches = {"deep": deep_watch, "flat": flat_watch}
        events: dict[str, Any] = {"stop": stop, "none": None, "peek": Peek()}
        # One round of asks: (watch, step ms, timeout ms, stop event).
        rounds: dict[str, list[tuple[str, int, int, str]]] = {
            "first port": [("deep", STEP_MS, STEP_MS, "stop"), ("flat", 1, 1, "none")],
            "nested peek": [("deep", STEP_MS, 1000, "peek")],
            "whole steps": [("deep", STEP_MS, STEP_MS, "stop"), ("flat", STEP_MS, STEP_MS, "stop")],
            "whole steps, no stop event": [
                ("deep", STEP_MS, STEP_MS, "none"),
                ("flat", STEP_MS, STEP_MS, "none"),
            ],
            "half steps, no stop event": [
                ("deep", STEP_MS // 2, STEP_MS // 2, "none"),
                ("flat", STEP_MS // 2, STEP_MS // 2, "none"),
            ],
            "one watch": [("deep", STEP_MS, STEP_MS, "stop")],
        }
        asks = rounds[variant]

        def main() -> None:
            while not stop.is_set():
                for watch, step, timeout, event in asks:
                    watches[watch].watch(DEBOUNCE_MS, step, timeout, events[event])

        threads = [threading.Thread(target=main)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    stop.wait()
    for thread in threads:
        thread.join()


def sample(window: float) -> dict[str, float]:
    """One round: every variant's child at once; CPU % of one core over the same window."""
    kids = {
        name: subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", name],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in VARIANTS
    }
    try:
        for proc in kids.values():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"a child ended without starting: {proc.args!r}")
        time.sleep(1.0)  # the watches' first steps
        # schedstat counts nanoseconds; psutil's ticks (10 ms) are too coarse for 0.1 %.
        start = {name: sum(thread_schedstat(proc.pid).values()) for name, proc in kids.items()}
        began = time.monotonic()
        time.sleep(window)
        spent = time.monotonic() - began
        return {
            name: (sum(thread_schedstat(proc.pid).values()) - start[name]) / spent * 100
            for name, proc in kids.items()
        }
    finally:
        for proc in kids.values():
            proc.send_signal(signal.SIGTERM)
        for proc in kids.values():
            proc.wait(10)


def main() -> int:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--window", type=float, default=60.0, help="seconds sampled per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (all variants each)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    load = os.getloadavg()[0]
    rounds = []
    for n in range(args.rounds):
        log(f"round {n + 1} of {args.rounds}: {len(VARIANTS)} children, {args.window:g} s")
        rounds.append(sample(args.window))
    print(f"## Watch threads, idle ({time.strftime('%Y-%m-%d %H:%M %Z')})")
    print()
    print(cores_line())
    print(python_line())
    print(f"- load average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    print()
    print("| variant | what it does | CPU, % of one core, per round |")
    print("|---|---|---:|")
    for name, what in VARIANTS.items():
        shown = ", ".join(f"{r[name]:.3f} %" for r in rounds)
        print(f"| {name} | {what} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
