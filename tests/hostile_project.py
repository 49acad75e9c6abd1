"""A small real project whose agent is a shell script: the hostile agent of the integrity tests.

The contract has one gate (``ok.txt`` exists) and one episode; the agent is ``sh SCRIPT`` with
the script chosen per test, run without a terminal, so a test reads like what the agent does.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import GitRunner, SavedFolder, make_repo, run_paella_in_process

TIMEOUT = 90.0

FINISHED_GROUP = "finished-run"
"""The xdist group of the tests that use ``finished_project``: the run is made once per test
process, so the tests that share it go to one worker and it is made once."""


class HostileProject:
    """A repository with a committed ``paella.toml`` whose agent runs ``script``."""

    def __init__(
        self,
        tmp_path: Path,
        git: GitRunner,
        script: str,
        *,
        gate: str | list[str] = "test -f ok.txt",
        constraints: list[dict[str, Any]] | None = None,
    ) -> None:
        self.repo = make_repo(tmp_path / "repo", git)
        self.git = git
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.script = self.outside / "agent.sh"
        self.script.write_text(script)
        data: dict[str, Any] = {
            "run": {
                "prompt": "make ok.txt",
                "agent": ["sh", str(self.script)],
                "tty": False,
                "stall_after": "5m",
            },
            "watch": {"settle": "0.2s"},
            "retry": {"backoff": "0.2s", "max_attempts": 1},
            "gate": [{"name": "work", "cmd": gate, "timeout": "30s"}],
            "episode": [{"name": "one", "goal": "ok.txt exists", "gates": ["work"]}],
        }
        if constraints:
            data["constraint"] = constraints
        (self.repo / "paella.toml").write_text(tomli_w.dumps(data))
        git(self.repo, "add", "paella.toml")
        git(self.repo, "commit", "-q", "-m", "contract")

    def agent(self, script: str) -> None:
        """What the agent does from the next attempt on."""
        self.script.write_text(script)

    def paella(
        self, *args: str, timeout: float = TIMEOUT, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the real command in the repository."""
        return subprocess.run(
            [sys.executable, "-m", "paella_tui", *args],
            cwd=self.repo,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )

    def read(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A command that reads or mends the state after a run (status, checkpoints, log,
        handoff, diff, rollback, prune) through ``cli.main`` in this process: the same code on
        the same files, without the interpreter's start-up. Runs and resumes use ``paella``
        or ``judged``."""
        return run_paella_in_process(self.repo, *args, env=env)

    def judged(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A run or resume (``paella run --headless``...) through ``cli.main`` in this process,
        for a test of what the run judges and records (the verdicts, the ledger, the handoff,
        the output's words): the same loop, agent, gates and git as ``paella``'s, without the
        interpreter's start-up and imports (about 0.2 s of CPU a run). A test of the process
        itself (signals, two supervisors, what outlives it) keeps ``paella``."""
        return run_paella_in_process(self.repo, *args, env=env)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start ``paella ARGS`` in the background."""
        return subprocess.Popen(
            [sys.executable, "-m", "paella_tui", *args],
            cwd=self.repo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
        )

    @property
    def state(self) -> Path:
        """paella's state folder in the repository."""
        return self.repo / ".git" / "paella"

    def run_dir(self) -> Path:
        """The newest run's folder."""
        runs = sorted((self.state / "runs").iterdir())
        return runs[-1]

    def ledger(self) -> list[dict[str, Any]]:
        """The newest run's ledger records (every readable line)."""
        records = []
        for line in (self.run_dir() / "events.jsonl").read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def status(self) -> dict[str, Any]:
        """``paella status --json``."""
        proc = self.read("status", "--json")
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    """Fail with the output when a command printed a Python traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]


# The finished project of this test process, once made: (project, its saved folder, its XDG
# state folder). Every module that asks for it gets this one, put back as it was saved.
_FINISHED: list[tuple[HostileProject, SavedFolder, Path]] = []


@contextlib.contextmanager
def finished_project(
    tmp_path_factory: pytest.TempPathFactory, git: GitRunner
) -> Iterator[tuple[HostileProject, SavedFolder]]:
    """A project with one finished run (a checkpoint, then the agent failed), its paella state
    and its mirror (a private XDG state folder) all in one saved folder: for a module of cases
    that each put it back (``SavedFolder.restore``) rather than run paella again. The run is made
    once per test process, by the first module that asks (the same ``paella run --headless``
    each would make: one script, one contract), and put back as saved for each module after it;
    ``XDG_STATE_HOME`` points at its mirror while the module's cases run."""
    if not _FINISHED:
        world = tmp_path_factory.mktemp("finished-run")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XDG_STATE_HOME", str(world / "xdg-state"))
            p = HostileProject(world, git, "echo ok > ok.txt\nsleep 1\nexit 1\n")
            assert p.judged("run", "--headless").returncode == 1
        saved = SavedFolder(world)
        saved.save()
        _FINISHED.append((p, saved, world / "xdg-state"))
    p, saved, xdg_state = _FINISHED[0]
    saved.restore()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(xdg_state))
        yield p, saved
