"""The run loop through its Python API: real repositories, real gates, scripted agents.

Each test writes a small contract (``settle = "0.2s"``, gates such as ``test -f a.txt``) into a
fresh repository, gives the agent (``tests/run_agents/plan_agent.py``) a plan per attempt, runs a
:class:`RunLoop` with a headless ``decide`` policy, and then checks what a user would rely on:
the events, the ledger, the checkpoint refs, the work tree, and that no process of the agent's
tree is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from conftest import GitRunner
from run_scenarios import (
    ABC_GATES,
    AGENT,
    PlannedRepo,
    Recorder,
    Step,
    assert_one_truth,
    children_killed_after,
    new_children,
    section,
)
from waiting import wait_until_async

from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.drift import DriftTracker
from paella_tui.supervisor.run.decisions import Decide, Decision, policy
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    CheckpointTaken,
    DriftDetected,
    EvaluationFinished,
    Event,
    HandoffWritten,
    Notice,
    RecoveryChosen,
    RecoveryFacts,
    RecoveryNeeded,
    RetryScheduled,
    RolledBack,
    RunDone,
    RunStopped,
)
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.watcher import WatchPlan, WorkspaceWatcher

FLOOD = Path(__file__).parent / "agents" / "flood.py"
RUN_TIMEOUT = 60.0
E = TypeVar("E", bound=Event)

ABC_EPISODES = [
    {"name": "a", "goal": "a.txt exists", "gates": ["g1"]},
    {"name": "b", "goal": "b.txt exists", "gates": ["g2"]},
    {"name": "c", "goal": "c.txt exists", "gates": ["g3"]},
]


def wait_checkpoints(n: int, timeout: float = 20.0) -> Step:
    """The agent waits (silently) until the run has ``n`` checkpoints."""
    return ["wait_ledger", "checkpoint", n, timeout]


def wait_drift(n: int = 1, timeout: float = 20.0) -> Step:
    """The agent waits (silently) until the run recorded ``n`` drift warnings."""
    return ["wait_ledger", "drift", n, timeout]


class Scenario(PlannedRepo):
    """The test's planned repository with a run, driven by a RunLoop, and the events of the run."""

    def __init__(
        self,
        repo: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        git: GitRunner,
        plan: dict[int | str, list[Step]],
        *,
        gates: int = 1,
        run: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
        constraints: list[dict[str, Any]] | None = None,
        agent: list[str] | None = None,
    ) -> None:
        super().__init__(
            repo,
            tmp_path,
            git,
            plan,
            gates=ABC_GATES[:gates],
            episodes=ABC_EPISODES[:gates],
            agent=agent,
            run={"stall_after": "1m", **(run or {})},
            retry={"max_backoff": "2s", **(retry or {})},
            constraints=constraints,
        )
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        self.contract: Contract = load_contract(repo / "paella.toml")
        self.workspace = Workspace.find(repo)
        self.run: Run = RunStore(self.workspace).create(self.contract, manual=False)
        self.events = Recorder()
        self.loop: RunLoop | None = None

    def make_loop(self, decide: Decide, *, stop_grace: float = 2.0) -> RunLoop:
        self.loop = RunLoop(
            run=self.run,
            contract=self.contract,
            emit=self.events,
            decide=decide,
            stop_grace=stop_grace,
        )
        return self.loop

    async def run_loop(self, decide: Decide, *, stop_grace: float = 2.0) -> int:
        loop = self.make_loop(decide, stop_grace=stop_grace)
        try:
            code = await asyncio.wait_for(loop.run(), RUN_TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"the run did not end in {RUN_TIMEOUT}s\n{self.story()}") from None
        # Every scenario: the ledger's fold is the live state, and the views agree (issue 14).
        assert_one_truth(self.run, self.contract, loop.run_state, self.events)
        return code

    # --- reading what happened ----------------------------------------------------------

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def drift(self, kind: str) -> list[DriftDetected]:
        return [d for d in self.of(DriftDetected) if d.drift == kind]

    def ledger(self, *kinds: str) -> list[dict[str, Any]]:
        records = self.run.ledger.read().records
        return [r for r in records if not kinds or r["kind"] in kinds]

    def kinds(self) -> list[str]:
        return [r["kind"] for r in self.ledger()]

    def story(self) -> str:
        """Every event and the agent's trace, for assertion messages."""
        lines = [f"{type(e).__name__}: {_brief(e)}" for e in self.events]
        return "events:\n  " + "\n  ".join(lines) + "\nagent trace:\n" + self.trace()

    def order(self, *types: type[Event]) -> list[str]:
        """The names of the events of these types, in the order they came."""
        return [type(e).__name__ for e in self.events if isinstance(e, types)]

    def files_at(self, ref: str) -> set[str]:
        return set(self.git(self.repo, "ls-tree", "-r", "--name-only", ref).split())

    def assert_snapshots(self) -> None:
        """Every checkpoint, salvage and step record of the ledger is a ref holding its commit
        and tree, and there is no other ref of the run but the frozen content's: ``frozen/0``
        keeps the run's start tree (judge/frozen.py), ``frozen/<n>`` what a person accepted."""
        kinds = ("checkpoint", "salvage", "step", "protected-accepted")
        kept = self.ledger(*kinds)
        start = f"{self.run.ref_prefix}/frozen/0"
        # Every name through one git process: each record's ref and its commit's tree, and the
        # start tree's frozen copy.
        names = [n for r in kept for n in (r["ref"], f"{r['commit']}^{{tree}}")]
        found = self.refs(*names, f"{start}^{{tree}}")
        for i, record in enumerate(kept):
            assert found[2 * i] == record["commit"], f"{record['ref']} is missing"
            assert found[2 * i + 1] == record["tree"]
        refs = self.git(self.repo, "for-each-ref", "--format=%(refname)", self.run.ref_prefix)
        expected = [r["ref"] for r in kept]
        if start in refs.split():
            assert found[-1] == self.ledger("run-tree")[0]["tree"]
            expected.append(start)
        assert sorted(refs.split()) == sorted(expected)

    async def finish(self, *, head_moved: bool = False) -> None:
        """What every test checks at the end: snapshots, the user's HEAD, and no process left."""
        self.assert_snapshots()
        if not head_moved:
            assert self.git.head(self.repo) == self.head0, "the run moved HEAD"
            assert self.git.branch(self.repo) == "main"
        await self.no_process_left()

    async def no_process_left(self, *extra: int) -> None:
        """Nothing of any agent tree runs: every recorded pid, every spawned one, our children."""
        known: list[tuple[int, float | None]] = [
            (e.pid, e.create_time) for e in self.of(AgentStarted)
        ]
        known += [(pid, None) for pid in (*self.spawned().values(), *extra)]
        await assert_no_process_left(known, self.children_before)


