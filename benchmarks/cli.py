"""Start-up: ``paella --help`` (SPEC 13: ≤ 300 ms) and ``paella status --tmux`` (issue 17).

Side by side in one run, interleaved: a bare ``python -c pass`` (the floor), ``paella --help``
through the console script, ``python -c "import textual.app"`` (what the TUI would add), and in
a workspace with a run (``paella init``, one ``paella checkpoint``): ``git rev-parse
--show-toplevel`` (the one git call a status needs) and ``paella status --tmux``, the line a tmux
status bar runs every few seconds. Targets: ``--help`` ≤ 300 ms; ``status --tmux`` ≤ 1.5 × (the
bare Python start + the ``rev-parse``), medians. Beside them, for the choices made: the same line
through pip's generated console script (which imports ``re`` first; paella installs a script of
its own), and a bare Python script doing only the line's work (spawn the ``rev-parse``, read
``current`` and the seal, stat the kept state and the ledger, read ``/proc``: what no import of
paella's can go below). Prints a Markdown table and the verdicts; exits 0 either way.
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


# pip's console script, as pip (distlib) generates it for `paella = "paella_tui.cli:main"`.
PIP_SCRIPT = """\
import re
import sys
from paella_tui.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""

# The line's work and nothing else, in a bare interpreter (the seal's name: sha256 of the run
# folder's real path, CPython's own sha256 as the seal module takes it).
BARE_LINE = """\
import os
try:
    from _sha2 import sha256
except ImportError:
    from _sha256 import sha256
r, w = os.pipe()
pid = os.posix_spawnp("git", ["git", "rev-parse", "--absolute-git-dir"], os.environ,
                      file_actions=[(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_CLOSE, r)])
os.close(w)
with open(r, "rb") as f:
    git_dir = f.read().decode().strip()
os.waitpid(pid, 0)
with open(os.path.join(git_dir, "paella", "current"), "rb") as f:
    run = os.path.join(git_dir, "paella", "runs", f.read().decode().strip())
home = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
name = sha256(os.path.realpath(run).encode()).hexdigest()[:32]
with open(os.path.join(home, "paella", "seals", name), "rb") as f:
    facts = dict(line.partition(" ")[::2] for line in f.read().decode().split("\\n")[1:] if line)
os.stat(os.path.join(run, "state.json"))
os.stat(os.path.join(run, "events.jsonl"))
with open(f"/proc/{os.getpid()}/stat", "rb") as f:
    f.read()
print("paella", facts["phase"], facts["gates"])
"""


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _make_workspace(folder: str, paella: list[str], env: dict[str, str]) -> None:
    """A repository with a run: ``paella init`` (a contract) and one ``paella checkpoint``."""
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
            "-mb",
        ],
        [*paella, "init", "--agent", "true", "--gate", "unit=true"],
        [*paella, "checkpoint", "--label", "bench"],
    ):
        subprocess.run(setup, cwd=folder, env=env, capture_output=True, check=True)


def main() -> int:
    """Run the measures and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--before",
        help="another checkout of paella (its source tree): its `status --tmux`, through pip's "
        "generated script as it was installed, timed alongside in a workspace of its own",
    )
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
    root = tempfile.mkdtemp(prefix="paella-cli-bench-")
    workspace = os.path.join(root, "workspace")
    # As installed, python finds compiled bytecode: keep it in the workspace's .git, even where
    # PYTHONDONTWRITEBYTECODE is set (else every run compiles every module it imports).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(root, "bench-pycache")
    # The workspaces' mirrors and seals go with them, not into the user's state home.
    env["XDG_STATE_HOME"] = os.path.join(root, "state")
    pip_script = os.path.join(root, "pip-paella")
    try:
        with open(pip_script, "w") as script:
            script.write(PIP_SCRIPT)
        os.mkdir(workspace)
        _make_workspace(workspace, [paella], env)
        timed: dict[str, tuple[list[str], str | None, dict[str, str]]] = {
            name: (argv, None, env) for name, argv in measures.items()
        }
        timed |= {
            "git rev-parse --show-toplevel (in the workspace)": (
                ["git", "rev-parse", "--show-toplevel"],
                workspace,
                env,
            ),
            "paella status --tmux (in the workspace)": (
                [paella, "status", "--tmux"],
                workspace,
                env,
            ),
            "the same through pip's console script (import re)": (
                [sys.executable, pip_script, "status", "--tmux"],
                workspace,
                env,
            ),
            "a bare python doing the line's work": (
                [sys.executable, "-c", BARE_LINE],
                workspace,
                env,
            ),
        }
        if args.before:
            # Its own workspace, state home and bytecode: the two versions seal the kept state
            # differently, and each would take the other's state for a forgery.
            before = os.path.join(root, "before")
            os.mkdir(before)
            before_env = dict(env, PYTHONPATH=os.path.abspath(args.before))
            before_env["XDG_STATE_HOME"] = os.path.join(root, "before-state")
            before_env["PYTHONPYCACHEPREFIX"] = os.path.join(root, "bench-pycache-before")
            _make_workspace(before, [sys.executable, pip_script], before_env)
            timed["paella status --tmux, --before (its pip script)"] = (
                [sys.executable, pip_script, "status", "--tmux"],
                before,
                before_env,
            )
        times: dict[str, list[Sample]] = {name: [] for name in timed}
        for argv, cwd, run_env in timed.values():
            _time(argv, cwd or workspace, run_env)  # warm the page and bytecode caches
        for _ in range(args.repeat):
            for name, (argv, cwd, run_env) in timed.items():
                times[name].append(_time(argv, cwd, run_env))
    finally:
        shutil.rmtree(root, ignore_errors=True)
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
    before_key = "paella status --tmux, --before (its pip script)"
    if before_key in times:
        for what in ("wall", "cpu"):
            ours = statistics.median(
                getattr(s, what) for s in times["paella status --tmux (in the workspace)"]
            )
            theirs = statistics.median(getattr(s, what) for s in times[before_key])
            print(f"| `status --tmux` / `--before`, {what} medians | {ours / theirs:.2f} × | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
