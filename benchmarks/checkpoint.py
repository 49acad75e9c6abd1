"""Checkpoint and rollback benchmark (SPEC 13): paella's snapshots against ``git status``.

Builds (or reuses, with ``--keep DIR``) a git repository of ~20,000 tracked files and ~160 MiB in
nested folders, committed, with 300 untracked files and a ``.gitignore`` that ignores a few hundred
more. Then it times, side by side in one run and interleaved round-robin so that machine noise hits
every measure alike, after a one-file change before each timed repetition:

* ``git status --porcelain``, the reference every ratio is taken against;
* a warm paella checkpoint through the Python API (``Workspace.find``, ``RunStore``,
  ``snapshotter_for``, ``take_checkpoint``), as the TUI's ``c`` key takes it;
* the same through the real ``paella checkpoint`` command, an end-to-end number (process start,
  imports, ledger checks);
* the same snapshot done with raw git plumbing (a temporary ``GIT_INDEX_FILE`` copied from the
  real index, ``git add -A``, ``write-tree``, ``commit-tree``, ``update-ref``), a baseline;
* a rollback to the previous checkpoint after ~10 files changed and one commit (salvage snapshot,
  restore, HEAD and index, verification included), and its undo (a rollback to the salvage).

It prints a Markdown table (median, p90, ratio to the ``git status`` median), the SPEC 13 targets
with PASS or FAIL, and the machine. When a target is missed (or with ``--profile``) it also times
every git subprocess paella runs, by wrapping ``paella_tui.supervisor.store.gitcli.Git.run`` in this process only,
and times alternative git commands on a copy of paella's private index, so that the report says
where the time goes. It always exits 0 once the measures ran: it is a report, not a test.

Usage::

    python benchmarks/checkpoint.py [--files 20000] [--size-mb 160] [--untracked 300]
                                    [--repeat 9] [--keep DIR] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script (``python benchmarks/checkpoint.py``, as its children are), Python puts only this
# folder on sys.path, and the editable install maps only paella_tui: add the repository root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import log
from benchmarks.machine import cores_line, git_version, python_line
from benchmarks.stats import median, ms, p90
from paella_tui.supervisor.judge.byproducts import snapshotter_for
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints as ckpt
from paella_tui.supervisor.store import scan_listing
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, take_checkpoint
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.rollback import RollbackResult, rollback
from paella_tui.supervisor.store.workspace import STATE_DIR_ENV, Workspace

LAYOUT_VERSION = 1
SEED = 20261129
_OID = re.compile(r"\b[0-9a-f]{40}\b")
_PAELLA_REF = re.compile(r"refs/paella/\S+")
MARKER = "paella-bench.json"  # in the benchmark repository's .git: says "this one is ours"
MIB = 1024 * 1024
MAX_TEXT_FILE = 1 * MIB
MAX_FILE = 8 * MIB  # well under paella's 50 MiB cap: nothing is left out of a snapshot
TEXT_POOL_SIZE = 4 * MIB
HOT_FILES = 8
CHANGE_FILES = 10
CHECKPOINT_RATIO_TARGET = 3.0
ROLLBACK_TARGET_S = 1.0
CLI_FLOOR_RATIO_TARGET = 2.0
"""Issue 17: the CLI checkpoint against raw git plumbing plus a bare Python start."""
GITIGNORE = """\
# benchmark: build products and caches are ignored
*.log
*.pyc
__pycache__/
/build/
.cache/
"""
# fmt: off
WORDS = (
    "core", "utils", "api", "models", "views", "tests", "docs", "assets", "lib", "internal", "cmd",
    "pkg", "service", "handlers", "storage", "config", "scripts", "tools", "web", "static", "data",
    "fixtures", "migrations", "plugins", "widgets", "net", "io", "parser", "render", "cache",
    "auth", "billing", "search", "events", "jobs", "queue", "schema", "client", "server", "common",
    "shared", "vendor",
)
TEXT_EXTS = (".py", ".ts", ".md", ".json", ".txt", ".c", ".h", ".go", ".rs", ".toml")
BINARY_EXTS = (".png", ".bin", ".dat", ".woff2", ".jpg", ".gz")
TOKENS = (
    "def", "return", "self", "import", "from", "class", "if", "else", "elif", "for", "in", "while",
    "with", "as", "try", "except", "raise", "None", "True", "False", "and", "or", "not", "is",
    "lambda", "yield", "async", "await", "const", "let", "var", "function", "=>", "=", "==", "!=",
    "+", "-", "*", "/", "(", ")", "[", "]", "{", "}", ":", ",", ".", ";", "#", "//", "value",
    "result", "items", "config", "path", "name", "count", "index", "data", "request", "response",
    "error", "buffer", "offset", "length", "handler", "context", "state", "cache", "key", "node",
    "tree",
)
# fmt: on


# ----------------------------------------------------------------------------------------------
# Small helpers


def clean_env() -> dict[str, str]:
    """The environment of a user's shell in the benchmark repository: no GIT_* or paella overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != STATE_DIR_ENV}
    env["LC_ALL"] = "C"
    return env


