"""A green tree kept as the checkpoint of the episodes it completes (split from
:mod:`paella_tui.supervisor.judge.evaluation`)."""

from __future__ import annotations

import asyncio
import contextlib

from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, take_checkpoint
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter
from paella_tui.supervisor.store.snapshot import Snapshot, Snapshotter


async def green_checkpoint(
    run: Run,
    contract: Contract,
    snapshotter: Snapshotter,
    snap: Snapshot,
    *,
    episode: int,
    green: tuple[str, ...],
) -> tuple[SnapshotRecord, bool]:
    """The checkpoint of ``episode`` holding ``snap``, and whether it was taken now (False: one
    already held it, and it is the base again, no copy). Raises PaellaError."""
    existing = await asyncio.to_thread(checkpoints.records, run, "checkpoints")
    for record in reversed(existing):
        if record.tree == snap.tree and record.episode == episode:
            return record, False
    label = f"episode {episode}: {contract.episodes[episode - 1].name}"

    def take() -> SnapshotRecord:
        # The tree is snapshotted already: the checkpoint commits it and writes no work tree,
        # so the run's newest scan may still be shared after it.
        only = (
            snapshotter.only_snapshots()
            if isinstance(snapshotter, SequencedSnapshotter)
            else contextlib.nullcontext()
        )
        with only:
            return take_checkpoint(
                run, snapshotter, episode=episode, gates_green=green, label=label, snap=snap
            )

    return await asyncio.to_thread(take), True
