"""The handoff (SPEC 10): what the next attempt reads first, cut short enough to paste, and built
from a real run folder's ledger and gate logs alone."""

from __future__ import annotations

import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.contract.loader import load_contract, parse_contract
from paella_tui.supervisor.contract.model import CONTRACT_FILE, Contract
from paella_tui.supervisor.run.events import GateResult
from paella_tui.supervisor.run.handoff import (
    EpisodeState,
    HandoffInputs,
    handoff_inputs_from_view,
    render_handoff,
    write_handoff,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, take_checkpoint
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# The SPEC 3 example with the "privacy" gate its second episode names, and two more episodes
# (export, audit) so that it is a typical run: 4 episodes, 5 gates.
CONTRACT = """\
[run]
name = "ledger-service"
prompt = "Build the event ledger, episode by episode."
agent = "claude -p {prompt}"
resume = "claude --continue -p {handoff}"
stall_after = "15m"
scope = ["src/**", "tests/**"]

[retry]
max_attempts = 3
backoff = "30s"
max_backoff = "15m"
transient = ["rate limit", "429", "overloaded", "usage limit"]

[[gate]]
name = "idempotency"
cmd = "pytest -q tests/test_idempotency.py"
timeout = "2m"
retries = 1
paths = ["src/**", "tests/**"]

[[gate]]
name = "privacy"
cmd = "pytest -q tests/test_privacy.py"

[[gate]]
name = "export"
cmd = "pytest -q tests/test_export.py"

[[gate]]
name = "lint"
cmd = "ruff check src"

[[gate]]
name = "audit"
cmd = "pytest -q tests/test_audit.py"

[[episode]]
name = "idempotent ingest"
goal = "Replaying an event twice changes nothing."
gates = ["idempotency"]

[[episode]]
name = "privacy"
goal = "No raw e-mail address reaches a log or an export."
gates = ["privacy"]

[[episode]]
name = "csv export"
goal = "Every ledger entry can be exported as CSV, one row per event."
gates = ["export", "lint"]

[[episode]]
name = "audit trail"
goal = "Every change to an entry leaves an audit record naming who and when."
gates = ["audit"]

[[constraint]]
text = "The public function ingest(event) keeps its signature."
protect = ["tests/**", "paella.toml"]
"""

RUN_ID = "20261129-021455-ab12"


def contract() -> Contract:
    return parse_contract(CONTRACT, Path(CONTRACT_FILE), default_name="ws")


def pytest_failure(lines: int) -> tuple[str, ...]:
    """The end of a failing pytest run, ``lines`` long."""
    body = [f"tests/test_idempotency.py::test_case_{i} PASSED" for i in range(lines - 6)]
    return (
        *body,
        "    def test_replay_twice():",
        ">       assert ingest(event) == ingest(event)",
        "E       AssertionError: ledger grew from 1 to 2 entries",
        "tests/test_idempotency.py:14: AssertionError",
        "FAILED tests/test_idempotency.py::test_replay_twice - AssertionError",
        "1 failed, 11 passed in 0.31s",
    )[-lines:]


def base_checkpoint() -> SnapshotRecord:
    return SnapshotRecord(
        kind="checkpoints",
        n=2,
        ref=f"refs/paella/{RUN_ID}/checkpoints/2",
        commit="c" * 40,
        tree="t" * 40,
        head="h" * 40,
        branch="main",
        t="2026-11-29T03:12:44.120Z",
        episode=2,
        gates_green=("idempotency", "privacy"),
        label="episode 2",
    )


def realistic(
    *,
    gate_output: tuple[str, ...] = pytest_failure(40),
    changes: int = 7,
    drifts: int = 3,
    line: str = "",
) -> HandoffInputs:
    """Episodes 1-2 completed at checkpoints 1-2, then idempotency regressed and the agent crashed."""
    c = contract()
    log = f"/repo/.git/paella/runs/{RUN_ID}/gates/idempotency/7.log"
    return HandoffInputs(
        contract=c,
        run_id=RUN_ID,
        episodes=(
            EpisodeState(1, "idempotent ingest", c.episodes[0].goal, ("idempotency",), False, 1),
            EpisodeState(2, "privacy", c.episodes[1].goal, ("privacy",), False, 2),
            EpisodeState(3, "csv export", c.episodes[2].goal, ("export", "lint"), False, None),
            EpisodeState(4, "audit trail", c.episodes[3].goal, ("audit",), False, None),
        ),
        base=base_checkpoint(),
        gates_now=(
            GateResult(
                gate="idempotency",
                status="fail",
                tree="a" * 40,
                exit_code=1,
                log_path=log,
                tail=gate_output,
            ),
            GateResult(gate="privacy", status="pass", tree="a" * 40),
            GateResult(
                gate="export",
                status="fail",
                tree="a" * 40,
                exit_code=1,
                tail=("E   ModuleNotFoundError: No module named 'ledger.export'",),
            ),
            GateResult(gate="lint", status="pass", tree="a" * 40),
            GateResult(gate="audit", status="pending", tree=""),
        ),
        regressed=("idempotency",),
        gate_log_lines={"idempotency": len(gate_output)},
        drift=tuple(
            {
                "kind": "regression" if i % 3 == 0 else "scope",
                "gate": "idempotency",
                "path": None,
                "message": f"idempotency fails; it passed at checkpoint 2 ({i}){line}",
                "t": f"2026-11-29T03:{40 + i % 20:02d}:12.000Z",
            }
            for i in range(drifts)
        ),
        ending="exit 1 after 42m, attempt 2",
        last_output=(
            *(f"● Editing src/ledger/ingest.py step {i}{line}" for i in range(60)),
            "Error: unexpected end of stream",
        ),
        agent_log=f"/repo/.git/paella/runs/{RUN_ID}/agent.log",
        changes=tuple(
            (f"src/ledger/module_{i:04d}.py{line}", 10 + i, i % 4) for i in range(changes)
        ),
        attempt=2,
    )


def headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section (up to the next ``## ``)."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


SECTIONS = [
    "## Gates that must stay green",
    "## Task",
    "## Constraints",
    "## Episodes",
    "## Last green checkpoint",
    "## Gates now",
    "## Drift warnings",
    "## How the last attempt ended",
    "## Files changed since checkpoint 2",
    "## What remains",
    "## Next step",
]


# --- the document -----------------------------------------------------------------------------


def test_the_gates_to_keep_green_come_first() -> None:
    text = render_handoff(realistic())
    lines = text.splitlines()
    assert lines[0] == f"# Handoff: ledger-service, run {RUN_ID}"
    assert headings(text) == SECTIONS
    # Between the title and the gates, only the "read this first" paragraph.
    before = text[: text.index("## Gates that must stay green")]
    assert "**Read this first.**" in before
    assert "continuing an interrupted run after attempt 2" in before
    assert "Done means every gate below passes" in before and "not that you say so" in before
    keep = section(text, "Gates that must stay green")
    assert "passed at the last green checkpoint (2)" in keep
    # Each with the command that runs it, the regressed one marked.
    assert "- `idempotency`: `pytest -q tests/test_idempotency.py`: ✗ fails now, REGRESSED" in keep
    assert "- `privacy`: `pytest -q tests/test_privacy.py`: ✓ passes now" in keep
    # The rest of the contract's gates must pass to finish, too.
    rest = keep[keep.index("To finish, these must pass too") :]
    assert "`export`: `pytest -q tests/test_export.py`" in rest
    assert "`audit`: `pytest -q tests/test_audit.py`: ◌ pending" in rest
    assert keep.index("`idempotency`") < keep.index("`export`")


def test_task_constraints_episodes_and_the_base() -> None:
    text = render_handoff(realistic())
    assert "Build the event ledger, episode by episode." in section(text, "Task")
    constraints = section(text, "Constraints")
    assert "ingest(event) keeps its signature" in constraints
    assert "Do not change: `tests/**`, `paella.toml`" in constraints
    episodes = section(text, "Episodes").splitlines()
    assert any(
        line.startswith("- ✗ 1. idempotent ingest")
        and "was complete at checkpoint 1, not now" in line
        for line in episodes
    )
    assert any(line.startswith("- ✗ 3. csv export") and "not yet" in line for line in episodes)
    base = section(text, "Last green checkpoint")
    assert f"Checkpoint 2: `refs/paella/{RUN_ID}/checkpoints/2`" in base
    assert "taken 2026-11-29 03:12 UTC" in base
    assert "gates green there: `idempotency`, `privacy`" in base
    assert "`paella diff 2`" in base


def test_gates_now_lists_regressions_first_with_the_failing_output() -> None:
    text = render_handoff(realistic())
    now = section(text, "Gates now")
    marks = [line for line in now.splitlines() if line.startswith("- ")]
    assert marks[0].startswith("- ⚠ ✗ `idempotency` fail: REGRESSED, it passed at checkpoint 2")
    assert marks[1].startswith("- ✗ `export` fail")
    assert [m.split("`")[1] for m in marks] == ["idempotency", "export", "audit", "privacy", "lint"]
    # The end of the failing output, and how much was cut and where the rest is.
    assert "E       AssertionError: ledger grew from 1 to 2 entries" in now
    assert "FAILED tests/test_idempotency.py::test_replay_twice" in now
    shown = now[now.index("### `idempotency`") : now.index("### `export`")]
    assert shown.count("PASSED") + 6 == 25
    assert (
        f"… 15 lines cut, full log: /repo/.git/paella/runs/{RUN_ID}/gates/idempotency/7.log" in now
    )
    assert "No module named 'ledger.export'" in now


def test_drift_the_ending_the_changes_what_remains_and_the_next_step() -> None:
    text = render_handoff(realistic())
    drift = section(text, "Drift warnings")
    assert "03:40:12 UTC ⚠ regression: idempotency fails; it passed at checkpoint 2 (0)" in drift
    ended = section(text, "How the last attempt ended")
    assert "exit 1 after 42m, attempt 2." in ended
    assert "Error: unexpected end of stream" in ended
    assert "earlier lines cut" in ended and "agent.log" in ended
    changed = section(text, "Files changed since checkpoint 2")
    assert "7 files, +91 −9 lines." in changed
    assert "- `src/ledger/module_0003.py` +13 −3" in changed
    remains = section(text, "What remains").splitlines()[2:]
    assert [line.split(" ")[0] for line in remains] == ["1.", "2.", "3.", "4."]
    assert "again: it was complete at checkpoint 1" in remains[0]
    # Episode 3 needs the gates of episodes 1-3; lint passes already.
    assert "one row per event" in remains[2]
    assert remains[2].endswith("(needs passing: `idempotency`, `export`)")
    next_step = section(text, "Next step")
    assert "Make `idempotency` pass again" in next_step
    assert "episode 3 (csv export)" in next_step


def test_a_typical_run_stays_under_8_kb() -> None:
    text = render_handoff(realistic())
    assert len(text.encode()) < 8 * 1024


def test_a_huge_input_is_cut_with_notes_and_stays_small() -> None:
    inputs = realistic(gate_output=pytest_failure(10_000), changes=5_000, drifts=300)
    text = render_handoff(inputs)
    assert len(text.encode()) < 12 * 1024
    assert headings(text) == SECTIONS
    assert "… 9,975 lines cut, full log:" in text
    assert "FAILED tests/test_idempotency.py::test_replay_twice" in text
    assert "… 4,940 more files cut (+" in text
    assert "5,000 files" in text
    assert re.search(
        r"… [\d,]+ earlier warnings cut \((regression|scope) \d+, (regression|scope) \d+\)", text
    )
    assert "all of them: `paella log`" in text


def test_huge_lines_are_cut_too() -> None:
    long = " " + "x" * 5_000
    inputs = realistic(
        gate_output=tuple(f"E   {i}{long}" for i in range(10_000)),
        changes=5_000,
        drifts=300,
        line=long,
    )
    text = render_handoff(inputs)
    assert len(text.encode()) < 12 * 1024
    assert "x" * 200 not in text
    assert "…" in section(text, "Gates now")
    assert "lines cut, full log:" in text
    assert "more files cut" in text


def test_when_every_gate_fails_hugely_tighter_budgets_keep_it_small() -> None:
    long = " " + "y" * 5_000
    inputs = realistic(changes=5_000, drifts=300, line=long)
    failing = tuple(
        GateResult(
            gate=g.name,
            status="fail",
            tree="a" * 40,
            exit_code=1,
            log_path=f"/logs/{g.name}.log",
            tail=tuple(f"E {i}{long}" for i in range(10_000)),
            message="m" * 3_000,
        )
        for g in inputs.contract.gates
    )
    text = render_handoff(
        replace(inputs, gates_now=failing, regressed=tuple(g.gate for g in failing))
    )
    assert len(text.encode()) < 12 * 1024
    assert headings(text) == SECTIONS
    for gate in inputs.contract.gates:
        assert f"lines cut, full log: /logs/{gate.name}.log" in text
    assert "REGRESSED, it passed on an earlier tree of this run" in text


def test_without_a_base_every_gate_must_pass_and_changes_count_from_the_start() -> None:
    inputs = realistic()
    c = inputs.contract
    fresh = HandoffInputs(
        contract=c,
        run_id=RUN_ID,
        episodes=tuple(
            EpisodeState(k, e.name, e.goal, e.gates, False) for k, e in enumerate(c.episodes, 1)
        ),
        base=None,
        gates_now=tuple(GateResult(gate=g.name, status="pending", tree="") for g in c.gates),
        changes=(("src/ledger/ingest.py", 3, 0),),
    )
    text = render_handoff(fresh)
    keep = section(text, "Gates that must stay green")
    assert "No gate has passed at a green checkpoint of this run yet." in keep
    assert "To finish, these must pass:" in keep
    assert "None yet" in section(text, "Last green checkpoint")
    assert "## Files changed since the run started" in text
    assert "No attempt has ended yet." in text
    assert "Continue with episode 1 (idempotent ingest)" in section(text, "Next step")


def test_output_holding_a_code_fence_does_not_break_the_document() -> None:
    inputs = realistic(gate_output=("```", "E   boom", "```"))
    text = render_handoff(inputs)
    now = section(text, "Gates now")
    assert "````\n```\nE   boom\n```\n````" in now


def test_a_prompt_file_is_referenced_and_a_long_prompt_is_cut() -> None:
    base = realistic()
    text = CONTRACT.replace(
        'prompt = "Build the event ledger, episode by episode."', 'prompt_file = "TASK.md"'
    )
    by_file = replace(base, contract=parse_contract(text, Path(CONTRACT_FILE), default_name="ws"))
    assert "The task is in `TASK.md` at the workspace root" in render_handoff(by_file)
    long_prompt = "Build it. " * 500
    text = CONTRACT.replace("Build the event ledger, episode by episode.", long_prompt)
    frozen = parse_contract(text, Path("/frozen/contract.toml"), default_name="ws")
    long = replace(base, contract=frozen)
    task = section(render_handoff(long), "Task")
    assert "characters cut; the whole task is `[run] prompt` in /frozen/contract.toml" in task
    assert len(task) < 2_000


def test_write_handoff_is_private_and_atomic(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    path = write_handoff(run_dir, "# first\n")
    assert path == run_dir / "handoff.md"
    path = write_handoff(run_dir, "# second\n")
    assert path.read_text() == "# second\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in run_dir.iterdir()) == ["handoff.md"]


# --- from a real run folder ---------------------------------------------------------------------


def gate_finished(
    run: Run, gate: str, status: str, tree: str, *, log: Path | None = None, **extra: object
) -> None:
    run.ledger.append(
        "gate-finished",
        gate=gate,
        status=status,
        tree=tree,
        duration_s=0.4,
        exit_code=0 if status == "pass" else 1,
        attempts=1,
        log=str(log) if log else None,
        cached=False,
        stale=False,
        message="",
        **extra,
    )


def write_log(run: Run, gate: str, n: int, lines: tuple[str, ...]) -> Path:
    path = run.dir / "gates" / gate / f"{n}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


@pytest.fixture
def crashed_run(repo: Path) -> Run:
    """A real run: episodes 1 and 2 checkpointed, then idempotency regressed and the agent crashed."""
    (repo / CONTRACT_FILE).write_text(CONTRACT)
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(load_contract(repo / CONTRACT_FILE), manual=False)
    snapshotter = Snapshotter(workspace)
    run.ledger.append("agent-started", attempt=1, pid=4242, create_time=0.0, argv=["claude"])
    gate_finished(run, "idempotency", "pass", "t1")
    take_checkpoint(run, snapshotter, episode=1, gates_green=("idempotency",), label="episode 1")
    (repo / "src").mkdir()
    (repo / "src" / "privacy.py").write_text("def scrub(text): ...\n")
    gate_finished(run, "privacy", "pass", "t2")
    gate_finished(run, "lint", "pass", "t2")
    take_checkpoint(
        run, snapshotter, episode=2, gates_green=("idempotency", "privacy"), label="episode 2"
    )
    run.ledger.append(
        "agent-exited",
        attempt=1,
        exit_code=1,
        signal=None,
        tail=["429 Too Many Requests"],
        leftovers=[],
        stopped_by_user=False,
    )
    run.ledger.append("agent-started", attempt=2, pid=4343, create_time=0.0, argv=["claude"])
    log = write_log(run, "idempotency", 3, pytest_failure(300))
    gate_finished(run, "idempotency", "fail", "t3", log=log)
    gate_finished(
        run,
        "export",
        "fail",
        "t3",
        log=write_log(
            run, "export", 1, ("E   ModuleNotFoundError: No module named 'ledger.export'",)
        ),
    )
    run.ledger.append("gate-started", gate="privacy", tree="t4")  # interrupted by the crash
    run.ledger.append(
        "drift",
        drift="regression",
        gate="idempotency",
        path=None,
        message="idempotency fails; it passed at checkpoint 2",
    )
    run.ledger.append(
        "agent-exited",
        attempt=2,
        exit_code=1,
        signal=None,
        tail=[
            "● Editing src/ledger/ingest.py",
            "Traceback (most recent call last):",
            "KeyError: 'event_id'",
        ],
        leftovers=[],
        stopped_by_user=False,
    )
    return run


def test_inputs_from_a_real_run_folder(crashed_run: Run) -> None:
    inputs = handoff_inputs_from_view(RunView.load(crashed_run), changes=[("src/privacy.py", 1, 0)])
    assert inputs.run_id == crashed_run.run_id
    assert inputs.base is not None and inputs.base.n == 2
    assert inputs.base.gates_green == ("idempotency", "privacy")
    assert inputs.regressed == ("idempotency",)
    by_gate = {r.gate: r for r in inputs.gates_now}
    assert [r.gate for r in inputs.gates_now] == [
        "idempotency",
        "privacy",
        "export",
        "lint",
        "audit",
    ]
    assert by_gate["idempotency"].status == "fail"
    assert by_gate["idempotency"].tail[-1] == "1 failed, 11 passed in 0.31s"
    assert (
        by_gate["privacy"].status == "pass"
    )  # the newest finished record, not the interrupted start
    assert by_gate["audit"].status == "pending"
    assert inputs.gate_log_lines["idempotency"] == 300
    assert [(e.n, e.complete, e.checkpoint) for e in inputs.episodes] == [
        (1, False, 1),
        (2, False, 2),
        (3, False, None),
        (4, False, None),
    ]
    assert inputs.ending is not None and inputs.ending.startswith("exit 1 after ")
    assert inputs.ending.endswith("attempt 2")
    assert inputs.last_output[-1] == "KeyError: 'event_id'"
    assert inputs.attempt == 2
    assert [d["kind"] for d in inputs.drift] == ["regression"]


def test_paella_handoff_from_disk_has_the_same_sections(crashed_run: Run) -> None:
    view = RunView.load(crashed_run)
    inputs = handoff_inputs_from_view(
        view, changes=[("src/privacy.py", 1, 0)], ending="exit 1 (crash)"
    )
    text = render_handoff(inputs)
    assert headings(text) == headings(render_handoff(realistic()))
    log = crashed_run.dir / "gates" / "idempotency" / "3.log"
    assert f"… 275 lines cut, full log: {log}" in text
    assert "REGRESSED, it passed at checkpoint 2" in text
    assert "KeyError: 'event_id'" in section(text, "How the last attempt ended")
    assert "exit 1 (crash); exit 1 after " in text
    assert "No module named 'ledger.export'" in section(text, "Gates now")
    path = write_handoff(crashed_run.dir, text)
    assert path == crashed_run.dir / "handoff.md"
    assert path.read_text() == text


def test_a_missing_gate_log_is_said_not_fatal(crashed_run: Run) -> None:
    (crashed_run.dir / "gates" / "idempotency" / "3.log").unlink()
    text = render_handoff(handoff_inputs_from_view(RunView.load(crashed_run)))
    assert "No output was recorded (log: " in section(text, "Gates now")


def test_an_attempt_without_a_recorded_end(crashed_run: Run) -> None:
    crashed_run.ledger.append(
        "agent-started", attempt=3, pid=4444, create_time=0.0, argv=["claude"]
    )
    inputs = handoff_inputs_from_view(RunView.load(crashed_run))
    assert inputs.attempt == 3
    assert inputs.ending == "attempt 3 has no recorded end (paella itself stopped while it ran)"


def test_a_run_without_a_contract_has_nothing_to_hand_off(repo: Path) -> None:
    run = RunStore(Workspace.find(repo)).create(None, manual=True)
    with pytest.raises(UsageError, match="no contract"):
        handoff_inputs_from_view(RunView.load(run))
