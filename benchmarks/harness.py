"""What the benchmarks set up around their measures.

Progress on stderr (every script but ``cli.py``); and for ``engine.py`` and ``tui.py``, the
environment their children run in, the folder a run builds in, their throw-away git workspaces,
and the start of the scripted agent both of them run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomli_w

# The start of every scripted agent, so that every benchmark floods the same bytes the same way:
# ``stamp(path)`` writes ``time.time()`` to a file; ``blocks(n)`` yields ``n`` deterministic
# 100-byte lines, 1,000 to a block; ``flood(n, digest)`` writes them all to stdout, adds them to
# ``digest`` and returns their size; ``record_flood`` writes the digest, the size and the times
# to a JSON file, for the benchmark to check agent.log against. Each script appends its modes.
AGENT_PRELUDE = r"""
import hashlib, json, os, sys, time

def stamp(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, repr(time.time()).encode())
    os.close(fd)

LETTERS = b"abcdefghijklmnopqrstuvwxyz" * 5

def blocks(n):
    for start in range(0, n, 1000):
        yield b"".join(
            b"%07d %s\n" % (i, LETTERS[i % 26 : i % 26 + 91])
            for i in range(start, min(n, start + 1000))
        )

def flood(n, digest):
    size = 0
    for block in blocks(n):
        digest.update(block)
        size += len(block)
        view = memoryview(block)
        while view:
            view = view[os.write(1, view):]
    return size

def record_flood(path, digest, size, started):
    done = {"sha256": digest.hexdigest(), "bytes": size, "started": started, "ended": time.time()}
    with open(path, "w") as handle:
        json.dump(done, handle)
"""


def log(message: str) -> None:
    """Progress on stderr, so that stdout holds only the report."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def clean_env(*, drop: Sequence[str] = ()) -> dict[str, str]:
    """Our environment without git or paella variables (``GIT_*``, ``PAELLA_*``) that would
    point somewhere else, nor the variables named in ``drop``."""
    return {
        k: v for k, v in os.environ.items() if not (k.startswith(("GIT_", "PAELLA_")) or k in drop)
    }


def git(repo: Path, *args: str) -> None:
    """Run git in ``repo`` (checked, quiet)."""
    subprocess.run(["git", *args], cwd=repo, env=clean_env(), check=True, capture_output=True)


def work_folder(stack: contextlib.ExitStack, keep: Path | None, prefix: str) -> Path:
    """Where a run builds everything: ``keep`` (made new, kept after the run), else a temporary
    folder that ``stack`` deletes."""
    if keep is not None:
        root = keep.resolve()
        root.mkdir(parents=True)
        return root
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))


def new_repo(repo: Path) -> None:
    """A new git repository at ``repo``, with an empty ``src/``: commits by ``bench``, unsigned,
    and no automatic gc, which would land in the middle of a measure."""
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for key, value in (
        ("user.name", "bench"),
        ("user.email", "bench@localhost"),
        ("commit.gpgsign", "false"),
        ("gc.auto", "0"),
    ):
        git(repo, "config", key, value)


def commit_workspace(repo: Path, contract: dict[str, Any]) -> None:
    """Write a ``.gitignore`` (logs, bytecode) and ``contract`` as ``paella.toml``, and commit
    everything in ``repo``: the workspace's one commit."""
    (repo / ".gitignore").write_text("*.log\n__pycache__/\n")
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "benchmark workspace")
