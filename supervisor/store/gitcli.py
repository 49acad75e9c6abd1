"""A small runner for git plumbing commands: fixed environment, optional private index, -z output.

Plumbing goes through the git command line rather than GitPython's object layer because the
snapshot needs exact control of the environment (a private ``GIT_INDEX_FILE``, no optional locks,
a committer identity that works on machines without ``user.name``) and of stdin.

Every git process started here that may write dies with paella (``PR_SET_PDEATHSIG`` on Linux):
a ``kill -9`` of paella never leaves a git child writing the work tree, the user's index or
paella's stores behind its back. paella's own ref updates run with hooks disabled, so a failing
``reference-transaction`` hook of the repository never blocks a checkpoint.

How a child gets its death signal without forking paella. A Python ``preexec_fn`` makes
``subprocess`` fork() instead of vfork(): the kernel copies paella's page tables and paella then
takes a copy-on-write fault on each page it writes (3.6 ms of CPU a git start at 10 MB, 8.5 ms
at 120 MB, 15 ms at 250 MB, against 1.5 ms plain: ``benchmarks/git_start.py``). So where
util-linux's ``setpriv`` knows ``--pdeathsig`` (found on ``PATH``; a process's first write
through it is its trial, run again with the hook below if setpriv itself refused, before any git
ran), git starts vfork'ed through it, with no ``preexec_fn``, one of three ways by what the
command can write (:func:`start_kind`):

- ``read``: nothing. Started plain: one left behind ends by itself and changes nothing.
- ``store``: objects and paella's refs only. Objects (``hash-object``, ``mktree``,
  ``commit-tree``, ``fast-import``...) are written to a temporary file and renamed into place
  whole, under no lock; refs under ``refs/paella/``, ``refs/paella-state/`` and
  ``refs/paella-mirror/`` are created only, or moved by compare-and-swap. Started as ``setpriv
  --pdeathsig KILL -- git ...`` (2.7 ms). Were paella killed in the millisecond between the
  start and setpriv's ``prctl``, this one git would run to its end: what paella dying just
  after that git returned leaves (an unreferenced object, a paella ref created or moved), a
  moment every ``kill -9`` can already choose. Such a git ends within milliseconds, long before
  a new paella has even started (150 ms and more) and could meet the ref lock it holds, which
  a new paella takes to be a dead paella's and removes (``checkpoints``).
- ``checked``: anything else. The private index (``update-index``, ``write-tree``,
  ``read-tree``): on a large tree these run for seconds, and a new paella removes the private
  index's lock it finds, trusting its writer died (``snapshot``). The user's work tree, index
  and branches (``read-tree --reset`` of a rollback, ``update-index --refresh``, ``update-ref
  HEAD``): the user may act the moment paella is gone. And any command not named above. No git
  of these may start once paella is gone: started as ``setpriv --pdeathsig KILL -- /bin/sh -c
  'test "$PPID" = "$1" && shift && exec "$@"' sh <paella's pid> git ...``, the signal is set
  first, then the shell checks that its parent is still paella before git starts (the check the
  fallback hook makes), at 3.7 ms whatever paella's size.

Without a usable ``setpriv`` (or ``/bin/sh`` for ``checked``), the ``preexec_fn`` hook of
:func:`die_with_parent` does both (signal, then the parent check) in the forked child, as it did
for every write before. Off Linux, children get no death signal.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.git_programs import (
    GUARD_ENV,
    config_settings,
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
# so they are started with no death signal at all.
_READ_ONLY = frozenset(
    {
        "cat-file",
        "check-attr",
        "check-ignore",
        "diff",
        "diff-files",
        "diff-tree",
        "for-each-ref",
        "log",
        "ls-files",
        "ls-tree",
        "merge-base",
        "rev-list",
        "rev-parse",
        "show",
        "status",
    }
)
# ``git config`` with one of these only reads (paella asks the repository's filters and settings).
_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l"})
# Commands whose writes are objects only: written to a temporary file and renamed into place whole.
_OBJECT_WRITERS = frozenset(
    {"commit-tree", "fast-import", "hash-object", "index-pack", "mktag", "mktree", "pack-objects"}
    | {"unpack-objects"}
)
_PAELLA_REFS = ("refs/paella/", "refs/paella-state/", "refs/paella-mirror/")
_REF_COMMAND = re.compile(rb"^(?:update|create|delete|verify) ([^ \0\n]+)")
_REF_CONTROL = frozenset({b"start", b"prepare", b"commit", b"abort"})

StartKind = Literal["read", "store", "checked"]
"""What a git command can write, which says how it is started (the module docstring)."""


def start_kind(args: Sequence[str], *, input: bytes | None) -> StartKind:
    """``read``, ``store`` or ``checked``: what ``git args`` (fed ``input``) can write."""
    command = args[0] if args else ""
    if command in _READ_ONLY:
        return "read"
    if command == "config" and _CONFIG_READS.intersection(args):
        return "read"
    if command == "worktree" and list(args[1:2]) == ["list"]:
        return "read"
    if _reads_a_symbolic_ref(args):
        return "read"
    if command in _OBJECT_WRITERS:
        return "store"
    if command == "update-ref" and _only_paella_refs(args[1:], input):
        return "store"
    return "checked"


def _reads_a_symbolic_ref(args: Sequence[str]) -> bool:
    """``symbolic-ref [-q] [--short] <name>``: one name and no message or delete reads it."""
    if not args or args[0] != "symbolic-ref" or {"-m", "-d", "--delete"}.intersection(args):
        return False
    return len([arg for arg in args[1:] if not arg.startswith("-")]) == 1


def _only_paella_refs(args: Sequence[str], input: bytes | None) -> bool:
    """Whether an ``update-ref`` with these arguments (and stdin) names only paella's refs."""
    if "--stdin" in args:
        refs = []
        for line in re.split(rb"[\n\0]", input or b""):
            if not line or line in _REF_CONTROL or line.startswith(b"option "):
                continue
            found = _REF_COMMAND.match(line)
            if found is None:  # -z puts the values on their own fields: bare object ids
                if re.fullmatch(rb"[0-9a-f]{40}|[0-9a-f]{64}|", line) is None:
                    return False
                continue
            refs.append(found.group(1).decode(errors="surrogateescape"))
    else:
        positional, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg == "-m":
                skip = True  # its value is the reflog message
            elif not arg.startswith("-"):
                positional.append(arg)
        refs = positional[:1]
    return bool(refs) and all(ref.startswith(_PAELLA_REFS) for ref in refs)


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


