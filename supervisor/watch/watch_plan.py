"""What the watcher watches and what counts: the watch plan, and the file-system scans around it.

Relevant means a change git could snapshot: never anything under a ``.git`` folder, the git dir,
the common dir or paella's state dir; never a path matching a ``[watch] ignore`` glob (the path
or one of its folders); never a path git ignores (decided by the watcher, with git).

The plan prunes: the inotify backend of notify walks every folder under a recursive root and adds
one watch to each, ``.git/objects`` and an ignored ``node_modules`` included (3,100 folders take
~50 ms and 3,100 watches, 33,000 take ~420 ms and 33,000 of the per-user limit); polling
re-scans every folder each interval. So ``git status --ignored=matching`` names the folders git
ignores wholesale (their content can never be re-included, and one holding a tracked file is not
named), and those, ``.git`` and the state dir are never watched. Their ancestor folders get a
non-recursive ("flat") watch; every other folder directly inside an ancestor gets a recursive
("deep") one (new subfolders are picked up there by notify itself).

A new folder directly inside a flat one, or a changed ``.gitignore``, re-plans: the new watches
start before the old ones stop, and once they are live the files already in the new folder are
reported, so nothing written before its watch existed goes unnoticed. (For that moment both sets
of watches exist: a tree using over half the watch limit can tip into polling on a re-plan.) A
folder the plan names that is deleted and made again (or replaced by a file and back, or renamed
away with another renamed in its place) is another folder, whose watch went with the old one:
the watches start again although the plan reads the same.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from paella_tui.supervisor.base.globs import folder_match, match_any
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.workspace import Workspace

EXPAND_LIMIT = 2000
"""Files listed for a new folder (or a catch-up); past that the folder stands for them."""
_MTIME_MARGIN = 1.0  # seconds: file systems with coarse timestamps


@dataclass(frozen=True)
class WatchPlan:
    """Which folders are watched and how: the result of pruning what git ignores."""

    flat: tuple[str, ...]
    """Absolute folders watched without their subfolders (ancestors of pruned folders)."""
    deep: tuple[str, ...]
    """Absolute folders watched with everything under them."""
    pruned: tuple[str, ...] = field(default=(), compare=False)
    """Relative folders never watched: ``.git``, the state dir, folders git ignores wholesale."""


class PathRules:
    """A work tree's paths as the watcher sees them: relative names, and the cheap rules."""

    def __init__(self, workspace: Workspace, ignore: tuple[str, ...]) -> None:
        self.root = os.fspath(workspace.root)
        self.prefix = self.root.rstrip(os.sep) + os.sep
        self.ignore = ignore
        """``[watch] ignore`` globs."""
        found = {".git"}
        for folder in (workspace.git_dir, workspace.common_dir, workspace.state_dir):
            rel = self._rel_of(folder)
            if rel:
                found.add(rel)
        self.private = tuple(sorted(found))
        """Relative folders inside the work tree that belong to git or paella."""

    def _rel_of(self, path: Path) -> str | None:
        try:
            rel = Path(os.path.abspath(path)).relative_to(self.root)
        except ValueError:
            return None
        return rel.as_posix() if rel.parts else None

    def abs(self, rel: str) -> str:
        """The absolute path of a relative one."""
        if not rel:
            return self.root
        # Called once per path of a burst: a concatenation, where the separator allows it.
        return self.prefix + rel if os.sep == "/" else os.path.join(self.root, *rel.split("/"))

    def rel(self, path: str) -> str:
        """The relative (``/``-separated) name of an absolute path; "" outside the work tree."""
        if not path.startswith(self.prefix):
            return ""
        rel = path[len(self.prefix) :]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    def cheap_relevant(self, rel: str) -> bool:
        """Everything but git's ignore rules: .git folders, the state dir, ``[watch] ignore``."""
        if ".git" in rel.split("/"):
            return False
        for private in self.private:
            if rel == private or rel.startswith(private + "/"):
                return False
        # A glob that names a folder ignores everything in it, as in .gitignore; the path itself
        # may be a file or a folder: both readings count.
        return not (self.ignore and (folder_match(rel, self.ignore) or match_any(rel, self.ignore)))


def compute_plan(rules: PathRules, git: Git) -> WatchPlan:
    """Ask git which folders it ignores wholesale and plan watches around them (blocking)."""
    pruned = {p for p in rules.private if os.path.lexists(os.path.join(rules.root, p))}
    proc = git.run(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored=matching",
            "--untracked-files=normal",
            "--ignore-submodules=all",
            "--no-renames",
        ],
        check=False,
    )
    if proc.returncode == 0:
        for item in proc.stdout.split(b"\0"):
            if item.startswith(b"!! ") and item.endswith(b"/"):
                pruned.add(item[3:-1].decode(errors="surrogateescape"))
    ancestors: set[str] = set()
    for rel in pruned:
        parts = rel.split("/")
        ancestors.update("/".join(parts[:i]) for i in range(len(parts)))
    if not ancestors:
        return WatchPlan(flat=(), deep=(rules.root,), pruned=())
    deep = [
        path
        for folder in sorted(ancestors)
        for path in _deep_roots(rules, folder, ancestors, pruned)
    ]
    flat = tuple(rules.abs(a) for a in sorted(ancestors) if os.path.isdir(rules.abs(a)))
    return WatchPlan(flat=flat, deep=tuple(sorted(deep)), pruned=tuple(sorted(pruned)))