def git(
    repo: Path,
    *args: str,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run git in ``repo`` as a user would, capturing its output."""
    proc = subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env or clean_env(),
        input=input,
        capture_output=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()}"
        )
    return proc


def git_out(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git and return its stdout as stripped text."""
    return git(repo, *args, env=env).stdout.decode(errors="replace").strip()


# ----------------------------------------------------------------------------------------------
# The repository


@dataclass(frozen=True)
class FileSpec:
    """One file of the benchmark repository: where, how big, and whether its content is binary."""

    path: str
    size: int
    binary: bool


@dataclass(frozen=True)
class Layout:
    """Every file of the benchmark repository, derived deterministically from the parameters."""

    files: int
    size_mb: int
    untracked_count: int
    tracked: tuple[FileSpec, ...]
    untracked: tuple[FileSpec, ...]
    ignored: tuple[FileSpec, ...]
    hot: tuple[str, ...]
    """Tracked text files the one-file change before each repetition rotates through."""
    change_pool: tuple[str, ...]
    """Tracked text files the rollback measure changes (never a hot file)."""

    def params(self) -> dict[str, int]:
        """What the marker records, to tell whether a kept repository fits these parameters."""
        return {
            "version": LAYOUT_VERSION,
            "seed": SEED,
            "files": self.files,
            "size_mb": self.size_mb,
            "untracked": self.untracked_count,
        }


def make_layout(files: int, size_mb: int, untracked: int) -> Layout:
    """The repository's files: nested folders, log-normal sizes summing to ``size_mb`` MiB."""
    rng = random.Random(SEED)
    # A random tree of folders, about 25 files each, up to six deep.
    dirs: list[str] = []
    depth: dict[str, int] = {"": 0}
    parents = [""]
    for i in range(max(8, files // 25)):
        parent = rng.choice(parents)
        name = f"{parent}/{rng.choice(WORDS)}{i}" if parent else f"{rng.choice(WORDS)}{i}"
        dirs.append(name)
        depth[name] = depth[parent] + 1
        if depth[name] < 6:
            parents.append(name)
    # Sizes: log-normal (many small files, a few big ones), scaled to the total, clamped.
    total = size_mb * MIB
    raw = [rng.lognormvariate(0.0, 1.5) for _ in range(files)]
    sizes = raw
    for _ in range(4):
        scale = total / sum(sizes)
        sizes = [min(MAX_FILE, max(64, s * scale)) for s in sizes]
    tracked: list[FileSpec] = [FileSpec(".gitignore", len(GITIGNORE), False)]
    for i, s in enumerate(sizes[1:], start=1):
        size = int(s)
        binary = size > MAX_TEXT_FILE or rng.random() < (0.5 if size > 256 * 1024 else 0.08)
        ext = rng.choice(BINARY_EXTS if binary else TEXT_EXTS)
        folder = rng.choice(dirs)
        tracked.append(FileSpec(f"{folder}/{rng.choice(WORDS)}_{i:05d}{ext}", size, binary))
    # Untracked: half beside tracked files, half in new folders (some nested).
    new_dirs = [f"wip_{k}" if k % 3 else f"wip_{k}/draft" for k in range(10)]
    extra: list[FileSpec] = []
    for i in range(untracked):
        folder = rng.choice(dirs) if i % 2 else rng.choice(new_dirs)
        extra.append(
            FileSpec(
                f"{folder}/scratch_{i:04d}{rng.choice(TEXT_EXTS)}", rng.randint(200, 16_384), False
            )
        )
    # Ignored: a build folder, __pycache__ folders, logs, a .cache folder.
    ignored: list[FileSpec] = [
        FileSpec(f"build/out/obj_{i:04d}.o", rng.randint(1_000, 60_000), True) for i in range(150)
    ]
    for folder in rng.sample(dirs, min(30, len(dirs))):
        ignored += [
            FileSpec(f"{folder}/__pycache__/m{j}.cpython-311.pyc", rng.randint(500, 9_000), True)
            for j in range(3)
        ]
    ignored += [
        FileSpec(f"{rng.choice(dirs)}/run_{i}.log", rng.randint(100, 30_000), False)
        for i in range(30)
    ]
    ignored += [FileSpec(f".cache/blob_{i:03d}", rng.randint(100, 20_000), True) for i in range(30)]
    candidates = sorted(
        f.path
        for f in tracked
        if not f.binary and 1_024 <= f.size <= 65_536 and f.path != ".gitignore"
    )
    picked = rng.sample(candidates, min(len(candidates), HOT_FILES + 40 * CHANGE_FILES))
    if len(picked) < HOT_FILES + CHANGE_FILES:
        raise SystemExit("too few text files of 1-64 KiB to change: use more --files")
    return Layout(
        files=files,
        size_mb=size_mb,
        untracked_count=untracked,
        tracked=tuple(tracked),
        untracked=tuple(extra),
        ignored=tuple(ignored),
        hot=tuple(picked[:HOT_FILES]),
        change_pool=tuple(picked[HOT_FILES:]),
    )


class ContentMaker:
    """Deterministic pseudo-random file contents: text from a pool of code-like lines, or bytes."""

    def __init__(self) -> None:
        rng = random.Random(SEED + 1)
        idents = [
            f"{rng.choice(TOKENS)}_{rng.choice(WORDS)}{rng.randint(0, 99)}" for _ in range(400)
        ]
        vocab = list(TOKENS) + idents
        lines: list[str] = []
        size = 0
        while size < TEXT_POOL_SIZE + MAX_TEXT_FILE:
            line = (
                "    " * rng.randint(0, 3)
                + " ".join(rng.choices(vocab, k=rng.randint(0, 12)))
                + "\n"
            )
            lines.append(line)
            size += len(line)
        self.pool = "".join(lines).encode()

    def content(self, spec: FileSpec) -> bytes:
        """The bytes of ``spec``: the same on every machine and every run."""
        rng = random.Random(f"{SEED}:{spec.path}")
        if spec.binary:
            return rng.randbytes(spec.size)
        header = f"# {spec.path}\n".encode()
        body = max(0, spec.size - len(header))
        start = rng.randrange(0, len(self.pool) - body)
        return header + self.pool[start : start + body]


def write_files(root: Path, specs: Sequence[FileSpec], maker: ContentMaker) -> None:
    """Write every file of ``specs`` under ``root`` (folders made as needed)."""
    made: set[Path] = set()
    for spec in specs:
        path = root / spec.path
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(maker.content(spec))


def inside_work_tree(path: Path) -> bool:
    """Whether ``path`` (an existing folder) lies inside some git work tree."""
    proc = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"],
        cwd=path,
        env=clean_env(),
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0 and proc.stdout.strip() == b"true"


def read_marker(root: Path) -> dict[str, Any] | None:
    """The benchmark marker of a repository this script built, or None."""
    try:
        data = json.loads((root / ".git" / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def build_repo(root: Path, layout: Layout) -> str:
    """Create the repository at ``root`` (an empty or missing folder) and return its base commit."""
    started = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for key, value in (
        ("user.name", "bench"),
        ("user.email", "bench@localhost"),
        ("core.autocrlf", "false"),
        ("commit.gpgsign", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
    ):
        # No automatic gc in the middle of a timed repetition: it would be noise, not paella.
        git(root, "config", key, value)
    maker = ContentMaker()
    log(
        f"writing {len(layout.tracked):,} tracked files ({sum(f.size for f in layout.tracked) / MIB:,.0f} MiB)"
    )
    (root / ".gitignore").write_text(GITIGNORE)
    write_files(root, layout.tracked[1:], maker)
    log(f"  written in {time.perf_counter() - started:.1f}s; git add -A and commit")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "benchmark repository")
    log(f"  committed at {time.perf_counter() - started:.1f}s; packing (as a clone would be)")
    git(root, "repack", "-a", "-d", "-q")
    git(root, "prune-packed")
    base = git_out(root, "rev-parse", "HEAD")
    (root / ".git" / MARKER).write_text(json.dumps({**layout.params(), "base": base}) + "\n")
    log(f"  built in {time.perf_counter() - started:.1f}s")
    return base


def prepare_repo(root: Path, layout: Layout) -> None:
    """Build the repository, or bring a kept one back to its freshly built state."""
    marker = read_marker(root)
    if root.exists() and any(root.iterdir()) and marker is None:
        raise SystemExit(f"{root} exists and was not built by this benchmark: refusing to touch it")
    if marker is not None and {k: marker.get(k) for k in layout.params()} != layout.params():
        log(f"{root} was built with other parameters ({marker}): rebuilding it")
        shutil.rmtree(root)
        marker = None
    if not root.exists() or not any(root.iterdir()):
        parent = root.parent
        parent.mkdir(parents=True, exist_ok=True)
        if inside_work_tree(parent):
            raise SystemExit(
                f"{parent} is inside a git work tree: build the benchmark repository elsewhere (/tmp)"
            )
        build_repo(root, layout)
        marker = read_marker(root)
    assert marker is not None
    log(f"resetting {root} to its base commit {marker['base'][:12]}")
    started = time.perf_counter()
    git(root, "checkout", "-q", "-f", "-B", "main", marker["base"])
    git(root, "clean", "-q", "-f", "-d")  # untracked files only: ignored ones stay
    shutil.rmtree(root / ".git" / "paella", ignore_errors=True)
    refs = git_out(root, "for-each-ref", "--format=%(refname)", "refs/paella", "refs/bench")
    if refs:
        git(
            root,
            "update-ref",
            "--stdin",
            input="".join(f"delete {r}\n" for r in refs.split()).encode(),
        )
    with contextlib.suppress(FileNotFoundError):
        (root / ".git" / "bench-raw.index").unlink()
    git(root, "reflog", "expire", "--expire=now", "--all")
    git(root, "prune", "--expire=now")
    maker = ContentMaker()
    write_files(root, layout.untracked, maker)
    write_files(root, layout.ignored, maker)
    git(
        root, "status", "--porcelain"
    )  # a fresh stat cache in the real index, as after any git command
    log(f"  ready in {time.perf_counter() - started:.1f}s")


def repo_facts(root: Path) -> dict[str, str]:
    """What the repository holds, counted by git itself."""
    tracked = git(root, "ls-files", "-z").stdout.count(b"\0")
    untracked = git(root, "ls-files", "-z", "--others", "--exclude-standard").stdout.count(b"\0")
    ignored = git(
        root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"
    ).stdout.count(b"\0")
    size = sum(
        int(line.split()[3]) for line in git_out(root, "ls-tree", "-r", "-l", "HEAD").splitlines()
    )
    count = dict(line.split(": ", 1) for line in git_out(root, "count-objects", "-v").splitlines())
    return {
        "tracked files": f"{tracked:,} ({size / MIB:,.1f} MiB)",
        "untracked files (not ignored)": f"{untracked:,}",
        "ignored files": f"{ignored:,}",
        "objects": f"{count.get('in-pack', '?')} packed, {count.get('count', '?')} loose",
    }


# ----------------------------------------------------------------------------------------------
# The measures


@dataclass
class Bench:
    """The benchmark repository and the state of the changes made to it between repetitions."""

    root: Path
    layout: Layout
    paella: list[str]
    before: Path | None = None
    """``--before``: another checkout of paella, whose CLI checkpoint is timed alongside."""
    edits: int = 0
    change_round: int = 0
    raw_count: int = 0
    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """CPU seconds (user + system) of the processes a measure ran, where it ran processes."""

    def touch_one(self) -> str:
        """The one-file change before each timed repetition: append a line to a tracked file."""
        self.edits += 1
        rel = self.layout.hot[self.edits % len(self.layout.hot)]
        with (self.root / rel).open("ab") as handle:
            handle.write(f"# benchmark edit {self.edits}\n".encode())
        return rel

    def change_and_commit(self) -> None:
        """The rollback measure's setup: change ~10 files (9 edited, 1 new) and commit once."""
        self.change_round += 1
        start = (self.change_round * (CHANGE_FILES - 1)) % len(self.layout.change_pool)
        paths = [
            self.layout.change_pool[(start + k) % len(self.layout.change_pool)]
            for k in range(CHANGE_FILES - 1)
        ]
        for rel in paths:
            with (self.root / rel).open("ab") as handle:
                handle.write(f"# change round {self.change_round}\n".encode())
        new = f"bench_added/round_{self.change_round:03d}.py"
        (self.root / new).parent.mkdir(exist_ok=True)
        (self.root / new).write_text(f"ROUND = {self.change_round}\n")
        git(self.root, "add", "--", *paths, new)
        git(self.root, "commit", "-q", "-m", f"benchmark change round {self.change_round}")

    def record(self, key: str, seconds: float, cpu: float | None = None) -> None:
        """Keep one timed sample of a measure (and the CPU its processes took)."""
        self.samples.setdefault(key, []).append(seconds)
        if cpu is not None:
            self.cpu.setdefault(key, []).append(cpu)


def children_cpu() -> float:
    """CPU seconds of every child this process waited for so far (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def api_checkpoint(root: Path, label: str) -> SnapshotRecord:
    """A manual checkpoint through the Python API, as the TUI takes one (the snapshotter the
    commands use: the byproducts left out, as ``paella checkpoint`` leaves them out, so the
    measures share one private index and its memo, as a user's commands do)."""
    workspace = Workspace.find(root)
    run = RunStore(workspace).current_or_manual("benchmark checkpoint")
    return take_checkpoint(run, snapshotter_for(workspace, run.load_contract()), label=label)


def api_rollback(root: Path, name: str) -> RollbackResult:
    """A rollback to the snapshot ``name`` (``3`` or ``salvage:2``) through the Python API."""
    workspace = Workspace.find(root)
    run = RunStore(workspace).current()
    assert run is not None
    snapshotter = snapshotter_for(workspace, run.load_contract())
    return rollback(run, ckpt.find(run, name), snapshotter=snapshotter)


def measure_status(bench: Bench) -> None:
    """``git status --porcelain``: the reference."""
    bench.touch_one()
    env = clean_env()
    started = time.perf_counter()
    git(bench.root, "status", "--porcelain", env=env)
    bench.record("git status --porcelain", time.perf_counter() - started)


def measure_api(bench: Bench) -> None:
    """A warm paella checkpoint through the Python API."""
    bench.touch_one()
    started = time.perf_counter()
    api_checkpoint(bench.root, f"benchmark {bench.edits}")
    bench.record("paella checkpoint (Python API, warm)", time.perf_counter() - started)


def measure_cli(bench: Bench) -> None:
    """``paella checkpoint`` as a subprocess: process start, imports, checks, snapshot, ledger."""
    cli_checkpoint(bench, "paella checkpoint (CLI subprocess)", None)


def measure_cli_before(bench: Bench) -> None:
    """``paella checkpoint`` of the ``--before`` checkout, on the same repository and run."""
    if bench.before is not None:
        cli_checkpoint(bench, BEFORE_KEY, bench.before)


BEFORE_KEY = "paella checkpoint (CLI subprocess), --before"


def cli_checkpoint(bench: Bench, key: str, before: Path | None) -> None:
    """Time one ``paella checkpoint`` process (``before``: with that checkout's code)."""
    bench.touch_one()
    env = clean_env()
    # As installed, python finds compiled bytecode; keep it outside the source tree, in the
    # benchmark repository's .git, even where PYTHONDONTWRITEBYTECODE is set.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cache = "bench-pycache" if before is None else "bench-pycache-before"
    env["PYTHONPYCACHEPREFIX"] = str(bench.root / ".git" / cache)
    if before is not None:
        # Its own mirror: the two versions keep the ledger's copy in different forms.
        env["PYTHONPATH"] = str(before)
        env["XDG_STATE_HOME"] = os.path.join(os.environ["XDG_STATE_HOME"], "before")
    cpu = children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(
        [*bench.paella, "checkpoint", "--label", f"benchmark cli {bench.edits}"],
        cwd=bench.root,
        env=env,
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"paella checkpoint failed ({proc.returncode}): {proc.stderr.decode()}")
    bench.record(key, elapsed, children_cpu() - cpu)


def measure_raw(bench: Bench) -> None:
    """The same snapshot with raw git plumbing and a throw-away index copied from the real one."""
    bench.touch_one()
    bench.raw_count += 1
    env = clean_env()
    index = bench.root / ".git" / "bench-raw.index"
    env_index = {**env, "GIT_INDEX_FILE": str(index)}
    cpu = children_cpu() + time.process_time()  # the index copy is this process's own work
    started = time.perf_counter()
    shutil.copyfile(bench.root / ".git" / "index", index)
    git(bench.root, "add", "-A", env=env_index)
    tree = git_out(bench.root, "write-tree", env=env_index)
    commit = git_out(bench.root, "commit-tree", tree, "-p", "HEAD", "-m", "raw snapshot", env=env)
    git(bench.root, "update-ref", f"refs/bench/raw/{bench.raw_count}", commit, env=env)
    elapsed = time.perf_counter() - started
    cpu = children_cpu() + time.process_time() - cpu
    bench.record("raw git plumbing snapshot (baseline)", elapsed, cpu)


def measure_python(bench: Bench) -> None:
    """A bare Python start (``python -c pass``), as the CLI's process starts."""
    cpu = children_cpu()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=clean_env(), check=True)
    elapsed = time.perf_counter() - started
    bench.record("python -c pass (a bare Python start)", elapsed, children_cpu() - cpu)


def measure_rollback(bench: Bench) -> None:
    """A rollback to the previous checkpoint after ~10 changed files and a commit, then its undo."""
    record = api_checkpoint(bench.root, f"before change round {bench.change_round + 1}")
    bench.change_and_commit()
    started = time.perf_counter()
    result = api_rollback(bench.root, record.name)
    bench.record("paella rollback (Python API)", time.perf_counter() - started)
    started = time.perf_counter()
    api_rollback(bench.root, result.salvage.name)
    bench.record("paella rollback undo (to the salvage)", time.perf_counter() - started)


MEASURES: tuple[Callable[[Bench], None], ...] = (
    measure_status,
    measure_api,
    measure_cli,
    measure_cli_before,
    measure_raw,
    measure_python,
    measure_rollback,
)
ORDER = (
    "git status --porcelain",
    "paella checkpoint (Python API, warm)",
    "paella checkpoint (CLI subprocess)",
    "raw git plumbing snapshot (baseline)",
    "python -c pass (a bare Python start)",
    "paella rollback (Python API)",
    "paella rollback undo (to the salvage)",
)


def run_rounds(bench: Bench, repeat: int) -> None:
    """One untimed warm-up round, then ``repeat`` rounds, each starting one measure later."""
    log("warm-up round (untimed: seeds paella's private index, warms the page cache)")
    for measure in MEASURES:
        measure(bench)
    # Both: the warm-up's CPU (its first checkpoint seeds the private index) was kept before.
    bench.samples.clear()
    bench.cpu.clear()
    for r in range(repeat):
        shift = r % len(MEASURES)
        for measure in (*MEASURES[shift:], *MEASURES[:shift]):
            measure(bench)
        log(f"round {r + 1}/{repeat} done")


def sanity_check(bench: Bench, layout: Layout) -> str:
    """Check that the last checkpoint holds the untracked files and none of the ignored ones."""
    workspace = Workspace.find(bench.root)
    run = RunStore(workspace).current()
    assert run is not None
    last = ckpt.records(run, "checkpoints")[-1]
    names = set(git_out(bench.root, "ls-tree", "-r", "--name-only", last.tree).splitlines())
    missing = [f.path for f in layout.untracked if f.path not in names]
    leaked = [f.path for f in layout.ignored if f.path in names]
    if missing or leaked:
        return f"⚠ checkpoint {last.n}: {len(missing)} untracked files missing, {len(leaked)} ignored files included"
    return f"checkpoint {last.n} holds {len(names):,} files: all {len(layout.untracked)} untracked, no ignored one"


# ----------------------------------------------------------------------------------------------
# Profile: where the time of a checkpoint and a rollback goes


@dataclass
class GitCall:
    """One git subprocess paella ran, who asked for it, and how long it took."""

    caller: str
    command: str
    seconds: float


def _describe(git_runner: Git, args: Sequence[str]) -> str:
    words: list[str] = []
    skip = False
    for arg in args:
        if skip or arg in ("-z", "--") or arg.startswith(":("):
            skip = False
            continue
        if arg == "-m" and args[0] in ("commit-tree", "update-ref", "symbolic-ref"):
            skip = True  # a message: not part of what the command does
            continue
        if not arg:
            arg = "''"
        arg = _OID.sub("<oid>", arg)
        words.append(_PAELLA_REF.sub("refs/paella/…", arg))
    if words[0] not in ("rev-parse", "update-ref", "symbolic-ref", "read-tree", "commit-tree"):
        words = [words[0], *[w for w in words[1:] if w.startswith("-")]]
    text = " ".join(w if len(w) <= 26 else w[:24] + "…" for w in words)
    return text + (" [private index]" if git_runner.index_file is not None else "")


def _caller() -> str:
    names: list[str] = []
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("supervisor.") and module != "paella_tui.supervisor.store.gitcli":
            names.append(frame.f_code.co_name)
        frame = frame.f_back  # type: ignore[assignment]
    return " > ".join(reversed(names)) or "?"


@contextlib.contextmanager
def instrument_git(calls: list[GitCall]) -> Iterator[None]:
    """Time every ``Git.run`` of this process (only while the block runs)."""
    original = Git.run

    def timed_run(
        self: Git, args: Sequence[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[bytes]:
        started = time.perf_counter()
        try:
            return original(self, args, **kwargs)
        finally:
            calls.append(GitCall(_caller(), _describe(self, args), time.perf_counter() - started))

    # A full scan's two listings run side by side (store/scan_listing.py): one entry, timed
    # from their start to both answers.
    listing_init, listing_result = scan_listing.Listing.__init__, scan_listing.Listing.result
    starts: dict[int, float] = {}

    def timed_init(self: scan_listing.Listing, git_runner: Git, *args: Any) -> None:
        starts[id(self)] = time.perf_counter()
        listing_init(self, git_runner, *args)

    def timed_result(self: scan_listing.Listing) -> tuple[list[str], list[str]]:
        try:
            return listing_result(self)
        finally:
            what = "diff-files ∥ ls-files --others (side by side)"
            if self.git.index_file is not None:
                what += " [private index]"
            seconds = time.perf_counter() - starts.pop(id(self), time.perf_counter())
            calls.append(GitCall(_caller(), what, seconds))

    Git.run = timed_run  # type: ignore[method-assign]
    scan_listing.Listing.__init__ = timed_init  # type: ignore[method-assign]
    scan_listing.Listing.result = timed_result  # type: ignore[method-assign]
    try:
        yield
    finally:
        Git.run = original  # type: ignore[method-assign]
        scan_listing.Listing.__init__ = listing_init  # type: ignore[method-assign]
        scan_listing.Listing.result = listing_result  # type: ignore[method-assign]


def breakdown(
    samples: list[tuple[float, list[GitCall]]], status_median: float, title: str
) -> list[str]:
    """A Markdown table: each git call's median time (in call order), and the rest (Python)."""
    keyed: dict[tuple[str, str], list[list[float]]] = {}
    order: list[tuple[str, str]] = []
    for _, calls in samples:
        seen: dict[tuple[str, str], list[float]] = {}
        for call in calls:
            key = (call.caller, call.command)
            if key not in seen and key not in keyed:
                order.append(key)
            seen.setdefault(key, []).append(call.seconds)
        for key, times in seen.items():
            keyed.setdefault(key, []).append(times)
    totals = [total for total, _ in samples]
    total = median(totals)
    lines = [
        f"#### {title}: median {ms(total)} over {len(samples)} runs ({total / status_median:.2f} × git status)",
        "",
        "| called from | git command | calls | median | share |",
        "|---|---|---:|---:|---:|",
    ]
    git_sum = 0.0
    for key in order:
        per_run = keyed[key]
        n_calls = round(statistics.mean(len(t) for t in per_run), 1)
        seconds = median([sum(t) for t in per_run])
        git_sum += seconds
        lines.append(
            f"| {key[0]} | `git {key[1]}` | {n_calls:g} | {ms(seconds)} | {seconds / total:.0%} |"
        )
    processes = round(statistics.mean(len(c) for _, c in samples), 1)
    lines.append(
        f"| | **{processes:g} git processes, sum of medians** | | **{ms(git_sum)}** | **{git_sum / total:.0%}** |"
    )
    lines.append(
        f"| | Python in paella (ledger, locks, parsing) | | {ms(total - git_sum)} | {(total - git_sum) / total:.0%} |"
    )
    return lines


def _timed(
    root: Path, args: Sequence[str], env: dict[str, str], stdin: bytes | None = None
) -> float:
    started = time.perf_counter()
    git(root, *args, env=env, input=stdin)
    return time.perf_counter() - started


# The commands Snapshotter.take runs when one tracked file changed (kept in step with snapshot.py).
TAKE_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ls-files --others --exclude-standard", ("ls-files", "-z", "--others", "--exclude-standard")),
    (
        "diff-files --name-status",
        ("diff-files", "-z", "--name-status", "--no-renames", "--ignore-submodules=dirty"),
    ),
    ("update-index --add --remove --stdin", ("update-index", "--add", "--remove", "-z", "--stdin")),
    ("ls-files -c -i --exclude-standard", ("ls-files", "-z", "-c", "-i", "--exclude-standard")),
    ("write-tree", ("write-tree",)),
    ("ls-files --stage", ("ls-files", "-z", "--stage")),
)
SKIPPABLE = ("ls-files -c -i --exclude-standard", "ls-files --stage")


def experiments(bench: Bench, repeat: int) -> list[str]:
    """Time the snapshot's git commands, and alternatives, on copies of paella's private index.

    Each repetition changes one file, then runs the commands of ``Snapshotter.take`` against a
    copy of the private index in each format (interleaved), and the alternatives to the two walks.
    Shared index files that git writes into ``.git`` for the split-index copy are removed after.
    """
    root = bench.root
    git_dir = root / ".git"
    private = git_dir / "paella" / "snapshot.index"
    shared_before = set(git_dir.glob("sharedindex.*"))
    scratch = Path(tempfile.mkdtemp(prefix="paella-bench-exp-"))
    try:
        envs: dict[str, dict[str, str]] = {}
        for variant, setup in (
            ("v2 index (now)", None),
            ("v4 index", ("update-index", "--index-version", "4")),
            ("split index", ("update-index", "--split-index")),
            (
                "untracked cache",
                ("-c", "core.untrackedCache=true", "update-index", "--untracked-cache"),
            ),
        ):
            copy = scratch / variant.split()[0]
            shutil.copyfile(private, copy)
            envs[variant] = {**clean_env(), "GIT_INDEX_FILE": str(copy), "GIT_OPTIONAL_LOCKS": "0"}
            if setup is not None:
                git(root, *setup, env=envs[variant])
        uc_env = {
            **envs["untracked cache"],
            "GIT_OPTIONAL_LOCKS": "1",
        }  # status writes the cache back
        uc_status = (
            "-c",
            "core.untrackedCache=true",
            "status",
            "-z",
            "--porcelain",
            "-unormal",
            "--no-renames",
            "--ignore-submodules=dirty",
        )
        git(root, *uc_status, env=uc_env)
        formats = [v for v in envs if v != "untracked cache"]
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(repeat):
            changed = bench.touch_one().encode() + b"\0"
            for variant in (*formats[r % 3 :], *formats[: r % 3]):
                for name, args in TAKE_STEPS:
                    stdin = changed if name.startswith("update-index") else None
                    times.setdefault((variant, name), []).append(
                        _timed(root, args, envs[variant], stdin)
                    )
            times.setdefault(("alt", "status UC"), []).append(_timed(root, uc_status, uc_env))
            git(root, *TAKE_STEPS[2][1], env=envs["untracked cache"], input=changed)
            times.setdefault(("alt", "format"), []).append(
                _timed(root, ("ls-files", "-z", "--format=%(objectmode)"), envs["v2 index (now)"])
            )
            times.setdefault(("alt", "start"), []).append(
                _timed(root, ("rev-parse", "--git-dir"), envs["v2 index (now)"])
            )

        def med(variant: str, name: str) -> float:
            return median(times[(variant, name)])

        lines = [
            f"#### The commands of `Snapshotter.take` on copies of the private index (median of {repeat})",
            "",
            "| git command | " + " | ".join(formats) + " |",
            "|---|" + "---:|" * len(formats),
        ]
        for name, _ in TAKE_STEPS:
            lines.append(f"| `{name}` | " + " | ".join(ms(med(v, name)) for v in formats) + " |")
        totals = {v: sum(med(v, name) for name, _ in TAKE_STEPS) for v in formats}
        kept = {
            v: sum(med(v, name) for name, _ in TAKE_STEPS if name not in SKIPPABLE) for v in formats
        }
        lines.append(
            "| **all six** | " + " | ".join(f"**{ms(totals[v])}**" for v in formats) + " |"
        )
        lines.append(
            "| without the last two (skipped when nothing can have changed) | "
            + " | ".join(ms(kept[v]) for v in formats)
            + " |"
        )
        walks = med("v2 index (now)", TAKE_STEPS[0][0]) + med("v2 index (now)", TAKE_STEPS[1][0])
        lines += [
            "",
            f"#### Other alternatives (median of {repeat})",
            "",
            "| now | instead | now | instead |",
            "|---|---|---:|---:|",
            "| `ls-files --others` + `diff-files` (two walks) | one `status --porcelain -unormal` on a private "
            f"index with the untracked cache (written back) | {ms(walks)} | {ms(median(times[('alt', 'status UC')]))} |",
            "| `ls-files --stage` (gitlink scan) | `ls-files --format=%(objectmode)` | "
            f"{ms(med('v2 index (now)', 'ls-files --stage'))} | {ms(median(times[('alt', 'format')]))} |",
            f"| starting one git process (`rev-parse --git-dir`) | | {ms(median(times[('alt', 'start')]))} | |",
        ]
        return lines
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for stale in set(git_dir.glob("sharedindex.*")) - shared_before:
            stale.unlink()


def profile(bench: Bench, runs: int) -> list[str]:
    """Instrumented checkpoints and rollbacks, and the alternatives, as Markdown.

    ``git status`` is timed again, interleaved with the instrumented checkpoints, so that the
    ratios of this section compare with what the machine did at the same moment.
    """
    statuses: list[float] = []
    checkpoint_samples: list[tuple[float, list[GitCall]]] = []
    for _ in range(runs):
        bench.touch_one()
        started = time.perf_counter()
        git(bench.root, "status", "--porcelain")
        statuses.append(time.perf_counter() - started)
        bench.touch_one()
        calls: list[GitCall] = []
        with instrument_git(calls):
            started = time.perf_counter()
            api_checkpoint(bench.root, "profile")
            checkpoint_samples.append((time.perf_counter() - started, calls))
    rollback_samples: list[tuple[float, list[GitCall]]] = []
    for _ in range(max(3, runs // 2)):
        record = api_checkpoint(bench.root, "profile: before change")
        bench.change_and_commit()
        calls = []
        with instrument_git(calls):
            started = time.perf_counter()
            result = api_rollback(bench.root, record.name)
            rollback_samples.append((time.perf_counter() - started, calls))
        api_rollback(bench.root, result.salvage.name)
    status_median = median(statuses)
    lines = [
        "### Where the time goes",
        "",
        f"`git status --porcelain`, timed between the instrumented checkpoints: median {ms(status_median)}.",
        "",
    ]
    lines += breakdown(checkpoint_samples, status_median, "paella checkpoint (Python API, warm)")
    lines += [""]
    lines += breakdown(rollback_samples, status_median, "paella rollback (Python API)")
    lines += [""]
    lines += experiments(bench, runs)
    return lines


# ----------------------------------------------------------------------------------------------
# The report


def machine() -> list[str]:
    """The machine, python and git, as Markdown bullet lines."""
    return [
        cores_line(),
        python_line(),
        f"- git: {git_version()}",
        f"- os: {platform.platform()}",
    ]


def git_settings(root: Path) -> str:
    """The git settings that change how fast status and snapshots are, as this repository sees them."""
    values = []
    for key in (
        "core.untrackedCache",
        "core.fsmonitor",
        "core.preloadIndex",
        "index.threads",
        "feature.manyFiles",
    ):
        proc = git(root, "config", "--get", key, check=False)
        values.append(f"{key}={proc.stdout.decode().strip() or '(default)'}")
    return ", ".join(values)


def report(
    bench: Bench, args: argparse.Namespace, facts: dict[str, str], sanity: str
) -> tuple[list[str], list[str]]:
    """The results table and the targets as Markdown lines, and the targets missed."""
    status = median(bench.samples["git status --porcelain"])
    lines = [
        f"## Checkpoint benchmark ({time.strftime('%Y-%m-%d %H:%M %Z')})",
        "",
        *machine(),
        f"- repository: {bench.root}: " + "; ".join(f"{k} {v}" for k, v in facts.items()),
        f"- git settings: {git_settings(bench.root)}",
        f"- {args.repeat} timed repetitions of each measure, interleaved round-robin after one warm-up round;"
        " one tracked file changed before each",
        f"- sanity: {sanity}",
        "",
        "| measure | median | p90 | ratio to git status median |",
        "|---|---:|---:|---:|",
    ]
    for key in (*ORDER[:3], BEFORE_KEY, *ORDER[3:]):
        samples = bench.samples.get(key)
        if not samples:
            continue
        lines.append(
            f"| {key} | {ms(median(samples))} | {ms(p90(samples))} | {median(samples) / status:.2f} × |"
        )
    api = median(bench.samples["paella checkpoint (Python API, warm)"])
    cli = median(bench.samples["paella checkpoint (CLI subprocess)"])
    back = median(bench.samples["paella rollback (Python API)"])
    undo = median(bench.samples["paella rollback undo (to the salvage)"])
    bound = CHECKPOINT_RATIO_TARGET * status
    raw = median(bench.samples["raw git plumbing snapshot (baseline)"])
    python = median(bench.samples["python -c pass (a bare Python start)"])
    floor = raw + python
    targets = [
        (
            "checkpoint median ≤ 3 × git status median (Python API, warm)",
            f"{api / status:.2f} × ({ms(api)} vs {ms(bound)})",
            api <= bound,
            True,
        ),
        ("rollback median ≤ 1 s", ms(back), back <= ROLLBACK_TARGET_S, True),
        (
            "(issue 17) CLI checkpoint ≤ 2 × (raw git plumbing + a bare Python start)",
            f"{cli / floor:.2f} × ({ms(cli)} vs {ms(raw)} + {ms(python)})",
            cli <= CLI_FLOOR_RATIO_TARGET * floor,
            True,
        ),
        (
            "(for information) the same bound, CLI checkpoint end to end",
            f"{cli / status:.2f} × ({ms(cli)})",
            cli <= bound,
            False,
        ),
        (
            "(for information) the same bound, rollback undo",
            ms(undo),
            undo <= ROLLBACK_TARGET_S,
            False,
        ),
    ]
    lines += ["", "| SPEC 13 target | measured | verdict |", "|---|---|---|"]
    missed: list[str] = []
    for what, measured, ok, counts in targets:
        lines.append(f"| {what} | {measured} | {'PASS' if ok else 'FAIL'} |")
        if counts and not ok:
            missed.append(what)
    lines.append("")
    if missed:
        lines.append("**Missed: " + "; ".join(missed) + ".**")
    else:
        lines.append("All SPEC 13 checkpoint and rollback targets are met.")
    lines += cpu_lines(bench)
    lines += pair_lines(bench)
    return lines, missed


def cpu_lines(bench: Bench) -> list[str]:
    """The CPU the whole-process measures took (user + system, with every git process they
    waited for): what the machine's load does not stretch, as it stretches wall time."""
    keys = [k for k in (*ORDER[:3], BEFORE_KEY, *ORDER[3:]) if bench.cpu.get(k)]
    if not keys:
        return []
    lines = [
        "",
        "CPU time of the same runs (user + system of the process and the git processes it "
        "waited for; the raw plumbing's index copy included), which a loaded machine stretches "
        "far less than wall time:",
        "",
        "| measure | CPU median | CPU p90 |",
        "|---|---:|---:|",
    ]
    lines += [f"| {k} | {ms(median(bench.cpu[k]))} | {ms(p90(bench.cpu[k]))} |" for k in keys]
    floor = median(bench.cpu["raw git plumbing snapshot (baseline)"]) + median(
        bench.cpu["python -c pass (a bare Python start)"]
    )
    for key in ("paella checkpoint (CLI subprocess)", BEFORE_KEY):
        if bench.cpu.get(key):
            cli = median(bench.cpu[key])
            lines.append(
                f"\n(for information) {key}, issue 17's bound in CPU time: {cli / floor:.2f} × "
                f"({ms(cli)} vs {ms(floor)} for the raw plumbing and a bare Python start)"
            )
    return lines


def pair_lines(bench: Bench) -> list[str]:
    """With ``--before``: this CLI checkpoint over the other checkout's, round by round (the
    two ran one after the other in each round, so each pair met the same load)."""
    key = "paella checkpoint (CLI subprocess)"
    lines = []
    for what, samples in (("wall", bench.samples), ("CPU", bench.cpu)):
        pairs = zip(samples.get(key, []), samples.get(BEFORE_KEY, []), strict=False)
        ratios = [a / b for a, b in pairs if b]
        if ratios:
            lines.append(
                f"\n(for information) CLI checkpoint / --before, pair by pair in {what} time: "
                f"median {median(ratios):.3f} × (from {min(ratios):.3f} × to {max(ratios):.3f} ×, "
                f"{len(ratios)} rounds)"
            )
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=20_000, help="tracked files (default 20000)")
    parser.add_argument(
        "--size-mb",
        type=int,
        default=160,
        help="total size of the tracked files in MiB (default 160)",
    )
    parser.add_argument(
        "--untracked", type=int, default=300, help="untracked, not ignored files (default 300)"
    )
    parser.add_argument(
        "--repeat", type=int, default=9, help="timed repetitions of each measure (default 9)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="build the repository in DIR and keep it; reuse it when it is there",
    )
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also time `paella checkpoint` with the paella checkout in DIR (e.g. `git archive "
        "<commit> | tar -x -C DIR`), interleaved, on the same repository; its mirror is its own",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print the time breakdown even when every target is met",
    )
    args = parser.parse_args(argv)
    if args.files < 100 or args.size_mb < 1 or args.untracked < 0 or args.repeat < 1:
        parser.error("need --files ≥ 100, --size-mb ≥ 1, --untracked ≥ 0, --repeat ≥ 1")
    return args


def find_paella() -> list[str]:
    """The ``paella`` console script of this Python (the venv's), else ``python -m paella_tui``."""
    script = Path(sys.executable).with_name("paella")
    if script.exists():
        return [str(script)]
    found = shutil.which("paella")
    return [found] if found else [sys.executable, "-m", "paella_tui"]


def main(argv: Sequence[str] | None = None) -> int:
    """Build or reuse the repository, run the measures, print the report (exit 0 either way)."""
    args = parse_args(argv)
    os.environ.pop(STATE_DIR_ENV, None)  # paella's state goes to the benchmark repository's .git
    layout = make_layout(args.files, args.size_mb, args.untracked)
    with contextlib.ExitStack() as stack:
        # Each run starts with new mirrors, there and not in the home folder.
        state = stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-bench-state-"))
        os.environ["XDG_STATE_HOME"] = state
        if args.keep is not None:
            root = args.keep.resolve()
        else:
            root = (
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="paella-bench-")))
                / "repo"
            )
        prepare_repo(root, layout)
        facts = repo_facts(root)
        bench = Bench(
            root=root,
            layout=layout,
            paella=find_paella(),
            before=args.before.resolve() if args.before else None,
        )
        run_rounds(bench, args.repeat)
        sanity = sanity_check(bench, layout)
        lines, missed = report(bench, args, facts, sanity)
        print("\n".join(lines), flush=True)
        if missed or args.profile:
            log("profiling: instrumented checkpoints and rollbacks, then alternatives")
            print("\n" + "\n".join(profile(bench, max(5, args.repeat))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
