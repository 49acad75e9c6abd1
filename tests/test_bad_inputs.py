"""Every bad input gets one clear line and the right exit status: no traceback, no hang, nothing
changed. Arguments, files in the workspace, paella's own state files turned into something
else, a deleted current folder, and readers whose pipe closes early. Each case runs the real
command with a timeout (a hang fails it): what the command does with a bad input through
``cli.main`` in the test process (``run_paella_in_process``: the same parser, handlers, messages
and exit statuses on redirected descriptors, without the interpreter's start-up), what only a
process shows (a current folder deleted under it, a pipe closed on it) as a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from conftest import GitRunner, SavedFolder, capture_tree, run_paella_in_process
from hostile_project import FINISHED_GROUP, HostileProject, finished_project, no_traceback

Setup = Callable[[HostileProject], None]


# The cases only need a project with one finished run; the run is made once per test process
# (one worker: the xdist group of every test that uses it) and its folder put back before each
# case (SavedFolder).
pytestmark = pytest.mark.xdist_group(FINISHED_GROUP)


@pytest.fixture(scope="module")
def finished_run(
    tmp_path_factory: pytest.TempPathFactory, git: GitRunner
) -> Iterator[tuple[HostileProject, SavedFolder]]:
    """A project with one finished run (a checkpoint, then the agent failed), its paella state
    and its mirror (a private XDG state folder) all in one saved folder."""
    with finished_project(tmp_path_factory, git) as made:
        yield made


@pytest.fixture
def project(finished_run: tuple[HostileProject, SavedFolder]) -> HostileProject:
    """The project with one finished run, as the run left it."""
    p, saved = finished_run
    saved.restore()
    return p


class Hang(AssertionError):
    """The command did not end within its time."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail with ``Hang`` when the block runs longer than ``seconds``: SIGALRM interrupts even a
    blocking ``open`` of a FIFO, as the subprocess's timeout did."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"the command did not end within {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def paella(p: HostileProject, *args: str) -> subprocess.CompletedProcess[str]:
    """``paella ARGS`` in the project through ``cli.main`` in this process, failing after 30 s."""
    with time_limit(30):
        return run_paella_in_process(p.repo, *args)


def state_picture(p: HostileProject) -> dict[str, bytes | str]:
    picture: dict[str, bytes | str] = {}
    for path in sorted(p.state.rglob("*")):
        key = str(path.relative_to(p.state))
        if path.is_symlink() or not path.exists():
            picture[key] = "link"
        elif path.is_dir():
            picture[key] = "dir"
        elif path.is_file():
            picture[key] = path.read_bytes()
        else:
            picture[key] = "special"
    return picture


ARGUMENTS = [
    (("rollback", "²", "--yes"), 2, "names no snapshot"),
    (("rollback", "salvage:²", "--yes"), 2, "names no snapshot"),
    (("rollback", "9" * 5000, "--yes"), 2, "names no snapshot"),
    (("rollback", "-1", "--yes"), 2, ""),
    (("rollback", "salvage:", "--yes"), 2, "names no snapshot"),
    (("diff", "²"), 2, "names no snapshot"),
    (("diff", "1" * 5000), 2, "names no snapshot"),
    (("handoff", "-o", "/"), 2, "is a folder"),
    (("handoff", "-o", "/no/such/folder/h.md"), 2, "does not exist"),
]


@pytest.mark.parametrize(("args", "code", "says"), ARGUMENTS, ids=lambda v: str(v)[:30])
def test_bad_arguments(
    project: HostileProject, args: tuple[str, ...], code: int, says: str
) -> None:
    tree, state = capture_tree(project.repo), state_picture(project)
    proc = paella(project, *args)
    no_traceback(proc)
    assert proc.returncode == code, proc.stderr
    assert says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2 + proc.stderr.count("warning"), proc.stderr
    assert capture_tree(project.repo) == tree
    assert state_picture(project) == state


def _prompt_file(value: str, make: Callable[[Path], None] | None = None) -> Setup:
    def setup(p: HostileProject) -> None:
        text = (p.repo / "paella.toml").read_text()
        text = text.replace('prompt = "make ok.txt"', f'prompt_file = "{value}"')
        (p.repo / "paella.toml").write_text(text)
        if make is not None:
            make(p.repo / value)

    return setup


def _contract(write: Callable[[Path], None]) -> Setup:
    def setup(p: HostileProject) -> None:
        path = p.repo / "paella.toml"
        path.unlink()
        write(path)

    return setup


def _gate_name(name: str) -> Setup:
    def setup(p: HostileProject) -> None:
        text = (p.repo / "paella.toml").read_text()
        (p.repo / "paella.toml").write_text(text.replace('"work"', f'"{name}"'))

    return setup