def _deep_roots(rules: PathRules, folder: str, ancestors: set[str], pruned: set[str]) -> list[str]:
    """The folders directly inside an ancestor that are watched recursively."""
    try:
        entries = list(os.scandir(rules.abs(folder)))
    except OSError:
        return []
    roots = []
    for entry in entries:
        rel = f"{folder}/{entry.name}" if folder else entry.name
        if rel in ancestors or rel in pruned or not entry.is_dir(follow_symlinks=False):
            continue
        if rules.ignore and folder_match(rel, rules.ignore):
            continue
        roots.append(entry.path)
    return roots


def changed_since(rules: PathRules, plan: WatchPlan, since: float) -> list[str]:
    """Relative paths under the plan's folders modified since ``since`` (blocking).

    A folder modified since then with nothing new inside lost an entry (a deletion, a
    rename): it is reported itself.
    """
    since_ns = int((since - _MTIME_MARGIN) * 1e9)
    files: list[str] = []
    folders: list[str] = []
    stack = [(p, rules.rel(p), False) for p in plan.flat]
    stack += [(p, rules.rel(p), True) for p in plan.deep]
    while stack and len(files) <= EXPAND_LIMIT:
        path, sub, deep = stack.pop()
        for entry, child, st in _entries(rules, path, sub):
            if stat.S_ISDIR(st.st_mode):
                if deep:
                    stack.append((entry.path, child, True))
                    if st.st_mtime_ns >= since_ns:
                        folders.append(child)
            elif st.st_mtime_ns >= since_ns:
                files.append(child)
    if len(files) > EXPAND_LIMIT:
        return [rules.rel(p) for p in plan.deep] + files[:EXPAND_LIMIT]
    lost = [f for f in folders if not any(p.startswith(f + "/") for p in files)]
    return files + lost


def files_in(
    rules: PathRules,
    folder: str,
    rel: str,
    subfolders: list[str],
    listed: dict[str, tuple[int, int]],
) -> list[str] | None:
    """The files under a new folder not listed before as they are, or None if too many.

    The folders found under it are added to ``subfolders``; ``listed`` remembers what was
    found (the same folder is looked into twice: its event, then its new watch).
    """
    found: list[str] = []
    stack = [(folder, rel)]
    while stack:
        path, sub = stack.pop()
        for entry, child, st in _entries(rules, path, sub):
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, child))
                subfolders.append(entry.path)
                continue
            # A file unchanged since the first look is not news.
            signature = (st.st_mtime_ns, st.st_size)
            if listed.get(child) != signature:
                listed[child] = signature
                found.append(child)
        if len(found) > EXPAND_LIMIT:
            return None
    if len(listed) > 4 * EXPAND_LIMIT:
        listed.clear()
    return found


def _entries(
    rules: PathRules, path: str, sub: str
) -> list[tuple[os.DirEntry[str], str, os.stat_result]]:
    """The relevant entries of a folder (cheap rules), with their relative names and lstat."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return []
    found = []
    for entry in entries:
        child = f"{sub}/{entry.name}" if sub else entry.name
        if not rules.cheap_relevant(child):
            continue
        try:
            found.append((entry, child, entry.stat(follow_symlinks=False)))
        except OSError:
            continue
    return found


RULES_LOOK_S = 2.0
"""How often the watcher looks at the repository-wide ignore rules (:class:`RepositoryRules`)."""


class RepositoryRules:
    """``info/exclude`` and the excludes file (``core.excludesFile``, else git's default): rules
    no change in the work tree shows, yet they decide which folders the plan leaves unwatched.
    A folder they stop ignoring would stay unwatched, its edits never reported, so the watcher
    looks at them every :data:`RULES_LOOK_S` (two ``stat`` calls; the configuration is read
    again only when one of its files changed) and plans again when they changed."""

    def __init__(self, workspace: Workspace) -> None:
        from paella_tui.supervisor.store.ignore_rules import IgnoreRules

        self._rules = IgnoreRules(workspace, workspace.git, ())
        self._seen: tuple[tuple[str, tuple[int, ...] | None], ...] | None = None

    def changed(self) -> bool:
        """Whether they changed since the last call; the first call only records (blocking)."""
        now = tuple((path, _identity(path)) for path in self._rules.excludes_files())
        changed = self._seen is not None and now != self._seen
        self._seen = now
        return changed


def _identity(path: str) -> tuple[int, ...] | None:
    """What tells a rewrite (git follows a symlinked excludes file: so does this)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
