"""A scan shared instead of taken again (issue 17: snapshots follow the change), and never a stale
one: real repositories, real snapshots, real gates.

Each test makes a change the shared scan cannot hold (an edit after it began, one the watcher
never reported, one a lock holder wrote after its own scan, one only the watcher's paths would
miss) and checks that the answer holds the change; the tests that share check that no new scan
was taken (the snapshotter's own counts, not timings).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from paella_tui.supervisor.contract.loader import parse_contract
from paella_tui.supervisor.judge.evaluation import Evaluator
from paella_tui.supervisor.run.events import (
    EvaluationFinished,
    Event,
    GateFinished,
    GateStarted,
)
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter, take_fresh
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import StepKeeper
from paella_tui.supervisor.store.workspace import Workspace


def _files(snapshotter: Snapshotter, tree: str) -> set[str]:
    return set(snapshotter.workspace.git.lines_z(["ls-tree", "-r", "-z", "--name-only", tree]))


def _scans(snapshotter: SequencedSnapshotter) -> int:
    return snapshotter.scans["full"] + snapshotter.scans["changed"]


# --- the snapshotter --------------------------------------------------------------------------


def test_a_scan_begun_after_the_moment_is_shared_and_a_later_edit_is_seen(repo: Path) -> None:
    snapshotter = SequencedSnapshotter(Workspace.find(repo))
    since = time.monotonic()
    first = snapshotter.take_locked()
    scans = _scans(snapshotter)

    shared = take_fresh(snapshotter, since, "a check")
    assert shared is first and _scans(snapshotter) == scans and snapshotter.shared == 1

    (repo / "late.txt").write_text("written after the scan began\n")
    again = take_fresh(snapshotter, time.monotonic(), "a check")
    assert _scans(snapshotter) == scans + 1
    assert "late.txt" in _files(snapshotter, again.tree)
    assert again.tree != first.tree


@pytest.mark.parametrize("why", ["never reported (an overflow)", "not settled yet"])
def test_an_edit_the_watcher_did_not_report_is_seen(repo: Path, why: str) -> None:
    """The watcher is live but says nothing of the edit (it overflowed, or the edit is still in
    its settle): a scan from its changed paths misses it, and is never the one shared."""
    snapshotter = SequencedSnapshotter(Workspace.find(repo))
    snapshotter.changes.follow()
    full = snapshotter.take_locked()  # the full scan that starts the record of changes
    (repo / "unreported.txt").write_text(f"{why}\n")
    since = time.monotonic()
    # Only the watcher's paths: nothing was reported, so this scan still finds the old tree.
    followed = snapshotter.take_locked(follow_changes=True)
    assert snapshotter.last_scan == "changed" and followed.tree == full.tree

    fresh = take_fresh(snapshotter, since, "a check")
    assert "unreported.txt" in _files(snapshotter, fresh.tree)
    assert snapshotter.last_scan == "full" and snapshotter.shared == 0


def test_no_scan_from_before_or_inside_a_rollback_is_shared(repo: Path) -> None:
    """A rollback snapshots (its salvage) and then writes the work tree, under the same lock
    hold: neither what it found before writing nor a scan taken before it is the tree now."""
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = SequencedSnapshotter(workspace)
    target = take_checkpoint(run, snapshotter, episode="manual", gates_green=(), label="before")
    (repo / "abandoned.txt").write_text("work the rollback takes away\n")
    since = time.monotonic()
    before = snapshotter.take_locked()  # begun after ``since``, but the rollback comes after it
    assert "abandoned.txt" in _files(snapshotter, before.tree)
    rollback(run, target, snapshotter=snapshotter)

    fresh = take_fresh(snapshotter, since, "a check")
    assert fresh.tree == target.tree
    assert "abandoned.txt" not in _files(snapshotter, fresh.tree)


def test_a_plain_snapshotter_takes_a_new_snapshot(repo: Path) -> None:
    snapshotter = Snapshotter(Workspace.find(repo))
    since = time.monotonic()
    first = snapshotter.take_locked()
    (repo / "new.txt").write_text("x\n")
    # No record of when its scans began: it cannot share, so it looks again.
    assert take_fresh(snapshotter, since, "a check").tree != first.tree


# --- steps ------------------------------------------------------------------------------------


async def test_a_step_shares_a_scan_begun_after_its_settle_and_no_older_one(repo: Path) -> None:
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = SequencedSnapshotter(workspace)
    steps: list[Any] = []
    keeper = StepKeeper(
        run,
        snapshotter,
        emit=lambda event: steps.append(event.record_),  # type: ignore[attr-defined]
        tail=lambda: [],
        attempt=lambda: 1,
    )
    snapshotter.take_locked()  # an older scan: before the edit below settled
    (repo / "one.txt").write_text("1\n")
    keeper.request()
    await keeper.idle()
    assert "one.txt" in _files(snapshotter, steps[-1].tree)

    (repo / "two.txt").write_text("2\n")
    keeper.request()
    # A gate's end check scans before the keeper's worker gets to run: that scan is the step.
    checked = snapshotter.take_locked()
    scans = _scans(snapshotter)
    await keeper.idle()
    assert steps[-1].tree == checked.tree and _scans(snapshotter) == scans
    assert "two.txt" in _files(snapshotter, checked.tree)


# --- the evaluator ----------------------------------------------------------------------------


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _evaluator(repo: Path, gates: list[dict[str, Any]]) -> tuple[Evaluator, list[Event]]:
    data = {
        "run": {"prompt": "build it", "agent": ["true"]},
        "gates": {"jobs": len(gates)},
        "gate": gates,
        "episode": [{"name": "all", "goal": "all", "gates": [g["name"] for g in gates]}],
    }
    contract = parse_contract(tomli_w.dumps(data), repo / "paella.toml", default_name="t")
    workspace = Workspace.find(repo)
    snapshotter = SequencedSnapshotter(workspace)
    # A live watcher that reports nothing: every edit below is one it missed or has not settled.
    snapshotter.changes.follow()
    events: list[Event] = []
    evaluator = Evaluator(
        run=RunStore(workspace).create(contract, manual=False),
        contract=contract,
        snapshotter=snapshotter,
        emit=events.append,
    )
    return evaluator, events


async def test_an_edit_landing_under_a_running_gate_makes_only_it_stale(
    repo: Path, tmp_path: Path
) -> None:
    """Gate "quick" ends before the edit; gate "slow" is running when it lands (it waits for the
    test's go). The slow gate's check must see the edit although the quick one's check scanned
    a moment before, and no watcher reported it."""
    go = tmp_path / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)"
    evaluator, events = _evaluator(
        repo,
        [{"name": "quick", "cmd": _py("pass")}, {"name": "slow", "cmd": _py(wait)}],
    )
    try:
        verdict = asyncio.create_task(evaluator.evaluate("start"))
        while not any(isinstance(e, GateFinished) and e.result.gate == "quick" for e in events):
            await asyncio.sleep(0.01)
        assert any(isinstance(e, GateStarted) and e.gate == "slow" for e in events)
        (repo / "edit.txt").write_text("landed while slow ran\n")
        go.write_text("")
        finished = await verdict
        stale = {e.result.gate: e.stale for e in events if isinstance(e, GateFinished)}
        assert stale == {"quick": False, "slow": True}
        assert finished.stale and finished.complete_episodes == 0
        await evaluator.idle()
        # The edit is judged by the evaluation queued for the moved tree, green this time.
        last = [e for e in events if isinstance(e, EvaluationFinished)][-1]
        assert not last.stale and last.complete_episodes == 1 and last.tree != finished.tree
    finally:
        await evaluator.close()


async def test_gates_that_end_together_share_their_check_and_an_edit_still_counts(
    repo: Path, tmp_path: Path
) -> None:
    """Four gates wait for one go; one of them edits the tree just before it: every gate was
    running when the edit landed, so every one is stale, however their checks were shared."""
    go = tmp_path / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)"
    gates = [{"name": f"g{i}", "cmd": _py(wait)} for i in range(4)]
    evaluator, events = _evaluator(repo, gates)
    snapshotter = evaluator._snapshotter
    assert isinstance(snapshotter, SequencedSnapshotter)
    try:
        verdict = asyncio.create_task(evaluator.evaluate("start"))
        while sum(isinstance(e, GateStarted) for e in events) < 4:
            await asyncio.sleep(0.01)
        scans = _scans(snapshotter)
        (repo / "edit.txt").write_text("landed while all four ran\n")
        go.write_text("")
        finished = await verdict
        assert [e.stale for e in events if isinstance(e, GateFinished)] == [True] * 4
        assert finished.stale
        # At most one scan per gate end; never fewer than one after the last gate ended.
        assert 1 <= _scans(snapshotter) - scans <= 4
    finally:
        await evaluator.close()


async def test_an_evaluation_asked_after_an_edit_never_shares_an_older_scan(repo: Path) -> None:
    """A pass with one gate: its own scan and its end check; an evaluation asked after an edit
    the watcher never reported takes a new scan (the check's began before the edit)."""
    evaluator, events = _evaluator(repo, [{"name": "ok", "cmd": _py("pass")}])
    snapshotter = evaluator._snapshotter
    assert isinstance(snapshotter, SequencedSnapshotter)
    try:
        first = await evaluator.evaluate("start")
        assert not first.stale and snapshotter.scans["full"] == 2  # the pass's, the check's
        (repo / "after.txt").write_text("written after the check\n")
        second = await evaluator.evaluate("asked for", force=True)
        assert second.tree != first.tree and "after.txt" in _files(snapshotter, second.tree)
        assert [e.stale for e in events if isinstance(e, GateFinished)] == [False, False]
    finally:
        await evaluator.close()


async def test_a_pass_the_tree_moved_under_is_judged_again_on_the_scan_that_saw_it(
    repo: Path,
) -> None:
    """The gate writes a file the first time it runs: its check's scan finds the moved tree, and
    the evaluation queued for it judges that scan (no scan of its own); then its own gate's check
    scans once more."""
    bump = "import pathlib; p = pathlib.Path('n.txt'); p.read_text() or p.write_text('x')"
    (repo / "n.txt").write_text("")
    evaluator, events = _evaluator(repo, [{"name": "bump", "cmd": _py(bump)}])
    snapshotter = evaluator._snapshotter
    assert isinstance(snapshotter, SequencedSnapshotter)
    try:
        first = await evaluator.evaluate("start")
        assert first.stale
        checked = snapshotter._fresh
        assert checked is not None
        full = snapshotter.scans["full"]
        await evaluator.idle()
        finished = [e for e in events if isinstance(e, EvaluationFinished)]
        assert [e.stale for e in finished] == [True, False]
        assert finished[1].tree == checked[1].tree != first.tree
        assert (repo / "n.txt").read_text() == "x"
        # The second pass shared the first one's check; its own gate's check scanned once.
        assert snapshotter.scans["full"] == full + 1
    finally:
        await evaluator.close()
