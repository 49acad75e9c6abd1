"""Tests of the evaluator: real repositories, real snapshots and checkpoints, real gate commands.

Every test drives an Evaluator the way the run loop does: events go to a list and, like the run
loop, to the ledger, so a second Evaluator can be seeded from what the first one recorded.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import psutil
import pytest
import tomli_w
from conftest import make_repo
from hypothesis import given, settings
from hypothesis import strategies as st
from waiting import wait_until_async

from paella_tui.supervisor.contract.loader import parse_contract
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.evaluation import (
    CHANGED_DURING_GATES,
    MAX_STALE_STREAK,
    Evaluator,
    EvaluatorClosed,
)
from paella_tui.supervisor.run.events import (
    CheckpointTaken,
    DriftDetected,
    EvaluationFinished,
    EvaluationStarted,
    Event,
    GateFinished,
    GateResult,
    GateStarted,
    GateStatus,
    Notice,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, records
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter
from paella_tui.supervisor.store.workspace import Workspace

SCRIPTS = Path(__file__).parent / "gate_scripts"
E = TypeVar("E", bound=Event)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def exists_gate(name: str, path: str, **extra: Any) -> dict[str, Any]:
    """A gate that is green while ``path`` exists in the workspace. A shell and ``test -e``:
    the evaluator sees a command's output and exit status whatever runs it, and a shell starts
    in a few milliseconds where an interpreter takes tens (these gates run hundreds of times)."""
    cmd = f"echo {shlex.quote(f'checking {path}')}; test -e {shlex.quote(path)}"
    return {"name": name, "cmd": ["sh", "-c", cmd], "timeout": "10s", **extra}


def make_contract(
    repo: Path, gates: list[dict[str, Any]], episodes: Sequence[tuple[str, list[str]]] = ()
) -> Contract:
    data: dict[str, Any] = {
        "run": {"prompt": "build it", "agent": ["true"]},
        "gates": {"jobs": 2},
        "gate": gates,
    }
    if episodes:
        data["episode"] = [
            {"name": name, "goal": f"{name} works", "gates": names} for name, names in episodes
        ]
    return parse_contract(tomli_w.dumps(data), repo / "paella.toml", default_name="test")


class Harness:
    """An Evaluator on a real run, with every event it emitted."""

    def __init__(self, repo: Path, contract: Contract, run: Run | None = None) -> None:
        self.repo = repo
        self.workspace = Workspace.find(repo)
        # The run loop's snapshotter: checks after the gates share scans begun after they ended.
        self.snapshotter = SequencedSnapshotter(self.workspace)
        self.contract = contract
        self.run = run or RunStore(self.workspace).create(contract, manual=False)
        self.events: list[Event] = []
        self.evaluator = self.new_evaluator()

    def new_evaluator(self, **kwargs: Any) -> Evaluator:
        return Evaluator(
            run=self.run,
            contract=self.contract,
            snapshotter=self.snapshotter,
            emit=self.emit,
            **kwargs,
        )

    def emit(self, event: Event) -> None:
        self.events.append(event)
        if event.kind is not None:  # the run loop persists what is not recorded elsewhere
            self.run.ledger.append(event.kind, **event.record())

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def mark(self) -> int:
        return len(self.events)

    def since(self, mark: int, kind: type[E]) -> list[E]:
        return [e for e in self.events[mark:] if isinstance(e, kind)]

    def checkpoints(self) -> list[SnapshotRecord]:
        return records(self.run, "checkpoints")

    async def wait_for(self, kind: type[E], count: int = 1, timeout: float = 10.0) -> E:
        await wait_until_async(
            lambda: len(self.of(kind)) >= count,
            f"{kind.__name__} #{count}",
            timeout=timeout,
            interval=0.01,
        )
        return self.of(kind)[count - 1]


@pytest.fixture
async def make_harness(repo: Path) -> Any:
    made: list[Harness] = []

    def factory(
        gates: list[dict[str, Any]], episodes: Sequence[tuple[str, list[str]]] = ()
    ) -> Harness:
        harness = Harness(repo, make_contract(repo, gates, episodes))
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        await harness.evaluator.close()


HarnessFactory = Callable[..., Harness]


def is_gone(pid: int) -> bool:
    """Not running (a zombie waiting for init to reap it is not running)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_judged_tree_is_not_judged_again_unless_forced(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness([exists_gate("readme", "README.md")])
    first = await h.evaluator.evaluate("start")
    assert [r.status for r in first.results] == ["pass"]
    assert not first.results[0].cached and not first.stale
    assert len(h.of(GateStarted)) == 1

    mark = h.mark()
    again = await h.evaluator.evaluate("again")
    assert again.tree == first.tree
    assert h.since(mark, GateStarted) == []
    assert again.results[0].cached and again.results[0].status == "pass"
    assert [e.result.cached for e in h.since(mark, GateFinished)] == [True]

    mark = h.mark()
    forced = await h.evaluator.evaluate("user asked", force=True)
    assert [e.gate for e in h.since(mark, GateStarted)] == ["readme"]
    assert not forced.results[0].cached


async def test_a_gate_with_paths_keeps_its_result_while_they_do_not_change(
    make_harness: HarnessFactory, repo: Path
) -> None:
    h = make_harness(
        [exists_gate("docs", "README.md", paths=["docs/**"]), exists_gate("all", "README.md")]
    )
    await h.evaluator.evaluate("start")
    assert sorted(e.gate for e in h.of(GateStarted)) == ["all", "docs"]

    (repo / "src").mkdir()
    (repo / "src" / "main.py").write_text("print('hi')\n")
    mark = h.mark()
    second = await h.evaluator.evaluate("src changed")
    assert [e.gate for e in h.since(mark, GateStarted)] == ["all"]
    docs = second.results[0]
    assert docs.gate == "docs" and docs.cached and docs.tree == second.tree
    assert docs.status == "pass"

    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("# guide\n")
    mark = h.mark()
    await h.evaluator.evaluate("docs changed")
    assert sorted(e.gate for e in h.since(mark, GateStarted)) == ["all", "docs"]


async def test_rapid_triggers_queue_one_evaluation_and_never_restart_a_gate(
    make_harness: HarnessFactory, repo: Path, tmp_path: Path
) -> None:
    starts, go = tmp_path / "starts", tmp_path / "go"
    # The first run lasts until every trigger came (the test says go), however slow the machine;
    # later runs find the go file and finish at once.
    slow = (
        f"import os, time; open({str(starts)!r}, 'a').write('start\\n')\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print('done')"
    )
    h = make_harness([{"name": "slow", "cmd": py(slow), "timeout": "10s"}])
    h.evaluator.request("first")
    await h.wait_for(GateStarted)
    await wait_until_async(starts.exists, "the gate's process to start", timeout=10)
    started = time.monotonic()  # after the gate's clock started: its duration is longer
    for i in range(10):
        (repo / "work.txt").write_text(f"edit {i}\n")
        h.evaluator.request(f"edit {i}")
        await asyncio.sleep(0.02)
    assert h.evaluator.triggers_last_minute() == 11
    final_asked = asyncio.ensure_future(h.evaluator.evaluate("final"))
    await asyncio.sleep(0)  # asked while the first run still runs
    ran_at_least = time.monotonic() - started
    go.write_text("go")
    final = await final_asked
    await h.evaluator.idle()

    assert [e.reason for e in h.of(EvaluationStarted)] == ["first", "final"]
    assert starts.read_text() == "start\nstart\n"
    first_run = h.of(GateFinished)[0]
    # The first run was left to finish (it printed "done"), and it judged a tree that moved.
    assert first_run.stale and first_run.result.tail == ("done",)
    assert first_run.result.duration_s >= ran_at_least  # it ran through every trigger
    finished = h.of(EvaluationFinished)
    assert [e.stale for e in finished] == [True, False]
    assert finished[0].results[0].status == "stale"
    assert final is finished[1] and final.results[0].status == "pass"
    assert "edit 9" in (repo / "work.txt").read_text()


async def test_a_gate_that_changes_a_tracked_file_is_stale_and_judged_again(
    make_harness: HarnessFactory, repo: Path, git: Any
) -> None:
    (repo / "version.txt").write_text("0\n")
    git(repo, "add", "version.txt")
    git(repo, "commit", "-q", "-m", "version")
    code = "import time; open('version.txt', 'w').write('1\\n'); time.sleep(0.2)"
    h = make_harness([{"name": "bump", "cmd": py(code)}], [("bumped", ["bump"])])

    first = await h.evaluator.evaluate("start")
    assert first.stale and first.complete_episodes == 0
    assert [e.stale for e in h.of(GateFinished)] == [True]
    assert h.of(CheckpointTaken) == []
    assert h.evaluator.latest == {}, "a stale result is not the gate's latest"

    await h.evaluator.idle()
    started = h.of(EvaluationStarted)
    assert [e.reason for e in started] == ["start", CHANGED_DURING_GATES]
    second = h.of(EvaluationFinished)[1]
    assert not second.stale and second.complete_episodes == 1
    assert second.tree != first.tree
    (taken,) = h.of(CheckpointTaken)
    assert taken.record_.tree == second.tree and taken.record_.episode == 1
    assert [c.tree for c in h.checkpoints()] == [second.tree]


@pytest.mark.parametrize(
    ("written", "paths", "stale"),
    [
        ("notes.md", ["src/**"], False),  # the agent's notes, outside what the gate reads
        ("src/extra.py", ["src/**"], True),
        ("notes.md", [], True),  # a gate without paths reads everything
        ("docs/src/x.md", ["src/**"], False),  # a glob anchored at the root, as in .gitignore
        ("src/deep/down.py", ["src/**", "!src/deep/**"], False),
    ],
)
async def test_a_change_under_a_running_gate_makes_it_stale_only_where_it_reads(
    make_harness: HarnessFactory, repo: Path, written: str, paths: list[str], stale: bool
) -> None:
    """While a gate runs, the agent writes elsewhere (its notes, a plan): a gate whose
    ``paths`` do not cover the change keeps its verdict, and the green tree is checkpointed;
    a change it reads makes it stale, as before."""
    code = (
        f"import os, time; os.makedirs(os.path.dirname({written!r}) or '.', exist_ok=True);"
        f"open({written!r}, 'w').write('written while the gate ran'); time.sleep(0.2)"
    )
    extra = {"paths": paths} if paths else {}
    h = make_harness([{"name": "tests", "cmd": py(code), **extra}], [("one", ["tests"])])
    first = await h.evaluator.evaluate("start")
    assert [e.stale for e in h.of(GateFinished)][:1] == [stale]
    assert first.stale is stale
    if stale:
        assert first.complete_episodes == 0
        assert all(c.record_.tree != first.tree for c in h.of(CheckpointTaken))
    else:
        (taken,) = h.of(CheckpointTaken)
        assert taken.record_.tree == first.tree and first.complete_episodes == 1
        assert h.evaluator.latest["tests"].tree == first.tree
    await h.evaluator.idle()


async def test_one_stale_gate_leaves_the_others_verdicts_and_takes_no_checkpoint(
    make_harness: HarnessFactory, repo: Path
) -> None:
    write = "import time; open('notes.md', 'w').write('x'); time.sleep(0.2)"
    h = make_harness(
        [
            {"name": "reads-src", "cmd": py(write), "paths": ["src/**"]},
            # Runs until the other gate's write (so the write falls while it runs).
            {
                "name": "reads-all",
                "cmd": py(
                    "import os, time\nwhile not os.path.exists('notes.md'): time.sleep(0.01)"
                ),
            },
        ],
        [("one", ["reads-src", "reads-all"])],
    )
    first = await h.evaluator.evaluate("start")
    by_gate = {e.result.gate: e.stale for e in h.of(GateFinished)[:2]}
    assert by_gate == {"reads-src": False, "reads-all": True}
    assert first.stale and first.complete_episodes == 0 and h.of(CheckpointTaken) == []
    assert h.evaluator.latest["reads-src"].tree == first.tree
    await h.evaluator.idle()


async def test_a_gate_writing_ignored_files_does_not_move_the_tree(
    make_harness: HarnessFactory, repo: Path, git: Any
) -> None:
    (repo / ".gitignore").write_text("cache/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    code = (
        "import os, time; os.makedirs('cache', exist_ok=True);"
        "open(f'cache/{time.time_ns()}', 'w').write('x'); time.sleep(0.2)"
    )
    h = make_harness([{"name": "cachey", "cmd": py(code)}])
    first = await h.evaluator.evaluate("start")
    await h.evaluator.idle()
    assert not first.stale and first.results[0].status == "pass"
    assert len(h.of(EvaluationStarted)) == 1
    assert any((repo / "cache").iterdir())
    mark = h.mark()
    again = await h.evaluator.evaluate("again")
    assert again.tree == first.tree and h.since(mark, GateStarted) == []


async def test_episodes_are_cumulative_and_each_green_boundary_is_checkpointed(
    make_harness: HarnessFactory, repo: Path
) -> None:
    h = make_harness(
        [exists_gate("one", "a.txt"), exists_gate("two", "b.txt")],
        [("first", ["one"]), ("second", ["two"])],
    )
    ev = h.evaluator
    (repo / "b.txt").write_text("b\n")  # episode 2's gate alone is not episode 2
    start = await ev.evaluate("start")
    assert start.complete_episodes == 0 and h.of(CheckpointTaken) == []

    (repo / "a.txt").write_text("a\n")
    (repo / "b.txt").unlink()
    result = await ev.evaluate("a written")
    assert result.complete_episodes == 1
    (cp1,) = h.of(CheckpointTaken)
    assert cp1.record_.episode == 1 and cp1.record_.gates_green == ("one",)
    assert cp1.record_.label == "episode 1: first" and cp1.record_.tree == result.tree
    assert ev.base == cp1.record_ and ev.complete_on_base == 1

    mark = h.mark()
    await ev.evaluate("same tree")
    assert h.since(mark, GateStarted) == [] and h.since(mark, CheckpointTaken) == []

    (repo / "b.txt").write_text("b\n")
    result = await ev.evaluate("b written")
    assert result.complete_episodes == 2
    cp2 = h.of(CheckpointTaken)[-1].record_
    assert (cp2.n, cp2.episode, cp2.gates_green) == (2, 2, ("one", "two"))
    on_disk = [(c.n, c.episode, c.gates_green, c.tree) for c in h.checkpoints()]
    assert on_disk == [(1, 1, ("one",), cp1.record_.tree), (2, 2, ("one", "two"), cp2.tree)]
    base_on_disk = RunView.load(h.run).last_green_checkpoint
    assert base_on_disk is not None and (base_on_disk.n, base_on_disk.tree) == (2, cp2.tree)
    assert ev.ever_green == {
        "one": {cp1.record_.tree, cp2.tree},
        "two": {start.tree, cp2.tree},
    }


async def test_a_regression_is_reported_once_per_fall_naming_the_checkpoint(
    make_harness: HarnessFactory, repo: Path
) -> None:
    h = make_harness(
        [exists_gate("idempotency", "a.txt"), exists_gate("privacy", "b.txt")],
        [("ingest", ["idempotency"]), ("privacy", ["privacy"])],
    )
    ev = h.evaluator
    (repo / "a.txt").write_text("a\n")
    await ev.evaluate("episode 1")
    (repo / "b.txt").write_text("b\n")
    await ev.evaluate("episode 2")
    assert len(h.checkpoints()) == 2 and h.of(DriftDetected) == []

    (repo / "a.txt").unlink()
    result = await ev.evaluate("broke it")
    assert result.complete_episodes == 0
    (drift,) = h.of(DriftDetected)
    assert drift.drift == "regression" and drift.gate == "idempotency"
    assert drift.message == (
        'gate "idempotency" was green at checkpoint 2 (episode 2) and now fails: '
        "the newest work broke an earlier invariant"
    )
    assert ev.regressed == {"idempotency"}
    assert [r["gate"] for r in h.run.ledger.read().of_kind("drift")] == ["idempotency"]

    (repo / "c.txt").write_text("still broken\n")
    await ev.evaluate("more work")
    assert len(h.of(DriftDetected)) == 1, "still red is not news"
    assert h.of(CheckpointTaken)[-1].record_.n == 2

    (repo / "a.txt").write_text("a\n")
    await ev.evaluate("fixed")
    assert ev.regressed == frozenset()
    (repo / "a.txt").unlink()
    await ev.evaluate("broke it again")  # the same tree as "more work": a cached red
    assert [d.gate for d in h.of(DriftDetected)] == ["idempotency", "idempotency"]


async def test_after_a_rollback_a_redone_episode_is_checkpointed_again(
    make_harness: HarnessFactory, repo: Path
) -> None:
    h = make_harness(
        [exists_gate("one", "a.txt"), exists_gate("two", "b.txt")],
        [("first", ["one"]), ("second", ["two"])],
    )
    ev = h.evaluator
    (repo / "a.txt").write_text("a\n")
    await ev.evaluate("episode 1")
    (repo / "b.txt").write_text("b\n")
    await ev.evaluate("episode 2")
    cp1, cp2 = h.checkpoints()

    rollback(h.run, cp1, snapshotter=h.snapshotter)
    assert not (repo / "b.txt").exists()
    ev.set_base(cp1)
    assert ev.base == cp1 and ev.complete_on_base == 1
    mark = h.mark()
    back = await ev.evaluate("after rollback")
    assert back.tree == cp1.tree and back.complete_episodes == 1
    assert h.since(mark, GateStarted) == [] and h.since(mark, CheckpointTaken) == []

    # Redone the same way: the very tree of checkpoint 2 is the base again, not a copy of it.
    (repo / "b.txt").write_text("b\n")
    await ev.evaluate("redone the same")
    assert h.since(mark, CheckpointTaken) == [] and len(h.checkpoints()) == 2
    assert ev.base == cp2

    rollback(h.run, cp1, snapshotter=h.snapshotter)
    ev.set_base(cp1)
    (repo / "b.txt").write_text("b, done differently\n")
    result = await ev.evaluate("redone differently")
    assert result.complete_episodes == 2
    (taken,) = h.since(mark, CheckpointTaken)
    assert (taken.record_.n, taken.record_.episode) == (3, 2)
    assert taken.record_.tree == result.tree and ev.base == taken.record_


async def test_a_resumed_evaluator_knows_what_was_green(
    make_harness: HarnessFactory, repo: Path
) -> None:
    h = make_harness([exists_gate("one", "a.txt")], [("first", ["one"])])
    (repo / "a.txt").write_text("a\n")
    first = await h.evaluator.evaluate("start")
    await h.evaluator.close()

    view = RunView.load(h.run)
    resumed = h.new_evaluator(
        history=view.of_kind("gate-finished"), base=view.last_green_checkpoint
    )
    h.evaluator = resumed  # closed by the fixture
    assert resumed.ever_green == {"one": {first.tree}}
    assert resumed.latest["one"].status == "pass" and resumed.complete_on_base == 1

    mark = h.mark()
    again = await resumed.evaluate("resumed")
    assert again.results[0].cached and h.since(mark, GateStarted) == []
    assert h.since(mark, CheckpointTaken) == []

    (repo / "a.txt").unlink()
    await resumed.evaluate("broken after resume")
    (drift,) = h.since(mark, DriftDetected)
    assert "checkpoint 1 (episode 1)" in drift.message

    # A third evaluator, seeded with the regression already in the ledger, does not repeat it.
    third = h.new_evaluator(history=RunView.load(h.run).of_kind("gate-finished"))
    await resumed.close()
    h.evaluator = third
    assert third.regressed == {"one"} and third.latest["one"].tail == ("checking a.txt",)
    mark = h.mark()
    await third.evaluate("still broken")
    assert h.since(mark, DriftDetected) == []


async def test_gates_run_in_parallel_up_to_jobs(
    make_harness: HarnessFactory, tmp_path: Path
) -> None:
    a, b = tmp_path / "a-here", tmp_path / "b-here"
    h = make_harness(
        [
            {
                "name": "a",
                "cmd": [sys.executable, str(SCRIPTS / "wait_for_peer.py"), str(a), str(b)],
            },
            {
                "name": "b",
                "cmd": [sys.executable, str(SCRIPTS / "wait_for_peer.py"), str(b), str(a)],
            },
        ]
    )
    result = await h.evaluator.evaluate("start")
    assert [r.status for r in result.results] == ["pass", "pass"]


async def test_a_gate_that_always_changes_the_tree_does_not_loop_forever(
    make_harness: HarnessFactory, repo: Path, git: Any
) -> None:
    (repo / "counter.txt").write_text("")
    git(repo, "add", "counter.txt")
    git(repo, "commit", "-q", "-m", "counter")
    code = "import time; open('counter.txt', 'a').write(f'{time.time_ns()}\\n')"
    h = make_harness([{"name": "appends", "cmd": py(code)}])
    h.evaluator.request("start")
    await asyncio.wait_for(h.evaluator.idle(), 30)
    assert len(h.of(EvaluationStarted)) == MAX_STALE_STREAK + 1
    assert all(e.stale for e in h.of(EvaluationFinished))
    assert any("tracked file" in n.message for n in h.of(Notice))


async def test_close_kills_the_running_gates(make_harness: HarnessFactory, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    hang = [sys.executable, str(SCRIPTS / "hang_with_children.py"), str(pidfile)]
    h = make_harness([{"name": "hang", "cmd": hang, "timeout": "60s"}])
    waiting = asyncio.create_task(h.evaluator.evaluate("start"))
    await wait_until_async(pidfile.exists, "the gate's pid file", timeout=10)
    pids = [int(p) for p in pidfile.read_text().split()]
    await h.evaluator.close()
    with pytest.raises(EvaluatorClosed):
        await waiting
    await asyncio.wait_for(h.evaluator.idle(), 1)
    assert [pid for pid in pids if not is_gone(pid)] == [], "close() left gate processes"
    with pytest.raises(EvaluatorClosed):
        await h.evaluator.evaluate("after close")


def _reference_fold(
    history: Sequence[tuple[str, str, str]],
) -> tuple[dict[str, list[str]], set[str], list[bool]]:
    """The evaluator's seed as it was written first (lists), kept here as the slow reference."""
    ever: dict[str, list[str]] = {}
    regressed: set[str] = set()
    news: list[bool] = []
    for name, status, tree in history:
        new = False
        if status in ("pass", "flaky"):
            trees = ever.setdefault(name, [])
            if tree not in trees:
                trees.append(tree)
            regressed.discard(name)
        elif (
            status in ("fail", "timeout", "error")
            and any(t != tree for t in ever.get(name, ()))
            and name not in regressed
        ):
            regressed.add(name)
            new = True
        news.append(new)
    return ever, regressed, news


_RESULTS = st.lists(
    st.tuples(
        st.sampled_from(["one", "two"]),
        st.sampled_from(["pass", "flaky", "fail", "timeout", "error", "pending"]),
        st.sampled_from([f"{i:040x}" for i in range(6)]),
    ),
    max_size=40,
)


@pytest.fixture(scope="module")
def seed_harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    repo = make_repo(tmp_path_factory.mktemp("seed") / "repo")
    return Harness(repo, make_contract(repo, [exists_gate("one", "a"), exists_gate("two", "b")]))


@settings(max_examples=200, deadline=None)
@given(history=_RESULTS)
def test_the_seed_folds_like_the_list_reference(
    seed_harness: Harness, history: list[tuple[str, str, str]]
) -> None:
    """The regressions and each 'new regression' verdict match the quadratic list fold the
    bounded sets replaced; the (at most two) trees kept decide "green on another tree" exactly
    as the whole list does, for every tree."""
    h = seed_harness
    records = [{"kind": "gate-finished", "gate": g, "status": s, "tree": t} for g, s, t in history]
    seeded = h.new_evaluator(history=records)
    ever, regressed, news = _reference_fold(history)
    assert set(seeded.ever_green) == set(ever)
    for name, trees in seeded.ever_green.items():
        assert trees <= set(ever[name]) and len(trees) == min(2, len(set(ever[name])))
        for tree in [f"{i:040x}" for i in range(6)]:
            assert any(t != tree for t in trees) == any(t != tree for t in ever[name])
    assert seeded.regressed == frozenset(regressed)
    # The same fold one result at a time says "new regression" exactly where the reference does.
    fresh = h.new_evaluator()
    said = [
        fresh._remember(GateResult(gate=g, status=cast(GateStatus, s), tree=t))
        for g, s, t in history
    ]
    assert said == news


async def test_an_evaluation_asked_while_another_runs_tells_the_tree_it_judges(
    make_harness: HarnessFactory, repo: Path, tmp_path: Path
) -> None:
    """The final evaluation after an exit names its own tree, not that of a pass that took its
    snapshot before and is still running (the recovery describes the tree the verdict is on)."""
    go = tmp_path / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)"
    h = make_harness([{"name": "slow", "cmd": py(wait), "timeout": "30s"}])
    h.evaluator.request("a change")
    first = await h.wait_for(EvaluationStarted)
    (repo / "new.txt").write_text("after the snapshot\n")
    seen: list[str] = []
    final = asyncio.ensure_future(h.evaluator.evaluate("agent exited", on_tree=seen.append))
    await asyncio.sleep(0.3)
    assert seen == [], "told the running pass's tree"
    go.write_text("go")
    finished = await asyncio.wait_for(final, 30)
    assert seen == [finished.tree] and finished.tree != first.tree
    assert h.of(EvaluationStarted)[-1].tree == finished.tree


@pytest.mark.parametrize(
    ("paths_of_gates", "changed", "reads"),
    [
        ([["src/**"]], ["notes.md"], False),
        ([["src/**"]], ["notes.md", "src/a.py"], True),
        ([["src/**"], []], ["notes.md"], True),  # a gate without paths reads everything
        ([["src/**", "!src/gen/**"]], ["src/gen/x.py"], False),
        ([["*.py"]], ["deep/down/x.py"], True),  # a slash-free glob matches at any depth
        ([], ["anything"], False),  # no gate: nothing to re-run
    ],
)
def test_reads_any_says_whether_a_change_can_re_run_a_gate(
    paths_of_gates: list[list[str]], changed: list[str], reads: bool
) -> None:
    from paella_tui.supervisor.contract.model import Gate
    from paella_tui.supervisor.judge.gate_cache import reads_any

    gates = [
        Gate(name=f"g{i}", argv=("true",), cmd="true", timeout=9, retries=0, paths=tuple(p))
        for i, p in enumerate(paths_of_gates)
    ]
    assert reads_any(gates, changed) is reads