_PDEATHSIG = ("--pdeathsig", "KILL", "--")
_SHELL = "/bin/sh"
# Run by /bin/sh under setpriv, once the death signal is set: git starts only if paella (pid $1)
# is still the parent, else paella died before the signal was set and none will ever come.
_PARENT_CHECK = 'test "$PPID" = "$1" && shift && exec "$@"'


def death_signal_program(path_var: str | None, *, untried: bool = False) -> str | None:
    """The ``setpriv`` on this ``PATH`` that starts a program with ``--pdeathsig``, or None: not
    Linux, none there, or it failed here. One not tried yet in this process is tried first (a
    process start), unless ``untried``: the caller's own start is then its trial, and a
    failure it reports (:func:`refused_by_setpriv`) rules it out."""
    if not sys.platform.startswith("linux"):
        return None
    found = _find_setpriv(path_var)
    if found is not None and not os.access(found, os.X_OK):  # moved (an upgrade): look again
        _find_setpriv.cache_clear()
        found = _find_setpriv(path_var)
    if found is None:
        return None
    works = _setpriv_works.get(found)
    if works is None and not untried:
        works = _setpriv_works[found] = _try_setpriv(found)
    return None if works is False else found


_setpriv_works: dict[str, bool] = {}
"""Whether each ``setpriv`` found has worked in this process (absent: not tried yet)."""


@functools.lru_cache(maxsize=8)
def _find_setpriv(path_var: str | None) -> str | None:
    found = shutil.which("setpriv", path=path_var if path_var is not None else os.defpath)
    return found if found is not None and os.path.isabs(found) else None


