"""The ledger's hash chain and its validation by kind, and a property test that feeds random and
mutated ledgers to every reader: status, checkpoints, log, rollback target selection, resume
and the handoff. Real runs in real repositories; the readers are the real command handlers.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.cli import main as paella_main
from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.decisions import policy
from paella_tui.supervisor.run.handoff import handoff_inputs_from_view, render_handoff
from paella_tui.supervisor.run.ledger import GENESIS, Ledger, line_hash
from paella_tui.supervisor.run.ledger_schema import SCHEMAS, problem
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store import checkpoints as ckpt
from paella_tui.supervisor.store.rollback import interrupted_rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

SHA = "a" * 40


def lines_of(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line]


# --- the chain ---------------------------------------------------------------------------


def test_each_record_links_to_the_line_before(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "events.jsonl")
    for n in range(3):
        ledger.append("drift", drift="stall", message=f"m{n}")
    lines = lines_of(ledger.path)
    links = [json.loads(line)["prev"] for line in lines]
    assert links == [GENESIS, line_hash(lines[0]), line_hash(lines[1])]
    read = ledger.read()
    assert read.chain_break is None and read.skipped == () and len(read.records) == 3


@pytest.mark.parametrize("attack", ["edit", "insert", "delete", "reorder", "unlinked-append"])
def test_an_edit_of_any_kind_breaks_the_chain_where_it_was_made(
    tmp_path: Path, attack: str
) -> None:
    ledger = Ledger(tmp_path / "events.jsonl")
    for n in range(5):
        ledger.append("drift", drift="stall", message=f"m{n}")
    lines = lines_of(ledger.path)
    if attack == "edit":
        lines[2] = lines[2].replace(b"m2", b"m9")
        first_bad = 4  # line 3 itself still links to line 2; line 4 no longer links to it
    elif attack == "insert":
        forged = {"t": "x", "kind": "drift", "drift": "stall", "message": "forged", "prev": "0"}
        lines.insert(2, json.dumps(forged).encode())
        first_bad = 3
    elif attack == "delete":
        del lines[1]
        first_bad = 2
    elif attack == "reorder":
        lines[1], lines[3] = lines[3], lines[1]
        first_bad = 2
    else:
        lines.append(b'{"t":"x","kind":"drift","drift":"stall","message":"no link"}')
        first_bad = 6
    ledger.path.write_bytes(b"\n".join(lines) + b"\n")
    read = ledger.read()
    assert read.chain_break is not None
    assert read.chain_break.line == first_bad, read.chain_break
    # What can be read is still read; records from the break on are flagged untrusted.
    assert len(read.records) == len(lines)
    assert not read.trusted(read.chain_break.index) and read.trusted(read.chain_break.index - 1)
    assert any("hash chain breaks" in s for s in read.skipped)


def test_an_old_ledger_without_links_reads_and_the_chain_starts_at_its_first_linked_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    old = [{"t": "x", "kind": "drift", "drift": "stall", "message": f"old {n}"} for n in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    ledger = Ledger(path)
    ledger.append("drift", drift="stall", message="new")
    read = ledger.read()
    assert read.chain_break is None and len(read.records) == 4
    assert read.records[-1]["prev"] == line_hash(lines_of(path)[2])


def test_a_torn_line_is_skipped_and_the_next_record_still_chains(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "events.jsonl")
    ledger.append("drift", drift="stall", message="one")
    with ledger.path.open("ab") as handle:
        handle.write(b'{"t":"x","kind":"dri')  # paella killed mid-write
    ledger.append("drift", drift="stall", message="two")
    read = ledger.read()
    assert [r["message"] for r in read.records] == ["one", "two"]
    assert read.chain_break is None
    assert any("unreadable" in s or "line (not JSON)" in s for s in read.skipped)


# --- validation by kind ------------------------------------------------------------------

GOOD: dict[str, dict[str, Any]] = {
    "checkpoint": {"n": 1, "ref": "refs/paella/r/checkpoints/1", "commit": SHA, "tree": SHA},
    "salvage": {"n": 1, "ref": "refs/paella/r/salvage/1", "commit": SHA, "tree": SHA},
    "rollback-intent": {
        "id": "x",
        "target": "checkpoint 1",
        "target_ref": "refs/paella/r/checkpoints/1",
        "salvage": 1,
        "salvage_ref": "refs/paella/r/salvage/1",
    },
    "agent-started": {"attempt": 1, "pid": 42},
    "run-tree": {"tree": SHA},
    "run-started": {"run_id": "r", "contract": {"path": "p", "sha256": "s"}},
}
BAD_VALUES: list[object] = [None, "1", 1.5, True, [], {}, -1, 2**70, "../../etc", "-x"]


def bad_cases() -> Iterator[tuple[str, str, object]]:
    for kind, record in GOOD.items():
        for name in record:
            yield kind, name, "<missing>"
            for value in BAD_VALUES:
                yield kind, name, value


@pytest.mark.parametrize(("kind", "name", "value"), list(bad_cases()))
def test_a_record_missing_or_mistyping_what_readers_use_is_refused(
    kind: str, name: str, value: object
) -> None:
    record: dict[str, Any] = {"t": "x", "kind": kind, **GOOD[kind]}
    assert problem(record) is None
    if value == "<missing>":
        del record[name]
    else:
        record[name] = value
    check, required = SCHEMAS[kind][name]
    expected_ok = (value == "<missing>" and not required) or (value != "<missing>" and check(value))
    assert (problem(record) is None) == expected_ok, (record, problem(record))


def test_unknown_kinds_pass_with_the_generic_check_and_extra_fields_are_kept() -> None:
    assert problem({"t": "x", "kind": "step", "anything": [1, {"a": None}]}) is None
    assert problem({"t": "x", "kind": "bisect"}) is None
    assert problem({"kind": "step"}) is not None
    assert problem({"t": "x", "kind": 3}) is not None
    assert problem({"t": "x", "kind": "checkpoint", **GOOD["checkpoint"], "retry": 3}) is None


# --- every reader, fed random and mutated ledgers --------------------------------------------

CONTRACT = """\
[run]
prompt = "x"
agent = ["true"]
[[gate]]
name = "work"
cmd = "true"
[[episode]]
name = "one"
goal = "g"
gates = ["work"]
[[constraint]]
text = "c"
protect = ["tests/**"]
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, bytes]:
    repo = make_repo(tmp_path_factory.mktemp("prop") / "repo")
    (repo / "paella.toml").write_text(CONTRACT)
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(load_contract(repo / "paella.toml"), manual=False)
    snap = Snapshotter(workspace)
    run.ledger.append("agent-started", attempt=1, pid=999999, create_time=0.0, argv=["true"])
    run.ledger.append("gate-finished", gate="work", status="pass", tree="t", stale=False)
    first = ckpt.take_checkpoint(run, snap, episode=1, gates_green=("work",))
    (repo / "a.txt").write_text("a\n")
    ckpt.take_checkpoint(run, snap, episode="manual", label="by hand")
    run.ledger.append("drift", drift="regression", message="m", gate="work")
    run.ledger.append(
        "agent-exited", attempt=1, exit_code=1, signal=None, tail=["boom"], leftovers=[]
    )
    run.ledger.append(
        "rollback-intent",
        id="abc",
        target="checkpoint 1",
        target_ref=first.ref,
        target_tree=first.tree,
        salvage=1,
        salvage_ref=first.ref.replace("checkpoints", "salvage"),
    )
    run.ledger.append("run-stopped", reason="stopped")
    return run, run.ledger.path.read_bytes()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
