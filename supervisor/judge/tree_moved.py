"""Whether the workspace left a pass's tree while one of its gates ran (split from
:mod:`paella_tui.supervisor.judge.evaluation`).

The check needs the tree as it was at some moment after the gate ended: any full scan that began
then answers it (:func:`~paella_tui.supervisor.store.sequenced.take_fresh`), so gates that end
together share one scan instead of taking one each, and a step kept meanwhile may be that scan.
A gate that ends while others of its pass run waits for them a moment (``GATHER_S``), so that
one scan, begun after all of them ended, checks them all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.evaluation_queue import Pass
from paella_tui.supervisor.judge.gate_cache import GateCache
from paella_tui.supervisor.store.sequenced import take_fresh
from paella_tui.supervisor.store.snapshot import Snapshotter

GATHER_S = 0.05
"""How long a gate that ended waits, at most, for the gates of its pass still running to end too,
so that one scan checks them all (a pass's gates often end within milliseconds of each other)."""


async def moved_under_gate(
    gate: Gate,
    current: Pass,
    *,
    ended: float,
    snapshotter: Snapshotter,
    cache: GateCache,
    warn: Callable[[str], None],
) -> bool:
    """Whether the workspace left the pass's tree before ``ended`` (``time.monotonic()``, taken
    once ``gate`` ended), in a path the gate reads: anywhere for a gate without ``paths``, else
    under them (README: a gate's ``paths``). Unverifiable counts as moved."""
    current.last_end = max(current.last_end, ended)
    await _gather(current)
    async with current.check:
        try:
            now = await asyncio.to_thread(
                take_fresh, snapshotter, ended, "a snapshot for the gates"
            )
        except PaellaError as exc:
            # Unverifiable is as good as moved: such a result must not be trusted.
            warn(f"could not check the tree after a gate: {exc}")
            return True
    if now.tree == current.tree:
        return False
    # Changes only where the gate does not read leave its verdict on the pass's tree true.
    return not await asyncio.to_thread(cache.untouched, gate, current.tree, now.tree)


async def _gather(current: Pass) -> None:
    """Tell the pass a gate ended; wait (``GATHER_S`` at most) for the gates running now to end."""
    others = set(current.running)
    async with current.ends:
        current.ends.notify_all()
        if others:
            # The check scans after the last of them ended: correct for every one of them. The
            # wait only trades a few milliseconds of a verdict for one scan instead of several.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    current.ends.wait_for(lambda: not others & current.running), GATHER_S
                )
