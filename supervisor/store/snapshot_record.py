"""The record of a checkpoint or salvage snapshot (SPEC 5), as the ledger, the run's state and
``status --json`` hold it: plain data, so that the run's state and its events need nothing of
how a snapshot is taken."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["checkpoints", "salvage", "steps"]
"""What a snapshot ref holds; steps (:mod:`paella_tui.supervisor.store.steps`) are rollback targets too."""


@dataclass(frozen=True)
class SnapshotRecord:
    """A checkpoint or salvage snapshot as the ledger and ``status --json`` hold it."""

    kind: Kind
    n: int
    ref: str
    commit: str
    tree: str
    head: str | None
    branch: str | None
    t: str
    episode: int | str | None = None
    """The episode number this checkpoint completes, ``"manual"``, or None (salvage)."""
    gates_green: tuple[str, ...] = ()
    label: str = ""
    reason: str = ""
    skipped_files: tuple[dict[str, Any], ...] = ()
    uncovered: tuple[str, ...] = field(default=())
    index: str | None = None
    """Salvage only: a commit of the user's index when it held staged changes (its 2nd parent)."""

    @property
    def name(self) -> str:
        """How a person names it on the command line: ``3`` or ``salvage:2``."""
        if self.kind == "steps":
            return f"step:{self.n}"
        return str(self.n) if self.kind == "checkpoints" else f"salvage:{self.n}"

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` shape of this record."""
        data: dict[str, Any] = {
            "n": self.n,
            "ref": self.ref,
            "commit": self.commit,
            "tree": self.tree,
            "head": self.head,
            "branch": self.branch,
        }
        if self.kind == "checkpoints":
            data.update(episode=self.episode, gates_green=list(self.gates_green), label=self.label)
        else:
            data.update(reason=self.reason)
            if self.index:
                data.update(index=self.index)
        data.update(
            skipped_files=list(self.skipped_files), uncovered=list(self.uncovered), t=self.t
        )
        return data

    @classmethod
    def from_ledger(cls, record: dict[str, Any]) -> SnapshotRecord:
        """Rebuild a record from its ledger line (``checkpoint`` or ``salvage`` kind)."""
        kind: Kind = "checkpoints" if record["kind"] == "checkpoint" else "salvage"
        return cls(
            kind=kind,
            n=int(record["n"]),
            ref=record["ref"],
            commit=record["commit"],
            tree=record["tree"],
            head=record.get("head"),
            branch=record.get("branch"),
            t=record["t"],
            episode=record.get("episode"),
            gates_green=tuple(record.get("gates_green") or ()),
            label=record.get("label", ""),
            reason=record.get("reason", ""),
            skipped_files=tuple(record.get("skipped_files") or ()),
            uncovered=tuple(record.get("uncovered") or ()),
            index=record.get("index"),
        )
