"""End to end, the way it is used: the real ``paella run`` in a real tmux pane.

A scripted agent completes episode 1, breaks it while doing episode 2, and dies. The test reads
the pane (``capture-pane``) until the recovery screen shows, presses ``r`` (roll back to the last
green checkpoint and resume), waits for the resumed attempt (which reads its handoff) to finish
and the pane to say ✓ done, presses ``q``, and checks the exit status and that nothing is left
running. A second test closes the pane while the agent runs (SIGHUP) and checks that the agent
was stopped and the stop recorded.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import tomli_w
from waiting import wait_until

TMUX = shutil.which("tmux")
AGENT = Path(__file__).parent / "agents" / "episodes.py"
WAIT_S = 40.0

pytestmark = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed: the end-to-end pane tests need a real tmux"
)


class Pane:
    """One tmux server (its own socket) with one 120×36 pane running a shell command."""

    def __init__(self, command: str) -> None:
        assert TMUX is not None
        self.socket = f"paella-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # -f /dev/null: nobody's tmux.conf changes what the pane shows.
        self.tmux(
            "-f", os.devnull, "new-session", "-d", "-x", "120", "-y", "36", "-s", "paella", command
        )

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a tmux command against this server."""
        assert TMUX is not None
        return subprocess.run(
            [TMUX, "-L", self.socket, *args], capture_output=True, text=True, check=False
        )

    def text(self) -> str:
        """What the pane shows now ("" once it is gone)."""
        return self.tmux("capture-pane", "-p", "-t", "paella").stdout

    def wait_for(
        self, needle: str, timeout: float = WAIT_S, *, once: Callable[[], bool] | None = None
    ) -> str:
        """Capture the pane until it shows ``needle``; return that capture.

        ``once``: a condition that holds before the pane can show ``needle`` and costs next to
        nothing to ask (the ledger record of the event that draws it: the run loop hands the
        record to the ledger's writer as it hands the event to the App). The pane is captured
        only from then on: each capture is a tmux client process (about 2 ms of CPU, 20 a
        second), and a test waits seconds for a death or a verdict."""
        if once is not None:
            wait(once, f"the ledger record before {needle!r}", self.text, timeout)
        return wait(lambda: needle in self.text(), f"{needle!r} in the pane", self.text, timeout)

    def keys(self, *keys: str) -> None:
        """Type into the pane."""
        self.tmux("send-keys", "-t", "paella", *keys)

    def kill(self) -> None:
        """End the server (closing the pane sends SIGHUP to what runs in it)."""
        self.tmux("kill-server")


def wait(
    condition: Callable[[], bool], what: str, show: Callable[[], str], timeout: float = WAIT_S
) -> str:
    """Poll until ``condition()``; fail with what ``show()`` says if it never holds."""
    wait_until(condition, what, timeout=timeout, interval=0.05, show=show)
    return show()


@pytest.fixture
def pane_factory() -> Iterator[Callable[[str], Pane]]:
    """Open panes; every server is killed at the end, whatever happened."""
    panes: list[Pane] = []

    def open_pane(command: str) -> Pane:
        pane = Pane(command)
        panes.append(pane)
        return pane

    yield open_pane
    for pane in panes:
        pane.kill()


def write_contract(repo: Path, scripts: dict[int, str]) -> None:
    """Two cumulative episodes (a.txt, then b.txt) and the scripted agent."""
    argv = [sys.executable, str(AGENT)]
    for attempt, script in scripts.items():
        argv += [f"--{attempt}", script]
    contract = {
        "run": {"name": "tmux-e2e", "prompt": "make a.txt, then b.txt", "agent": argv},
        "watch": {"settle": "0.2s"},
        "gate": [
            {"name": "a", "cmd": "test -f a.txt", "timeout": "10s"},
            {"name": "b", "cmd": "test -f b.txt", "timeout": "10s"},
        ],
        "episode": [
            {"name": "first", "goal": "a.txt exists", "gates": ["a"]},
            {"name": "second", "goal": "b.txt exists", "gates": ["b"]},
        ],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))


