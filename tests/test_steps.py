"""Steps on their own: the ``[steps]`` contract keys, the step records and refs, and pruning after
``[steps] keep`` (checkpoints never pruned), with real repositories and the real command."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import GitRunner, run_paella_in_process
from test_contract import MINIMAL, problems_of, write

from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import DEFAULT_STEPS_KEEP
from paella_tui.supervisor.run.ledger import Ledger
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import (
    StepKeeper,
    StepRecord,
    find,
    prune_expired,
    records,
    take_step,
)
from paella_tui.supervisor.store.workspace import Workspace


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The commands through ``cli.main`` in the test process (``run_paella_in_process``): these
    tests check what ``steps`` and ``rollback`` say, not how the process starts."""
    return run_paella_in_process


def test_steps_keys_default_and_parse(tmp_path: Path) -> None:
    plain = load_contract(write(tmp_path, MINIMAL))
    assert plain.steps.keep == DEFAULT_STEPS_KEEP == 7 * 86400
    assert plain.steps.link == ()
    given = load_contract(
        write(
            tmp_path, MINIMAL + '\n[steps]\nkeep = "2h30m"\nlink = [".venv", "web/node_modules/"]\n'
        )
    )
    assert given.steps.keep == 9000
    assert given.steps.link == (".venv", "web/node_modules")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('keep = "soon"', "paella.toml:14: [steps] → keep:"),
        ("keep = -1", "paella.toml:14: [steps] → keep:"),
        ('link = ".venv"', '[steps] → link: expected an array of strings, got ".venv"'),
        ('link = ["/usr/lib"]', "'/usr/lib' must be a path inside the workspace"),
        ('link = ["../elsewhere"]', "'../elsewhere' must be a path inside the workspace"),
        ('link = [".git/hooks"]', "'.git/hooks' must be a path inside the workspace"),
        ('link = [""]', "item 1 is an empty string"),
        ('kep = "1d"', "[steps] → kep: unknown key (did you mean 'keep'?)"),
    ],
)
def test_bad_steps_keys_are_one_clear_problem(tmp_path: Path, extra: str, expected: str) -> None:
    error = problems_of(tmp_path, MINIMAL + f"\n[steps]\n{extra}\n")
    assert expected in str(error)


def test_a_stray_steps_key_at_the_top_is_pointed_to_its_table(tmp_path: Path) -> None:
    error = problems_of(tmp_path, 'keep = "1d"\n' + MINIMAL)
    assert "did you mean to put it under [steps]?" in str(error)


def _repo_run(repo: Path) -> tuple[Workspace, Run, Snapshotter]:
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    return workspace, run, Snapshotter(workspace)


def test_a_step_is_a_ref_and_a_record_with_its_files_and_lines(repo: Path, git: GitRunner) -> None:
    _workspace, run, snapshotter = _repo_run(repo)
    first = take_step(run, snapshotter.take_locked().tree, previous=None)
    assert first is not None and first.n == 0 and first.parent_tree is None
    assert take_step(run, first.tree, previous=first) is None, "no change, no step"
    (repo / "README.md").write_text("hello\nworld\n")
    (repo / "untracked.txt").write_text("a\nb\nc\n")
    second = take_step(
        run, snapshotter.take_locked().tree, previous=first, tail=["x"] * 9, attempt=2
    )
    assert second is not None
    assert second.n == 1 and second.name == "step:1"
    assert second.files == (("README.md", 1, 0), ("untracked.txt", 3, 0))
    assert (second.added, second.removed, second.files_total) == (4, 0, 2)
    assert second.tail == ("x",) * 5 and second.attempt == 2
    assert git(repo, "rev-parse", second.ref) == second.commit
    assert git(repo, "rev-parse", f"{second.commit}^{{tree}}") == second.tree
    # The step's parent is the HEAD it sat on: the agent's commits stay reachable.
    assert git(repo, "rev-parse", f"{second.commit}^") == git.head(repo)
    assert records(run) == [first, second]
    assert find(run, "step:1") == second
    assert StepRecord.from_ledger({**second.to_json(), "kind": "step"}) == second
    # Nothing of the user's moved.
    assert git(repo, "status", "--porcelain") == " M README.md\n?? untracked.txt"


