"""Read-only git questions a command asks first, started before its imports (issue 17).

``paella checkpoint`` asks git where the workspace is (``rev-parse``: :meth:`Workspace.find`)
first, after ~100 ms of imports. :func:`start` runs it during the imports, beside the early scan
(:mod:`~paella_tui.supervisor.store.scan_listing`); starting it reads the configuration's filter
drivers and the settings a snapshot needs (``git_programs.ConfigWatch``, which every command runs
with), so that read is done early too. :func:`take` gives the answer to the code that asks only
when nothing it depends on can have changed:

- the same command line as would run now (gitcli's options, the filter drivers turned off as the
  configuration names them at this moment), folder and environment;
- the same configuration: every file git reads it from (the repository's, the worktree's, the
  global and system files, each include) holds the same bytes, the git dirs are found where they
  were, and HEAD is the same (``git_programs.ConfigWatch``'s key). That is everything the answer
  is made of: ``rev-parse`` reads the ``.git`` layout and ``core.bare``/``core.worktree``.

Anything else, and the answer is dropped and git asked again; each answer is used at most once.
The question is read-only (``GIT_OPTIONAL_LOCKS=0``, no write of any kind), so one left running by a
killed paella changes nothing.

A process that opens the workspace again (the TUI's commands, a test running commands through
``cli.main``) gets the answer it had from git (:func:`ask`, :func:`recall`) on the same
conditions, checked anew each time, and while the repository's ``objects`` and ``refs``
folders (what makes a folder a git dir to git) are still there.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from paella_tui.supervisor.store.git_programs import config_watch, git_dirs
from paella_tui.supervisor.store.gitcli import Git

WORKSPACE_ARGS = (
    "rev-parse",
    "--path-format=absolute",
    "--show-toplevel",
    "--git-dir",
    "--git-common-dir",
    "--is-bare-repository",
)
"""What :meth:`~paella_tui.supervisor.store.workspace.Workspace.find` asks."""


class _Read:
    """One question running: its command line, folder, environment and configuration then."""

    def __init__(self, git: Git, args: Sequence[str]) -> None:
        self.root = git.root
        self.env = git.env
        self.config = config_watch(git.root).key()
        self.argv = git.command(args)
        self.proc = subprocess.Popen(
            self.argv,
            cwd=git.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def matches(self, git: Git, args: Sequence[str]) -> bool:
        """Whether ``git args`` would be this very command now, over the same configuration."""
        return (
            self.root == git.root
            and self.env == git.env
            and self.argv == git.command(args)
            and self.config == config_watch(git.root).key()
        )

    def answer(self) -> subprocess.CompletedProcess[bytes]:
        """The finished process, as ``Git.run(..., check=False)`` returns it."""
        out, err = self.proc.communicate()
        return subprocess.CompletedProcess(self.argv, self.proc.returncode, out, err)

    def cancel(self) -> None:
        """Stop it if it still runs, and reap it."""
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(OSError, ValueError):
                self.proc.communicate()


_reads: dict[tuple[str, ...], _Read] = {}
taken = 0
"""How many answers this process took from an early read (for tests and benchmarks)."""


def start(folder: Path) -> None:
    """Ask where the workspace at ``folder`` is (best effort: nothing on any doubt)."""
    discard()
    with contextlib.suppress(OSError, ValueError):
        _reads[WORKSPACE_ARGS] = _Read(Git(folder.resolve()), WORKSPACE_ARGS)


def take(git: Git, args: Sequence[str]) -> subprocess.CompletedProcess[bytes] | None:
    """The early answer to ``git args`` when it is what asking now would answer; else None (the
    caller asks git, and the early read is gone)."""
    global taken
    read = _reads.pop(tuple(args), None)
    if read is None:
        return None
    if not read.matches(git, args):
        read.cancel()
        return None
    answer = read.answer()
    if read.config != config_watch(git.root).key():  # changed while it read
        return None
    taken += 1
    return answer


def discard() -> None:
    """Stop the early reads nobody took (the command ended first, or took another way)."""
    while _reads:
        _reads.popitem()[1].cancel()


_answers: dict[tuple[Path, tuple[str, ...]], tuple[tuple[object, ...], bytes]] = {}


def _made_of(git: Git, args: Sequence[str]) -> tuple[object, ...]:
    """What git's answer to ``args`` in ``git.root`` is made of, as :class:`_Read` checks it:
    the command line, environment, configuration (with the git dirs and HEAD), and whether
    the common dir still has the folders that make it a git dir."""
    dirs = git_dirs(git.root)
    there = tuple(os.path.isdir(d / n) for d in (dirs or ())[1:] for n in ("objects", "refs"))
    return (git.env, git.command(args), config_watch(git.root).key(), there)


def ask(git: Git, args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` (``check=False``) and keep a successful answer for :func:`recall`,
    unless something it is made of changed while git answered."""
    before = _made_of(git, args)
    proc = git.run(args, check=False)
    if proc.returncode == 0 and _made_of(git, args) == before:
        _answers[(git.root, tuple(args))] = (before, proc.stdout)
    return proc


def recall(git: Git, args: Sequence[str]) -> subprocess.CompletedProcess[bytes] | None:
    """The answer :func:`ask` kept for ``git args`` when everything it is made of is the
    same now (else None: git is asked)."""
    known = _answers.get((git.root, tuple(args)))
    if known is None or known[0] != _made_of(git, args):
        return None
    return subprocess.CompletedProcess(git.command(args), 0, known[1], b"")
