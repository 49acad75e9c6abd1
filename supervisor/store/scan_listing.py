"""A full snapshot's two listings (``diff-files`` and ``ls-files --others``), run side by side,
and for ``paella checkpoint`` started before the command's imports (an early scan).

The two listings are independent reads of the private index and the work tree, so a full scan
runs them at the same time (two cores: the slower one alone sets the wall time).

A ``paella checkpoint`` process spends most of its first 100 ms importing the engine; its
snapshot's listings can run meanwhile. :func:`start_early` starts them as the last snapshot of
this workspace ran them (the arguments its memo kept), with no lock held: both are read-only
(``GIT_OPTIONAL_LOCKS=0``, no index write). The snapshot takes their answer (:func:`take_early`)
only when, under its lock, everything they depend on is unchanged: the same command line,
environment and folder as it would run now, and the very same private index file (inode, size,
modification and change times: any snapshot or rollback in between replaced it). Anything else
discards them and the snapshot lists as usual; an early scan is used at most once. The answer
then describes the work tree as it was a few tens of milliseconds before the lock was taken,
which is what a checkpoint asked for a moment earlier would hold.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.git_programs import git_dirs
from paella_tui.supervisor.store.gitcli import Git

STATE_DIR_ENV = "PAELLA_STATE_DIR"  # workspace.STATE_DIR_ENV (not imported: it costs the start)
INDEX_NAME = "snapshot.index"
MEMO_NAME = "snapshot.memo.json"

Stamp = tuple[int, int, int, int]


def index_stamp(index_file: Path) -> Stamp | None:
    """What identifies one version of the private index: inode, size, mtime and ctime (ns)."""
    try:
        st = os.stat(index_file)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _items(data: bytes) -> list[str]:
    return [p.decode(errors="surrogateescape") for p in data.split(b"\0") if p]


class Listing:
    """``diff-files`` and ``ls-files --others`` running at once (their answers, once)."""

    def __init__(self, git: Git, diff_args: Sequence[str], others_args: Sequence[str]) -> None:
        self.git = git
        self.diff_args = list(diff_args)
        self.others_args = list(others_args)
        # The command lines as started (gitcli adds the options that turn off the filter
        # drivers the configuration names at that moment): an answer is taken only for these.
        self.argv = [git.command(self.diff_args), git.command(self.others_args)]
        self._procs = [git.popen(self.diff_args)]
        try:
            self._procs.append(git.popen(self.others_args))
        except BaseException:
            self.cancel()  # the first one is not left running
            raise
        if self.argv != [git.command(self.diff_args), git.command(self.others_args)]:
            self.argv = []  # the configuration changed while they started: never matches

    def matches(self, git: Git, diff_args: Sequence[str], others_args: Sequence[str]) -> bool:
        """Whether these are the listings ``git`` would run now with these arguments."""
        return (
            self.git.root == git.root
            and self.argv == [git.command(diff_args), git.command(others_args)]
            and self.git.env == git.env
        )

    def result(self) -> tuple[list[str], list[str]]:
        """The ``diff-files`` items and the untracked paths; a GitError when either failed."""
        try:
            outs = [proc.communicate() for proc in self._procs]
        finally:
            self.cancel()
        for proc, args, (_, err) in zip(
            self._procs, (self.diff_args, self.others_args), outs, strict=True
        ):
            if proc.returncode != 0:
                raise GitError(args, proc.returncode, err.decode(errors="replace"))
        return _items(outs[0][0]), _items(outs[1][0])

    def cancel(self) -> None:
        """Stop whichever listing still runs and reap both (nothing is left behind)."""
        for proc in self._procs:
            if proc.returncode is not None:
                continue  # reaped, its pipes closed
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(OSError, ValueError):
                proc.communicate()


def list_both(
    git: Git, diff_args: Sequence[str], others_args: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Run both listings side by side: the ``diff-files`` items and the untracked paths."""
    return Listing(git, diff_args, others_args).result()


class _Early:
    """The early scan of this process, with the private index it read."""

    def __init__(self, listing: Listing, index_file: Path, stamp: Stamp) -> None:
        self.listing = listing
        self.index_file = index_file
        self.stamp = stamp


_early: _Early | None = None
used = 0
"""How many snapshots in this process took an early scan's answer (for tests and benchmarks)."""


