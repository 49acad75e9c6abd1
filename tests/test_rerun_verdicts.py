"""A gate re-running keeps its last verdict: the counters never drop to 0 in between."""

from __future__ import annotations

from pathlib import Path

import tomli_w

from paella_tui.run_board import RunBoard
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.events import GateFinished, GateResult, GateStarted
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace


def contract_in(repo: Path):  # type: ignore[no-untyped-def]
    data = {
        "run": {"prompt": "x", "agent": "true"},
        "gate": [{"name": "a", "cmd": "true"}, {"name": "b", "cmd": "true"}],
        "episode": [{"name": "one", "gates": ["a"]}, {"name": "two", "gates": ["b"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(data))
    return load_contract(repo / "paella.toml")


def finished(gate: str, status: str = "pass") -> GateFinished:
    return GateFinished(result=GateResult(gate=gate, status=status, tree="t" * 40))  # type: ignore[arg-type]


def test_the_board_keeps_verdicts_while_gates_re_run(repo: Path) -> None:
    board = RunBoard(contract=contract_in(repo), run_id="r")
    for gate in ("a", "b"):
        board.apply(GateStarted(gate=gate, tree="t" * 40))
    assert [r.status for r in board.gate_rows()] == ["running", "running"]  # never judged yet
    for gate in ("a", "b"):
        board.apply(finished(gate))
    done = [e.state for e in board.episode_rows()]
    for gate in ("a", "b"):
        board.apply(GateStarted(gate=gate, tree="u" * 40))
        rows = board.gate_rows()
        assert [(r.status, r.rerunning) for r in rows if r.name == gate] == [("pass", True)]
        assert [e.state for e in board.episode_rows()] == done == ["complete", "complete"]
    board.apply(finished("a", "fail"))
    assert [(r.status, r.rerunning) for r in board.gate_rows()] == [
        ("fail", False),
        ("pass", True),
    ]


def test_status_keeps_verdicts_while_gates_re_run(repo: Path) -> None:
    contract = contract_in(repo)
    run = RunStore(Workspace.find(repo)).create(contract, manual=False)
    for gate in ("a", "b"):
        run.ledger.append("gate-started", gate=gate, tree="t" * 40)
        run.ledger.append(finished(gate).kind or "", **finished(gate).record())
    for gate in ("a", "b"):
        run.ledger.append("gate-started", gate=gate, tree="u" * 40)
    data = RunView.load(run).to_json()
    assert [(g["status"], g["running"]) for g in data["gates"]] == [("pass", True)] * 2
    assert [e["complete"] for e in data["episodes"]] == [True, True]
