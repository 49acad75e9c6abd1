"""Snapshots that follow the change (issue 17) against a full scan and ``git status``.

Builds (or reuses, with ``--keep DIR``) the repository of ``benchmarks/checkpoint.py`` (~20,000
tracked files by default; ``--files 100000`` for the big one), then times, interleaved
round-robin so that machine noise hits every measure alike, after a one-file change before each
timed repetition:

* ``git status --porcelain``, the reference every ratio is taken against;
* a run's snapshot from the watcher's paths (``take(follow_changes=True)`` with the changed file
  noted, as the evaluation a settle asks for takes it);
* a run's full-scan snapshot (the same snapshotter, nothing followed: the safety net, and what
  every snapshot cost before);
* git's floor for the same job: ``git update-index`` of the one changed path and ``git
  write-tree``, on a private index kept beside the repository's (what any tool that records the
  work tree as a tree without touching the user's index must run at least; each rewrites the
  whole index);
* the parts the ignore rules add (``ignore_rules``): the signature every snapshot takes (a stat
  of the ``.gitignore`` of each folder holding an entry), and the listing of newly ignored
  entries a snapshot runs when it finds the rules changed.

After the rounds it checks that the last followed tree equals a fresh full scan. It prints a
Markdown table (median, p90, ratio to the ``git status`` median) and exits 0: it is a report.

Usage::

    python benchmarks/incremental.py [--files 20000] [--size-mb 160] [--repeat 9] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.checkpoint import make_layout, prepare_repo
from benchmarks.harness import log
from benchmarks.machine import cores_line, git_version, python_line
from benchmarks.stats import median, ms, p90
from paella_tui.supervisor.judge.byproducts import BYPRODUCTS
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace


def one_file(root: Path) -> str:
    """A tracked text file to change before each timed repetition."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.py"], cwd=root, capture_output=True, check=True
    ).stdout
    return out.split(b"\0", 1)[0].decode()


def main(argv: Sequence[str] | None = None) -> int:
    """Build or reuse the repository, time the three measures, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=20_000, help="tracked files (default 20000)")
    parser.add_argument("--size-mb", type=int, default=160, help="MiB of tracked files (160)")
    parser.add_argument("--repeat", type=int, default=9, help="timed repetitions (default 9)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build in DIR and keep it")
    args = parser.parse_args(argv)
    if args.files < 100 or args.size_mb < 1 or args.repeat < 1:
        parser.error("need --files ≥ 100, --size-mb ≥ 1, --repeat ≥ 1")
    os.environ.pop(STATE_DIR_ENV, None)
    layout = make_layout(args.files, args.size_mb, 300)
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            root = args.keep.resolve()
        else:
            temp = stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-incr-"))
            root = Path(temp) / "repo"
        prepare_repo(root, layout)
        print("\n".join(measure(root, args.repeat, args.files)), flush=True)
    return 0


def measure(root: Path, repeat: int, files: int) -> list[str]:
    """Time the measures round-robin; the report's lines."""
    snapshotter = Snapshotter(Workspace.find(root), exclude=BYPRODUCTS)
    snapshotter.changes.follow()
    with snapshotter.locked():
        snapshotter.take()  # warm: the private index and its stat cache exist
    target = root / one_file(root)
    counter = [0]

    def touch() -> str:
        counter[0] += 1
        with open(target, "a") as handle:
            handle.write(f"# change {counter[0]}\n")
        return str(target.relative_to(root))

    def followed() -> None:
        snapshotter.changes.note([touch()])
        with snapshotter.locked():
            snapshotter.take(follow_changes=True)
        assert snapshotter.last_scan == "changed", "the followed snapshot fell back to a full scan"

    def full() -> None:
        touch()
        with snapshotter.locked():
            snapshotter.take()

    floor_env = {**os.environ, "GIT_INDEX_FILE": str(root / ".git" / "bench-floor-index")}

    def plumbing(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, env=floor_env, capture_output=True, check=True)

    plumbing("read-tree", "HEAD")
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, env=floor_env)
    plumbing("write-tree")  # the cache tree, as the snapshot's private index keeps it

    def floor() -> None:
        path = touch()
        plumbing("update-index", "--add", "--", path)
        plumbing("write-tree")

    def status() -> None:
        touch()
        subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, check=True)

    # What watching the ignore rules adds (ignore_rules): every snapshot stats the .gitignore
    # of each folder that holds an entry; a snapshot that finds them changed lists the entries
    # they now leave out.
    folders = json.loads(snapshotter.memo_file.read_text())["rule_folders"]

    def rule_stats() -> None:
        snapshotter.rules.look(folders, time.time_ns())

    def drop() -> None:
        with snapshotter.locked():
            snapshotter.rules.drop_newly_ignored()

    measures: dict[str, Callable[[], None]] = {
        "git status --porcelain": status,
        "snapshot from the watcher's paths (1 file)": followed,
        "full-scan snapshot (1 file changed)": full,
        "git's floor: update-index + write-tree (1 file)": floor,
        f"of every snapshot: the ignore rules' signature ({len(folders):,} folders)": rule_stats,
        "of a snapshot after a rule change: the drop of newly ignored entries": drop,
    }
    samples: dict[str, list[float]] = {name: [] for name in measures}
    log(f"timing {repeat} rounds on {root}")
    for _ in range(repeat):
        for name, fn in measures.items():
            started = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - started)
    # Correctness, once more on the big tree: the followed tree is the full scan's.
    snapshotter.changes.note([touch()])
    with snapshotter.locked():
        quick = snapshotter.take(follow_changes=True).tree
        slow = snapshotter.take().tree
    base = median(samples["git status --porcelain"])
    lines = [
        f"## Snapshots that follow the change: {files:,} tracked files, {repeat} rounds",
        "",
        "| measure | median | p90 | × git status |",
        "|---|---:|---:|---:|",
    ]
    for name, values in samples.items():
        lines.append(
            f"| {name} | {ms(median(values))} | {ms(p90(values))} | {median(values) / base:.2f} |"
        )
    lines += [
        "",
        f"followed tree == full-scan tree: {'yes' if quick == slow else 'NO'}",
        f"machine: {cores_line()}; {python_line()}; {git_version()}",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
