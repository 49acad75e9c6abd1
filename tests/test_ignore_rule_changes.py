"""Ignore rules that change where no listing shows it (issue 17, snapshots follow the change): a
``.gitignore`` that ignores itself (a venv's, a tool cache's), one that comes to ignore itself or
is deleted while it did, a rule file that another rule ignores, ``core.excludesFile`` pointed
somewhere new, the global excludes file rewritten. After every step the checkpoint's tree (``paella
checkpoint``, a new process's snapshotter over the kept private index) and a run's snapshot (one
snapshotter for the whole run, following the watcher's paths) equal a fresh full scan's."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_repo, run_paella_in_process
from test_snapshot_follow import MAX_SIZE, full_scan_tree, state_dir, watcher_view

from paella_tui.supervisor.judge.byproducts import BYPRODUCTS
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

Edit = Callable[[Path, Path], set[str]]
"""An edit of the work tree (root) or of files outside it (a folder for them): the paths in the
work tree it touched, as a watcher sees them change."""


def write(rel: str, text: str) -> Edit:
    def edit(root: Path, _: Path) -> set[str]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        return {rel}

    return edit


def delete(rel: str) -> Edit:
    def edit(root: Path, _: Path) -> set[str]:
        (root / rel).unlink()
        return {rel}

    return edit


def config(*args: str) -> Edit:
    """``git config`` in the repository (an agent may write ``.git/config``); paths under
    ``outside`` are named by ``{out}``."""

    def edit(root: Path, outside: Path) -> set[str]:
        Git(root).run(["config", *(a.format(out=outside) for a in args)])
        return set()

    return edit


def user_git(*args: str) -> Edit:
    """A git command on the user's index (``add -f``, ``commit``, ``rm --cached``): the files
    it touches on disk are none (the watcher sees no path)."""

    def edit(root: Path, _: Path) -> set[str]:
        proc = Git(root).run(list(args), check=False)
        assert proc.returncode == 0, proc.stderr
        return set()

    return edit


def git_file(rel: str, text: str) -> Edit:
    """Write a file in the git dir (no watcher sees it)."""

    def edit(root: Path, _: Path) -> set[str]:
        (root / ".git" / rel).write_text(text)
        return set()

    return edit


def outside_file(name: str, text: str, *, same_times: bool = False) -> Edit:
    """Write a file outside the work tree; ``same_times``: with its old modification time put
    back (the same size: only its inode's change time tells)."""

    def edit(root: Path, outside: Path) -> set[str]:
        path = outside / name
        path.parent.mkdir(parents=True, exist_ok=True)
        old = os.stat(path) if path.exists() else None
        path.write_text(text)
        if same_times and old is not None:
            os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
        return set()

    return edit


def files(*rels: str) -> Edit:
    def edit(root: Path, outside: Path) -> set[str]:
        return set().union(*(write(rel, f"{rel}\n")(root, outside) for rel in rels))

    return edit


@dataclass(frozen=True)
class Case:
    """Files first (snapshotted), then each step, each one checked against a fresh scan."""

    setup: tuple[Edit, ...]
    steps: tuple[Edit, ...]
    xdg: bool = False
    """Point ``XDG_CONFIG_HOME`` at a folder of the test's (git's default excludes file)."""


CASES = {
    "a venv writes a .gitignore that ignores itself": Case(
        (files(".venv/pyvenv.cfg", ".venv/lib/site.py", "src/app.py"),),
        (
            write(".venv/.gitignore", "*\n"),
            delete(".venv/.gitignore"),
            write(".venv/.gitignore", "*\n"),
        ),
    ),
    "a .gitignore comes to ignore itself": Case(
        (write("cache/.gitignore", "*.tmp\n"), files("cache/data.txt", "cache/x.tmp")),
        (write("cache/.gitignore", "*\n"), write("cache/.gitignore", "*.txt\n")),
    ),
    "a self-ignoring .gitignore is deleted": Case(
        (write("tool/.gitignore", "*\n"), files("tool/out.txt", "tool/sub/deep.txt")),
        (delete("tool/.gitignore"), write("tool/.gitignore", "*\n!out.txt\n")),
    ),
    "a self-ignoring .gitignore lets one file in": Case(
        (write("tool/.gitignore", "*\n"), files("tool/a.txt", "tool/b.txt")),
        (write("tool/.gitignore", "*\n!a.txt\n"), write("tool/.gitignore", "*\n")),
    ),
    "a rule file another rule ignores, in a folder it opens again": Case(
        (
            write(".gitignore", "gen/*\n!gen/src/\n"),
            write("gen/.gitignore", "\n"),
            files("gen/src/a.c", "gen/src/b.h"),
        ),
        (
            write("gen/.gitignore", "*.c\n"),
            write("gen/.gitignore", "src/\n"),
            delete("gen/.gitignore"),
        ),
    ),
    "every .gitignore is ignored, the top one too": Case(
        (
            write(".gitignore", ".gitignore\n"),
            write("sub/.gitignore", ""),
            files("sub/x.dat", "a.c"),
        ),
        (write("sub/.gitignore", "*.dat\n"), write(".gitignore", ".gitignore\n*.c\n")),
    ),
    "a rule file inside a folder git ignores whole": Case(
        (write(".gitignore", "build/\n"), write("build/.gitignore", "!*\n"), files("build/x.o")),
        (write("build/.gitignore", "!x.o\n"), write(".gitignore", "\n")),
    ),
    "core.excludesFile pointed somewhere new": Case(
        (
            outside_file("ign-a", "*.a\n"),
            outside_file("ign-b", "*.dat\n"),
            config("core.excludesFile", "{out}/ign-a"),
            files("x.dat", "y.a", "z.txt"),
        ),
        (config("core.excludesFile", "{out}/ign-b"), config("--unset", "core.excludesFile")),
    ),
    "the configured excludes file rewritten, same size and time": Case(
        (
            outside_file("ign", "*.a\n"),
            config("core.excludesFile", "{out}/ign"),
            files("x.a", "x.b"),
        ),
        (outside_file("ign", "*.b\n", same_times=True), outside_file("ign", "*.txt\n")),
    ),
    "git's default excludes file (XDG) written": Case(
        (files("x.log", "x.txt"),),
        (outside_file("git/ignore", "*.log\n"), outside_file("git/ignore", "*.txt\n")),
        xdg=True,
    ),
    # A file the user's index tracks though the rules ignore it (force-added), deleted and
    # written back: no listing names it again (dormant.py). It was lost from every later
    # snapshot, and a rollback from before the deletion overwrote it with no salvage.
    "a tracked file the rules ignore, deleted and written back": Case(
        (
            write(".gitignore", "*.log\n"),
            files("keep.log", "a.txt"),
            user_git("add", "-f", "keep.log"),
            user_git("commit", "-q", "-m", "keep"),
        ),
        (delete("keep.log"), write("keep.log", "back\n"), write("keep.log", "again\n")),
    ),
    "a tracked folder the rules ignore, regenerated": Case(
        (
            write(".gitignore", "dist/\n"),
            files("dist/app.js", "dist/app.css", "src/app.ts"),
            user_git("add", "-f", "dist"),
            user_git("commit", "-q", "-m", "dist"),
        ),
        (
            delete("dist/app.js"),
            delete("dist/app.css"),
            write("dist/app.js", "built again\n"),
            write("dist/app.css", "built again\n"),
        ),
    ),
    "a tracked ignored file deleted, untracked by the user, written back": Case(
        (
            write(".gitignore", "*.log\n"),
            files("keep.log"),
            user_git("add", "-f", "keep.log"),
            user_git("commit", "-q", "-m", "keep"),
        ),
        (delete("keep.log"), user_git("rm", "-q", "--cached", "keep.log"), files("keep.log")),
    ),
    "info/exclude rewritten": Case(
        (files("x.log", "x.txt"),),
        (git_file("info/exclude", "*.log\n"), git_file("info/exclude", "*.txt\n")),
    ),
}


def newest_checkpoint_tree(root: Path) -> str:
    """The tree of the newest checkpoint ``paella checkpoint`` made."""
    listed = Git(root).out(["for-each-ref", "--format=%(refname) %(tree)", "refs/paella/"])
    trees = dict(line.split() for line in listed.splitlines())
    newest = max((r for r in trees if "/checkpoints/" in r), key=lambda r: int(r.rsplit("/")[-1]))
    return trees[newest]


def run_snapshotter(workspace: Workspace, where: Path) -> Snapshotter:
    """A run's snapshotter (one for the whole run, following the watcher's paths), after the
    run's first snapshot (a full scan)."""
    with state_dir(where):
        snapshotter = Snapshotter(workspace, max_file_size=MAX_SIZE, exclude=BYPRODUCTS)
    snapshotter.changes.follow()
    snapshotter.take_locked(follow_changes=True)
    return snapshotter


def checkpoint_tree(root: Path) -> str:
    """``paella checkpoint`` (the real command), and the tree it recorded."""
    proc = run_paella_in_process(root, "checkpoint", "--label", "step")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return newest_checkpoint_tree(root)


@pytest.mark.parametrize("engine", ["checkpoint", "run"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_snapshot_after_an_ignore_rule_change_equals_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, engine: str
) -> None:
    case = CASES[name]
    outside = tmp_path / "outside"
    outside.mkdir()
    if case.xdg:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(outside))
    root = make_repo(tmp_path / "repo")
    for edit in case.setup:
        edit(root, outside)
    workspace = Workspace.find(root)
    run = run_snapshotter(workspace, tmp_path / "run-state") if engine == "run" else None
    if run is None:
        checkpoint_tree(root)
    for number, edit in enumerate(case.steps, 1):
        touched = edit(root, outside)
        if run is None:
            tree = checkpoint_tree(root)
        else:
            run.changes.note(watcher_view(workspace, touched))
            with run.locked():
                tree = run.take(follow_changes=True).tree
        fresh = full_scan_tree(workspace, tmp_path / f"fresh-{number}")
        assert tree == fresh, f"step {number}"


def test_a_tracked_ignored_file_written_back_is_salvaged_before_a_rollback(tmp_path: Path) -> None:
    """What the dormant entries are for: the file the agent wrote back is in the salvage of a
    rollback to a checkpoint from before, and the undo gives it back."""
    root = make_repo(tmp_path / "repo")
    for edit in (
        write(".gitignore", "*.log\n"),
        write("keep.log", "one\n"),
        user_git("add", "-f", "keep.log"),
        user_git("commit", "-q", "-m", "keep"),
    ):
        edit(root, tmp_path)
    checkpoint_tree(root)
    (root / "keep.log").unlink()
    checkpoint_tree(root)
    (root / "keep.log").write_text("written back\n")
    checkpoint_tree(root)
    rolled = run_paella_in_process(root, "rollback", "1", "--yes")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert (root / "keep.log").read_text() == "one\n"
    undone = run_paella_in_process(root, "rollback", "salvage:1", "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert (root / "keep.log").read_text() == "written back\n"


@pytest.mark.parametrize("named", [[".env"], [".env", "../outside", "/etc/passwd"]])
def test_a_dormant_path_the_memo_names_is_added_only_if_the_users_index_tracks_it(
    tmp_path: Path, named: list[str]
) -> None:
    """The memo is the agent's to write: naming an ignored file the user does not track (a
    secret) there brings nothing into a snapshot."""
    root = make_repo(tmp_path / "repo")
    write(".gitignore", ".env\n")(root, tmp_path)
    write(".env", "TOKEN=secret\n")(root, tmp_path)
    workspace = Workspace.find(root)
    snapshotter = Snapshotter(workspace)
    snapshotter.take_locked()
    memo = json.loads(snapshotter.memo_file.read_text())
    memo["dormant"] = named
    snapshotter.memo_file.write_text(json.dumps(memo))
    (root / "a.txt").write_text("a change\n")
    tree = snapshotter.take_locked().tree
    assert tree == full_scan_tree(workspace, tmp_path / "fresh")
    listed = workspace.git.lines_z(["ls-tree", "-r", "-z", "--name-only", tree])
    assert ".env" not in listed
