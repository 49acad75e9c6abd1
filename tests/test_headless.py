"""The whole loop through the real command: ``paella run --headless`` and friends in subprocesses.

A scripted agent (``tests/run_agents/plan_agent.py``) completes episodes, breaks an old gate,
crashes, and is resumed with a handoff; ``paella status``, ``log``, ``gates``, ``handoff``,
``resume`` and ``rollback`` are run from other processes the way a person in a second tmux pane
would. Every test also checks the headless output is plain (timestamped lines, no ANSI codes) and
that no process of the agent's tree is left.

A run whose subject is what it judges, records and prints (the whole loop, a claimed-done resume,
an agent that cannot start) goes through ``cli.main`` in the test process (``Project.judged``):
the same loop, agent, gates and git, without an interpreter's start-up and imports. The tests of
the process itself (a second process reading the live run, paella killed and its orphan stopped
by the resume, signals and their exit statuses) run the command in subprocesses.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import GitRunner, capture_tree, run_paella, run_paella_in_process
from run_scenarios import (
    ABC_GATES,
    PlannedRepo,
    Step,
    children_killed_after,
    new_children,
    section,
)
from waiting import wait_until

from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.workspace import Workspace

TIMEOUT = 60.0

EPISODES = [
    {"name": "alpha", "goal": "a.txt exists", "gates": ["g1"]},
    {"name": "beta", "goal": "b.txt exists", "gates": ["g2"]},
    {"name": "gamma", "goal": "c.txt exists", "gates": ["g3"]},
]

# A line of headless output: "HH:MM:SS  text", or a continuation indented under the text.
EVENT_LINE = re.compile(r"^(\d\d:\d\d:\d\d  .*\S.*| {10}.*\S.*)$")


def wait_checkpoints(n: int, timeout: float = 30.0) -> Step:
    return ["wait_ledger", "checkpoint", n, timeout]


class Project(PlannedRepo):
    """The test's planned repository, driven through the ``paella`` command in subprocesses."""

    # --- commands ---------------------------------------------------------------------------

    def paella(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        """The real command in a subprocess: runs and resumes (signals, a process of their own)."""
        return run_paella(self.repo, *args, env=self.env, timeout=timeout)

    def judged(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A run or resume through ``cli.main`` in this process, for a test of what the run
        judges, records and prints (hostile_project.HostileProject.judged says more): the same
        exit status and output, without the interpreter's start-up and imports (~0.3 s of CPU a
        run). A test of the process (signals, a kill, what outlives it) keeps ``paella``."""
        return run_paella_in_process(self.repo, *args, env=self.env)

    def read(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A command that reads or mends the state (status, gates, handoff, log, rollback)
        through ``cli.main`` in this process: the same code on the same files, still another
        process than the run's, without the interpreter's start-up (0.2 s of CPU a command)."""
        return run_paella_in_process(self.repo, *args, env=self.env)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start ``paella ARGS`` in the background, its output in a pipe."""
        return subprocess.Popen(
            [sys.executable, "-m", "paella_tui", *args],
            cwd=self.repo,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
        )

    def status(self) -> dict[str, Any]:
        proc = self.read("status", "--json")
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    # --- state on disk ----------------------------------------------------------------------

    _read: tuple[tuple[str, int, int, int], tuple[dict[str, Any], ...]] | None = None
    """The ledger's last read: (path, inode, size, mtime) and its records."""

    @functools.cached_property
    def store(self) -> RunStore:
        """The repository's run store, found once: the ledger is polled every 20 ms, and finding
        the workspace again would start a git process each time."""
        return RunStore(Workspace.find(self.repo))

    @property
    def run(self) -> Run:
        run = self.store.current()
        assert run is not None, "no run on disk"
        return run

    def ledger(self, *kinds: str) -> list[dict[str, Any]]:
        try:
            records = self._records(self.run)
        except AssertionError:
            return []
        return [r for r in records if not kinds or r["kind"] in kinds]

    def _records(self, run: Run) -> tuple[dict[str, Any], ...]:
        """The run's ledger records, read again only when the file changed: a wait polls every
        20 ms, and a read parses and checks every line (the ledger's identity, size and time
        unchanged: the same bytes, so the same records)."""
        try:
            st = run.ledger.path.stat()
        except FileNotFoundError:
            return ()
        key = (str(run.ledger.path), st.st_ino, st.st_size, st.st_mtime_ns)
        if self._read is None or self._read[0] != key:
            self._read = (key, tuple(run.ledger.read().records))
        return self._read[1]

    def wait_ledger(self, kind: str, count: int = 1, timeout: float = 30.0) -> dict[str, Any]:
        wait_until(
            lambda: len(self.ledger(kind)) >= count,
            f"{kind} record #{count}",
            timeout=timeout,
            show=self.trace,
        )
        return self.ledger(kind)[count - 1]

    def agent_pids(self) -> list[tuple[int, float | None]]:
        return [(r["pid"], r.get("create_time")) for r in self.ledger("agent-started")]


@pytest.fixture
def workspace(
    repo: Path, tmp_path: Path, git: GitRunner, children_before: set[tuple[int, float]]
) -> Callable[..., Project]:
    """``workspace(plan, gates=3)`` -> the test's repository with a contract and a planned agent:
    the first ``gates`` gates and episodes, and ``agent`` instead of the plan agent if given."""

    def make(
        plan: dict[int | str, list[Step]], *, gates: int = 3, agent: list[str] | None = None
    ) -> Project:
        project = Project(
            repo,
            tmp_path,
            git,
            plan,
            gates=ABC_GATES[:gates],
            episodes=EPISODES[:gates],
            agent=agent,
        )
        project.children_before = children_before
        return project

    return make


def assert_plain(output: str) -> None:
    """Headless output is one timestamped line per event, plain text, readable in a pipe."""
    assert "\x1b" not in output, "ANSI escape codes in headless output"
    lines = output.splitlines()
    assert lines, "no output"
    assert lines[0].startswith("paella: run "), lines[0]
    odd = [line for line in lines[1:] if not EVENT_LINE.match(line)]
    assert not odd, f"lines that are not timestamped events: {odd[:5]}"


def _alive(pid: int, create_time: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            if proc.ppid() == os.getpid():
                # An orphan of a killed paella re-parented to this (subreaper) test: reap it.
                os.waitpid(pid, os.WNOHANG)
            return False
        return True
    except (psutil.NoSuchProcess, ChildProcessError):
        return False


def _command_of(proc: psutil.Process) -> str:
    """Its command line, or ``(ended)`` when it ended between the look and the read."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return "(ended)"


def assert_no_process_left(
    w: Project, *extra: tuple[int, float | None], within: float = 5.0
) -> None:
    """No agent of the run (nor ``extra``) runs, and nothing this test started is left."""
    known = [*w.agent_pids(), *extra]
    assert known, "no agent pid was recorded"
    deadline = time.monotonic() + within
    while True:
        left = [pid for pid, created in known if _alive(pid, created)]
        children = [
            f"{c.pid} {_command_of(c)[:120]}"
            for c in new_children(w.children_before)
            if _alive(c.pid, None)
        ]
        if not left and not children:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"agent processes left: {left}; children of the test: {children}")
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def children_before() -> Iterator[set[tuple[int, float]]]:
    """Our children when the test began; whatever the test left is killed after it."""
    with children_killed_after() as before:
        yield before


def wait_exit(proc: subprocess.Popen[str], timeout: float = TIMEOUT) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"paella did not end in {timeout}s\n{out}\n{err}") from None
    return proc.returncode, out, err


# --- the whole loop ---------------------------------------------------------------------------


@pytest.mark.slow
def test_episodes_regression_crash_rollback_handoff_and_done(
    workspace: Callable[..., Project], git: GitRunner
) -> None:
    w = workspace(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["write", "b.txt", "b\n"],
                wait_checkpoints(2),
                # Episode 3 goes wrong: a.txt (episode 1) is lost on the way to c.txt. (In this
                # order no tree in between has every gate green, however slow the agent is.)
                ["remove", "a.txt"],
                ["append", "README.md", "half an edit\n"],
                ["write", "notes/plan.txt", "untracked notes\n"],
                ["write", "c.txt", "c from attempt 1\n"],
                ["wait_ledger", "drift", 1, 30],
                ["copy_tree", "{outside}/crashed"],
                ["print", "Traceback (most recent call last): boom"],
                ["exit", 1],
            ],
            2: [
                ["record", "{outside}/attempt2.json"],
                ["write", "c.txt", "c\n"],
                ["print", "done, for real"],
                ["exit", 0],
            ],
        }
    )

    proc = w.judged("run", "--headless", "--on-death", "rollback")

    assert proc.returncode == 0, proc.stdout + proc.stderr + w.trace()
    out = proc.stdout
    assert_plain(out)
    for expected in (
        "✓ checkpoint 1 (episode 1: alpha)",
        "✓ checkpoint 2 (episode 2: beta)",
        '⚠ drift regression: gate "g1" was green at checkpoint 2 (episode 2)',
        "✗ agent ended: exit 1, attempt 1",
        "✗ recovery needed: exit 1, attempt 1; last good state: checkpoint 2 (g1, g2 green)",
        "regressions: g1",
        "→ recovery: rollback to 2 (policy)",
        "✓ rolled back to 2; the state before is salvage:1",
        "● agent resumed: attempt 2",
        "✓ DONE: every gate is green on the final tree (g1, g2, g3)",
    ):
        assert expected in out, f"{expected!r} not in the output:\n{out}"

    # The ledger tells the same story, in order.
    kinds = [r["kind"] for r in w.ledger()]
    story = [
        k
        for k in kinds
        if k
        in (
            "checkpoint",
            "drift",
            "agent-exited",
            "recovery-needed",
            "recovery-chosen",
            "salvage",
            "rollback-done",
            "agent-started",
            "run-done",
        )
    ]
    # Episode 3's checkpoint comes from a settle evaluation or from the final one, which runs
    # after the death is reported: either side of the last agent-exited is right.
    last_start = len(story) - 1 - story[::-1].index("agent-started")
    tail = story[last_start:]
    assert sorted(tail) == sorted(["agent-started", "checkpoint", "agent-exited", "run-done"]), (
        kinds
    )
    assert tail[0] == "agent-started" and tail[-1] == "run-done", kinds
    assert story[:last_start] == [
        "agent-started",
        "checkpoint",
        "checkpoint",
        "drift",
        "agent-exited",
        "recovery-needed",
        "recovery-chosen",
        "salvage",
        "rollback-done",
    ], kinds
    drift = w.ledger("drift")[0]
    assert (drift["drift"], drift["gate"]) == ("regression", "g1")
    needed = w.ledger("recovery-needed")[0]
    assert (needed["ending"], needed["regressions"], needed["base"], needed["default"]) == (
        "crash",
        ["g1"],
        2,
        "rollback",
    )
    assert w.ledger("recovery-chosen")[0]["target"] == "2"
    checkpoints = w.ledger("checkpoint")
    assert [c["episode"] for c in checkpoints] == [1, 2, 3]
    for record in checkpoints:
        assert w.ref(record["ref"]) == record["commit"]
    salvage = w.ledger("salvage")
    assert len(salvage) == 1 and w.ref(salvage[0]["ref"]) == salvage[0]["commit"]

    # The resumed agent was told what to keep green and what remains.
    seen = w.reported("attempt2.json")
    assert seen["attempt"] == "2" and seen["episode"] == "3"
    keep = section(seen["handoff"], "Gates that must stay green")
    assert "last green checkpoint (2)" in keep
    must, finish = keep.split("To finish")
    assert "`g1`" in must and "`g2`" in must and "`g3`" not in must
    assert "`g3`" in finish and "`test -f c.txt`" in finish

    # The work tree is checkpoint 2 plus the resumed agent's work.
    final = w.tree()
    assert {p: final[p][1] for p in ("a.txt", "b.txt", "c.txt")} == {
        "a.txt": b"a\n",
        "b.txt": b"b\n",
        "c.txt": b"c\n",
    }
    assert final["README.md"][1] == b"hello\n" and "notes/plan.txt" not in final
    assert git.head(w.repo) == w.head0 and git.branch(w.repo) == "main"
    assert_no_process_left(w)

    # The rollback can itself be undone: salvage:1 brings back the crashed state, byte for byte.
    undo = w.read("rollback", "salvage:1", "--yes")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    crashed = capture_tree(w.outside / "crashed")
    now = w.tree()
    assert now == crashed, "\n".join(now.differences(crashed))
    assert git.head(w.repo) == w.head0


@pytest.mark.slow
def test_a_resumed_agent_that_claims_done_with_a_red_gate_is_not_done(
    workspace: Callable[..., Project],
) -> None:
    w = workspace(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["print", "Segmentation fault (core dumped)"],
                ["exit", 139],
            ],
            2: [
                ["record", "{outside}/attempt2.json"],
                ["print", "Done! Episode beta is finished."],
                ["exit", 0],
            ],
        },
        gates=2,
    )

    first = w.judged("run", "--headless", "--on-death", "stop")
    assert first.returncode == 1, first.stdout + first.stderr
    assert_plain(first.stdout)
    assert "■ run stopped, not done: handoff written; stopped (policy)" in first.stdout

    resumed = w.judged("resume", "--headless", "--on-death", "stop")

    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    out = resumed.stdout
    assert_plain(out)
    assert "● agent resumed: attempt 2" in out
    assert "⚠ drift claimed-done: The agent exited 0 as if done, but gate g2 is red." in out
    assert "✓ DONE" not in out
    assert "■ run stopped, not done" in out
    claimed = [r for r in w.ledger("drift") if r["drift"] == "claimed-done"]
    assert len(claimed) == 1 and claimed[0]["gate"] == "g2"
    assert [r["ending"] for r in w.ledger("recovery-needed")] == ["crash", "claimed-done"]
    assert "run-done" not in [r["kind"] for r in w.ledger()]
    assert [(r["attempt"], r["resumed"]) for r in w.ledger("agent-started")] == [
        (1, False),
        (2, True),
    ]
    seen = w.reported("attempt2.json")
    assert "exit 139" in seen["handoff"] and "`g1`" in section(
        seen["handoff"], "Gates that must stay green"
    )
    assert_no_process_left(w)

    # `paella handoff` prints the newest handoff; -o writes it to a file.
    printed = w.read("handoff")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("# Handoff: ")
    assert "claimed-done" in section(printed.stdout, "Drift warnings")
    target = w.outside / "handoff-copy.md"
    written = w.read("handoff", "-o", str(target))
    assert written.returncode == 0 and written.stdout == "", written.stderr
    assert target.read_text() == printed.stdout
    assert str(target) in written.stderr

    # `paella log` tells the story in the headless printer's words: a timestamped line per
    # record worth one (details indented under it), never a key=value dump.
    log = w.read("log")
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    assert all(
        re.match(r"^(\d\d:\d\d:\d\d  |          )\S", line.replace("  │", "│"))
        or re.match(r"^\d\d:\d\d:\d\d    \S", line)
        for line in lines
    ), lines[:5]
    assert not [line for line in lines if re.search(r"\w+=\S", line) and "gate-" in line], lines
    text = log.stdout
    order = [
        "started on main",
        "● agent started: attempt 1",
        "checkpoint 1 (episode 1",
        "✗ recovery needed",
        "■ run stopped, not done",
        "resumed",
        "⚠ drift claimed-done",
        "■ run stopped, not done",
    ]
    position = 0
    for needle in order:
        found = text.find(needle, position)
        assert found >= 0, f"{needle!r} not in the log after position {position}:\n{text}"
        position = found + 1


# --- another pane ---------------------------------------------------------------------------


def test_status_json_from_another_process_while_the_run_is_live(
    workspace: Callable[..., Project],
) -> None:
    w = workspace(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["wait_file", "{outside}/go1", 60],
                ["write", "b.txt", "b\n"],
                wait_checkpoints(2),
                ["wait_file", "{outside}/go2", 60],
                ["exit", 0],
            ]
        },
        gates=2,
    )
    proc = w.start("run", "--headless", "--on-death", "stop")
    try:
        seen: list[dict[str, Any]] = []

        def poll_until_checkpoints(n: int) -> dict[str, Any]:
            deadline = time.monotonic() + TIMEOUT
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"paella ended early: {proc.communicate()}")
                # `status` (a whole command: the fold, the agent's processes, the mirror) is
                # asked once the ledger (read again only when it changed) holds the checkpoint
                # it must show, not every 100 ms while the agent works towards it.
                if len(w.ledger("checkpoint")) >= n and w.ledger("agent-started"):
                    status = w.status()
                    seen.append(status)
                    if len(status["checkpoints"]) >= n:
                        return status
                assert time.monotonic() < deadline, f"no checkpoint {n}: {seen[-1:]}"
                time.sleep(0.1)

        one = poll_until_checkpoints(1)
        assert [(e["n"], e["complete"], e["checkpoint"]) for e in one["episodes"]] == [
            (1, True, 1),
            (2, False, None),
        ]
        assert one["current_episode"] == 2 and one["last_green_checkpoint"] == 1
        assert [(g["name"], g["status"]) for g in one["gates"]] == [("g1", "pass"), ("g2", "fail")]
        (w.outside / "go1").write_text("go")

        two = poll_until_checkpoints(2)
        assert [(e["n"], e["complete"], e["checkpoint"]) for e in two["episodes"]] == [
            (1, True, 1),
            (2, True, 2),
        ]
        assert [(g["name"], g["status"], g["ever_green"]) for g in two["gates"]] == [
            ("g1", "pass", True),
            ("g2", "pass", True),
        ]
        assert two["last_green_checkpoint"] == 2 and two["done"] is False
        assert [c["ref"] for c in two["checkpoints"]] == [
            f"refs/paella/{two['run_id']}/checkpoints/{n}" for n in (1, 2)
        ]
        pid = w.ledger("agent-started")[0]["pid"]
        for status in seen:
            assert status["state"] == "running", status
            agent = status["agent"]
            assert (agent["pid"], agent["alive"], agent["attempt"]) == (pid, True, 1)
        assert psutil.pid_exists(pid)
    finally:
        (w.outside / "go1").write_text("go")
        (w.outside / "go2").write_text("go")
        code, out, err = wait_exit(proc)

    assert code == 0, out + err
    assert_plain(out)
    done = w.status()
    assert (done["state"], done["done"], done["agent"]["alive"], done["agent"]["exit_code"]) == (
        "done",
        True,
        False,
        0,
    )
    assert_no_process_left(w)


def test_resume_after_paella_was_killed_stops_the_orphan_and_finishes(
    workspace: Callable[..., Project],
) -> None:
    w = workspace(
        {
            1: [
                # Like a real agent that survives its terminal going away.
                ["ignore", "SIGHUP"],
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["wait_file", "{outside}/never", 120],
                ["exit", 0],
            ],
            2: [["record", "{outside}/attempt2.json"], ["write", "b.txt", "b\n"], ["exit", 0]],
        },
        gates=2,
    )
    proc = w.start("run", "--headless", "--on-death", "stop")
    try:
        w.wait_ledger("checkpoint")
        orphan = w.ledger("agent-started")[0]
    finally:
        proc.send_signal(signal.SIGKILL)
        wait_exit(proc)
    assert proc.returncode == -signal.SIGKILL
    assert _alive(orphan["pid"], orphan["create_time"]), "the agent died with paella"
    assert w.status()["agent"]["alive"] is True

    # The attempt paella lost is decided first, by the --on-death policy (here: continue).
    resumed = w.paella("resume", "--headless", "--on-death", "continue")

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + w.trace()
    assert_plain(resumed.stdout)
    assert f"stopped agent pid {orphan['pid']} left running by an earlier paella" in resumed.stdout
    assert "recovery needed: paella itself stopped while attempt 1 ran" in resumed.stdout
    assert [(r["choice"], r["by"]) for r in w.ledger("recovery-chosen")] == [("continue", "policy")]
    stopped = w.ledger("orphan-stopped")
    assert len(stopped) == 1 and stopped[0]["pid"] == orphan["pid"]
    assert stopped[0]["attempt"] == 1
    kinds = [r["kind"] for r in w.ledger()]
    assert (
        kinds.index("resumed")
        < kinds.index("orphan-stopped")
        < kinds.index("recovery-needed")
        < kinds.index("run-done")
    )
    assert [(r["attempt"], r["resumed"]) for r in w.ledger("agent-started")] == [
        (1, False),
        (2, True),
    ]
    seen = w.reported("attempt2.json")
    assert "`g1`" in section(seen["handoff"], "Gates that must stay green")
    assert w.status()["state"] == "done"
    assert_no_process_left(w)


def test_resume_after_paella_was_killed_asks_first_and_stop_starts_no_agent(
    workspace: Callable[..., Project],
) -> None:
    w = workspace(
        {
            1: [
                ["ignore", "SIGHUP"],
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["remove", "a.txt"],  # a regression, then paella dies before anyone decided
                ["wait_file", "{outside}/never", 120],
                ["exit", 0],
            ],
        },
        gates=2,
    )
    proc = w.start("run", "--headless", "--on-death", "stop")
    try:
        w.wait_ledger("drift")
    finally:
        proc.send_signal(signal.SIGKILL)
        wait_exit(proc)

    resumed = w.paella("resume", "--headless", "--on-death", "stop")

    assert resumed.returncode == 1, resumed.stdout + resumed.stderr + w.trace()
    assert "recovery needed: paella itself stopped while attempt 1 ran" in resumed.stdout
    assert "regressions: g1" in resumed.stdout
    assert len(w.ledger("agent-started")) == 1, "no agent ran before the decision"
    assert w.ledger("recovery-chosen")[-1]["choice"] == "stop"
    assert_no_process_left(w)


# --- gates, signals -------------------------------------------------------------------------


def test_gates_command_exit_status_and_json(workspace: Callable[..., Project]) -> None:
    w = workspace({}, gates=2)

    none = w.read("gates")
    assert none.returncode == 1, none.stdout + none.stderr
    assert "\x1b" not in none.stdout
    assert "✗ gate g1: fail" in none.stdout and "✗ gate g2: fail" in none.stdout

    (w.repo / "a.txt").write_text("a\n")
    half = w.read("gates", "--json")
    assert half.returncode == 1, half.stderr
    data = json.loads(half.stdout)
    assert [(g["name"], g["status"]) for g in data["gates"]] == [("g1", "pass"), ("g2", "fail")]
    assert data["complete_episodes"] == 1 and data["stale"] is False

    (w.repo / "b.txt").write_text("b\n")
    green = w.read("gates")
    assert green.returncode == 0, green.stdout + green.stderr
    assert "✓ gate g1: pass" in green.stdout and "✓ gate g2: pass" in green.stdout
    all_green = w.read("gates", "--json")
    assert all_green.returncode == 0
    data = json.loads(all_green.stdout)
    assert [g["status"] for g in data["gates"]] == ["pass", "pass"]
    assert data["complete_episodes"] == 2
    # Without a run, `paella gates` opens none and keeps no log: a judgement has no side effect.
    assert all(g["log"] is None for g in data["gates"])
    assert not list((w.repo / ".git" / "paella" / "runs").glob("*"))
    refs = subprocess.run(["git", "for-each-ref", "refs/paella"], cwd=w.repo, capture_output=True)
    assert refs.stdout == b""


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, 1), (signal.SIGINT, 130), (signal.SIGHUP, 1)],
    ids=["SIGTERM", "SIGINT", "SIGHUP"],
)
def test_a_signal_to_a_headless_run_stops_the_agent_and_is_recorded(
    workspace: Callable[..., Project], sig: signal.Signals, code: int
) -> None:
    w = workspace(
        {1: [["print", "working hard"], ["spawn", "helper"], ["sleep", 60], ["exit", 0]]},
        gates=1,
    )
    proc = w.start("run", "--headless")
    try:
        w.wait_ledger("agent-started")
        wait_until(w.pids_file.exists, "the agent's pid file", show=w.trace)
    finally:
        proc.send_signal(sig)
        returncode, out, err = wait_exit(proc, timeout=30)

    assert returncode == code, out + err
    assert_plain(out)
    assert f"■ run stopped, not done: paella received {sig.name}" in out
    stopped = w.ledger("run-stopped")
    assert [r["reason"] for r in stopped] == [f"paella received {sig.name}"]
    exited = w.ledger("agent-exited")
    # The agent was stopped (SIGTERM to its group), and its end recorded before the run's.
    assert [(r["exit_code"], r["signal"]) for r in exited] == [(None, signal.SIGTERM)]
    helper = w.spawned()["helper"]
    assert_no_process_left(w, (helper, None))
    assert w.status()["state"] == "stopped"


def test_an_agent_command_that_does_not_exist_is_refused_before_anything_starts(
    workspace: Callable[..., Project],
) -> None:
    w = workspace({}, gates=1, agent=["paella-no-such-agent-xyz", "{prompt}"])
    before = w.tree()

    proc = w.judged("run", "--headless")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'paella-no-such-agent-xyz'" in proc.stderr and "not found" in proc.stderr
    assert "Nothing was started" in proc.stderr
    assert RunStore(Workspace.find(w.repo)).current() is None
    assert w.tree() == before
    assert not new_children(w.children_before)
