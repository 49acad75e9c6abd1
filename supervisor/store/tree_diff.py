"""What changed between two snapshot trees: files and lines, for recovery facts, the handoff and the picker.

Snapshots hold raw bytes, so a file whose line endings flipped (an agent's editor writing LF into
a CRLF checkout under ``core.autocrlf``) differs on every line. Counted as such, a one-line edit
read "+5,645 −5,644": a rewrite-sized change is counted again with a CR at the end of a line
ignored, and when that count is smaller, it is the one given, with ``line_endings`` set so that a
view says the line endings changed too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paella_tui.supervisor.store.workspace import Workspace


@dataclass(frozen=True)
class FileChange:
    """One changed path and its line counts (None for binary files)."""

    path: str
    added: int | None
    removed: int | None
    line_endings: bool = False
    """Lines also changed only by their line ending (CRLF ↔ LF); ``added`` and ``removed`` count
    the other changes."""


REWRITE_LINES = 20
"""A file with at least this many lines both added and removed is counted again ignoring a CR
at the end of a line (one more git process, only for such files)."""
MAX_PATHS = 1000
"""More rewrites than this are counted again over the whole diff rather than named on argv."""


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
    rewrites = [c.path for c in changes if min(c.added or 0, c.removed or 0) >= REWRITE_LINES]
    if rewrites:
        changes = _line_endings_apart(workspace, old_tree, new_tree, changes, rewrites)
    return changes


def _line_endings_apart(
    workspace: Workspace, old_tree: str, new_tree: str, changes: list[FileChange], paths: list[str]
) -> list[FileChange]:
    """``changes`` with the rewrites among ``paths`` counted without line-ending changes."""
    named = ["--", *paths] if len(paths) <= MAX_PATHS else []
    args = ["diff-tree", "-r", "-z", "--numstat", "--no-renames", "--ignore-cr-at-eol"]
    data = workspace.git.run(
        [*args, old_tree, new_tree, *named], env={"GIT_LITERAL_PATHSPECS": "1"}
    ).stdout
    blind: dict[str, tuple[int, int]] = {}
    for item in data.split(b"\0"):
        parts = item.split(b"\t", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            blind[parts[2].decode(errors="surrogateescape")] = (int(parts[0]), int(parts[1]))
    wanted = set(paths)
    out = []
    for change in changes:
        if change.path in wanted:
            # A path git no longer lists with CR ignored differs only by its line endings.
            added, removed = blind.get(change.path, (0, 0))
            if (added, removed) != (change.added, change.removed):
                change = replace(change, added=added, removed=removed, line_endings=True)
        out.append(change)
    return out


def totals(changes: list[FileChange]) -> tuple[int, int]:
    """Lines added and removed over all text files."""
    return sum(c.added or 0 for c in changes), sum(c.removed or 0 for c in changes)