def start_early(cwd: Path | None = None) -> None:
    """Start the listings the last snapshot of the workspace at ``cwd`` (default: the current
    folder) ran (best effort: any doubt, and nothing is started)."""
    global _early
    discard_early()
    try:
        # Found as git looks for it (a guess: the snapshot checks everything before taking it).
        dirs = git_dirs(cwd or Path.cwd())
        if dirs is None:
            return
        git_dir = dirs[0].resolve()
        override = os.environ.get(STATE_DIR_ENV)
        state_dir = Path(override).resolve() if override else git_dir / "paella"
        with open(state_dir / MEMO_NAME, "rb") as handle:
            scan = json.loads(handle.read()).get("scan")
        index_file = Path(scan["index"])
        if index_file != state_dir / INDEX_NAME:
            return
        config = [(str(k), str(v)) for k, v in scan["config"]]
        diff_args = [str(a) for a in scan["diff"]]
        others_args = [str(a) for a in scan["others"]]
        if not _plain(config, diff_args, others_args):
            return
        git = Git(Path(scan["root"]), index_file=index_file, config=config)
        # Stamped before the listings open it: a replacement after this shows at take_early.
        stamp = index_stamp(index_file)
        if stamp is None:
            return
        _early = _Early(Listing(git, diff_args, others_args), index_file, stamp)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass


# What a snapshotter's listings are run with (snapshot.py, raw_blobs.PRIVATE_CONFIG,
# index_update.AttributeSources.pinned; gitcli adds its own options, filters off). The memo lies
# in the git dir, where the agent can write: an early scan runs nothing else, so no memo can make
# it run a program (a filter, an fsmonitor hook) that the snapshot's own listing would not run.
PRIVATE_KEYS = frozenset(
    {
        "core.autocrlf",
        "core.safecrlf",
        "core.fileMode",
        "core.symlinks",
        "core.ignoreStat",
        "core.sparseCheckout",
        "core.sparseCheckoutCone",
        "index.sparse",
        "core.splitIndex",
        "core.untrackedCache",
        "core.fsmonitor",
    }
)
DIFF_START = ["diff-files", "-z", "--name-status", "--no-renames", "--ignore-submodules=dirty"]
"""A snapshot's ``diff-files``, before its pathspecs (snapshot.py builds its own from it)."""
DIFF_ARGS = [*DIFF_START, "--"]
OTHERS_START = ["ls-files", "-z", "--others", "--exclude-standard"]
"""A snapshot's ``ls-files --others``, before its patterns and pathspecs."""


def _plain(config: list[tuple[str, str]], diff: list[str], others: list[str]) -> bool:
    """Whether these are listings as a snapshotter runs them: its private settings, a pinned
    attributes file, patterns and literal pathspecs."""
    for key, value in config:
        ok = value in ("true", "false") if key in PRIVATE_KEYS else key == "core.attributesFile"
        if not ok:
            return False
    if diff != DIFF_ARGS or others[: len(OTHERS_START)] != OTHERS_START:
        return False
    rest = others[len(OTHERS_START) :]
    if "--" not in rest:
        return False
    cut = rest.index("--")
    patterns, pathspecs = rest[:cut], rest[cut + 1 :]
    return all(a.startswith("--exclude=") for a in patterns) and all(
        a.startswith(":(exclude,top,literal)") for a in pathspecs
    )


def take_early(
    git: Git, diff_args: Sequence[str], others_args: Sequence[str], index_file: Path
) -> tuple[list[str], list[str]] | None:
    """The early scan's answer when it is exactly what these listings would answer now over
    this very private index (the caller holds the snapshot lock); else None (and it is gone)."""
    global _early, used
    early, _early = _early, None
    if early is None:
        return None
    if (
        early.index_file != index_file
        or not early.listing.matches(git, diff_args, others_args)
        or index_stamp(index_file) != early.stamp
    ):
        early.listing.cancel()
        return None
    try:
        answer = early.listing.result()
    except GitError:
        return None  # the snapshot's own listing says what is wrong (and rebuilds if it can)
    if index_stamp(index_file) != early.stamp:  # replaced while they read it
        return None
    used += 1
    return answer


def discard_early() -> None:
    """Stop an early scan nobody took (the command ended first)."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.listing.cancel()
