"""A policy decides a death on the final tree's verdict (the headless run, ``--on-death``).

Recovery opens before the final tree's gates finish so that a person sees it at once; a policy
has nobody to show it to. Deciding early, the headless run wrote its handoff with the gates
of an earlier tree (or none), and the recovery record said "gates still running". The agent
here breaks the gate and crashes at once, and the gate is slow: the facts the policy got and
the handoff it wrote must both hold the final tree's red verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import make_repo, run_paella_in_process
from run_scenarios import section

from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.decisions import Decide, Decision, OnDeath, policy
from paella_tui.supervisor.run.events import Event, RecoveryFacts, RecoveryNeeded
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace

AGENT = "echo broken > broken.txt; exit 1"
# Slow enough that the policy, deciding after recovery opens, would decide before it ends.
GATE = "sleep 1; test ! -e broken.txt"


def _loop(repo: Path, decide: Decide | None, emit: Callable[[Event, object], None]) -> RunLoop:
    made = run_paella_in_process(
        repo, "init", "--agent", f"sh -c '{AGENT}'", "--gate", f"slow=sh -c '{GATE}'"
    )
    assert made.returncode == 0, made.stderr
    contract = load_contract(repo / "paella.toml")
    run = RunStore(Workspace.find(repo)).create(contract, manual=False)
    return RunLoop(run=run, contract=contract, emit=emit, decide=decide, stop_grace=2.0)


@pytest.mark.parametrize("on_death", ["stop", "continue"])
def test_a_policy_decides_on_the_final_verdict_and_the_handoff_holds_it(
    tmp_path: Path, on_death: OnDeath
) -> None:
    repo = make_repo(tmp_path / "repo")
    events: list[Event] = []
    loop = _loop(repo, policy(on_death), lambda event, _state: events.append(event))

    exit_code = asyncio.run(asyncio.wait_for(loop.run(), 120))
    assert exit_code != 0
    facts = [e.facts for e in events if isinstance(e, RecoveryNeeded)]
    # "continue" goes on until the policy's limit stops it: every death is judged in full.
    assert len(facts) == (1 if on_death == "stop" else loop.contract.retry.max_attempts + 1)
    for fact in facts:
        assert fact.gates_final, "the policy decided before the final tree was judged"
        assert [(r.gate, r.status) for r in fact.gates_now] == [("slow", "fail")]
    handoff = (loop.run_.dir / "handoff.md").read_text()
    assert "✗ `slow` fail" in section(handoff, "Gates now"), handoff


def test_a_person_still_sees_recovery_before_the_final_gates_end(tmp_path: Path) -> None:
    """The TUI's way (no policy): recovery opens with what is known, the verdict follows."""
    repo = make_repo(tmp_path / "repo")
    seen: list[RecoveryFacts] = []
    loops: list[RunLoop] = []

    def emit(event: Event, _state: object) -> None:
        if isinstance(event, RecoveryNeeded):
            seen.append(event.facts)
            loops[0].decisions.send(Decision("stop"))  # as the recovery screen answers

    loops.append(_loop(repo, None, emit))
    exit_code = asyncio.run(asyncio.wait_for(loops[0].run(), 120))
    assert exit_code != 0
    assert seen and not seen[0].gates_final, "recovery waited for the slow gate"
