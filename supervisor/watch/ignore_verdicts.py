"""Git's ignore verdicts for the paths of one burst, each folder decided once (SPEC 6, 8).

The verdict is the one ``git check-ignore`` gives with the index: a path is ignored when the
ignore rules say so and it is not tracked (a tracked file that matches ``.gitignore`` still
counts, as it does for a snapshot). Asking ``git check-ignore --stdin`` for that directly costs
O(tracked files × paths asked): it matches every path against the whole index. A burst of 50,000
new files on a 20,000-file repository made 194 such calls and 35 s of git.

So the two halves are asked apart, and only what a burst has not decided yet:

- the rules, with ``check-ignore --no-index -v -n`` (one line of output per path asked, in
  order), for each new path and for each of its folders not asked before (a folder that exists:
  asked for a missing one, git could not tell that a rule such as ``build/`` applies, and a
  trailing slash would let the folder's own ``.gitignore`` judge it). A folder the rules ignore
  decides every path under it (git cannot re-include a file in an excluded folder), so later
  batches of the same burst ask nothing for them;
- whether a path the rules ignore is tracked, with one ``ls-files`` of the top-most ignored
  folders (or files) not listed before. Nearly always these hold nothing tracked.

One difference, on purpose: a path with glob characters is only itself here (``x*/build`` is
ignored though ``x*/a/build`` is tracked), as a snapshot sees it, where ``check-ignore`` would
match the name as a pathspec glob against the index.

A deleted folder stands for everything that was in it (:meth:`IgnoreVerdicts.stand_in`): the
paths of a burst whose folder no longer exists are reported as the outermost gone folder, asked
of the rules as a folder (``name/``: git cannot tell a missing path is one, and the pattern it
names tells whether it judged the folder or an empty name after it). Its verdict decides
them all, as for an existing ignored folder: when the rules ignore it, nothing in it was a
change a snapshot could see, bar its tracked files (``ls-files``); when they do not, it is
reported, and a snapshot looks at everything under it. Asking path by path instead cost as much
as 5 × the ``git add -A`` that records the deletion, for 50,000 deleted files (issue 17). What
the stand-in loses is the case of a folder whose files were all ignored by name, with no rule
for the folder: it is reported though nothing a snapshot holds changed, which costs a snapshot,
never a missed change.

A ``.gitignore`` git reads counts even when the rules ignore it (:meth:`IgnoreVerdicts.rules_read`):
a file that ignores itself still holds rules for its folder.

Verdicts live as long as this object: the watcher keeps one per burst, because the rules (and
the index) may change between bursts.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from paella_tui.supervisor.store.gitcli import Git, encode_paths_z
from paella_tui.supervisor.store.ignore_rules import rules_path

_LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}  # a file named ``*.c`` or ``:x`` is only itself
_MAX_ROOTS = 200


def folders_of(path: str) -> list[str]:
    """The folders ``path`` lies in, outermost first (``a/b/c`` -> ``a``, ``a/b``)."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


