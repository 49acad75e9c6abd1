"""What changed between two snapshot trees: files and lines, for recovery facts, the handoff and the picker."""

from __future__ import annotations

from dataclasses import dataclass

from paella_tui.supervisor.store.workspace import Workspace


@dataclass(frozen=True)
class FileChange:
    """One changed path and its line counts (None for binary files)."""

    path: str
    added: int | None
    removed: int | None


def changes_between(workspace: Workspace, old_tree: str, new_tree: str) -> list[FileChange]:
    """The files that differ from ``old_tree`` to ``new_tree``, with lines added and removed."""
    if old_tree == new_tree:
        return []
    data = workspace.git.run(
        ["diff-tree", "-r", "-z", "--numstat", "--no-renames", old_tree, new_tree]
    ).stdout
    changes: list[FileChange] = []
    # -z --numstat: "added\tremoved\tpath\0" per file; binary files show "-\t-".
    for item in data.split(b"\0"):
        if not item:
            continue
        parts = item.split(b"\t", 2)
        if len(parts) != 3:
            continue
        added, removed, path = parts
        changes.append(
            FileChange(
                path=path.decode(errors="surrogateescape"),
                added=None if added == b"-" else int(added),
                removed=None if removed == b"-" else int(removed),
            )
        )
    return changes


def totals(changes: list[FileChange]) -> tuple[int, int]:
    """Lines added and removed over all text files."""
    return sum(c.added or 0 for c in changes), sum(c.removed or 0 for c in changes)
