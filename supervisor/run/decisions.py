"""Recovery decisions: the typed words of a choice, the ``--on-death`` policies, and the one channel
a decision reaches the run loop by.

A recovery is a question the loop cannot answer alone. Whoever answers (the recovery screen, a key
on the main screen, a quit, the headless policy, a test's script) answers through one
:class:`DecisionChannel`: :meth:`DecisionChannel.send` from anywhere on the loop's thread, or its
``ask`` function, which answers every recovery by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, get_args

from paella_tui.supervisor.judge.frozen import ProtectedChange, ReviewChoice
from paella_tui.supervisor.run.events import RecoveryFacts
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

Choice = Literal["rollback", "continue", "stop", "accept"]
"""Roll back, continue from the tree as it is, stop the run, or accept (every gate is green)."""
DecidedBy = Literal["user", "policy", "policy (limit)", "quit"]
"""Who chose: a person, the ``--on-death`` policy, the policy's limit, or a quit of paella."""
OnDeath = Literal["ask", "rollback", "continue", "stop"]
"""The ``--on-death`` policy: ask a person (the TUI), or answer every recovery the same way."""
ON_DEATH: tuple[OnDeath, ...] = get_args(OnDeath)


@dataclass(frozen=True)
class Decision:
    """The answer to a recovery: roll back (to ``target``, default the base), continue, stop, or
    accept (every gate is green on the tree: the run is done)."""

    choice: Choice
    target: SnapshotRecord | None = None
    by: DecidedBy = "user"
    reason: str | None = None
    """Why, in words, when the run is quitting (``paella received SIGHUP``)."""


Decide = Callable[[RecoveryFacts], Awaitable[Decision]]
Review = Callable[[ProtectedChange], Awaitable[ReviewChoice]]
"""Asks a person to accept or revert changed protected files (the TUI); headless has none."""


def policy(on_death: OnDeath) -> Decide:
    """A ``decide`` that answers every recovery the same way (``--on-death`` headless)."""

    async def decide(facts: RecoveryFacts) -> Decision:
        if on_death == "rollback":
            return Decision("rollback", facts.base, by="policy")
        if on_death == "continue":
            return Decision("continue", by="policy")
        return Decision("stop", by="policy")

    return decide


class DecisionChannel:
    """The one way a decision reaches the run loop.

    :meth:`send` answers the recovery being asked, or (when none is) the next one: a rollback
    picked on the main screen stops the agent, and its end is then recovered with that choice. A
    recovery asked with nothing sent waits for ``ask`` (a policy) or a :meth:`send`, whichever
    answers first. Used on the event loop's thread only.
    """

    def __init__(self, ask: Decide | None = None) -> None:
        self._ask = ask
        self._pending: Decision | None = None
        self._waiting: asyncio.Future[Decision] | None = None

    @property
    def answers_itself(self) -> bool:
        """A policy answers every recovery (headless, ``--on-death``, a script): nobody is
        waiting to see the recovery before the final tree's gates are judged."""
        return self._ask is not None

    @property
    def asking(self) -> bool:
        """A recovery is waiting for its answer now."""
        return self._waiting is not None and not self._waiting.done()

    def send(self, decision: Decision) -> None:
        """The answer to the recovery asked now, else to the next one (the newest send wins)."""
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(decision)
        else:
            self._pending = decision

    async def receive(self, facts: RecoveryFacts) -> Decision:
        """The decision for the recovery ``facts`` describe."""
        if self._pending is not None:
            decision, self._pending = self._pending, None
            return decision
        waiting: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiting = waiting
        asked = asyncio.ensure_future(self._ask(facts)) if self._ask is not None else None
        try:
            if asked is not None:
                await asyncio.wait({waiting, asked}, return_when=asyncio.FIRST_COMPLETED)
                return waiting.result() if waiting.done() else asked.result()
            return await waiting
        finally:
            self._waiting = None
            if asked is not None and not asked.done():
                asked.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asked
