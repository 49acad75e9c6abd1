"""The facts of a recovery (SPEC 9): how the attempt ended, the base, the gates now with their
regressions, what changed since the base, and where each regressed gate broke."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from paella_tui.supervisor.judge.breaks import BreakTracker
from paella_tui.supervisor.run.events import RED, AgentExited, Ending, GateResult, RecoveryFacts
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord
from paella_tui.supervisor.store.tree_diff import changes_between, totals
from paella_tui.supervisor.store.workspace import Workspace


@dataclass(frozen=True)
class JudgedTree:
    """The tree a recovery describes, the results known on it, and whether they are final."""

    tree: str
    results: tuple[GateResult, ...]
    final: bool
    """The final evaluation finished (else ``results`` are the newest known)."""


def recovery_facts(
    *,
    ending: Ending,
    exited: AgentExited,
    judged: JudgedTree,
    base: SnapshotRecord | None,
    since: str,
    regressed: Collection[str],
    workspace: Workspace,
    breaks: BreakTracker,
    note: str | None = None,
) -> RecoveryFacts:
    """The facts, with the changes from ``since`` (the base's tree, else the run's start) to the
    judged tree; ``note`` is said after how it ended (protected files changed). Runs git."""
    changes = changes_between(workspace, since, judged.tree)
    added, removed = totals(changes)
    # The run state's rule (a red on the very tree a gate passed on is no regression).
    regressions = tuple(r.gate for r in judged.results if r.gate in regressed and r.status in RED)
    how = "stopped by you" if exited.stopped_by_user else exited.describe()
    if note:
        how = f"{how}, but {note}"
    found, before_break = breaks.facts(regressions)
    return RecoveryFacts(
        ending=ending,
        how=how,
        attempt=exited.attempt,
        tail=exited.tail[-15:],
        base=base,
        gates_now=judged.results,
        regressions=regressions,
        changed_files=tuple(c.path for c in changes),
        lines_added=added,
        lines_removed=removed,
        default="rollback" if regressions and base is not None else "continue",
        gates_final=judged.final,
        breaks=found,
        before_break=before_break,
        tree=judged.tree,
    )
