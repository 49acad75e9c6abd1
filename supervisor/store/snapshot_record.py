"""The record of a checkpoint or salvage snapshot (SPEC 5), as the ledger, the run's state and
``status --json`` hold it: plain data, so that the run's state and its events need nothing of
how a snapshot is taken."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

Kind = Literal["checkpoints", "salvage", "steps"]
"""What a snapshot ref holds; steps (:mod:`paella_tui.supervisor.store.steps`) are rollback targets too."""
_KINDS = frozenset(("checkpoints", "salvage", "steps"))


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

    def to_row(self) -> list[Any]:
        """The record as a row of its fields in order: how the run's kept state holds it (a
        run keeps a thousand; rows are read back faster than objects with their keys)."""
        return [
            self.kind,
            self.n,
            self.ref,
            self.commit,
            self.tree,
            self.head,
            self.branch,
            self.t,
            self.episode,
            list(self.gates_green),
            self.label,
            self.reason,
            [dict(f) for f in self.skipped_files],
            list(self.uncovered),
            self.index,
        ]

    @classmethod
    def from_row(cls, row: Any) -> SnapshotRecord:
        """A record from :meth:`to_row`'s row, every field checked against its declared type as
        strictly as the kept state's generic decoder does; ValueError when one is unfit."""
        if type(row) is not list or len(row) != 15:
            raise ValueError("expected a snapshot row of 15 fields")
        kind, n, ref, commit, tree, head, branch, t, episode = row[:9]
        green, label, reason, skipped, uncovered, index = row[9:]
        # Straight-line checks (no generator per field): a run's state holds a thousand rows.
        if type(kind) is not str or kind not in _KINDS or type(n) is not int:
            raise ValueError(f"not a snapshot's kind and number: {kind!r}, {n!r}")
        if not (
            type(ref) is str
            and type(commit) is str
            and type(tree) is str
            and type(t) is str
            and type(label) is str
            and type(reason) is str
        ):
            raise ValueError("a snapshot's ref, commit, tree, time, label and reason are text")
        if not (
            (head is None or type(head) is str)
            and (branch is None or type(branch) is str)
            and (index is None or type(index) is str)
        ):
            raise ValueError("a snapshot's head, branch and index are text or null")
        if not (episode is None or type(episode) is int or type(episode) is str):
            raise ValueError(f"not an episode: {episode!r}")
        if type(skipped) is not list or (skipped and not _objects(skipped)):
            raise ValueError("a snapshot's skipped files are objects")
        return cls(
            cast(Kind, kind),
            n,
            ref,
            commit,
            tree,
            head,
            branch,
            t,
            episode,
            _texts(green),
            label,
            reason,
            tuple(dict(f) for f in skipped),
            _texts(uncovered),
            index,
        )

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


def _texts(value: Any) -> tuple[str, ...]:
    """A list of strings as a tuple; ValueError for anything else."""
    if type(value) is not list:
        raise ValueError(f"expected a list of text, found {str(value)[:40]}")
    for item in value:
        if type(item) is not str:
            raise ValueError(f"expected text, found {str(item)[:40]}")
    return tuple(value)


def _objects(values: list[Any]) -> bool:
    """Whether every value is a JSON object (its keys are text)."""
    return all(type(v) is dict and all(type(k) is str for k in v) for v in values)