def test_steps_go_on_after_the_step_before_was_pruned(repo: Path, git: GitRunner) -> None:
    """An agent deletes paella's refs and runs `git gc --prune=now`: the last step's tree is
    gone. The next step starts the line again (as the first does) and the ones after it are
    kept as usual (each failed before, on the missing tree, for the rest of the run)."""
    _workspace, run, snapshotter = _repo_run(repo)
    (repo / "only-in-a-step.txt").write_text("soon pruned\n")
    first = take_step(run, snapshotter.take_locked().tree, previous=None)
    assert first is not None
    git(repo, "update-ref", "-d", first.ref)
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "cat-file", "-e", first.tree], cwd=repo).returncode != 0
    (repo / "only-in-a-step.txt").write_text("after the gc\n")
    second = take_step(run, snapshotter.take_locked().tree, previous=first)
    assert second is not None and second.parent_tree is None and second.files == ()
    (repo / "README.md").write_text("and on\n")
    third = take_step(run, snapshotter.take_locked().tree, previous=second)
    assert third is not None and third.parent_tree == second.tree
    assert third.files == (("README.md", 1, 1),)


def _ended_run(workspace: Workspace, snapshotter: Snapshotter, repo: Path, keep: str) -> Run:
    (repo / "paella.toml").write_text(MINIMAL + f'\n[steps]\nkeep = "{keep}"\n')
    contract = load_contract(repo / "paella.toml")
    run = RunStore(workspace).create(contract, manual=False)
    step = take_step(run, snapshotter.take_locked().tree, previous=None)
    (repo / f"{run.run_id}.txt").write_text("change\n")
    take_step(run, snapshotter.take_locked().tree, previous=step)
    take_checkpoint(run, snapshotter, label="kept forever")
    run.ledger.append("run-stopped", reason="test")
    return run


def test_steps_are_pruned_after_keep_and_checkpoints_never(repo: Path, git: GitRunner) -> None:
    workspace = Workspace.find(repo)
    snapshotter = Snapshotter(workspace)
    short = _ended_run(workspace, snapshotter, repo, "1h")
    long = _ended_run(workspace, snapshotter, repo, "7d")
    running = RunStore(workspace).create(None, manual=True)
    take_step(running, snapshotter.take_locked().tree, previous=None)
    running.ledger.append("agent-started", attempt=1, pid=1, create_time=0.0, argv=[])
    store = RunStore(workspace)

    def refs(run: Run, kind: str) -> list[str]:
        out = git(repo, "for-each-ref", "--format=%(refname)", f"{run.ref_prefix}/{kind}/")
        return out.split()

    assert prune_expired(store) == [], "nothing has been kept long enough yet"
    later = datetime.now(UTC) + timedelta(hours=2)
    assert prune_expired(store, now=later) == [(short.run_id, 2)]
    assert refs(short, "steps") == [] and len(refs(short, "checkpoints")) == 1
    assert len(refs(long, "steps")) == 2
    much_later = datetime.now(UTC) + timedelta(days=8)
    assert prune_expired(store, now=much_later) == [(long.run_id, 2)]
    assert len(refs(long, "checkpoints")) == 1
    assert len(refs(running, "steps")) == 1, "a run that has not ended keeps its steps"
    pruned = [r for r in short.ledger.read().records if r["kind"] == "steps-pruned"]
    assert pruned and pruned[0]["refs"] == 2