def _try_setpriv(setpriv: str) -> bool:
    """Whether ``setpriv`` sets the death signal here: an old one lacks the option, a sandbox
    may refuse the ``prctl``."""
    try:
        proc = subprocess.run(
            [setpriv, *_PDEATHSIG, setpriv, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and b"setpriv" in proc.stdout


def refused_by_setpriv(argv: Sequence[str], proc: subprocess.CompletedProcess[bytes]) -> bool:
    """Whether ``proc``, started by ``argv`` through setpriv, failed in setpriv itself, before
    any git ran (then safe to run again without it); a start that got past it proves it works."""
    setpriv = argv[0] if argv and list(argv[1:3]) == list(_PDEATHSIG[:2]) else None
    if setpriv is None:
        return False
    # util-linux prints "setpriv: ..." for its own errors, getopt "<argv[0]>: ..." for options.
    refused = proc.returncode != 0 and proc.stderr.startswith(
        (b"setpriv: ", setpriv.encode(errors="surrogateescape") + b": ")
    )
    _setpriv_works[setpriv] = not refused
    return refused


@functools.lru_cache(maxsize=1)
def _shell_usable() -> bool:
    return os.access(_SHELL, os.X_OK)


def start_argv(
    argv: Sequence[str], kind: StartKind, path_var: str | None, *, untried: bool = False
) -> tuple[list[str], Callable[[], None] | None]:
    """The argv and ``preexec_fn`` that start ``argv`` (a git command of ``kind``) so that it
    dies with this process, as the module docstring says; ``path_var`` is the child's ``PATH``,
    ``untried`` as for :func:`death_signal_program`."""
    if kind == "read":
        return list(argv), None
    setpriv = death_signal_program(path_var, untried=untried)
    if setpriv is None:
        return list(argv), die_with_parent()
    if kind == "store":
        return [setpriv, *_PDEATHSIG, *argv], None
    if not _shell_usable():  # kind "checked"
        return list(argv), die_with_parent()
    return [setpriv, *_PDEATHSIG, _SHELL, "-c", _PARENT_CHECK, "sh", str(os.getpid()), *argv], None


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

    def settings(self) -> bytes:
        """The configuration's :data:`git_programs.SETTINGS` here, as ``git config -z
        --get-regexp`` prints them: read with the filter drivers, in no process of its own."""
        return config_settings(self.root, self._program, self._env)

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

        def start(untried: bool) -> tuple[list[str], subprocess.CompletedProcess[bytes]]:
            argv, preexec = self.how_to_start(args, input=input, untried=untried)
            return argv, subprocess.run(
                argv,
                cwd=self.root,
                env=full_env,
                input=input,
                capture_output=True,
                check=False,
                preexec_fn=preexec,
            )

        # This start may be setpriv's trial in this process: its output says if it failed.
        argv, proc = start(untried=True)
        if refused_by_setpriv(argv, proc):  # no git ran: again, with the fallback hook
            _argv, proc = start(untried=False)
        if check and proc.returncode != 0:
            raise GitError(list(args), proc.returncode, proc.stderr.decode(errors="replace"))
        return proc

    def how_to_start(
        self, args: Sequence[str], *, input: bytes | None = None, untried: bool = False
    ) -> tuple[list[str], Callable[[], None] | None]:
        """The argv and ``preexec_fn`` that start ``git args`` (fed ``input``): with the death
        signal its writes call for (:func:`start_kind`, :func:`start_argv`)."""
        kind = start_kind(args, input=input)
        return start_argv(self.command(args), kind, self._env.get("PATH"), untried=untried)

    def popen(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with pipes on stdin and stdout (for ``cat-file --batch`` streams;
        its stdin is not known beforehand: an ``update-ref --stdin`` here counts as ``checked``)."""
        return self._spawn(args, subprocess.PIPE)

    def start(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with no input and its output dropped; the caller waits for it
        (a write that may run beside other work, as the index refresh after a rollback)."""
        return self._spawn(args, subprocess.DEVNULL)

    def _spawn(self, args: Sequence[str], stdio: int) -> subprocess.Popen[bytes]:
        argv, preexec = self.how_to_start(args)
        return subprocess.Popen(
            argv,
            cwd=self.root,
            env=self._env,
            stdin=stdio,
            stdout=stdio,
            stderr=stdio,
            preexec_fn=preexec,
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


def literal_pathspecs(paths: Iterable[str]) -> list[str]:
    """Pathspecs that match these paths as they are (no glob), from the top of the work tree."""
    return [f":(top,literal){p}" for p in paths]


def encode_paths_z(paths: Sequence[str]) -> bytes:
    """Paths as NUL-terminated bytes for ``--stdin -z`` (surrogates restore the original bytes)."""
    return b"".join(p.encode(errors="surrogateescape") + b"\0" for p in paths)
