"""The gate results an evaluator already knows: cached by (gate name, definition key, judged
tree), reused for a gate with ``paths`` while nothing under them changed, and read back from the
ledger's ``gate-finished`` records on a resumed run.

The judged tree is the one the gates ran on: the workspace tree itself, or (while protected files
differ from their frozen content) that tree with them held at it (``judge/frozen.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import replace
from typing import Any

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.base.globs import match_any
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.run.events import GREEN, RED, GateResult
from paella_tui.supervisor.store.gitcli import Git

_MAX_JUDGED_TREES = 10_000


class GateCache:
    """Known results per gate definition and judged tree; two gates may share a command, never
    results."""

    def __init__(self, gates: Iterable[Gate], git: Git) -> None:
        self.keys = {gate.name: gate.definition_key() for gate in gates}
        """Each gate's definition key: a changed definition never reuses an old result."""
        self._git = git
        self._results: dict[tuple[str, str, str], GateResult] = {}
        self._judged_trees: dict[str, str] = {}
        """Workspace tree -> the tree its gates judged (they differ while protected files do)."""

    def put(self, gate: str, judged: str, result: GateResult) -> None:
        """Keep ``result`` of ``gate`` on the judged tree ``judged``."""
        self._results[(gate, self.keys[gate], judged)] = result

    def judged_as(self, tree: str, judged: str) -> None:
        """The gates judge workspace tree ``tree`` as ``judged``."""
        if len(self._judged_trees) > _MAX_JUDGED_TREES:
            self._judged_trees.clear()  # only the latest results' trees are ever looked up
        self._judged_trees[tree] = judged

    def hit(self, gate: str, tree: str, judged: str) -> GateResult | None:
        """The cached result of ``gate`` on ``judged``, as a result on ``tree``."""
        hit = self._results.get((gate, self.keys[gate], judged))
        return replace(hit, tree=tree, cached=True) if hit is not None else None

    def unchanged(
        self, gate: Gate, tree: str, judged: str, previous: GateResult | None
    ) -> GateResult | None:
        """``previous`` carried over to ``tree`` when nothing under ``gate.paths`` changed
        between the trees they judged (blocking: git; called in a thread)."""
        if not gate.paths or previous is None or previous.tree == tree:
            return None
        before = self._judged_trees.get(previous.tree, previous.tree)
        changed = self._changed_paths(before, judged)
        if changed is None or any(match_any(path, gate.paths) for path in changed):
            return None
        result = replace(previous, tree=tree, cached=True)
        self.put(gate.name, judged, result)
        return result

    def untouched(self, gate: Gate, old: str, new: str) -> bool:
        """Whether no path ``gate`` reads (its ``paths``) differs between two trees; False for a
        gate without ``paths`` (it reads everything) or when git cannot tell (blocking: git)."""
        if not gate.paths:
            return False
        changed = self._changed_paths(old, new)
        return changed is not None and not any(match_any(path, gate.paths) for path in changed)

    def _changed_paths(self, old: str, new: str) -> list[str] | None:
        """Paths that differ between two trees; None when git cannot tell (a pruned tree)."""
        try:
            return self._git.lines_z(
                ["diff-tree", "-r", "-z", "--name-only", "--no-renames", old, new]
            )
        except GitError:
            return None


def reads_any(gates: Iterable[Gate], paths: Iterable[str]) -> bool:
    """Whether a change of ``paths`` can re-run a gate: one without ``paths`` reads everything,
    one with them reads what they match."""
    changed = tuple(paths)
    return any(not g.paths or any(match_any(p, g.paths) for p in changed) for g in gates)


def result_from_record(record: dict[str, Any], known: Set[str]) -> GateResult | None:
    """The verdict a ledger ``gate-finished`` record holds (None: another kind, stale, or a gate
    the contract no longer has)."""
    if record.get("kind", "gate-finished") != "gate-finished" or record.get("stale"):
        return None
    name, status, tree = record.get("gate"), record.get("status"), record.get("tree")
    if not isinstance(name, str) or name not in known or status not in GREEN | RED:
        return None
    if not isinstance(tree, str):
        return None
    return GateResult(
        gate=name,
        status=status,
        tree=tree,
        duration_s=float(record.get("duration_s") or 0.0),
        exit_code=record.get("exit_code"),
        attempts=int(record.get("attempts") or 1),
        log_path=record.get("log"),
        message=record.get("message") or "",
    )