kinds = st.sampled_from([*SCHEMAS, "step", "", "resumed"])


@st.composite
def mutated_ledgers(draw: st.DrawFn, base: bytes) -> bytes:
    lines = [line for line in base.split(b"\n") if line]
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["field", "drop", "type", "bytes", "record", "cut", "dup"]))
        i = draw(st.integers(0, len(lines) - 1))
        if action in ("field", "drop", "type"):
            try:
                record = json.loads(lines[i])
            except ValueError:
                continue
            if not isinstance(record, dict) or not record:
                continue
            name = draw(st.sampled_from(sorted(record)))
            if action == "drop":
                del record[name]
            else:
                record[name] = draw(json_values)
            lines[i] = json.dumps(record).encode()
        elif action == "bytes":
            lines.insert(i, draw(st.binary(max_size=40)).replace(b"\n", b""))
        elif action == "record":
            record = {"t": draw(st.text(max_size=5)), "kind": draw(kinds)}
            record.update(draw(st.dictionaries(st.text(max_size=12), json_values, max_size=5)))
            for name in SCHEMAS.get(str(record["kind"]), {}):
                if draw(st.booleans()):
                    record[name] = draw(json_values)
            lines.insert(i, json.dumps(record).encode())
        elif action == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            lines.insert(i, lines[i])
    return b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))


def read_everything(run: Run) -> None:
    """Every reader of the ledger, as the commands and the run loop use them."""
    view = RunView.load(run)
    view.to_json()
    view.state()
    base = view.last_green_checkpoint
    for record in (*view.checkpoints, *view.salvage):
        view.rollback_target_ok(record)
    # The base checks its newest candidate alone first: the same answer as every one checked.
    by_ref = {c.ref: c for c in view.checkpoints}
    line = [by_ref[ref] for ref in reversed(view.run_state.base_line) if ref in by_ref]
    assert base == next((c for c in line if view.rollback_target_ok(c)), None)
    if base is not None:
        ckpt.find(run, base.name)
    interrupted_rollback(run)
    text = render_handoff(handoff_inputs_from_view(view, changes=[]))
    assert text
    contract = run.load_contract()
    if contract is not None:
        RunLoop(run=run, contract=contract, emit=lambda _e, _s: None, decide=policy("stop"))
    for argv in (
        ["status"],
        ["status", "--json"],
        ["status", "--tmux"],
        ["checkpoints"],
        ["checkpoints", "--json"],
        ["log"],
        ["handoff"],
    ):
        code = paella_main(argv)
        assert code in (0, 2, 3), argv


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_reader_survives_random_and_mutated_ledger_lines(
    real_run: tuple[Run, bytes],
    data: st.DataObject,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, base = real_run
    monkeypatch.chdir(run.workspace.root)
    # The mirror would put the ledger back before a reader sees it: point it nowhere, so the
    # readers meet the mutated lines themselves.
    monkeypatch.setenv("PAELLA_MIRROR", str(run.workspace.root.parent / "no-mirror"))
    ledger = data.draw(mutated_ledgers(base))
    run.ledger.path.write_bytes(ledger)
    # A clear message and an exit status is what a person gets: allowed.
    with contextlib.suppress(PaellaError):
        read_everything(run)
    capsys.readouterr()
