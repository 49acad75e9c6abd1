"""A small runner for git plumbing commands: fixed environment, optional private index, -z output.

Plumbing goes through the git command line rather than GitPython's object layer because the
snapshot needs exact control of the environment (a private ``GIT_INDEX_FILE``, no optional locks,
a committer identity that works on machines without ``user.name``) and of stdin.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from paella_tui.supervisor.errors import GitError

# Commits paella writes are snapshots, not the user's work: a fixed identity keeps them working on
# machines with no git identity configured (CI) and makes them easy to tell apart in a log.
PAELLA_IDENTITY = {
    "GIT_AUTHOR_NAME": "paella",
    "GIT_AUTHOR_EMAIL": "paella@localhost",
    "GIT_COMMITTER_NAME": "paella",
    "GIT_COMMITTER_EMAIL": "paella@localhost",
}

# Variables from the caller's environment that would point git at another repository or index.
_SCRUBBED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


class Git:
    """Runs git in one work tree, optionally against a private index file."""

    def __init__(self, root: Path, *, index_file: Path | None = None) -> None:
        self.root = root
        self.index_file = index_file
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        # Read-only commands (status, diff-files) must never take the user's index.lock.
        env["GIT_OPTIONAL_LOCKS"] = "0"
        env["GIT_TERMINAL_PROMPT"] = "0"
        env["LC_ALL"] = "C"
        env.update(PAELLA_IDENTITY)
        if index_file is not None:
            env["GIT_INDEX_FILE"] = str(index_file)
        self._env = env

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
        proc = subprocess.run(
            ["git", "-c", "core.quotepath=false", *args],
            cwd=self.root,
            env=full_env,
            input=input,
            capture_output=True,
            check=False,
        )
        if check and proc.returncode != 0:
            raise GitError(list(args), proc.returncode, proc.stderr.decode(errors="replace"))
        return proc

    def out(self, args: Sequence[str], **kwargs: object) -> str:
        """Run git and return its stdout as text, without the trailing newline."""
        proc = self.run(args, **kwargs)  # type: ignore[arg-type]
        return proc.stdout.decode(errors="surrogateescape").rstrip("\n")

    def lines_z(self, args: Sequence[str], *, input: bytes | None = None) -> list[str]:
        """Run git with NUL-separated output and return the items (paths keep any byte)."""
        data = self.run(args, input=input).stdout
        return [p.decode(errors="surrogateescape") for p in data.split(b"\0") if p]

    def rev_parse(self, rev: str) -> str | None:
        """The object id ``rev`` names, or None when it does not resolve."""
        proc = self.run(["rev-parse", "--verify", "-q", rev], check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def encode_paths_z(paths: Sequence[str]) -> bytes:
    """Paths as NUL-terminated bytes for ``--stdin -z`` (surrogates restore the original bytes)."""
    return b"".join(p.encode(errors="surrogateescape") + b"\0" for p in paths)
