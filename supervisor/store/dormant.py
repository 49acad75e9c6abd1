"""Files the user's index tracks, deleted and written back: held again, ignored or not.

A snapshot holds what ``git add -A`` would: the user's tracked files, ignored or not, and the
untracked ones git does not ignore. A fresh snapshot seeds the private index from the user's
index, so a tracked file the rules ignore (force-added: a vendored ``dist/``, a ``*.log`` kept
on purpose) is in it. But once such a file is deleted, the snapshot drops its entry, and when
the file is written back no listing names it again: ``diff-files`` knows only the private
index's entries and ``ls-files --others`` skips what git ignores. Every later snapshot left it
out, and a rollback to a checkpoint from before the deletion wrote that checkpoint's version over
the file with no salvage of it.

Whether the rules ignore the file when it comes back cannot be known when it goes (a
``.gitignore`` deleted and written back as ``*`` ignores itself only then). So a snapshot that
drops the entry of a file the user's index tracks (one ``ls-files`` over the dropped paths, only
when there are some) remembers its path as *dormant* in the memo, and each snapshot after it
looks for the dormant paths on disk (one ``lstat`` each): a file there again is added back (a
listing may name it too; it is added once). When the user's index changed since, the dormant
paths it no longer tracks are forgotten (one ``ls-files``). The memo is the agent's to write: a
dormant path is added back only after the user's index, asked then, says it tracks it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

from paella_tui.supervisor.store.gitcli import literal_pathspecs
from paella_tui.supervisor.store.workspace import Workspace

MAX_PATHSPECS = 1000
"""More paths than this are matched against a whole listing instead of named to git (an
argument list has a size limit)."""


def index_stamp(workspace: Workspace) -> list[int] | None:
    """The user's index as a stamp (inode, size, times): git writes a new file each time."""
    try:
        st = os.stat(workspace.git_dir / "index")
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _paths(value: object) -> list[str] | None:
    """A list of relative paths read from the memo, or None when it is not one."""
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return None
    if any(not p or p.startswith("/") or ".." in p.split("/") for p in value):
        return None
    return value


class Dormant:
    """Tracked files deleted from one snapshotter's private index (see the module docstring)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def back(self, memo: dict[str, Any] | None) -> tuple[list[str], list[str]]:
        """(the dormant paths on disk again that the user's index tracks: add them; the ones
        still away)."""
        kept = (memo or {}).get("dormant")
        if not isinstance(kept, dict):
            return [], []
        dormant = _paths(kept.get("paths")) or []
        asked = False
        if dormant and kept.get("index") != index_stamp(self.workspace):
            # The user's index changed: what it no longer tracks is no longer dormant.
            dormant, asked = self.tracked(dormant), True
        present = [p for p in dormant if _file_there(os.path.join(self.workspace.root, p))]
        if not present:
            return [], dormant
        tracked = set(present if asked else self.tracked(present))
        return [p for p in present if p in tracked], [p for p in dormant if p not in present]

    def memo(self, away: Sequence[str], removed: Sequence[str]) -> dict[str, object]:
        """What the memo keeps: ``away`` (still dormant) and the paths of ``removed`` (dropped
        by this snapshot) that the user's index tracks."""
        newly = self.tracked(removed) if removed else []
        return {"index": index_stamp(self.workspace), "paths": sorted({*away, *newly})}

    def tracked(self, paths: Sequence[str]) -> list[str]:
        """Of ``paths``, the ones the user's index tracks (a whole listing, matched here, for
        many paths: an argument list has a size limit)."""
        args = ["ls-files", "-z", "-c"]
        if len(paths) <= MAX_PATHSPECS:
            return self.workspace.git.lines_z([*args, "--", *literal_pathspecs(paths)])
        wanted = set(paths)
        return [p for p in self.workspace.git.lines_z(args) if p in wanted]


def _file_there(path: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)