def ledger(repo: Path) -> list[dict[str, object]]:
    """The newest run's ledger records."""
    state = repo / ".git" / "paella"
    run_id = (state / "current").read_text().strip()
    lines = (state / "runs" / run_id / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def recorded(repo: Path, kind: str) -> Callable[[], bool]:
    """Whether the newest run's ledger in ``repo`` holds a record of ``kind`` yet (not before
    the run exists)."""

    def holds() -> bool:
        try:
            return any(r["kind"] == kind for r in ledger(repo))
        except (FileNotFoundError, ValueError):  # no run yet; a line still being written
            return False

    return holds


def processes_in(repo: Path) -> list[str]:
    """Live processes working in ``repo`` (the agent, its gates, paella itself)."""
    found = []
    for proc in psutil.process_iter(["pid", "cwd", "cmdline", "status"]):
        info = proc.info
        if info["status"] != psutil.STATUS_ZOMBIE and info["cwd"] == str(repo):
            found.append(f"{info['pid']} {' '.join(info['cmdline'] or [])}")
    return found


def paella_command(repo: Path, rc: Path) -> str:
    """The shell line the pane runs: ``paella run``, then its exit status into ``rc``."""
    # COLUMNS/LINES (set by the test session) would override the pane's real size.
    paella = f"env -u COLUMNS -u LINES {shlex.quote(sys.executable)} -m paella_tui run"
    return f"cd {shlex.quote(str(repo))} && {paella}; echo $? > {shlex.quote(str(rc))}"


@pytest.mark.slow
def test_death_recovery_rollback_resume_done_in_a_real_pane(
    repo: Path, tmp_path: Path, pane_factory: Callable[[str], Pane]
) -> None:
    write_contract(
        repo,
        {
            1: "write a.txt; wait-ledger checkpoint; rm a.txt; write b.txt; wait-ledger drift; "
            "sleep 0.5; exit 3",
            2: "handoff; write a.txt; write b.txt; sleep 0.3; exit 0",
        },
    )
    rc = tmp_path / "rc"
    pane = pane_factory(paella_command(repo, rc))

    screen = pane.wait_for("The agent died", once=recorded(repo, "recovery-needed"))
    assert "exit 3" in screen and "REGRESSED" in screen  # the facts: how, and what broke
    pane.keys("r")  # roll back to the last green checkpoint and resume

    screen = pane.wait_for("✓ done", once=recorded(repo, "run-done"))
    assert "every gate green on the final tree (a, b)" in screen
    assert "attempt 2" in screen
    assert "handoff: # Handoff" in screen  # the resumed agent read $PAELLA_HANDOFF_FILE
    print(screen)  # what a person sees at the end (pytest -s shows it)
    time.sleep(0.5)
    assert not rc.exists(), "the App must stay open after done, until q"

    pane.keys("q")
    wait(rc.exists, "the exit status", pane.text)
    assert rc.read_text().strip() == "0"
    records = ledger(repo)
    assert [r["choice"] for r in records if r["kind"] == "recovery-chosen"] == ["rollback"]
    assert records[-1]["kind"] == "run-done"
    wait(
        lambda: not processes_in(repo),
        "no process left in the repository",
        lambda: "\n".join(processes_in(repo)),
    )


def test_closing_the_pane_stops_the_agent_and_records_it(
    repo: Path, tmp_path: Path, pane_factory: Callable[[str], Pane]
) -> None:
    write_contract(repo, {1: "write a.txt; forever"})
    pane = pane_factory(paella_command(repo, tmp_path / "rc"))
    pane.wait_for("● running", once=recorded(repo, "agent-started"))
    wait(
        lambda: any(r["kind"] == "checkpoint" for r in ledger(repo)),
        "checkpoint 1",
        pane.text,
    )
    pids = [int(r["pid"]) for r in ledger(repo) if r["kind"] == "agent-started"]  # type: ignore[call-overload]
    assert pids and psutil.pid_exists(pids[0])

    pane.kill()  # the pane closes: SIGHUP

    wait(
        lambda: not processes_in(repo),
        "the agent and paella to end",
        lambda: "\n".join(processes_in(repo)),
    )
    records = ledger(repo)
    assert records[-1]["kind"] == "run-stopped"
    assert records[-1]["reason"] == "paella received SIGHUP"
    assert any(r["kind"] == "agent-exited" for r in records)
