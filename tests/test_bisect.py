"""Steps, scratch trees and the bisect, through their Python API: real repositories, real gate
processes, every gate run counted by the gate itself (a line appended to a file outside the repo).

The history is built the way a run builds it: the work tree changes, the snapshot is taken with
the private index, the tree is kept as the next step. The user's work tree, index and HEAD are
captured byte for byte before each search and compared after it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GitRunner, capture_tree, make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.bisect import Bisection, known_results, last_good_step, max_runs
from paella_tui.supervisor.run.events import GateFinished, GateResult
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.scratch_tree import ScratchTree
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import StepRecord, records, take_step
from paella_tui.supervisor.store.workspace import Workspace

STEPS = 40
# One module-scoped history serves every test here: they run on one worker, so it is built once.
pytestmark = pytest.mark.xdist_group("bisect-history")


def sh_gate(name: str, script: str, *, retries: int = 0) -> Gate:
    """A gate running ``script`` with sh; it appends one line to $COUNTER each time it runs."""
    body = f'echo "$PAELLA_TREE" >> "$COUNTER"; {script}'
    return Gate(
        name=name,
        argv=("sh", "-c", body),
        cmd=body,
        timeout=20.0,
        retries=retries,
        paths=(),
    )


# The gate reads n.txt (the step number the history wrote) and fails from step $BREAK on.
NUMBERED = sh_gate("numbered", 'test "$(cat n.txt)" -lt "$BREAK"')


class History:
    """A repository whose run kept ``STEPS`` + 1 steps: step k wrote n.txt = k and notes/k.txt."""

    def __init__(self, root: Path, git: GitRunner) -> None:
        self.repo = make_repo(root / "repo", git)
        self.git = git
        self.workspace = Workspace.find(self.repo)
        self.run: Run = RunStore(self.workspace).create(None, manual=True)
        self.snapshotter = Snapshotter(self.workspace)
        self.counter = root / "runs.txt"
        previous: StepRecord | None = None
        for k in range(STEPS + 1):
            (self.repo / "n.txt").write_text(f"{k}\n")
            if k:
                (self.repo / "notes").mkdir(exist_ok=True)
                (self.repo / "notes" / f"{k}.txt").write_text(f"note {k}\n" * k)
            tree = self.snapshotter.take_locked().tree
            step = take_step(self.run, tree, previous=previous, tail=[f"agent line {k}"])
            assert step is not None
            previous = step
        self.steps = records(self.run)

    def runs(self) -> list[str]:
        """The trees the gate ran on, in order (from the gate's own lines)."""
        if not self.counter.exists():
            return []
        return self.counter.read_text().split()

    def user_state(self) -> tuple[object, ...]:
        """The user's work tree, index file, HEAD and branch, byte for byte."""
        index = (self.workspace.git_dir / "index").read_bytes()
        return (
            capture_tree(self.repo),
            index,
            self.git.head(self.repo),
            self.git.branch(self.repo),
        )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """One history for the module: building 41 real snapshots takes a while on a busy machine."""
    return History(tmp_path_factory.mktemp("history"), GitRunner())


@pytest.fixture
def env(history: History) -> Iterator[dict[str, str]]:
    """Set $COUNTER (emptied) for the gates; tests set $BREAK."""
    saved = {k: os.environ.get(k) for k in ("COUNTER", "BREAK")}
    history.counter.unlink(missing_ok=True)
    os.environ["COUNTER"] = str(history.counter)
    yield os.environ  # type: ignore[misc]
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def search(history: History, gate: Gate, n: int, known: dict[str, list[str]]) -> Bisection:
    return Bisection(
        run=history.run,
        gate=gate,
        steps=history.steps[: n + 1],
        known=known,
        slots=asyncio.Semaphore(2),
        record=lambda fields: history.run.ledger.append("bisect-probe", **fields),
    )


def ends(history: History, n: int, brk: int) -> dict[str, list[str]]:
    """What the live gates knew: green at step 0, red at step n (as a regression is found)."""
    return {
        history.steps[0].tree: ["pass" if brk > 0 else "fail"],
        history.steps[n].tree: ["pass" if n < brk else "fail"],
    }


@pytest.mark.parametrize(("n", "brk"), [(30, 17), (30, 1), (30, 30), (30, 16), (7, 4), (2, 2)])
def test_bisect_names_the_breaking_step_within_log2_plus_one_runs(
    history: History, env: dict[str, str], n: int, brk: int
) -> None:
    env["BREAK"] = str(brk)
    before = history.user_state()
    found = asyncio.run(search(history, NUMBERED, n, ends(history, n, brk)).find())
    assert found.verdict == "found", found.message
    assert found.step == brk
    assert found.last_green_step == brk - 1
    assert found.runs == len(history.runs()), "the runs counted are the gate's own"
    assert found.runs <= max_runs(n)
    assert max_runs(30) == 6
    # The breaking step's files come from the step record: n.txt and its note.
    assert {p for p, _a, _r in found.files} == {"n.txt", f"notes/{brk}.txt"}
    assert history.user_state() == before, "a bisect touched the user's work tree, index or HEAD"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_break_in_any_range_is_found_within_the_bound(
    history: History, env: dict[str, str], data: st.DataObject
) -> None:
    n = data.draw(st.integers(min_value=2, max_value=STEPS), label="steps")
    brk = data.draw(st.integers(min_value=1, max_value=n), label="break")
    # Some intermediate steps already judged by the live gates (a real run judges many).
    judged = data.draw(st.sets(st.integers(min_value=1, max_value=n - 1), max_size=6))
    env["BREAK"] = str(brk)
    history.counter.unlink(missing_ok=True)
    known = ends(history, n, brk)
    for k in judged:
        known[history.steps[k].tree] = ["pass" if k < brk else "fail"]
    known_before = set(known)
    found = asyncio.run(search(history, NUMBERED, n, known).find())
    assert (found.verdict, found.step) == ("found", brk), found.message
    assert found.runs == len(history.runs()) <= max_runs(n)
    # Nothing known was run again but the one confirmation of the breaking step.
    reruns = [t for t in history.runs() if t in known_before]
    assert reruns in ([], [history.steps[brk].tree])


def test_without_known_ends_it_judges_them_itself(history: History, env: dict[str, str]) -> None:
    env["BREAK"] = "9"
    found = asyncio.run(search(history, NUMBERED, 20, {}).find())
    assert (found.verdict, found.step) == ("found", 9)
    assert found.runs <= max_runs(20) + 2  # the two ends, then the search


def test_results_are_cached_by_gate_definition_and_tree(
    history: History, env: dict[str, str]
) -> None:
    env["BREAK"] = "12"
    # Other tests bisected this history with other $BREAKs: only this test's probes count.
    start = len(history.run.ledger.read().records)
    first = asyncio.run(search(history, NUMBERED, 30, ends(history, 30, 12)).find())
    assert first.step == 12
    ledger = history.run.ledger.read().records[start:]
    known = known_results(ledger, NUMBERED, frozen=NUMBERED)
    history.counter.unlink()
    again = asyncio.run(search(history, NUMBERED, 30, known).find())
    assert again.step == 12
    assert len(history.runs()) == 1, "only the confirmation of the breaking step runs again"
    # Another definition of the gate (a different command) shares nothing.
    other = sh_gate("numbered", 'test "$(cat n.txt)" -lt "$BREAK" && true')
    assert known_results(ledger, other, frozen=NUMBERED) == {}


def test_a_gate_that_fails_the_first_time_on_a_tree_is_called_flaky(
    history: History, env: dict[str, str], tmp_path: Path
) -> None:
    # Fails the first time it sees a tree, passes after: "pass and fail on one tree".
    seen = tmp_path / "seen"
    seen.mkdir()
    flaky = sh_gate(
        "flaky",
        f'if [ -e "{seen}/$PAELLA_TREE" ]; then exit 0; fi; touch "{seen}/$PAELLA_TREE"; exit 1',
    )
    before = history.user_state()
    found = asyncio.run(search(history, flaky, 30, {history.steps[0].tree: ["pass"]}).find())
    assert found.verdict == "flaky", found
    assert found.step is None
    assert "flaky" in found.message
    assert history.user_state() == before


def test_a_gate_that_passes_only_on_its_retry_is_flaky(
    history: History, env: dict[str, str], tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    script = (
        f'if [ -e "{seen}/$PAELLA_TREE" ]; then exit 0; fi; touch "{seen}/$PAELLA_TREE"; exit 1'
    )
    retrying = sh_gate("retrying", script, retries=1)
    found = asyncio.run(search(history, retrying, 30, {history.steps[0].tree: ["pass"]}).find())
    assert found.verdict == "flaky"
    assert "retry" in found.message


def test_known_pass_and_fail_on_one_tree_is_flaky_without_running(
    history: History, env: dict[str, str]
) -> None:
    tree = history.steps[5].tree
    known = {history.steps[0].tree: ["pass"], tree: ["pass", "fail"]}
    found = asyncio.run(search(history, NUMBERED, 30, known).find())
    assert found.verdict == "flaky"
    assert history.runs() == []


def test_red_from_the_start_and_not_reproduced(history: History, env: dict[str, str]) -> None:
    env["BREAK"] = "0"
    red = asyncio.run(search(history, NUMBERED, 10, {}).find())
    assert red.verdict == "red-from-start"
    env["BREAK"] = "99"
    green = asyncio.run(search(history, NUMBERED, 10, {}).find())
    assert green.verdict == "not-reproduced"
    assert "passes on step 10" in green.message


def test_a_gate_that_cannot_run_in_the_scratch_tree_is_an_error_not_a_step(
    history: History, env: dict[str, str]
) -> None:
    missing = Gate(
        name="missing",
        argv=("./no-such-script.sh",),
        cmd="./no-such-script.sh",
        timeout=5.0,
        retries=0,
        paths=(),
    )
    known = {history.steps[0].tree: ["pass"], history.steps[10].tree: ["fail"]}
    found = asyncio.run(search(history, missing, 10, known).find())
    assert found.verdict == "error"
    assert "[steps] link" in found.message


def test_last_good_step_checks_every_base_gate(history: History, env: dict[str, str]) -> None:
    env["BREAK"] = "14"
    start = len(history.run.ledger.read().records)
    point = asyncio.run(search(history, NUMBERED, 30, ends(history, 30, 14)).find())
    # A second base gate that broke earlier (at step 12) rules out steps 12 and 13.
    other = sh_gate("other", 'test "$(cat n.txt)" -lt 12')
    ledger = history.run.ledger.read().records[start:]
    step = asyncio.run(
        last_good_step(
            history.run,
            [NUMBERED, other],
            history.steps,
            [point],
            known={
                "numbered": known_results(ledger, NUMBERED, frozen=NUMBERED),
                "other": {},
            },
            tries=5,
        )
    )
    assert step is not None and step.n == 11


def test_live_results_count_only_with_the_same_definition(history: History) -> None:
    tree = history.steps[3].tree
    finished = GateFinished(result=GateResult(gate="numbered", status="pass", tree=tree))
    ledger = [{"kind": "gate-finished", **finished.record()}]
    assert known_results(ledger, NUMBERED, frozen=NUMBERED) == {tree: ["pass"]}
    changed = Gate(**{**NUMBERED.__dict__, "timeout": 99.0})
    assert known_results(ledger, changed, frozen=NUMBERED) == {}
    stale = [{**ledger[0], "stale": True}]
    assert known_results(stale, NUMBERED, frozen=NUMBERED) == {}


# --- scratch trees ----------------------------------------------------------------------------


def test_a_scratch_tree_holds_each_tree_exactly_and_links_ignored_paths(
    tmp_path: Path, git: GitRunner
) -> None:
    repo = make_repo(tmp_path / "repo", git)
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (repo / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "lf.txt").write_bytes(b"a\nb\n")
    # A checkout would write these files with CRLF; the scratch tree holds the snapshot's bytes.
    (repo / ".gitattributes").write_text("*.txt text eol=crlf\n")
    os.symlink("run.sh", repo / "link")
    workspace = Workspace.find(repo)
    snapshotter = Snapshotter(workspace)
    first = snapshotter.take_locked().tree
    (repo / "run.sh").unlink()
    (repo / "sub").mkdir()
    (repo / "sub" / "new.txt").write_text("new\n")
    second = snapshotter.take_locked().tree
    before = capture_tree(repo)
    index = (workspace.git_dir / "index").read_bytes()
    with ScratchTree(workspace, links=(".venv",), parent=tmp_path) as scratch:
        assert not scratch.path.is_relative_to(repo)
        for tree in (first, second, first):
            scratch.checkout(tree)
            got = capture_tree(scratch.path, exclude=(".venv",))
            assert got == {path: entry for path, entry in _tree_entries(git, repo, tree).items()}
            assert (scratch.path / ".venv").is_symlink()
            assert (scratch.path / ".venv" / "bin" / "tool").read_text().startswith("#!")
        # The bytes the file had on disk, though its attributes would convert them on checkout.
        assert (scratch.path / "lf.txt").read_bytes() == b"a\nb\n"
        area = scratch.path.parent
    assert not area.exists()
    assert capture_tree(repo) == before
    assert (workspace.git_dir / "index").read_bytes() == index
    assert (repo / ".venv" / "bin" / "tool").exists(), "closing never follows a link"


def _tree_entries(git: GitRunner, repo: Path, tree: str) -> dict[str, tuple[object, ...]]:
    """What capture_tree would say of a checkout of ``tree``."""
    out: dict[str, tuple[object, ...]] = {}
    for path, (mode, content) in git.tree(repo, tree).items():
        if mode == "120000":
            assert isinstance(content, bytes)
            out[path] = ("link", content.decode())
        else:
            out[path] = ("file", content, mode == "100755")
    return out


# The protected check fails from step REAL_BREAK on (n.txt at 6 or more); the agent weakens it (the
# check file, protected by the contract, becomes `exit 0`) in step WEAKENED, before it breaks.
WEAKENED, REAL_BREAK, LAST = 3, 6, 9
CHECK = 'echo "$PAELLA_STEP" >> "$COUNTER"; test "$(cat n.txt)" -lt 6\n'
PROTECTING_CONTRACT = """\
[run]
prompt = "count"
agent = "true"

[[gate]]
name = "check"
cmd = ["sh", "checks/check.sh"]
timeout = "20s"

[[episode]]
name = "count"
goal = "counting"
gates = ["check"]

[[constraint]]
text = "the checks are the spec"
protect = ["checks/**"]
"""


class WeakenedHistory:
    """A run with a frozen contract that protects ``checks/**``: step k writes n.txt = k, and
    step WEAKENED also rewrites the protected check to pass whatever the tree holds."""

    def __init__(self, root: Path, git: GitRunner) -> None:
        from paella_tui.supervisor.contract.loader import load_contract

        self.repo = make_repo(root / "repo", git)
        (self.repo / "checks").mkdir()
        (self.repo / "checks" / "check.sh").write_text(CHECK)
        (self.repo / "paella.toml").write_text(PROTECTING_CONTRACT)
        (self.repo / "n.txt").write_text("0\n")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "checks")
        self.workspace = Workspace.find(self.repo)
        self.contract = load_contract(self.repo / "paella.toml")
        self.run: Run = RunStore(self.workspace).create(self.contract, manual=False)
        snapshotter = Snapshotter(self.workspace)
        previous: StepRecord | None = None
        for k in range(LAST + 1):
            (self.repo / "n.txt").write_text(f"{k}\n")
            if k == WEAKENED:
                (self.repo / "checks" / "check.sh").write_text(
                    'echo "$PAELLA_STEP" >> "$COUNTER"\n'
                )
            tree = snapshotter.take_locked().tree
            if k == 0:
                self.run.ledger.append("run-tree", tree=tree)  # what the run freezes
            step = take_step(self.run, tree, previous=previous, tail=[f"agent line {k}"])
            assert step is not None
            previous = step
        self.steps = records(self.run)


@pytest.mark.parametrize("how", ["engine", "paella bisect"])
def test_a_weakened_protected_check_does_not_move_where_it_broke(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from conftest import run_paella_in_process

    from paella_tui.supervisor.judge.frozen import FrozenFiles
    from paella_tui.supervisor.run.state_store import StateStore

    h = WeakenedHistory(tmp_path, git)
    counter = tmp_path / "runs.txt"
    monkeypatch.setenv("COUNTER", str(counter))
    gate = h.contract.gate("check")
    # The live gates knew the start green and the newest step red (judged with the frozen check).
    known = {h.steps[0].tree: ["pass"], h.steps[LAST].tree: ["fail"]}
    if how == "engine":
        state = StateStore(h.run.ledger.path).load().state
        files = FrozenFiles.of_state(h.run, h.contract, state)
        assert files is not None and files.tree == h.steps[0].tree
        found = asyncio.run(
            Bisection(run=h.run, gate=gate, steps=h.steps, known=known, files=files).find()
        )
        assert (found.verdict, found.step, found.last_green_step) == (
            "found",
            REAL_BREAK,
            REAL_BREAK - 1,
        ), found.message
        # The frozen check ran (it counts itself) on steps that hold the agent's own check.
        assert any(int(n) >= WEAKENED for n in counter.read_text().split())
        # The same search judging the steps' own checks (as before) is fooled by the agent:
        # from step WEAKENED on the check it wrote passes, so it never reproduces the failure.
        counter.unlink(missing_ok=True)
        fooled = asyncio.run(
            Bisection(run=h.run, gate=gate, steps=h.steps, known=dict(known)).find()
        )
        assert (fooled.verdict, fooled.step) == ("flaky", None), fooled
    else:
        for tree, statuses in known.items():
            for status in statuses:
                h.run.ledger.append(
                    "gate-finished", gate="check", status=status, tree=tree, duration_s=0.1
                )
        # The agent weakened the live paella.toml's gate too: `paella bisect` takes the frozen one.
        (h.repo / "paella.toml").write_text(
            PROTECTING_CONTRACT.replace('["sh", "checks/check.sh"]', '["true"]')
        )
        proc = run_paella_in_process(h.repo, "bisect", "check", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        verdict = json.loads(proc.stdout)
        assert (verdict["verdict"], verdict["step"]) == ("found", REAL_BREAK), verdict
        assert any(int(n) >= WEAKENED for n in counter.read_text().split())