WORKSPACE_FILES: list[tuple[str, Setup, int, str]] = [
    ("prompt_file missing", _prompt_file("TASK.md"), 2, "does not exist"),
    ("prompt_file a folder", _prompt_file("TASK", lambda p: p.mkdir()), 2, "folder"),
    (
        "prompt_file /dev/zero",
        _prompt_file("zero", lambda p: p.symlink_to("/dev/zero")),
        2,
        "not a regular file",
    ),
    ("prompt_file a FIFO", _prompt_file("fifo", lambda p: os.mkfifo(p)), 2, "not a regular file"),
    (
        "prompt_file too big",
        _prompt_file("big", lambda p: p.write_bytes(b"x" * (2 << 20))),
        2,
        "over the limit",
    ),
    ("paella.toml a FIFO", _contract(lambda p: os.mkfifo(p)), 2, "not a regular file"),
    (
        "paella.toml /dev/zero",
        _contract(lambda p: p.symlink_to("/dev/zero")),
        2,
        "not a regular file",
    ),
    ("paella.toml a folder", _contract(lambda p: p.mkdir()), 2, "folder"),
    (
        "paella.toml 5000-deep arrays",
        _contract(lambda p: p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")),
        2,
        "nested too deeply",
    ),
    (
        "paella.toml not UTF-8",
        _contract(lambda p: p.write_bytes(b'[run]\nprompt = "\xff"\n')),
        2,
        "UTF-8",
    ),
    ("gate name of 300 bytes", _gate_name("g" * 300), 2, "must fit in"),
    ("gate name of 120 bytes", _gate_name("é" * 60), 2, "must fit in"),
]


@pytest.mark.parametrize(
    ("case", "setup", "code", "says"), WORKSPACE_FILES, ids=[c[0] for c in WORKSPACE_FILES]
)
@pytest.mark.parametrize("command", ["check", "run"])
def test_bad_workspace_files(
    project: HostileProject, case: str, setup: Setup, code: int, says: str, command: str
) -> None:
    setup(project)
    runs_before = sorted(os.listdir(project.state / "runs"))
    tree = capture_tree(project.repo)
    args = ("run", "--headless") if command == "run" else ("check",)
    proc = paella(project, *args)
    no_traceback(proc)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert says in proc.stderr, proc.stderr
    assert sorted(os.listdir(project.state / "runs")) == runs_before, "a run was created"
    assert capture_tree(project.repo) == tree


def _state(name: str, make: Callable[[Path], None]) -> Setup:
    def setup(p: HostileProject) -> None:
        path = p.state / name if "/" not in name else p.run_dir() / name.split("/", 1)[1]
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        make(path)

    return setup


STATE_FILES: list[tuple[str, Setup, tuple[str, ...], int]] = [
    (
        "current not UTF-8",
        _state("current", lambda p: p.write_bytes(b"\xff\xfe\n")),
        ("status",),
        0,
    ),
    ("current a folder", _state("current", lambda p: p.mkdir()), ("status",), 0),
    ("current a FIFO", _state("current", lambda p: os.mkfifo(p)), ("status", "--json"), 0),
    ("ledger a folder", _state("run/events.jsonl", lambda p: p.mkdir()), ("status",), 0),
    ("ledger a FIFO", _state("run/events.jsonl", lambda p: os.mkfifo(p)), ("log",), 0),
    ("contract copy a folder", _state("run/contract.toml", lambda p: p.mkdir()), ("status",), 0),
    ("handoff a folder", _state("run/handoff.md", lambda p: p.mkdir()), ("handoff",), 3),
]


@pytest.mark.parametrize(
    ("case", "setup", "args", "code"), STATE_FILES, ids=[c[0] for c in STATE_FILES]
)
def test_state_files_that_are_not_what_they_should_be(
    project: HostileProject, case: str, setup: Setup, args: tuple[str, ...], code: int
) -> None:
    setup(project)
    proc = paella(project, *args)
    no_traceback(proc)
    assert proc.returncode == code, proc.stderr


def test_a_deleted_current_folder_is_one_line_and_exit_3(project: HostileProject) -> None:
    gone = project.repo / "gone"
    gone.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, subprocess; os.rmdir(os.getcwd()); "
            "sys.exit(subprocess.run([sys.executable, '-m', 'paella_tui', 'status']).returncode)",
        ],
        cwd=gone,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert "Traceback" not in err and "current folder no longer exists" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args", [("status",), ("log",), ("checkpoints", "--json"), ("check",), ("status", "--json")]
)
def test_a_reader_whose_pipe_closes_ends_quietly(
    project: HostileProject, args: tuple[str, ...]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "paella_tui", *args],
        cwd=project.repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head -0`: the reader is gone before the first line
    err = proc.stderr.read().decode()
    proc.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 0, err
