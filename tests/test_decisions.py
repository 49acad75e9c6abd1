"""Recovery decisions reach the run loop through one channel: whoever answers (the recovery
screen, ``r`` on the main screen, a quit, the ``--on-death`` policy) sends to it, and the loop's
recovery receives exactly one answer, the right one, whatever the order."""

from __future__ import annotations

import asyncio

import pytest

from paella_tui.supervisor.run.decisions import ON_DEATH, Decision, DecisionChannel, policy
from paella_tui.supervisor.run.events import RecoveryFacts
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

BASE = SnapshotRecord(
    kind="checkpoints", n=1, ref="refs/paella/r/checkpoints/1", commit="c" * 40, tree="t" * 40,
    head="h" * 40, branch="main", t="2026-12-01T00:00:00Z", episode=1, gates_green=("unit",),
)  # fmt: skip
FACTS = RecoveryFacts(
    ending="crash",
    how="exit 1",
    attempt=2,
    tail=(),
    base=BASE,
    gates_now=(),
    regressions=(),
    changed_files=(),
    lines_added=0,
    lines_removed=0,
    default="continue",
)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_decision_sent_before_the_recovery_answers_it() -> None:
    async def go() -> Decision:
        channel = DecisionChannel(policy("stop"))
        channel.send(Decision("rollback", BASE))  # `r` on the main screen, then the agent stops
        return await channel.receive(FACTS)

    assert run(go()) == Decision("rollback", BASE)


def test_a_decision_sent_while_asked_answers_and_is_used_once() -> None:
    async def go() -> tuple[Decision, bool, bool]:
        channel = DecisionChannel()
        asked = asyncio.ensure_future(channel.receive(FACTS))
        await asyncio.sleep(0)
        asking = channel.asking
        channel.send(Decision("continue"))
        answer = await asked
        return answer, asking, channel.asking

    answer, asking_then, asking_after = run(go())
    assert answer == Decision("continue") and asking_then and not asking_after


def test_the_newest_send_wins_when_none_is_asked() -> None:
    async def go() -> Decision:
        channel = DecisionChannel()
        channel.send(Decision("continue"))
        channel.send(Decision("stop", by="quit", reason="paella received SIGHUP"))
        return await channel.receive(FACTS)

    assert run(go()) == Decision("stop", by="quit", reason="paella received SIGHUP")


def test_a_quit_beats_a_policy_that_never_answers() -> None:
    async def never(_facts: RecoveryFacts) -> Decision:
        await asyncio.Event().wait()
        raise AssertionError

    async def go() -> Decision:
        channel = DecisionChannel(never)
        asked = asyncio.ensure_future(channel.receive(FACTS))
        await asyncio.sleep(0.01)
        channel.send(Decision("stop", by="quit"))
        return await asked

    assert run(go()) == Decision("stop", by="quit")


@pytest.mark.parametrize("on_death", [w for w in ON_DEATH if w != "ask"])
def test_a_policy_answers_by_itself(on_death: str) -> None:
    expected = {
        "rollback": Decision("rollback", BASE, by="policy"),
        "continue": Decision("continue", by="policy"),
        "stop": Decision("stop", by="policy"),
    }[on_death]
    assert run(DecisionChannel(policy(on_death)).receive(FACTS)) == expected  # type: ignore[arg-type]
