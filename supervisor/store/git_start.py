"""How a git child is started so that it dies with paella: what each command can write decides.

Every git process ``gitcli`` starts that may write dies with paella (``PR_SET_PDEATHSIG`` on Linux):
a ``kill -9`` of paella never leaves a git child writing the work tree, the user's index or
paella's stores behind its back. paella's own ref updates run with hooks disabled, so a failing
``reference-transaction`` hook of the repository never blocks a checkpoint.

What a death signal cannot stop: the kernel closes a dying paella's descriptors (``do_exit``:
``exit_files``, the last close run by ``exit_task_work``) before it signals paella's children
(``exit_notify``). A git reading its input from paella sees that input end a moment before its
SIGKILL, and one that runs in that moment finishes what it was given, as git writes: whole (an
index or a pack written beside and renamed in, its lock gone), never torn. That is what paella
dying just after that git returned leaves, a moment every ``kill -9`` can already choose; no git
starts once paella is gone, and none runs on after its signal. Closing the window would take an
end-of-input mark git's ``--stdin`` commands do not have (tests/test_rollback_kill9.py holds
every route to this promise).

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

Cheaper still, where it applies: the ``store`` writes and the private index's own writes join
:mod:`~paella_tui.supervisor.store.death_group`'s process group, whose keeper kills it the moment
paella is gone (no wrapper at all: 1.0-1.7 ms of CPU less a write). Writes to the user's index,
work tree or branches keep the ways above (:func:`joins_group` says why).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, TypeVar

from paella_tui.supervisor.store import death_group

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

_T = TypeVar("_T")

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


_PRIVATE_INDEX_WRITERS = frozenset({"update-index", "write-tree", "read-tree"})


def joins_group(args: Sequence[str], kind: StartKind, *, private_index: bool) -> bool:
    """Whether ``git args`` (of ``kind``) joins the death group rather than taking setpriv's
    way: objects and paella's refs (``store``), and the private index's own writes (not a
    ``read-tree -u``, which writes the work tree). A git in the group is in no terminal's
    foreground: the user's index, work tree and branches keep setpriv, so that a Ctrl-C reaches
    their git, which then removes its lock on the user's index as it ends."""
    if kind == "store":
        return True
    return (
        kind == "checked"
        and private_index
        and bool(args)
        and args[0] in _PRIVATE_INDEX_WRITERS
        and "-u" not in args
    )


class Start(NamedTuple):
    """How one git command starts: its argv, a ``preexec_fn`` and a process group to join."""

    argv: list[str]
    preexec_fn: Callable[[], None] | None
    process_group: int | None


def joining(how: Start, start: Callable[[int | None], _T]) -> _T:
    """``start(group)`` with ``how``'s group; once more with a new group when it could not join
    (``setpgid`` refused: the group's leader ended since it was checked)."""
    try:
        return start(how.process_group)
    except PermissionError:
        if how.process_group is None:
            raise
        group = death_group.renew(how.process_group)
        if group is None:  # no group can be made any more: the caller's git cannot start safely
            raise
        return start(group)
