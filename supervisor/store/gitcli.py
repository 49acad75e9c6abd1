"""A small runner for git plumbing commands: fixed environment, optional private index, -z output.

Plumbing goes through the git command line rather than GitPython's object layer because the
snapshot needs exact control of the environment (a private ``GIT_INDEX_FILE``, no optional locks,
a committer identity that works on machines without ``user.name``) and of stdin.

Every git process started here dies with paella (``PR_SET_PDEATHSIG`` on Linux): a ``kill -9``
of paella never leaves a git child writing the work tree or an index behind its back. paella's
own ref updates run with hooks disabled, so a failing ``reference-transaction`` hook of the
repository never blocks a checkpoint.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.git_programs import (
    GUARD_ENV,
    filter_options,
    fixed_options,
    guarded_args,
)

# Commits paella writes are snapshots, not the user's work: a fixed identity keeps them working on
# machines with no git identity configured (CI) and makes them easy to tell apart in a log.
PAELLA_IDENTITY = {
    "GIT_AUTHOR_NAME": "paella",
    "GIT_AUTHOR_EMAIL": "paella@localhost",
    "GIT_COMMITTER_NAME": "paella",
    "GIT_COMMITTER_EMAIL": "paella@localhost",
}

# Variables from the caller's environment that would point git at another repository, index
# or object store (the mirror's git scrubs the same: store/mirror_local.py).
SCRUBBED_ENV = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_PREFIX",
        "GIT_TEST_SPLIT_INDEX",
    }
)

# Options on every git command paella runs: paths printed raw, no hooks (paella's own ref
# updates are not the user's operations; a reference-transaction hook must not veto them), and
# no program the repository's configuration names (store/git_programs.py).
BASE_OPTIONS = (
    "-c",
    "core.quotepath=false",
    "-c",
    f"core.hooksPath={os.devnull}",
    *fixed_options(),
)

_PR_SET_PDEATHSIG = 1
# Commands that only read: one left behind by a killed paella changes nothing and ends by itself,
# so they are spared the death-signal hook (it forces fork() over vfork(): ~1 ms a process).
_READ_ONLY = frozenset(
    {
        "cat-file",
        "check-attr",
        "diff",
        "diff-files",
        "diff-tree",
        "for-each-ref",
        "log",
        "ls-files",
        "ls-tree",
        "rev-parse",
        "show",
        "status",
    }
)


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when paella dies (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: a command that runs only read-only git never loads it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will ever come.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


_hooks: dict[int, Callable[[], None] | None] = {}


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child get SIGKILL when this process dies (Linux), or None.

    The death signal follows the thread that started the child, so start children from a thread
    that waits for them (as ``subprocess.run`` does), never from one that exits first.
    """
    pid = os.getpid()  # one hook per process: a forked paella has another parent pid to check
    if pid not in _hooks:
        _hooks[pid] = _die_with_parent_hook()
    return _hooks[pid]


def git_program(path_var: str | None) -> str:
    """The git to run for this ``PATH``: its absolute path, found once, or plain ``git`` (the
    child then searches ``PATH`` itself) when a ``PATH`` entry is relative (it would be looked
    up from the child's folder) or none holds git (the start fails as it always did). With a
    bare ``git``, every start first tried each ``PATH`` folder before git's own (nine failed
    ``execve`` calls per git process on a developer's ``PATH``)."""
    found = _find_git(path_var)
    if found != "git" and not os.access(found, os.X_OK):  # git moved (an upgrade): look again
        _find_git.cache_clear()
        found = _find_git(path_var)
    return found


@functools.lru_cache(maxsize=8)
def _find_git(path_var: str | None) -> str:
    entries = (path_var if path_var is not None else os.defpath).split(os.pathsep)
    if not all(os.path.isabs(entry) for entry in entries):
        return "git"
    return shutil.which("git", path=path_var) or "git"


class Git:
    """Runs git in one work tree, optionally against a private index file."""

    def __init__(
        self,
        root: Path,
        *,
        index_file: Path | None = None,
        config: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.root = root
        self.index_file = index_file
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
        # Read-only commands (status, diff-files) must never take the user's index.lock.
        env["GIT_OPTIONAL_LOCKS"] = "0"
        env["GIT_TERMINAL_PROMPT"] = "0"
        env["LC_ALL"] = "C"
        env.update(PAELLA_IDENTITY)
        env.update(GUARD_ENV)
        if index_file is not None:
            env["GIT_INDEX_FILE"] = str(index_file)
        self._env = env
        self._program = git_program(env.get("PATH"))
        self._options = [*BASE_OPTIONS]
        for key, value in config:
            self._options += ["-c", f"{key}={value}"]

    def command(self, args: Sequence[str]) -> list[str]:
        """The full argv that runs ``git args`` with this runner's options: the filter drivers
        the configuration names now made no-ops, and no diff or signing program either."""
        filters = filter_options(self.root, self._program, self._env)
        return [self._program, *self._options, *filters, *guarded_args(args)]

    @property
    def env(self) -> dict[str, str]:
        """The environment git runs with (a copy)."""
        return dict(self._env)

    def run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``git args`` in the work tree and return the completed process (bytes)."""
        full_env = self._env if env is None else {**self._env, **env}
        writes = not args or args[0] not in _READ_ONLY
        proc = subprocess.run(
            self.command(args),
            cwd=self.root,
            env=full_env,
            input=input,
            capture_output=True,
            check=False,
            preexec_fn=die_with_parent() if writes else None,
        )
        if check and proc.returncode != 0:
            raise GitError(list(args), proc.returncode, proc.stderr.decode(errors="replace"))
        return proc

    def popen(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with pipes on stdin and stdout (for ``cat-file --batch`` streams)."""
        return self._spawn(args, subprocess.PIPE)

    def start(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with no input and its output dropped; the caller waits for it
        (a write that may run beside other work, as the index refresh after a rollback)."""
        return self._spawn(args, subprocess.DEVNULL)

    def _spawn(self, args: Sequence[str], stdio: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command(args),
            cwd=self.root,
            env=self._env,
            stdin=stdio,
            stdout=stdio,
            stderr=stdio,
            preexec_fn=die_with_parent(),
        )

    def out(self, args: Sequence[str], **kwargs: object) -> str:
        """Run git and return its stdout as text, without the trailing newline."""
        proc = self.run(args, **kwargs)  # type: ignore[arg-type]
        return proc.stdout.decode(errors="surrogateescape").rstrip("\n")

    def lines_z(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Run git with NUL-separated output and return the items (paths keep any byte)."""
        data = self.run(args, input=input, env=env).stdout
        return [p.decode(errors="surrogateescape") for p in data.split(b"\0") if p]

    def rev_parse(self, rev: str) -> str | None:
        """The object id ``rev`` names, or None when it does not resolve."""
        proc = self.run(["rev-parse", "--verify", "-q", rev], check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def encode_paths_z(paths: Sequence[str]) -> bytes:
    """Paths as NUL-terminated bytes for ``--stdin -z`` (surrogates restore the original bytes)."""
    return b"".join(p.encode(errors="surrogateescape") + b"\0" for p in paths)
