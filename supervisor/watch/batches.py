"""What one batch of watch events comes to: the relevant paths, a re-plan, unwatched folders.

Git decides what it ignores, once per path and burst, in one ``git check-ignore``-like call for
the batch (:mod:`ignore_verdicts`): as ``git check-ignore`` with the index would (a tracked file
that matches ``.gitignore`` still counts, as it does for a snapshot), but the cheap way, the
rules without the index and each folder once, so a folder git ignores decides every path under
it. The verdicts are kept for one burst only, across its batches,
because the rules can change with the next one. A deleted folder stands for what was in it (one
verdict for a deleted tree, not one per file). A new folder stands for what is in it (files may
have landed there before any watch on it existed): its files are reported instead, when there
are few. A new folder where a watched one of the same name was is another folder: the old watch
went with the old one (:attr:`Batch.renewed`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

import watchfiles

from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.ignore_rules import rules_path
from paella_tui.supervisor.watch.ignore_verdicts import IgnoreVerdicts
from paella_tui.supervisor.watch.streams import dev_ino, inotify_watched
from paella_tui.supervisor.watch.watch_plan import PathRules, files_in

_ADDED = watchfiles.Change.added
_BIG_FOLDER = 100  # subfolders: a new ignored folder this big is worth a re-plan to unwatch it


@dataclass(frozen=True)
class Batch:
    """What one batch of events comes to."""

    report: set[str]
    """Relevant paths to report (files; a new folder only when it holds too many to list; a
    deleted folder for everything that was in it)."""
    replan: bool
    """A new folder appeared where only its parent is watched, or a .gitignore changed."""
    unwatched: tuple[str, ...] = ()
    """New folders inside watched ones that inotify is not watching (the watch limit)."""
    renewed: tuple[str, ...] = ()
    """Absolute folders the plan watches on their own that were made again (deleted and made,
    renamed in): their watch went with the old folder, so the watches must start again."""


@dataclass
class _Sorted:
    """The candidates of a batch, sorted before git is asked."""

    considered: list[str] = field(default_factory=list)
    ask: list[str] = field(default_factory=list)
    expanded: dict[str, list[str]] = field(default_factory=dict)
    new_folders: list[str] = field(default_factory=list)
    """New folders directly inside flat-watched ones: a re-plan watches them."""
    to_verify: list[str] = field(default_factory=list)
    """New folders inside recursively watched ones, which notify should have watched itself."""
    big: list[str] = field(default_factory=list)


class Classifier:
    """Classifies batches for one watcher; keeps the verdicts of the current burst."""

    def __init__(self, rules: PathRules, git: Git) -> None:
        self.rules = rules
        self._git = git
        self.ignores = IgnoreVerdicts(git)
        """The burst's ignore verdicts (git's rules, once per folder)."""
        self.verdicts: dict[str, bool] = {}
        """Path -> relevant, for the current burst."""
        self._listed: dict[str, tuple[int, int]] = {}

    def new_burst(self) -> None:
        """Forget every verdict: the ignore rules and the index may change between bursts."""
        self.verdicts.clear()
        self.ignores = IgnoreVerdicts(self._git)

    def classify(
        self,
        candidates: dict[str, watchfiles.Change],
        flat: set[str],
        inotify: bool,
        watched: frozenset[str] = frozenset(),
    ) -> Batch:
        """Which changes are relevant, with one git call for the lot (blocking).

        ``flat`` holds the absolute folders watched without their subfolders, ``watched`` every
        absolute folder the plan names (flat or deep).
        """
        # A deleted folder stands for what was in it: one verdict for a deleted tree, not one
        # per file (50,000 deleted files cost 3-5 x the ``git add -A`` recording them). A path
        # both deleted and added in the batch was made again: it counts as added.
        stand_in = self.ignores.stand_in
        merged: dict[str, watchfiles.Change] = {}
        for rel, change in candidates.items():
            key = stand_in(rel)
            if merged.get(key) != _ADDED:
                merged[key] = change
        found = self._sort(merged, flat)
        ask = [*found.ask, *found.to_verify]
        unknown = [p for p in dict.fromkeys(ask) if p not in self.verdicts]
        if unknown:
            ignored = self.ignores.ignored(unknown)
            self.verdicts.update((p, p not in ignored) for p in unknown)
        verdict = self.verdicts.get
        rules_read = self.ignores.rules_read

        def counts(path: str) -> bool:
            # A .gitignore that ignores itself still changes the rules of its folder.
            return bool(verdict(path)) or rules_read(path)

        report = {p for p in found.considered if counts(p) and p not in found.expanded}
        for folder, inside in found.expanded.items():
            if verdict(folder):
                report.update(p for p in inside if counts(p))
        replan = (
            any(verdict(p) for p in found.new_folders)
            or any(rules_path(p) for p in report)
            # A big new folder git ignores (an npm install in a subproject): prune it.
            or any(verdict(p) is False for p in found.big)
        )
        # An ignored folder may go unwatched.
        to_verify = [p for p in found.to_verify if verdict(p)]
        unwatched = self._unwatched(to_verify) if to_verify and inotify else []
        # The plan names it, yet it was just added: not the folder the plan's watch is on.
        renewed = [
            full for p in found.new_folders if verdict(p) and (full := self.rules.abs(p)) in watched
        ]
        return Batch(
            report=report,
            replan=replan,
            unwatched=tuple(sorted(unwatched)),
            renewed=tuple(sorted(renewed)),
        )

    def counted(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` (changed files) that count: the ones git does not ignore, and a
        ``.gitignore`` git reads, as the burst's verdicts so far decide (blocking)."""
        ignored = self.ignores.ignored(paths)
        return {p for p in paths if p not in ignored or self.ignores.rules_read(p)}

    def _sort(self, candidates: dict[str, watchfiles.Change], flat: set[str]) -> _Sorted:
        found = _Sorted()
        links: dict[str, bool] = {}
        for rel, change in candidates.items():
            full = self.rules.abs(rel)
            if _beyond_symlink(rel, self.rules.root, links):
                # Git records the link, never what lies behind it (and check-ignore would fail).
                self.verdicts[rel] = False
                continue
            if _is_dir(full):
                if change != _ADDED:
                    continue  # a folder's own metadata: git does not record it
                self._new_folder(rel, full, flat, found)
            found.considered.append(rel)
            found.ask.append(rel)
        return found

    def _new_folder(self, rel: str, full: str, flat: set[str], found: _Sorted) -> None:
        subfolders: list[str] = []
        in_flat = os.path.dirname(full) in flat
        if in_flat:
            found.new_folders.append(rel)
        inside = files_in(self.rules, full, rel, subfolders, self._listed)
        if not in_flat:
            found.to_verify += [rel, *(self.rules.rel(f) for f in subfolders)]
        if inside is None or len(subfolders) > _BIG_FOLDER:
            found.big.append(rel)
        if inside is not None:
            found.expanded[rel] = inside
            found.ask.extend(inside)

    def _unwatched(self, to_verify: list[str]) -> list[str]:
        """notify drops a failed watch on a new folder silently (the watch limit): look for
        each new folder among this process's inotify watches."""
        watched = inotify_watched()
        if watched is None:
            return []
        return [
            p
            for p in to_verify
            if dev_ino(self.rules.abs(p)) not in watched and os.path.isdir(self.rules.abs(p))
        ]


def _beyond_symlink(rel: str, root: str, cache: dict[str, bool]) -> bool:
    """Whether one of ``rel``'s folders is a symbolic link.

    ``cache`` maps a folder to whether it or one of its own folders is a link: a burst of
    thousands of files in a few folders looks at each folder once.
    """
    parent = rel.rpartition("/")[0]
    if not parent:
        return False
    known = cache.get(parent)
    if known is None:
        try:
            link = stat.S_ISLNK(os.lstat(os.path.join(root, parent)).st_mode)
        except OSError:
            link = False
        known = link or _beyond_symlink(parent, root, cache)
        cache[parent] = known
    return known


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