def _brief(event: Event) -> str:
    if isinstance(event, CheckpointTaken):
        r = event.record_
        return f"checkpoint {r.n} episode={r.episode} green={r.gates_green}"
    if isinstance(event, EvaluationFinished):
        return f"tree={event.tree[:8]} complete={event.complete_episodes} stale={event.stale} " + (
            " ".join(f"{r.gate}:{r.status}" for r in event.results)
        )
    if isinstance(event, RecoveryNeeded):
        f = event.facts
        return f"{f.ending} {f.how_and_attempt} regressions={f.regressions} base={f.base.n if f.base else None}"
    if isinstance(event, AgentExited):
        return f"attempt {event.attempt} exit={event.exit_code} signal={event.signal} leftovers={event.leftovers}"
    text = repr(event)
    return text if len(text) < 300 else text[:300] + "…"


def _lives(pid: int, create_time: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False  # the pid now names another process
        if proc.status() == psutil.STATUS_ZOMBIE:
            # A zombie of ours is a process nobody reaped; someone else's is on its way out.
            return proc.ppid() == os.getpid()
        return True
    except psutil.NoSuchProcess:
        return False


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


async def assert_no_process_left(
    known: Iterable[tuple[int, float | None]],
    before: set[tuple[int, float]],
    *,
    within: float = 3.0,
) -> None:
    """No pid in ``known`` lives, and the test left no child (zombies included: unreaped)."""
    known = list(known)
    deadline = time.monotonic() + within
    while True:
        left = [pid for pid, created in known if _lives(pid, created)]
        children = [_describe(c) for c in new_children(before)]
        if not left and not children:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"processes of the agent's tree are still there: {left}; our children: {children}"
            )
        await asyncio.sleep(0.05)


async def _wait_for(condition: Callable[[], bool], s: Scenario, timeout: float = 15.0) -> None:
    await wait_until_async(condition, "the scenario", timeout=timeout, show=s.story)


@pytest.fixture(autouse=True)
def children_before() -> Iterator[set[tuple[int, float]]]:
    """Our children when the test began; whatever the test left is killed after it."""
    with children_killed_after() as before:
        yield before


@pytest.fixture
def scenario(
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    git: GitRunner,
    children_before: set[tuple[int, float]],
) -> Callable[..., Scenario]:
    """``scenario(plan, gates=1, **contract)`` -> a Scenario in the test's repository, whose
    contract has the first ``gates`` of the gates g1-g3 (a.txt, b.txt, c.txt exists) and their
    episodes."""

    def make(plan: dict[int | str, list[Step]], **kwargs: Any) -> Scenario:
        made = Scenario(repo, tmp_path, monkeypatch, git, plan, **kwargs)
        made.children_before = children_before
        return made

    return make


# --- done, episode by episode -----------------------------------------------------------------