def test_paella_steps_lists_and_refuses_pruned_targets(repo: Path, git: GitRunner, paella) -> None:
    workspace = Workspace.find(repo)
    snapshotter = Snapshotter(workspace)
    run = _ended_run(workspace, snapshotter, repo, "1s")
    out = paella(repo, "steps", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["schema_version"] == 1 and [s["n"] for s in data["steps"]] == [0, 1]
    assert data["steps"][1]["files"] == [{"path": f"{run.run_id}.txt", "added": 1, "removed": 0}]
    prune_expired(RunStore(workspace), now=datetime.now(UTC) + timedelta(minutes=1))
    refused = paella(repo, "rollback", "step:1", "--yes")
    assert refused.returncode == 2
    assert "were pruned" in refused.stderr and "Traceback" not in refused.stderr
    assert "(refs pruned)" in paella(repo, "steps").stdout


def _keeper(repo: Path) -> tuple[SequencedSnapshotter, StepKeeper, list[StepRecord]]:
    """A step keeper of a manual run in ``repo``, and the steps it records, in order."""
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = SequencedSnapshotter(workspace)
    taken: list[StepRecord] = []
    keeper = StepKeeper(
        run,
        snapshotter,
        emit=lambda event: taken.append(event.record_),  # type: ignore[attr-defined]
        tail=lambda: ["working"],
        attempt=lambda: 1,
    )
    return snapshotter, keeper, taken


async def test_a_tree_heard_of_late_never_makes_a_step_go_backwards(repo: Path) -> None:
    """The gates' snapshot and the keeper's run in threads; an older tree delivered after a newer
    one was kept is dropped, while a real return to an earlier state is a step."""
    snapshotter, keeper, taken = _keeper(repo)
    older = snapshotter.take_locked().tree
    (repo / "README.md").write_text("newer\n")
    newer = snapshotter.take_locked().tree
    keeper.note(newer)
    keeper.note(older)  # the evaluation that saw the older tree reports late
    await keeper.idle()
    assert [s.tree for s in taken] == [newer]
    (repo / "README.md").write_text("hello\n")  # back to the first state: a real change
    keeper.request()
    await keeper.idle()
    assert [s.tree for s in taken] == [newer, older]
    assert [s.n for s in taken] == [0, 1]


async def test_a_step_still_being_kept_when_the_run_ends_is_never_recorded_after_it(
    repo: Path,
) -> None:
    """The run's verdict is recorded once the keeper is closed: a step kept by then is
    recorded before it; one still waiting for its snapshot is dropped, even when the snapshot
    finishes later, and no step is taken after the close."""
    snapshotter, keeper, taken = _keeper(repo)
    keeper.request()
    await keeper.idle()
    assert [s.n for s in taken] == [0]
    (repo / "README.md").write_text("a change the step keeper is slow to snapshot\n")
    with snapshotter.locked("a test holding the snapshot lock"):
        # The keeper's snapshot waits for the lock (in its thread) past the close's wait.
        keeper.request()
        await asyncio.sleep(0.05)
        await keeper.close(wait_s=0.2)
    # The lock is free: the dropped snapshot finishes in its thread; taking the lock again
    # waits for that, then the event loop gets every chance to deliver a late step.
    snapshotter.take_locked()
    for _ in range(5):
        await asyncio.sleep(0.02)
    keeper.request()
    await keeper.idle()
    assert [s.n for s in taken] == [0]
    assert keeper.last is not None and keeper.last.n == 0


def test_pruning_follows_the_runs_folded_end_and_never_reads_whole_ledgers(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped run that was resumed has not ended; a "done" forged after a break of the hash
    chain ends nothing; a run that ended is pruned. The ends come from each run's kept fold
    (new records only): reading a whole old ledger at every start would cost its history."""
    workspace = Workspace.find(repo)
    snapshotter = Snapshotter(workspace)
    resumed = _ended_run(workspace, snapshotter, repo, "1s")
    resumed.ledger.append("resumed", paella_pid=1)
    forged = RunStore(workspace).create(None, manual=True)
    take_step(forged, snapshotter.take_locked().tree, previous=None)
    forged.ledger.append("agent-started", attempt=1, pid=1, create_time=0.0, argv=[])
    with forged.ledger.path.open("a") as ledger:  # the agent writes a "done" of its own
        ledger.write(json.dumps({"kind": "run-done", "t": "2026-01-01T00:00:00Z", "gates": []}))
        ledger.write("\n")
    ended = _ended_run(workspace, snapshotter, repo, "1s")

    def whole_read(_self: object) -> None:
        raise AssertionError("a whole ledger was read")

    monkeypatch.setattr(Ledger, "read", whole_read)
    later = datetime.now(UTC) + timedelta(minutes=1)
    assert prune_expired(RunStore(workspace), now=later) == [(ended.run_id, 2)]
