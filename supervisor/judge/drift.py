"""Drift the run loop checks for (SPEC 8): protected files, scope, the contract, stalls,
claims of done, and rewound history.

Regressions are the evaluator's to find and flapping the watcher's. Each check returns the
:class:`~paella_tui.supervisor.run.events.DriftDetected` events of facts that are new: a fact already reported
is not reported again on the next evaluation, and is re-armed only once it stops being true (a
reverted file, resumed activity, a branch that holds the checkpoint again).

When one evaluation finds more than a few new paths of one kind (an agent that rewrote a whole
folder outside the scope), they become one event naming the first few and the count, so the
feed, the bell and the handoff are not flooded; every path still counts as reported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.base.files import read_regular_file
from paella_tui.supervisor.base.globs import match_any
from paella_tui.supervisor.contract.model import CONTRACT_FILE, MAX_CONTRACT_BYTES, Contract
from paella_tui.supervisor.judge.frozen import FrozenFiles
from paella_tui.supervisor.run.events import DriftDetected, DriftKind
from paella_tui.supervisor.store.workspace import Workspace

_GROUP_AFTER = 3
"""More new paths than this, of one kind in one check, are reported as one event."""
_SHOWN = 3
"""How many paths a grouped event names."""


class DriftTracker:
    """Checks a run for drift against its frozen contract, reporting each distinct fact once."""

    def __init__(
        self, *, workspace: Workspace, contract: Contract, start_tree: str, contract_sha256: str
    ) -> None:
        self.workspace = workspace
        self.contract = contract
        self.start_tree = start_tree
        self.contract_sha256 = contract_sha256
        self._reported_paths: set[tuple[DriftKind, str]] = set()
        self._contract_reported = False
        self._stall_reported_at: float | None = None
        """The last activity time a stall was reported for; new activity re-arms the check."""
        self._claim_reported: tuple[int | None, frozenset[str]] | None = None
        self._history_reported: set[str] = set()
        self.frozen: FrozenFiles | None = None
        """The protected files' frozen content (start tree, or accepted since); None: the start."""

    # --- the tree --------------------------------------------------------------------------

    def check_tree(self, tree: str) -> list[DriftDetected]:
        """Protected, out-of-scope and contract changes between the run's start tree and ``tree``."""
        changed = self._changed_paths(tree)
        # A path back to its start state is re-armed: changing it again is a new fact.
        self._reported_paths = {key for key in self._reported_paths if key[1] in changed}
        events: list[DriftDetected] = []
        events += self._protected(changed)
        events += self._scope(changed)
        events += self._contract()
        return events

    def protected_changes(self, tree: str) -> list[str]:
        """Protected paths whose content in ``tree`` differs from the run's start (and
        ``paella.toml`` when it differs from the frozen contract): while any does, the run is
        not done, whatever the gates say (an edited test can turn its own gate green)."""
        if self.frozen is not None:
            # Against the frozen content, which a person may have moved on by accepting.
            hits = {c.path for c in self.frozen.differing(tree)}
            frozen_tree = self.frozen.tree
        else:
            changed = self._changed_paths(tree)
            hits = {p for p in changed if match_any(p, self.contract.protected_globs())}
            frozen_tree = self.start_tree
        if CONTRACT_FILE in hits:
            return sorted(hits)
        in_tree = self.workspace.git.run(
            ["cat-file", "-e", f"{frozen_tree}:{CONTRACT_FILE}"], check=False
        )
        if in_tree.returncode != 0 and (
            _sha256(self.workspace.root / CONTRACT_FILE) != self.contract_sha256
        ):
            # Not in the snapshots (an ignored paella.toml): its hash is the only witness.
            hits.add(CONTRACT_FILE)
        return sorted(hits)

    def _changed_paths(self, tree: str) -> set[str]:
        if tree == self.start_tree:
            return set()
        known = self.frozen.known_changes(tree) if self.frozen is not None else None
        if known is not None and self.frozen is not None and self.frozen.tree == self.start_tree:
            # The frozen files compared the same two trees for the gates: no second diff.
            return {c.path for c in known}
        return set(
            self.workspace.git.lines_z(
                ["diff-tree", "-r", "-z", "--name-only", "--no-renames", self.start_tree, tree]
            )
        )

    def _new(self, kind: DriftKind, paths: Sequence[str]) -> list[str]:
        """The paths not yet reported as ``kind``, now marked reported."""
        fresh = [p for p in sorted(paths) if (kind, p) not in self._reported_paths]
        self._reported_paths.update((kind, p) for p in fresh)
        return fresh

    def _protected(self, changed: set[str]) -> list[DriftDetected]:
        events: list[DriftDetected] = []
        for constraint in self.contract.constraints:
            if not constraint.protect:
                continue
            hits = [p for p in changed if match_any(p, constraint.protect)]
            # A path protected by two constraints is one fact: reported under the first.
            fresh = self._new("protected", hits)
            rule = f'"{constraint.text}"'
            if len(fresh) > _GROUP_AFTER:
                events.append(
                    DriftDetected(
                        drift="protected",
                        message=(
                            f"{_some(fresh)} changed, but the constraint {rule} protects them. "
                            "The agent must not change these files: review the changes, or roll "
                            "back to the last green checkpoint."
                        ),
                    )
                )
                continue
            for path in fresh:
                events.append(
                    DriftDetected(
                        drift="protected",
                        path=path,
                        message=(
                            f"{path} changed, but the constraint {rule} protects it. The agent "
                            "must not change this file: review the change, or roll back to the "
                            "last green checkpoint."
                        ),
                    )
                )
        return events

    def _scope(self, changed: set[str]) -> list[DriftDetected]:
        scope = self.contract.run.scope
        if not scope:
            return []
        # paella.toml is the contract, not work: its change is `contract` drift, not scope.
        outside = [p for p in changed if p != CONTRACT_FILE and not match_any(p, scope)]
        fresh = self._new("scope", outside)
        where = ", ".join(scope)
        if len(fresh) > _GROUP_AFTER:
            return [
                DriftDetected(
                    drift="scope",
                    message=(
                        f"{_some(fresh)} changed, outside the run's scope ({where}). Work outside "
                        "the scope suggests the agent lost the thread: check these changes."
                    ),
                )
            ]
        return [
            DriftDetected(
                drift="scope",
                path=path,
                message=(
                    f"{path} changed, outside the run's scope ({where}). Work outside the scope "
                    "suggests the agent lost the thread: check this change."
                ),
            )
            for path in fresh
        ]

    def _contract(self) -> list[DriftDetected]:
        live = self.workspace.root / CONTRACT_FILE
        digest = _sha256(live)
        if digest == self.contract_sha256:
            self._contract_reported = False
            return []
        if self._contract_reported:
            return []
        self._contract_reported = True
        what = "was deleted" if digest is None else "changed"
        return [
            DriftDetected(
                drift="contract",
                path=CONTRACT_FILE,
                message=(
                    f"{CONTRACT_FILE} {what} during the run. The run keeps using the copy frozen "
                    "at its start; the change takes effect only in a new run."
                ),
            )
        ]

    # --- time, exits and history -----------------------------------------------------------

    def check_stall(self, last_activity: float, now: float) -> list[DriftDetected]:
        """``stall`` once when nothing happened for ``stall_after``; new activity re-arms it."""
        stall_after = self.contract.run.stall_after
        if now - last_activity < stall_after or self._stall_reported_at == last_activity:
            return []
        self._stall_reported_at = last_activity
        quiet = format_duration(now - last_activity)
        return [
            DriftDetected(
                drift="stall",
                message=(
                    f"No agent output and no file change for {quiet} (stall_after is "
                    f"{format_duration(stall_after)}). The agent may be stuck or waiting for "
                    "input: look at its output, or stop it and resume."
                ),
            )
        ]

    def check_claimed_done(
        self, exit_code: int | None, red_gates: Sequence[str], *, attempt: int | None = None
    ) -> list[DriftDetected]:
        """``claimed-done`` when the agent exited 0 while contract gates are red (once per attempt)."""
        if exit_code != 0 or not red_gates:
            self._claim_reported = None
            return []
        key = (attempt, frozenset(red_gates))
        if key == self._claim_reported:
            return []
        self._claim_reported = key
        names = ", ".join(dict.fromkeys(red_gates))
        plural = "s" if len(key[1]) > 1 else ""
        verb = "are" if plural else "is"
        return [
            DriftDetected(
                drift="claimed-done",
                gate=red_gates[0] if len(key[1]) == 1 else None,
                message=(
                    f"The agent exited 0 as if done, but gate{plural} {names} {verb} red. "
                    "Done is what the gates say, not what the agent says: the run is not done."
                ),
            )
        ]

    def check_history(self, checkpoint_head: str | None) -> list[DriftDetected]:
        """``history`` when the last checkpoint's HEAD is no longer an ancestor of HEAD."""
        if checkpoint_head is None:
            return []
        head = self.workspace.head()
        if head.commit is None:
            return []
        if head.commit == checkpoint_head:
            # HEAD has not moved: git found that commit, and a commit is its own ancestor.
            self._history_reported.discard(checkpoint_head)
            return []
        proc = self.workspace.git.run(
            ["merge-base", "--is-ancestor", checkpoint_head, head.commit], check=False
        )
        if proc.returncode == 0:
            self._history_reported.discard(checkpoint_head)
            return []
        if proc.returncode != 1 or checkpoint_head in self._history_reported:
            return []  # not 1: git could not tell (an unknown commit); say nothing rather than guess
        self._history_reported.add(checkpoint_head)
        where = f"The branch {head.branch}" if head.branch else "The detached HEAD"
        return [
            DriftDetected(
                drift="history",
                message=(
                    f"{where} was rewound: it is at {head.commit[:7]}, which no longer contains "
                    f"{checkpoint_head[:7]}, the HEAD of the last checkpoint. Commits made since "
                    "are off the branch, but the checkpoint and salvage refs still hold them."
                ),
            )
        ]


def _some(paths: Sequence[str]) -> str:
    """``a, b, c and 4 more files`` for a grouped event."""
    shown = ", ".join(paths[:_SHOWN])
    return f"{len(paths)} files ({shown} and {len(paths) - _SHOWN} more)"


def _sha256(path: Path) -> str | None:
    """The file's sha256 hex, or None when it cannot be read (deleted)."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_CONTRACT_BYTES)).hexdigest()
    except (OSError, ValueError):
        return None
