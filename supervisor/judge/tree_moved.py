"""Whether the workspace left a pass's tree while one of its gates ran (split from
:mod:`paella_tui.supervisor.judge.evaluation`).

The check needs the tree as it was at some moment after the gate ended: any full scan that began
then answers it (:func:`~paella_tui.supervisor.store.sequenced.take_fresh`), so gates that end
together share one scan instead of taking one each, and a step kept meanwhile may be that scan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.evaluation_queue import Pass
from paella_tui.supervisor.judge.gate_cache import GateCache
from paella_tui.supervisor.store.sequenced import take_fresh
from paella_tui.supervisor.store.snapshot import Snapshotter


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
