"""How many git processes each paella operation starts, per checkout side by side (issue 14
item 7: the suite's cost is mostly git children; issue 17: cost follows the change).

Each side runs in a child Python of its own (``PYTHONPATH=<checkout>/pythonpath``) with
:mod:`benchmarks.git_calls` logging every git start, on a fresh repository of 200 files: the
engine's operations through the Python API (what the run loop and the TUI call), then the CLI
commands as processes (their git starts logged by a ``sitecustomize``). Counts are exact,
not timed: the same operation on the same repository starts the same processes.

    python -m benchmarks.git_counts [--before DIR] [--commands]

``--before DIR``: another checkout (``git archive REV | tar -x -C DIR``) alongside.
``--commands``: each operation's git commands listed, per side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
OPERATIONS = (
    "Workspace.find",
    "Snapshotter(ws)",
    "first snapshot (seed + full scan)",
    "snapshot, one file changed",
    "run start (RunStore.create, mirror's first save)",
    "checkpoint (take_checkpoint + ledger save)",
    "rollback to checkpoint 1",
    "paella checkpoint",
    "paella checkpoints",
    "paella status",
    "paella rollback 1 --yes",
)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i in range(200):
        path = repo / f"src/m{i % 10}/f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * 20)
    (repo / ".gitignore").write_text("build/\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base")
    return repo


def child(out: Path) -> None:
    """One side: every operation, its git commands written to ``out`` (JSON)."""
    from benchmarks import git_calls

    log = out.with_suffix(".log")
    git_calls.install(str(log))
    from paella_tui.supervisor.run.runs import RunStore, save_to_mirror, wait_for_mirror
    from paella_tui.supervisor.store.checkpoints import take_checkpoint
    from paella_tui.supervisor.store.rollback import rollback
    from paella_tui.supervisor.store.snapshot import Snapshotter
    from paella_tui.supervisor.store.workspace import Workspace

    root = Path(tempfile.mkdtemp(prefix="paella-git-counts-"))
    os.environ["XDG_STATE_HOME"] = str(root / "xdg")
    repo = _repository(root)
    results: dict[str, list[list[str]]] = {}

    def measure(name: str, action: Callable[[], object]) -> object:
        log.write_text("")
        value = action()
        wait_for_mirror()
        results[name] = [json.loads(line)["cmd"] for line in log.read_text().splitlines()]
        return value

    ws = measure(OPERATIONS[0], lambda: Workspace.find(repo))
    assert isinstance(ws, Workspace)
    snapper = measure(OPERATIONS[1], lambda: Snapshotter(ws))
    assert isinstance(snapper, Snapshotter)
    measure(OPERATIONS[2], snapper.take_locked)
    (repo / "src/m1/f1.py").write_text("changed\n")
    measure(OPERATIONS[3], snapper.take_locked)
    run = measure(OPERATIONS[4], lambda: RunStore(ws).create(None, manual=True, reason="bench"))

    def checkpoint() -> object:
        record = take_checkpoint(run, snapper, label="bench")  # type: ignore[arg-type]
        save_to_mirror(run)  # type: ignore[arg-type]
        return record

    first = measure(OPERATIONS[5], checkpoint)
    (repo / "src/m2/f2.py").write_text("changed too\n")
    (repo / "new.txt").write_text("new\n")
    take_checkpoint(run, snapper, label="second")  # type: ignore[arg-type]
    measure(OPERATIONS[6], lambda: rollback(run, first, snapshotter=snapper))  # type: ignore[arg-type]
    (repo / "src/m3/f3.py").write_text("changed by the CLI's turn\n")
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import benchmarks.git_calls\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ["PYTHONPATH"]]))
    env[git_calls.ENV] = str(log)
    for name in OPERATIONS[7:]:
        words = name.split()[1:]
        measure(
            name,
            lambda words=words: subprocess.run(
                [sys.executable, "-m", "paella_tui", *words],
                cwd=repo,
                env=env,
                capture_output=True,
                check=False,
            ),
        )
    out.write_text(json.dumps(results))


def _side(checkout: Path, work: Path, name: str) -> dict[str, list[list[str]]]:
    out = work / f"{name}.json"
    path = os.pathsep.join([str(checkout / "pythonpath"), str(HERE)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PAELLA_"))}
    env["PYTHONPATH"] = path
    # Run from the work folder: the current folder leads sys.path, and this checkout's would
    # shadow the other side's paella_tui.
    subprocess.run(
        [sys.executable, "-m", "benchmarks.git_counts", "--child", str(out)],
        env=env,
        cwd=work,
        check=True,
    )
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> int:
    """Count each side's git processes per operation and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout, counted alongside")
    parser.add_argument("--commands", action="store_true", help="list each operation's commands")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
    sides = [("this checkout", HERE)]
    if args.before is not None:
        sides.insert(0, (f"before ({args.before})", args.before.resolve()))
    with tempfile.TemporaryDirectory(prefix="paella-git-counts-") as tmp:
        counts = [
            (label, _side(path, Path(tmp), f"side{i}")) for i, (label, path) in enumerate(sides)
        ]
    print("| operation | " + " | ".join(label for label, _ in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    totals = [0] * len(counts)
    for op in OPERATIONS:
        cells = []
        for i, (_, found) in enumerate(counts):
            totals[i] += len(found.get(op, []))
            cells.append(str(len(found.get(op, []))))
        print(f"| {op} | " + " | ".join(cells) + " |")
    print("| all | " + " | ".join(str(t) for t in totals) + " |")
    if args.commands:
        for label, found in counts:
            print(f"\n## {label}\n")
            for op in OPERATIONS:
                words = [" ".join(w for w in c[:3] if not w.startswith(":(")) for c in found[op]]
                print(f"- {op}: " + ", ".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