async def test_completes_episodes_one_by_one(scenario: Callable[..., Scenario]) -> None:
    s = scenario(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["write", "b.txt", "b\n"],
                wait_checkpoints(2),
                ["write", "c.txt", "c\n"],
                ["print", "all done"],
                ["exit", 0],
            ]
        },
        gates=3,
    )
    before = s.tree()

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    taken = [e.record_ for e in s.of(CheckpointTaken)]
    assert [(c.n, c.episode) for c in taken] == [(1, 1), (2, 2), (3, 3)], s.story()
    assert [c.gates_green for c in taken] == [("g1",), ("g1", "g2"), ("g1", "g2", "g3")]
    # Each checkpoint holds exactly the work of its episode, on the HEAD the run started on.
    for record, files in zip(
        taken, ({"a.txt"}, {"a.txt", "b.txt"}, {"a.txt", "b.txt", "c.txt"}), strict=True
    ):
        assert s.ref(record.ref) == record.commit
        assert s.files_at(record.ref) == {"README.md", "paella.toml", *files}
        assert (record.head, record.branch) == (s.head0, "main")
        assert s.ref(f"{record.ref}^") == s.head0
    names = s.order(AgentStarted, CheckpointTaken, AgentExited, RunDone)
    # Checkpoint 3 is taken once c.txt settles, or by the evaluation after the exit: either way
    # before the verdict, and the verdict is the last event.
    assert names in (
        ["AgentStarted", *["CheckpointTaken"] * 3, "AgentExited", "RunDone"],
        ["AgentStarted", *["CheckpointTaken"] * 2, "AgentExited", "CheckpointTaken", "RunDone"],
    ), s.story()
    assert isinstance(s.events[-1], RunDone), s.story()
    exited = s.of(AgentExited)
    assert [(e.exit_code, e.signal, e.leftovers) for e in exited] == [(0, None, ())]
    assert exited[0].tail[-1] == "all done"
    done = s.of(RunDone)
    assert done and done[0].gates == ("g1", "g2", "g3")
    assert not s.of(DriftDetected) and not s.of(RecoveryNeeded), s.story()
    assert s.loop is not None and s.loop.state == "done"
    # The evaluations after a settle looked at the watcher's paths only (issue 17), and the
    # checkpoints above hold exactly each episode's files all the same.
    assert s.loop.snapshotter.scans["changed"] >= 1, s.loop.snapshotter.scans

    kinds = s.kinds()
    assert kinds[:2] == ["run-started", "run-tree"]
    assert kinds[-1] == "run-done"
    assert kinds.count("checkpoint") == 3 and kinds.count("agent-started") == 1
    assert [r["episode"] for r in s.ledger("checkpoint")] == [1, 2, 3]
    started = s.ledger("agent-started")[0]
    assert started["attempt"] == 1 and started["argv"][1] == str(AGENT)
    assert s.ledger("agent-exited")[0]["exit_code"] == 0

    # The agent's work is there; HEAD, branch and index are as the run found them.
    after = s.tree()
    assert after.without("a.txt", "b.txt", "c.txt") == before
    assert {p: after[p][1] for p in ("a.txt", "b.txt", "c.txt")} == {
        "a.txt": b"a\n",
        "b.txt": b"b\n",
        "c.txt": b"c\n",
    }
    assert s.git.head(s.repo) == s.head0 and s.git.branch(s.repo) == "main"
    assert s.git(s.repo, "diff", "--cached", "--name-only") == ""
    await s.finish()


async def test_an_edit_made_while_the_watches_are_set_up_is_seen(
    scenario: Callable[..., Scenario], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Planning the watches takes a while on a big tree (~0.4 s for 33,000 folders): an agent
    # that edits at once must still be seen, not only when it edits again or exits.
    plan = WorkspaceWatcher._compute_plan

    def slow_plan(self: WorkspaceWatcher) -> WatchPlan:
        time.sleep(1.0)
        return plan(self)

    monkeypatch.setattr(WorkspaceWatcher, "_compute_plan", slow_plan)
    s = scenario(
        {
            1: [
                ["sleep", 0.3],
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1, timeout=8),
                ["print", "saw my checkpoint"],
                ["exit", 0],
            ]
        }
    )

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    exited = s.of(AgentExited)
    assert exited[0].tail[-1] == "saw my checkpoint", s.story()
    assert s.events.index(s.of(CheckpointTaken)[0]) < s.events.index(exited[0])
    await s.finish()


# --- drift -------------------------------------------------------------------------------------


