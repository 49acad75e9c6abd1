"""The words of a regression: where the gate was green, and what it does now (SPEC 8)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from paella_tui.supervisor.run.events import GateResult
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

_VERBS = {"fail": "now fails", "timeout": "now times out", "error": "now cannot run"}


def regression_message(
    result: GateResult, green_trees: Collection[str], checkpoints: Sequence[SnapshotRecord]
) -> str:
    """``gate "x" was green at checkpoint 2 (episode 1) and now fails: ...``: the newest
    checkpoint the gate was green at, else the tree it was green on before any checkpoint."""
    name = result.gate
    where = next(
        (c for c in reversed(checkpoints) if name in c.gates_green or c.tree in green_trees), None
    )
    if where is not None:
        what = f"episode {where.episode}" if isinstance(where.episode, int) else "manual"
        at = f"at checkpoint {where.n} ({what})"
    else:
        earlier = next((t for t in sorted(green_trees) if t != result.tree), "?")
        at = f"on an earlier tree ({earlier[:12]}) before any checkpoint"
    verb = _VERBS.get(result.status, "now fails")
    return f'gate "{name}" was green {at} and {verb}: the newest work broke an earlier invariant'
