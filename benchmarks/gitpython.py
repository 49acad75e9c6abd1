"""GitPython against the git command line for the read-only queries behind ``status``,
``checkpoints`` and the TUI's refresh: does GitPython earn a place among the dependencies?

Side by side in one run, interleaved, on a throw-away repository with one run of N checkpoint
refs (each a commit with its own tree):

- the cost of a fresh process making the query (what ``paella status`` or ``checkpoints`` pay):
  ``python -c`` with ``subprocess`` + ``git for-each-ref`` against ``import git`` + ``Repo`` + the
  same refs, commits and trees through GitPython, and the floor ``python -c pass``;
- the same query warm, in one process (what a TUI refresh pays);
- how many git processes ``paella status --json`` and ``paella checkpoints --json`` start today
  (a ``git`` shim on PATH counts them): GitPython could only save those.

GitPython is no dependency of paella-tui; install it to run this (``pip install GitPython``).
Prints a Markdown table; exits 0 either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.machine import cores_line, git_version, python_line
from benchmarks.stats import median, ms, p95

GIT_CLI_QUERY = """
import subprocess, sys
out = subprocess.run(
    ["git", "for-each-ref", "--format=%(refname) %(objectname) %(tree)", "refs/paella/"],
    cwd=sys.argv[1], capture_output=True, check=True, text=True,
).stdout
rows = [line.split() for line in out.splitlines()]
assert len(rows) == int(sys.argv[2]), len(rows)
"""

GITPYTHON_QUERY = """
import sys, git
repo = git.Repo(sys.argv[1])
rows = [
    (ref.path, ref.commit.hexsha, ref.commit.tree.hexsha)
    for ref in repo.refs if ref.path.startswith("refs/paella/")
]
assert len(rows) == int(sys.argv[2]), len(rows)
"""


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, input=stdin, capture_output=True, text=True, check=True
    ).stdout.strip()


def build_repo(where: Path, checkpoints: int) -> Path:
    """A repository with one commit on main and ``checkpoints`` refs of a paella run."""
    repo = where / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "bench@example.invalid")
    _git(repo, "config", "user.name", "bench")
    (repo / "a.txt").write_text("0\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    updates = []
    for n in range(1, checkpoints + 1):
        blob = _git(repo, "hash-object", "-w", "--stdin", stdin=f"{n}\n")
        tree = _git(repo, "mktree", stdin=f"100644 blob {blob}\ta.txt\n")
        commit = _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", f"checkpoint {n}")
        updates.append(f"create refs/paella/20261201-000000-abcd/checkpoints/{n} {commit}\n")
    _git(repo, "update-ref", "--stdin", stdin="".join(updates))
    return repo


def count_git_spawns(repo: Path, where: Path, *argv: str) -> int:
    """How many git processes ``paella ARGV`` starts in ``repo`` (a counting shim on PATH)."""
    shim_dir = where / "shim"
    shim_dir.mkdir(exist_ok=True)
    log = where / "spawns.log"
    log.write_text("")
    real = shutil.which("git")
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    paella = Path(sys.executable).with_name("paella")
    env = {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(
        [str(paella), *argv], cwd=repo, env=env, capture_output=True, check=True, text=True
    )
    return len(log.read_text().splitlines())


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    """Run the measures and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--checkpoints", type=int, default=50)
    args = parser.parse_args()
    try:
        import git  # noqa: F401  (only to say it is missing before anything runs)
    except ImportError:
        print("GitPython is not installed: `pip install GitPython` to run this comparison")
        return 0
    with tempfile.TemporaryDirectory(prefix="paella-bench-gitpython-") as tmp:
        where = Path(tmp)
        repo = build_repo(where, args.checkpoints)
        n = str(args.checkpoints)
        cold: dict[str, list[str]] = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "fresh process: subprocess + git for-each-ref": [
                sys.executable,
                "-c",
                GIT_CLI_QUERY,
                str(repo),
                n,
            ],
            "fresh process: import git + Repo + refs, commits, trees": [
                sys.executable,
                "-c",
                GITPYTHON_QUERY,
                str(repo),
                n,
            ],
            "python -c 'import git' (the import alone)": [sys.executable, "-c", "import git"],
        }
        warm_cli = compile(GIT_CLI_QUERY, "cli", "exec")
        warm_gp = compile(GITPYTHON_QUERY, "gitpython", "exec")

        def run_warm(code: object) -> Callable[[], object]:
            def go() -> object:
                saved = sys.argv
                sys.argv = ["-", str(repo), n]
                try:
                    exec(code, {})  # the two queries above, timed in-process
                finally:
                    sys.argv = saved
                return None

            return go

        warm = {
            "warm, in-process: git for-each-ref": run_warm(warm_cli),
            "warm, in-process: GitPython Repo + refs, commits, trees": run_warm(warm_gp),
        }
        times: dict[str, list[float]] = {name: [] for name in [*cold, *warm]}
        for argv in cold.values():  # warm the page cache and bytecode
            subprocess.run(argv, check=True)
        for fn in warm.values():
            fn()
        for _ in range(args.repeat):
            for name, argv in cold.items():
                times[name].append(
                    _time(lambda argv=argv: subprocess.run(argv, check=True))  # type: ignore[misc]
                )
            for name, fn in warm.items():
                times[name].append(_time(fn))
        # A run to query: one manual checkpoint.
        subprocess.run(
            [str(Path(sys.executable).with_name("paella")), "checkpoint"],
            cwd=repo,
            capture_output=True,
            check=True,
        )
        spawns = {
            "paella status --json": count_git_spawns(repo, where, "status", "--json"),
            "paella checkpoints --json": count_git_spawns(repo, where, "checkpoints", "--json"),
        }
    print(cores_line())
    print(python_line())
    print(f"- git: {git_version()}")
    print(f"- {args.repeat} interleaved repetitions, {args.checkpoints} checkpoint refs\n")
    print("| measure | median | p95 |")
    print("|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {ms(median(values))} | {ms(p95(values))} |")
    print("\n| command | git processes it starts |")
    print("|---|---:|")
    for name, count in spawns.items():
        print(f"| `{name}` | {count} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