async def test_fixing_a_later_episode_and_breaking_an_earlier_gate_is_a_regression(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                # Episode 2 "needs" a.txt gone: the earlier invariant breaks.
                ["remove", "a.txt"],
                ["write", "b.txt", "b\n"],
                wait_drift(1),
                ["print", "Traceback (most recent call last): boom"],
                ["exit", 3],
            ]
        },
        gates=2,
    )

    code = await s.run_loop(policy("stop"))

    assert code == 1, s.story()
    regressions = s.drift("regression")
    assert len(regressions) == 1, s.story()
    drift = regressions[0]
    assert drift.gate == "g1"
    assert '"g1"' in drift.message and "checkpoint 1 (episode 1)" in drift.message, drift.message
    # Seen live, while the agent still ran (it waited for the warning before crashing).
    assert s.events.index(drift) < s.events.index(s.of(AgentExited)[0])

    needed = s.of(RecoveryNeeded)
    assert len(needed) == 1
    facts = needed[0].facts
    assert facts.ending == "crash" and (facts.how, facts.attempt) == ("exit 3", 1)
    assert facts.regressions == ("g1",)
    assert facts.base is not None and facts.base.n == 1
    assert facts.default == "rollback"
    assert set(facts.changed_files) == {"a.txt", "b.txt"}
    assert "Traceback (most recent call last): boom" in facts.tail
    assert [(c.choice, c.by) for c in s.of(RecoveryChosen)] == [("stop", "policy")]
    stopped = s.of(RunStopped)
    assert len(stopped) == 1 and "stopped" in stopped[0].reason

    drift_records = s.ledger("drift")
    assert [(r["drift"], r["gate"]) for r in drift_records] == [("regression", "g1")]
    recovery = s.ledger("recovery-needed")[0]
    assert (recovery["regressions"], recovery["base"], recovery["default"]) == (
        ["g1"],
        1,
        "rollback",
    )
    assert s.kinds()[-1] == "run-stopped"
    # A stop keeps the state as it is, with the handoff naming the regression.
    assert not (s.repo / "a.txt").exists() and (s.repo / "b.txt").read_text() == "b\n"
    handoff = (s.run.dir / "handoff.md").read_text()
    assert "REGRESSED" in handoff and "`g1`" in handoff
    assert s.ref(f"{s.run.ref_prefix}/checkpoints/1") is not None
    assert "a.txt" in s.files_at(f"{s.run.ref_prefix}/checkpoints/1")
    await s.finish()


async def test_exit_zero_with_red_gates_is_claimed_done_then_recovery(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {
            1: [["print", "All done! Every test passes."], ["exit", 0]],
            2: [["record", "{outside}/attempt2.json"], ["write", "a.txt", "a\n"], ["exit", 0]],
        },
    )

    code = await s.run_loop(policy("continue"))

    assert code == 0, s.story()
    claimed = s.drift("claimed-done")
    assert len(claimed) == 1, s.story()
    assert claimed[0].gate == "g1" and "exited 0" in claimed[0].message
    needed = s.of(RecoveryNeeded)
    assert len(needed) == 1 and needed[0].facts.ending == "claimed-done"
    assert (needed[0].facts.how, needed[0].facts.attempt) == ("exit 0", 1)
    assert [(c.choice, c.by) for c in s.of(RecoveryChosen)] == [("continue", "policy")]
    started = s.of(AgentStarted)
    assert [(a.attempt, a.resumed) for a in started] == [(1, False), (2, True)]
    assert len(s.of(RunDone)) == 1 and not s.of(RolledBack)
    # The resumed attempt was given the handoff, and told which episode it is on.
    seen = s.reported("attempt2.json")
    assert seen["attempt"] == "2" and seen["episode"] == "1"
    assert seen["handoff_file"] == str(s.run.dir / "handoff.md")
    assert "claimed-done" in seen["handoff"] and "`g1`" in seen["handoff"]
    kinds = s.kinds()
    assert kinds.index("drift") < kinds.index("recovery-needed") < kinds.index("recovery-chosen")
    assert kinds[-1] == "run-done"
    assert [r["drift"] for r in s.ledger("drift")] == ["claimed-done"]
    assert [c.record_.episode for c in s.of(CheckpointTaken)] == [1]
    assert (s.repo / "a.txt").read_text() == "a\n"
    await s.finish()


