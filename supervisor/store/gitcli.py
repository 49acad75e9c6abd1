"""A small runner for git plumbing commands: fixed environment, optional private index, -z output.

Plumbing goes through the git command line rather than GitPython's object layer because the
snapshot needs exact control of the environment (a private ``GIT_INDEX_FILE``, no optional locks,
a committer identity that works on machines without ``user.name``) and of stdin.

Every git process started here that may write dies with paella: how, and why that way, is
:mod:`~paella_tui.supervisor.store.git_start`. paella's own ref updates run with hooks disabled,
so a failing ``reference-transaction`` hook of the repository never blocks a checkpoint.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store import death_group
from paella_tui.supervisor.store.git_programs import (
    GUARD_ENV,
    config_settings,
    filter_options,
    fixed_options,
    guarded_args,
)
from paella_tui.supervisor.store.git_start import (
    Start,
    joining,
    joins_group,
    refused_by_setpriv,
    start_argv,
    start_kind,
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

# Objects read as they were written: a ref under refs/replace/ (which anyone who can write .git
# can add, the agent included) would otherwise make git read another commit or tree wherever a
# checkpoint's is named, so a rollback would restore the replacement's files, or a checkpoint
# that the mirror confirms would be refused as forged. paella's snapshots are its own objects.
NO_REPLACE_ENV = {"GIT_NO_REPLACE_OBJECTS": "1"}

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


_built: tuple[dict[bytes, bytes], dict[str, str]] | None = None
"""The process environment last seen (``os.environ``'s own bytes) and git's made from it."""


def _base_env() -> dict[str, str]:
    """git's environment made from this process's (a new dict): the caller's, less
    :data:`SCRUBBED_ENV`, with paella's fixed variables. A ``Git`` is made for nearly every
    command; decoding the whole environment each time cost ~15 us, so the answer is kept while
    ``os.environ`` holds the same bytes (a dict comparison in C)."""
    global _built
    data = getattr(os.environ, "_data", None)  # CPython's bytes behind os.environ
    kept = _built
    if isinstance(data, dict) and kept is not None and kept[0] == data:
        return dict(kept[1])
    seen = dict(data) if isinstance(data, dict) else None  # before the reading: never newer
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    # Read-only commands (status, diff-files) must never take the user's index.lock.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    env.update(NO_REPLACE_ENV)
    env.update(PAELLA_IDENTITY)
    env.update(GUARD_ENV)
    if seen is not None:
        _built = (seen, env)
    return dict(env)


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
        env = _base_env()
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
            how = self.how_to_start(args, input=input, untried=untried)
            # A git in the death group never reads the terminal (it is not in its foreground).
            stdin = subprocess.DEVNULL if how.process_group is not None and input is None else None
            return how.argv, joining(
                how,
                lambda group: subprocess.run(
                    how.argv,
                    cwd=self.root,
                    env=full_env,
                    input=input,
                    stdin=stdin,
                    capture_output=True,
                    check=False,
                    preexec_fn=how.preexec_fn,
                    process_group=group,
                ),
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
    ) -> Start:
        """How ``git args`` (fed ``input``) starts so that it dies with paella: in the death
        group (:func:`joins_group`), else with the death signal its writes call for
        (:func:`start_kind`, :func:`start_argv`)."""
        kind = start_kind(args, input=input)
        argv = self.command(args)
        if joins_group(args, kind, private_index=self.index_file is not None):
            group = death_group.group()
            if group is not None:
                return Start(argv, None, group)
        return Start(*start_argv(argv, kind, self._env.get("PATH"), untried=untried), None)

    def popen(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with pipes on stdin and stdout (for ``cat-file --batch`` streams;
        its stdin is not known beforehand: an ``update-ref --stdin`` here counts as ``checked``)."""
        return self._spawn(args, subprocess.PIPE)

    def start(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``git args`` with no input and its output dropped; the caller waits for it
        (a write that may run beside other work, as the index refresh after a rollback)."""
        return self._spawn(args, subprocess.DEVNULL)

    def _spawn(self, args: Sequence[str], stdio: int) -> subprocess.Popen[bytes]:
        how = self.how_to_start(args)
        return joining(
            how,
            lambda group: subprocess.Popen(
                how.argv,
                cwd=self.root,
                env=self._env,
                stdin=stdio,
                stdout=stdio,
                stderr=stdio,
                preexec_fn=how.preexec_fn,
                process_group=group,
            ),
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
