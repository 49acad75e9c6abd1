"""Drift found in real repositories: protected files, scope, the contract, stalls, claims of done
and rewound history, each reported once with a message that says what it means."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import GitRunner

from paella_tui.supervisor.contract.loader import parse_contract
from paella_tui.supervisor.judge.drift import DriftTracker
from paella_tui.supervisor.judge.frozen import FrozenFiles
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

CONTRACT = """\
[run]
prompt = "Build the ledger."
agent = "true"
stall_after = "15m"
scope = ["src/**", "tests/**"]

[[gate]]
name = "unit"
cmd = "pytest -q"

[[episode]]
name = "ingest"
gates = ["unit"]

[[constraint]]
text = "The public function ingest(event) keeps its signature."
protect = ["tests/**"]
"""


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def snapshot(ws: Workspace) -> str:
    snap = Snapshotter(ws)
    with snap.locked():
        return snap.take().tree


def tracker_for(repo: Path, git: GitRunner, contract_text: str = CONTRACT) -> DriftTracker:
    """A tracker for a run starting now, with src/ and tests/ committed."""
    write(repo, "paella.toml", contract_text)
    write(repo, "src/ledger.py", "def ingest(event): ...\n")
    write(repo, "tests/test_ledger.py", "def test_ingest(): ...\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    ws = Workspace.find(repo)
    contract = parse_contract(contract_text, repo / "paella.toml", default_name="ledger")
    return DriftTracker(
        workspace=ws,
        contract=contract,
        start_tree=snapshot(ws),
        contract_sha256=contract.sha256,
    )


def test_nothing_for_an_unchanged_tree_or_allowed_changes(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    assert tracker.check_tree(tracker.start_tree) == []
    write(repo, "src/ledger.py", "def ingest(event): return 1\n")
    write(repo, "src/new/module.py", "x = 1\n")
    assert tracker.check_tree(snapshot(tracker.workspace)) == []
    assert tracker.check_stall(last_activity=100.0, now=100.0 + 899) == []
    assert tracker.check_claimed_done(0, []) == []
    assert tracker.check_claimed_done(1, ["unit"]) == []
    assert tracker.check_claimed_done(None, ["unit"]) == []
    assert tracker.check_history(None) == []
    assert tracker.check_history(git.head(repo)) == []


def test_protected_file_is_reported_once_naming_path_and_constraint(
    repo: Path, git: GitRunner
) -> None:
    tracker = tracker_for(repo, git)
    write(repo, "tests/test_ledger.py", "def test_ingest(): assert True\n")
    events = tracker.check_tree(snapshot(tracker.workspace))
    assert [(e.drift, e.path) for e in events] == [("protected", "tests/test_ledger.py")]
    message = events[0].message
    assert "tests/test_ledger.py" in message
    assert "The public function ingest(event) keeps its signature." in message
    assert "roll back" in message

    # Changed again: the same fact, not reported again.
    write(repo, "tests/test_ledger.py", "def test_ingest(): assert 1\n")
    assert tracker.check_tree(snapshot(tracker.workspace)) == []

    # Reverted, then changed once more: a new fact.
    git(repo, "checkout", "--", "tests/test_ledger.py")
    assert tracker.check_tree(snapshot(tracker.workspace)) == []
    write(repo, "tests/test_ledger.py", "# gone\n")
    events = tracker.check_tree(snapshot(tracker.workspace))
    assert [(e.drift, e.path) for e in events] == [("protected", "tests/test_ledger.py")]


def test_out_of_scope_change_is_reported_once_and_paella_toml_is_not_scope(
    repo: Path, git: GitRunner
) -> None:
    tracker = tracker_for(repo, git)
    write(repo, "docs/notes.md", "notes\n")
    write(repo, "paella.toml", CONTRACT.replace("15m", "20m"))
    events = tracker.check_tree(snapshot(tracker.workspace))
    assert sorted((e.drift, e.path) for e in events) == [
        ("contract", "paella.toml"),
        ("scope", "docs/notes.md"),
    ]
    scope = next(e for e in events if e.drift == "scope")
    assert "docs/notes.md" in scope.message and "src/**, tests/**" in scope.message
    contract = next(e for e in events if e.drift == "contract")
    assert "frozen" in contract.message and "new run" in contract.message

    write(repo, "docs/notes.md", "more notes\n")
    write(repo, "paella.toml", CONTRACT.replace("15m", "25m"))
    assert tracker.check_tree(snapshot(tracker.workspace)) == []


def test_contract_restored_then_changed_again_is_reported_again(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    (repo / "paella.toml").unlink()
    events = tracker.check_tree(snapshot(tracker.workspace))
    assert [e.drift for e in events] == ["contract"]
    assert "deleted" in events[0].message
    write(repo, "paella.toml", CONTRACT)
    assert tracker.check_tree(snapshot(tracker.workspace)) == []
    write(repo, "paella.toml", CONTRACT + "\n# edited\n")
    assert [e.drift for e in tracker.check_tree(snapshot(tracker.workspace))] == ["contract"]


def test_many_out_of_scope_files_are_one_event(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    for i in range(6):
        write(repo, f"vendor/lib{i}.py", "x\n")
    events = tracker.check_tree(snapshot(tracker.workspace))
    assert len(events) == 1
    assert events[0].drift == "scope" and events[0].path is None
    assert "6 files" in events[0].message and "vendor/lib0.py" in events[0].message
    assert tracker.check_tree(snapshot(tracker.workspace)) == []


def test_no_scope_means_anywhere(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git, CONTRACT.replace('scope = ["src/**", "tests/**"]\n', ""))
    write(repo, "docs/notes.md", "notes\n")
    assert tracker.check_tree(snapshot(tracker.workspace)) == []


def test_stall_once_until_activity_resumes(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    assert tracker.check_stall(last_activity=100.0, now=100.0 + 899.9) == []
    events = tracker.check_stall(last_activity=100.0, now=100.0 + 900)
    assert [e.drift for e in events] == ["stall"]
    assert "15m" in events[0].message and "stuck" in events[0].message
    assert tracker.check_stall(last_activity=100.0, now=100.0 + 2000) == []
    # Activity resumed at 1500; quiet again long enough: a new stall.
    assert tracker.check_stall(last_activity=1500.0, now=1600.0) == []
    assert [e.drift for e in tracker.check_stall(last_activity=1500.0, now=2400.0)] == ["stall"]


def test_claimed_done_names_the_red_gates_once_per_attempt(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    events = tracker.check_claimed_done(0, ["unit", "privacy"], attempt=1)
    assert [e.drift for e in events] == ["claimed-done"]
    assert "unit, privacy" in events[0].message
    assert "Done is what the gates say" in events[0].message
    assert tracker.check_claimed_done(0, ["unit", "privacy"], attempt=1) == []
    again = tracker.check_claimed_done(0, ["unit"], attempt=2)
    assert [(e.drift, e.gate) for e in again] == [("claimed-done", "unit")]


def test_history_after_a_reset_past_the_checkpoint_commit(repo: Path, git: GitRunner) -> None:
    tracker = tracker_for(repo, git)
    write(repo, "src/ledger.py", "def ingest(event): return 2\n")
    git(repo, "commit", "-q", "-am", "episode 1")
    checkpoint_head = git.head(repo)
    assert checkpoint_head is not None
    write(repo, "src/ledger.py", "def ingest(event): return 3\n")
    git(repo, "commit", "-q", "-am", "after the checkpoint")
    assert tracker.check_history(checkpoint_head) == []

    git(repo, "reset", "-q", "--hard", "HEAD~2")
    events = tracker.check_history(checkpoint_head)
    assert [e.drift for e in events] == ["history"]
    message = events[0].message
    assert checkpoint_head[:7] in message and "main" in message
    assert "checkpoint and salvage refs still hold" in message
    assert tracker.check_history(checkpoint_head) == []

    # Back on a branch that holds the checkpoint: re-armed.
    git(repo, "reset", "-q", "--hard", checkpoint_head)
    assert tracker.check_history(checkpoint_head) == []
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    assert [e.drift for e in tracker.check_history(checkpoint_head)] == ["history"]


def test_history_is_silent_on_an_unborn_branch(tmp_path: Path, git: GitRunner) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo, "paella.toml", CONTRACT)
    ws = Workspace.find(repo)
    contract = parse_contract(CONTRACT, repo / "paella.toml", default_name="fresh")
    tracker = DriftTracker(
        workspace=ws, contract=contract, start_tree=snapshot(ws), contract_sha256=contract.sha256
    )
    assert tracker.check_history("0" * 40) == []


@pytest.mark.parametrize(
    "edit",
    ["add", "modify", "delete", "make executable", "file to symlink", "file to folder", "none"],
)
def test_the_paths_from_the_frozen_files_diff_are_the_ones_drift_finds_itself(
    repo: Path, git: GitRunner, edit: str
) -> None:
    """A verdict's tree was compared with the frozen (start) tree for the gates already: drift
    takes its paths from that comparison, and they are exactly what its own diff finds."""
    tracker = tracker_for(repo, git)
    ws = tracker.workspace
    target = repo / "src" / "ledger.py"
    if edit == "add":
        write(repo, "src/new.py", "new\n")
    elif edit == "modify":
        target.write_text("changed\n")
    elif edit == "delete":
        target.unlink()
    elif edit == "make executable":
        target.chmod(0o755)
    elif edit == "file to symlink":
        target.unlink()
        target.symlink_to("../README.md")
    elif edit == "file to folder":
        target.unlink()
        write(repo, "src/ledger.py/inner.py", "inner\n")
    tree = snapshot(ws)
    own = tracker._changed_paths(tree)  # no frozen files: drift's own diff
    frozen = FrozenFiles(ws, ["tests/**"], tracker.start_tree)
    tracker.frozen = frozen
    assert frozen.known_changes(tree) is None and tracker._changed_paths(tree) == own
    frozen.differing(tree)  # the gates' pass compares the trees (no git for the start tree)
    assert (frozen.known_changes(tree) is None) is (tree == tracker.start_tree)
    assert tracker._changed_paths(tree) == own
    assert bool(own) is (edit != "none")