@pytest.mark.slow
async def test_a_person_picks_an_older_checkpoint_and_the_episode_is_redone(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["write", "b.txt", "b, the first way\n"],
                wait_checkpoints(2),
                ["print", "Traceback (most recent call last): boom"],
                ["exit", 1],
            ],
            2: [["record", "{outside}/attempt2.json"], ["write", "b.txt", "b\n"], ["exit", 0]],
        },
        gates=2,
    )
    asked: list[tuple[RecoveryFacts, str]] = []

    async def decide(facts: RecoveryFacts) -> Decision:
        # What `paella status` in another pane shows while the question is open.
        asked.append((facts, RunView.load(s.run).state()))
        first = next(c for c in RunView.load(s.run).checkpoints if c.n == 1)
        return Decision("rollback", first)

    code = await s.run_loop(decide)

    assert code == 0, s.story()
    assert len(asked) == 1
    facts, state = asked[0]
    assert state == "recovering"
    assert facts.ending == "crash" and facts.base is not None and facts.base.n == 2
    assert facts.default == "continue" and facts.regressions == ()
    assert [(c.choice, c.target, c.by) for c in s.of(RecoveryChosen)] == [("rollback", "1", "user")]
    rolled = s.of(RolledBack)
    assert len(rolled) == 1 and rolled[0].target.n == 1 and rolled[0].salvage.n == 1
    # The resumed attempt started from checkpoint 1, and knew it.
    seen = s.reported("attempt2.json")
    assert "b.txt" not in seen["files"] and "a.txt" in seen["files"]
    assert seen["episode"] == "2"
    assert "last green checkpoint (1)" in section(seen["handoff"], "Gates that must stay green")
    # Episode 2, redone after the rollback, is checkpointed again.
    assert [(c.record_.n, c.record_.episode) for c in s.of(CheckpointTaken)] == [
        (1, 1),
        (2, 2),
        (3, 2),
    ]
    assert s.files_at(f"{s.run.ref_prefix}/salvage/1") == {
        "README.md",
        "paella.toml",
        "a.txt",
        "b.txt",
    }
    salvaged = s.git(s.repo, "show", f"{s.run.ref_prefix}/salvage/1:b.txt")
    assert salvaged == "b, the first way"
    assert (s.repo / "b.txt").read_text() == "b\n" and len(s.of(RunDone)) == 1
    kinds = s.kinds()
    assert kinds.index("salvage") < kinds.index("rollback-done") < kinds.index("run-done")
    await s.finish()


# --- deaths --------------------------------------------------------------------------------------


async def test_rate_limit_is_retried_after_the_backoff_then_recovered(
    scenario: Callable[..., Scenario],
) -> None:
    rate_limited = [
        ["print", "Error: rate limit exceeded (HTTP 429), please slow down"],
        ["exit", 1],
    ]
    s = scenario(
        {
            1: rate_limited,
            2: rate_limited,
            3: rate_limited,
            4: [["record", "{outside}/attempt4.json"], ["write", "a.txt", "a\n"], ["exit", 0]],
        },
        retry={"max_attempts": 2, "backoff": "0.5s"},
    )

    code = await s.run_loop(policy("continue"))

    assert code == 0, s.story()
    retries = s.of(RetryScheduled)
    assert [(r.attempt, r.failures, r.wait_s) for r in retries] == [(1, 1, 0.5), (2, 2, 1.0)]
    assert all("backoff" in r.reason for r in retries)
    started = s.of(AgentStarted)
    assert [(a.attempt, a.resumed) for a in started] == [
        (1, False),
        (2, True),
        (3, True),
        (4, True),
    ]
    # Each countdown is honoured: the next attempt starts no earlier than announced.
    for retry, nxt in zip(retries, started[1:3], strict=True):
        assert retry.resume_at == pytest.approx(retry.at + retry.wait_s, abs=0.2)
        assert nxt.at >= retry.resume_at - 0.05, "the retry did not wait for its countdown"
    # After max_attempts transient failures: recovery, not a third blind wait.
    needed = s.of(RecoveryNeeded)
    assert len(needed) == 1, s.story()
    assert needed[0].facts.ending == "transient" and (
        needed[0].facts.how,
        needed[0].facts.attempt,
    ) == ("exit 1", 3)
    assert s.events.index(needed[0]) > s.events.index(s.of(AgentExited)[2])
    assert [c.choice for c in s.of(RecoveryChosen)] == ["continue"]
    assert len(s.of(RunDone)) == 1
    # The resumes get the handoff, which says how the last attempt ended.
    seen = s.reported("attempt4.json")
    assert seen["handoff_file"] and "429" in seen["handoff"]
    ledger_retries = s.ledger("retry-scheduled")
    assert [(r["failures"], r["wait_s"]) for r in ledger_retries] == [(1, 0.5), (2, 1.0)]
    assert [r["exit_code"] for r in s.ledger("agent-exited")] == [1, 1, 1, 0]
    # A transient failure is resumed from the current state: no rollback, no salvage.
    assert not s.of(RolledBack) and not s.ledger("salvage")
    assert [c.record_.episode for c in s.of(CheckpointTaken)] == [1]
    assert (s.repo / "a.txt").read_text() == "a\n"
    await s.finish()