class IgnoreVerdicts:
    """Which paths git ignores, decided once per path and per folder for as long as it lives."""

    def __init__(self, git: Git) -> None:
        self._git = git
        self._root = git.root
        self._rules: dict[str, bool] = {}
        """Path -> ignored by the rules alone, without the index."""
        self._folders: dict[str, bool | None] = {}
        """Folder -> ignored by the rules; None: it was no folder when asked (paths decide)."""
        self._tracked: dict[str, list[str]] = {}
        """Root asked of ``ls-files`` -> the tracked paths under it, sorted."""
        self._all_tracked: list[str] | None = None
        self._ignoring: dict[str, str | None] = {}
        """Folder whose folders (and itself) all have verdicts -> the outermost ignored one."""
        self._gone: dict[str, str | None] = {}
        """Folder -> the outermost of it and its folders that no longer exists (None: none)."""
        self._stand_ins: set[str] = set()
        """Gone folders :meth:`stand_in` answered: asked of the rules as folders."""
        self.git_calls = 0
        """How many git processes this object ran (for tests and benchmarks)."""

    def stand_in(self, path: str) -> str:
        """What stands for ``path`` in a report: itself, or its outermost folder that is gone.

        The first path of a burst under a folder looks at its folders (an ``lstat`` each, once
        per burst); a folder found gone stays so for the burst: were it made again meanwhile,
        reporting it stands for its new files too.
        """
        parent = path.rpartition("/")[0]
        if not parent:
            return path
        gone = self._gone[parent] if parent in self._gone else self._gone_root(parent)
        if gone is None:
            return path
        if gone in self._rules and gone not in self._stand_ins and self._folders.get(gone) is None:
            # Its name was judged as a plain path already (an empty folder's own deletion), not
            # as a folder (asked while it existed): its paths are judged one by one.
            return path
        self._stand_ins.add(gone)
        return gone

    def _gone_root(self, folder: str) -> str | None:
        """The outermost of ``folder`` and its folders that does not exist (blocking)."""
        parent = folder.rpartition("/")[0]
        gone = (
            (self._gone[parent] if parent in self._gone else self._gone_root(parent))
            if parent
            else None
        )
        if gone is None and _missing(self._root / folder):
            gone = folder
        self._gone[folder] = gone
        return gone

    def ignored(self, paths: Iterable[str]) -> set[str]:
        """Those of ``paths`` git ignores (blocking; at most two git processes per call).

        In doubt (git fails), a path is not ignored: a needless gate run costs less than a
        missed change.
        """
        wanted = list(dict.fromkeys(p.strip("/") for p in paths if p.strip("/")))
        # A burst has many paths and few folders: folders are looked at once per parent.
        parents = {p.rpartition("/")[0] for p in wanted} - self._ignoring.keys()
        folders = {
            f for parent in parents if parent for f in [*folders_of(parent), parent]
        } - self._folders.keys()
        ask: list[str] = []
        for folder in sorted(folders):
            # Only an existing folder is asked as itself: git decides a missing one by its
            # name alone, where a rule such as ``build/`` needs to know it is a folder.
            if _is_dir(self._root / folder):
                ask.append(folder)
            else:
                self._folders[folder] = None
        # A path whose folders are not all decided yet is asked too (cheap, and consistent).
        ask += [
            p
            for p in wanted
            if p not in self._rules and self._ignoring.get(p.rpartition("/")[0]) is None
        ]
        if ask:
            verdicts = self._ask_rules(list(dict.fromkeys(ask)))
            for folder in folders:
                if folder not in self._folders:
                    self._folders[folder] = verdicts.get(folder, False)
        by_root: dict[str, str] = {}
        for path in wanted:
            root = self._ignoring_folder(path)
            if root is not None or self._rules.get(path, False):
                by_root[path] = root or path
        self._list_tracked([r for r in dict.fromkeys(by_root.values()) if r not in self._tracked])
        return {path for path, root in by_root.items() if not self._is_tracked(root, path)}

    def rules_read(self, path: str) -> bool:
        """Whether ``path`` (asked of :meth:`ignored` before) is a ``.gitignore`` git reads: in
        no folder the rules ignore. Its change is a change of the rules even when the rules
        ignore the file itself (a venv's ``*``), so it counts."""
        return rules_path(path) and self._ignoring_folder(path) is None

    def _ignoring_folder(self, path: str) -> str | None:
        """The outermost folder of ``path`` the rules are known to ignore."""
        parent = path.rpartition("/")[0]
        if not parent:
            return None
        if parent in self._ignoring:
            return self._ignoring[parent]
        found: str | None = None
        complete = True
        for folder in [*folders_of(parent), parent]:
            verdict = self._folders.get(folder, None)
            if folder not in self._folders:
                complete = False
            elif verdict:
                found = folder
                break
        if complete or found is not None:
            self._ignoring[parent] = found  # final: verdicts are only ever added
        return found

    def _ask_rules(self, paths: list[str]) -> dict[str, bool]:
        self.git_calls += 1
        # A gone folder is asked as ``name/`` (see _folder_verdict); one made again since is
        # asked as itself, so that its own new .gitignore does not judge it.
        folders = {p for p in paths if p in self._stand_ins and _missing(self._root / p)}
        proc = self._git.run(
            ["check-ignore", "--no-index", "-z", "-v", "-n", "--stdin"],
            input=encode_paths_z([p + "/" if p in folders else p for p in paths]),
            check=False,
        )
        fields = proc.stdout.split(b"\0")
        if proc.returncode not in (0, 1) or len(fields) < 4 * len(paths):
            verdicts = dict.fromkeys(paths, False)
        else:
            # -v names the last pattern that matched; a negated one ("!x") re-includes.
            verdicts = {
                path: _folder_verdict(fields[4 * i + 2])
                if path in folders
                else bool(fields[4 * i + 2]) and not fields[4 * i + 2].startswith(b"!")
                for i, path in enumerate(paths)
            }
        self._rules.update(verdicts)
        return verdicts

    def _list_tracked(self, roots: list[str]) -> None:
        if not roots or self._all_tracked is not None:
            return
        self.git_calls += 1
        # ls-files matches every index entry against every pathspec: past a few hundred roots,
        # listing the whole index once is cheaper.
        many = len(roots) > _MAX_ROOTS
        args = ["ls-files", "-z", "--cached"] + ([] if many else ["--", *roots])
        proc = self._git.run(args, check=False, env=_LITERAL)
        if proc.returncode != 0:
            # A path inside a submodule, say: count everything under these roots as tracked.
            self._tracked.update((root, [root]) for root in roots)
            return
        found = sorted(p.decode(errors="surrogateescape") for p in proc.stdout.split(b"\0") if p)
        if many:
            self._all_tracked = found
            return
        for root in roots:
            start = bisect.bisect_left(found, root)
            end = bisect.bisect_left(found, root + "/\U0010ffff")
            self._tracked[root] = [
                p for p in found[start:end] if p == root or p.startswith(root + "/")
            ]

    def _is_tracked(self, root: str, path: str) -> bool:
        tracked = self._all_tracked if self._all_tracked is not None else self._tracked[root]
        return _holds(tracked, path)


def _folder_verdict(pattern: bytes) -> bool:
    """Whether the pattern ``check-ignore`` named for a missing ``name/`` excludes it as a folder.

    Git judges the folders leading to a path as folders (``name/`` included), and a folder one
    of them excludes is the answer. Else it matches the rest, an empty name, and only a pattern
    whose last part is all stars can match that (``*``, ``a/**``): such an answer says nothing
    of the folder (``*`` then ``!*/`` keeps every folder), so it counts as not ignored, which
    costs a needless snapshot at worst. A pattern ending in ``/`` matches folders only.
    """
    if not pattern or pattern.startswith(b"!"):
        return False
    return pattern.endswith(b"/") or pattern.rpartition(b"/")[2].strip(b"*") != b""


def _holds(tracked: list[str], path: str) -> bool:
    """Whether ``path`` is tracked or a folder with a tracked file in it (``tracked`` sorted)."""
    i = bisect.bisect_left(tracked, path)
    if i < len(tracked) and tracked[i] == path:
        return True
    prefix = path + "/"
    j = bisect.bisect_left(tracked, prefix)
    return j < len(tracked) and tracked[j].startswith(prefix)


def _missing(path: Path) -> bool:
    """Whether nothing is at ``path`` (a file in the way of a folder is something)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