async def test_a_headless_policy_gives_up_after_max_attempts_recoveries(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario({"*": [["print", "KeyError: 'config'"], ["exit", 1]]}, retry={"max_attempts": 2})

    code = await s.run_loop(policy("continue"))

    # An agent that crashes every time is not resumed forever by a headless policy.
    assert code == 1, s.story()
    assert [a.attempt for a in s.of(AgentStarted)] == [1, 2, 3]
    assert [(c.choice, c.by) for c in s.of(RecoveryChosen)] == [
        ("continue", "policy"),
        ("continue", "policy"),
        ("stop", "policy (limit)"),
    ]
    warnings = [n.message for n in s.of(Notice) if n.level == "warning"]
    assert any("automatic recoveries already" in m for m in warnings), s.story()
    assert not s.of(RetryScheduled) and not s.of(RunDone)
    assert s.kinds()[-1] == "run-stopped"
    await s.finish()


async def test_death_by_a_signal_goes_to_recovery(scenario: Callable[..., Scenario]) -> None:
    s = scenario(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                ["print", "about to die"],
                ["kill", "SIGKILL"],
            ]
        },
        gates=2,
    )

    code = await s.run_loop(policy("stop"))

    assert code == 1, s.story()
    exited = s.of(AgentExited)
    assert [(e.exit_code, e.signal) for e in exited] == [(None, signal.SIGKILL)]
    assert exited[0].describe() == "killed by SIGKILL"
    assert "about to die" in exited[0].tail
    facts = s.of(RecoveryNeeded)[0].facts
    assert facts.ending == "signal" and (facts.how, facts.attempt) == ("killed by SIGKILL", 1)
    assert facts.base is not None and facts.base.n == 1 and facts.base.gates_green == ("g1",)
    assert facts.regressions == () and facts.default == "continue"
    assert s.ledger("agent-exited")[0]["signal"] == signal.SIGKILL
    needed = s.ledger("recovery-needed")[0]
    assert (needed["how"], needed["attempt"]) == ("killed by SIGKILL", 1)
    handoff_events = s.of(HandoffWritten)
    assert handoff_events, s.story()
    handoff = Path(handoff_events[-1].path).read_text()
    assert "killed by SIGKILL" in handoff
    assert s.kinds()[-1] == "run-stopped"
    # Stopped, not rolled back: the state stays as the agent left it.
    assert (s.repo / "a.txt").read_text() == "a\n" and not (s.repo / "b.txt").exists()
    assert s.files_at(facts.base.ref) == {"README.md", "paella.toml", "a.txt"}
    await s.finish()


async def test_leftover_grandchildren_are_stopped_and_named(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {
            1: [
                ["spawn", "dev-server"],
                ["spawn", "daemon", "--setsid"],
                ["write", "a.txt", "a\n"],
                ["print", "leaving my servers running"],
                ["exit", 0],
            ]
        },
    )

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    spawned = s.spawned()
    assert set(spawned) == {"dev-server", "daemon"}
    exited = s.of(AgentExited)
    assert len(exited) == 1
    named = {int(line.split()[0]) for line in exited[0].leftovers}
    assert named == set(spawned.values()), exited[0].leftovers
    assert all("sleeper.py" in line for line in exited[0].leftovers)
    assert s.ledger("agent-exited")[0]["leftovers"] == list(exited[0].leftovers)
    # They were stopped before anything else happened: before the run was judged done.
    assert s.events.index(exited[0]) < s.events.index(s.of(RunDone)[0])
    assert (s.repo / "a.txt").read_text() == "a\n"
    await s.finish()


async def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {1: [["ignore", "SIGTERM"], ["print", "ignoring SIGTERM"], ["sleep", 60]]},
    )
    before = s.tree()
    loop = s.make_loop(policy("stop"), stop_grace=1.0)
    task = asyncio.create_task(loop.run())
    await _wait_for(lambda: any("ignoring SIGTERM" in line for line in loop.tail.plain_lines()), s)

    began = time.monotonic()
    await asyncio.wait_for(loop.stop_agent(), 10)
    elapsed = time.monotonic() - began
    code = await asyncio.wait_for(task, RUN_TIMEOUT)

    assert 1.0 <= elapsed < 1.0 + 2.0, f"stop took {elapsed:.2f}s with a 1s grace"
    assert code == 1, s.story()
    exited = s.of(AgentExited)
    assert [(e.exit_code, e.signal, e.stopped_by_user) for e in exited] == [
        (None, signal.SIGKILL, True)
    ]
    facts = s.of(RecoveryNeeded)[0].facts
    assert facts.ending == "stopped" and (facts.how, facts.attempt) == ("stopped by you", 1)
    assert not s.drift("claimed-done")
    assert s.ledger("agent-exited")[0]["stopped_by_user"] is True
    assert s.tree() == before
    await s.finish()


@pytest.mark.slow
async def test_a_flood_of_output_is_logged_byte_exact_and_gates_still_run(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario({1: [["write", "a.txt", "a\n"], ["flood", 1_000_000, True], ["exit", 0]]})

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    flood = json.loads(s.flood_file.read_text())
    # The gates ran and checkpointed while the agent was still flooding.
    assert flood["checkpoint_seen_at_line"] is not None, (
        f"no checkpoint while {flood['lines']:,} lines were written: the run loop was not responsive"
    )
    assert flood["lines"] >= 1_000_000
    taken = s.of(CheckpointTaken)
    assert taken and taken[0].at < flood["ended"]
    evaluated = [e for e in s.of(EvaluationFinished) if e.at < flood["ended"] and not e.stale]
    assert evaluated, s.story()

    sys.path.insert(0, str(FLOOD.parent))
    try:
        from flood import flood_blocks
    finally:
        sys.path.remove(str(FLOOD.parent))
    # The log block by block against what the agent wrote (compared, not hashed twice: 100 MB).
    at = 0
    with open(s.run.dir / "agent.log", "rb") as handle:
        for block in flood_blocks(flood["lines"]):
            same = handle.read(len(block)) == block
            assert same, f"agent.log is not what the agent wrote, from byte {at:,} on"
            at += len(block)
        assert handle.read(1) == b"", f"agent.log holds more than the {at:,} bytes written"
    assert len(s.of(RunDone)) == 1
    assert (s.repo / "a.txt").read_text() == "a\n"
    await s.finish()


async def test_silence_past_stall_after_is_stall_drift(scenario: Callable[..., Scenario]) -> None:
    s = scenario(
        {
            1: [
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                wait_drift(1),
                ["print", "back"],
                ["exit", 0],
            ]
        },
        run={"stall_after": "1s"},
    )

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    stalls = s.drift("stall")
    assert len(stalls) == 1, s.story()
    assert "stall_after is 1s" in stalls[0].message
    assert s.events.index(stalls[0]) < s.events.index(s.of(AgentExited)[0])
    assert [r["drift"] for r in s.ledger("drift")] == ["stall"]
    assert len(s.of(RunDone)) == 1 and (s.repo / "a.txt").read_text() == "a\n"
    await s.finish()


def slow_drift_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Path-drift checks as slow as git on a big repository: they answer after the agent ended."""
    check_tree = DriftTracker.check_tree

    def slow(self: DriftTracker, tree: str) -> list[DriftDetected]:
        time.sleep(0.5)
        return check_tree(self, tree)

    monkeypatch.setattr(DriftTracker, "check_tree", slow)


EXITS = pytest.mark.parametrize("exits_at_once", [False, True], ids=["waits", "exits-at-once"])


@EXITS
async def test_editing_a_protected_file_is_protected_drift(
    scenario: Callable[..., Scenario],
    repo: Path,
    git: GitRunner,
    monkeypatch: pytest.MonkeyPatch,
    exits_at_once: bool,
) -> None:
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ingest.py").write_text("def test_ingest():\n    assert True\n")
    git(repo, "add", "tests")
    git(repo, "commit", "-q", "-m", "tests")
    rule = "The tests in tests/ are the spec: never edit them."
    steps: list[Step] = [
        ["append", "tests/test_ingest.py", "    # skip the hard part\n"],
        ["write", "a.txt", "a\n"],
    ]
    if exits_at_once:
        slow_drift_checks(monkeypatch)
    else:
        steps.append(wait_drift(1))
    s = scenario({1: [*steps, ["exit", 0]]}, constraints=[{"text": rule, "protect": ["tests/**"]}])

    code = await s.run_loop(policy("stop"))

    # Green gates over an edited protected test prove nothing: the run is not done, and the
    # change is named (once as it happened, once as the reason it is not done).
    assert code == 1, s.story()
    drift = s.drift("protected")
    assert len(drift) == 2, s.story()
    assert drift[0].path == "tests/test_ingest.py"
    assert drift[1].message.startswith("not done: tests/test_ingest.py")
    assert "tests/test_ingest.py" in drift[0].message and rule in drift[0].message
    records = s.ledger("drift")
    assert [(r["drift"], r["path"]) for r in records] == [
        ("protected", "tests/test_ingest.py"),
        ("protected", None),
    ]
    # Even when the check answers after the agent ended, the warning comes before the verdict,
    # and the verdict (not done: stopped) is the run's last word.
    kinds = s.kinds()
    assert "run-done" not in kinds
    assert kinds.index("drift") < kinds.index("run-stopped") and kinds[-1] == "run-stopped", kinds
    assert isinstance(s.events[-1], RunStopped), s.story()
    handoff = (s.run.dir / "handoff.md").read_text()
    assert "tests/test_ingest.py" in handoff
    assert (s.repo / "tests" / "test_ingest.py").read_text().endswith("# skip the hard part\n")
    await s.finish()


@EXITS
async def test_editing_the_contract_is_contract_drift_and_the_frozen_copy_holds(
    scenario: Callable[..., Scenario], monkeypatch: pytest.MonkeyPatch, exits_at_once: bool
) -> None:
    # The agent makes its own life easy: the gate no longer needs a.txt.
    steps: list[Step] = [["write", "paella.toml", "{contract}"]]
    if exits_at_once:
        slow_drift_checks(monkeypatch)
    else:
        steps.append(wait_drift(1))
    s = scenario({1: [*steps, ["print", "done: all gates pass"], ["exit", 0]]})
    original = (s.repo / "paella.toml").read_text()
    cheat = original.replace('cmd = "test -f a.txt"', 'cmd = "true"')
    assert cheat != original
    plan_file = s.outside / "plan.json"
    plan_file.write_text(plan_file.read_text().replace('"{contract}"', json.dumps(cheat)))

    code = await s.run_loop(policy("stop"))

    assert code == 1, s.story()
    contract = s.drift("contract")
    assert len(contract) == 1, s.story()
    assert contract[0].path == "paella.toml" and "frozen" in contract[0].message
    # Held to the frozen gate (test -f a.txt), the agent's "done" is a claim, not a fact.
    assert len(s.drift("claimed-done")) == 1 and not s.of(RunDone)
    assert s.run.contract_copy.read_text() == original
    assert (s.repo / "paella.toml").read_text() == cheat
    evaluated = s.of(EvaluationFinished)[-1]
    assert [(r.gate, r.status) for r in evaluated.results] == [("g1", "fail")]
    assert sorted(r["drift"] for r in s.ledger("drift")) == ["claimed-done", "contract"]
    # The warning is in the ledger before the recovery, and in the handoff written for it.
    kinds = s.kinds()
    assert kinds.index("drift") < kinds.index("recovery-needed"), kinds
    handoff = section((s.run.dir / "handoff.md").read_text(), "Drift warnings")
    assert "paella.toml changed during the run" in handoff, handoff
    assert kinds[-1] == "run-stopped", kinds
    await s.finish()


async def test_resetting_the_branch_past_the_checkpoint_is_history_drift(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario(
        {
            1: [
                ["write", "work.txt", "work\n"],
                ["git", "add", "work.txt"],
                ["git", "commit", "-q", "-m", "work"],
                ["write", "a.txt", "a\n"],
                wait_checkpoints(1),
                # Rewind the branch; the files stay (a soft reset), so no gate breaks.
                ["git", "reset", "-q", "--soft", "HEAD~1"],
                ["exit", 0],
            ]
        },
    )

    code = await s.run_loop(policy("stop"))

    assert code == 0, s.story()
    checkpoint = s.of(CheckpointTaken)[0].record_
    assert checkpoint.head is not None and checkpoint.head != s.head0
    history = s.drift("history")
    assert len(history) == 1, s.story()
    message = history[0].message
    assert "main" in message and checkpoint.head[:7] in message and s.head0[:7] in message
    assert s.git.head(s.repo) == s.head0
    # The rewound commit is still reachable through the checkpoint.
    assert s.ref(f"{checkpoint.ref}^") == checkpoint.head
    assert [r["drift"] for r in s.ledger("drift")] == ["history"]
    assert (s.repo / "work.txt").read_text() == "work\n"
    assert s.git(s.repo, "diff", "--cached", "--name-only") == "work.txt"
    await s.finish(head_moved=True)


async def test_an_agent_command_that_does_not_exist_is_a_clear_error(
    scenario: Callable[..., Scenario],
) -> None:
    s = scenario({}, agent=["paella-no-such-agent-xyz", "{prompt}"])
    before = s.tree()

    code = await s.run_loop(policy("rollback"))

    assert code == 2, s.story()
    errors = [n for n in s.of(Notice) if n.level == "error"]
    assert len(errors) == 1, s.story()
    assert "'paella-no-such-agent-xyz' was not found" in errors[0].message
    assert "paella.toml" in errors[0].message
    assert not s.of(AgentStarted) and not s.of(RecoveryNeeded)
    stopped = s.ledger("run-stopped")
    assert len(stopped) == 1 and "could not start" in stopped[0]["reason"]
    assert "agent-started" not in s.kinds()
    assert s.tree() == before and not s.ledger("checkpoint")
    await s.finish()


@pytest.mark.parametrize(("all_green", "code"), [(True, 0), (False, 1)])
async def test_accept_after_a_death_is_done_only_when_every_gate_is_green(
    scenario: Callable[..., Scenario], all_green: bool, code: int
) -> None:
    steps: list[Step] = [["write", "a.txt", "a\n"], wait_checkpoints(1)]
    if all_green:
        steps.append(["write", "b.txt", "b\n"])
    steps.append(["kill", "SIGKILL"])
    s = scenario({1: steps}, gates=2)

    async def accept(facts: RecoveryFacts) -> Decision:
        return Decision("accept")

    assert await s.run_loop(accept) == code, s.story()
    chosen = s.ledger("recovery-chosen")
    assert [(c["choice"], c["by"]) for c in chosen] == [("accept", "user")]
    kinds = s.kinds()
    if all_green:
        assert kinds[-1] == "run-done" and len(s.of(AgentStarted)) == 1
    else:
        assert kinds[-1] == "run-stopped" and "run-done" not in kinds
        assert "accept refused" in s.ledger("run-stopped")[-1]["reason"]
    await s.finish()
