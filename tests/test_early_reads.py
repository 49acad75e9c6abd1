"""The question ``paella checkpoint`` asks git first, started before its imports
(``store/early_reads.py``, issue 17): an answer taken early is the one asking git then gives,
in every layout (the work tree's top, a subfolder, a linked worktree, configured exclude and
attributes files, an include), and any change to what it is made of in between drops it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner, make_repo

from paella_tui.supervisor.store import early_reads
from paella_tui.supervisor.store.early_reads import WORKSPACE_ARGS
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.workspace import Workspace


def _layout(kind: str, tmp_path: Path, git: GitRunner) -> tuple[Path, Path]:
    """A repository laid out as ``kind``: the folder a command runs in, and its work tree."""
    repo = make_repo(tmp_path / "repo", git)
    if kind == "subfolder":
        (repo / "a" / "b").mkdir(parents=True)
        return repo / "a" / "b", repo
    if kind == "worktree":
        git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
        return tmp_path / "linked", tmp_path / "linked"
    if kind == "configured":
        git(repo, "config", "core.excludesFile", str(tmp_path / "ignore"))
        git(repo, "config", "core.attributesFile", str(tmp_path / "attributes"))
    if kind == "include":
        (tmp_path / "more.config").write_text(f"[core]\n\texcludesFile = {tmp_path}/x\n")
        git(repo, "config", "include.path", str(tmp_path / "more.config"))
    return repo, repo


def _asked_now(folder: Path) -> Workspace:
    """What the workspace's question gives with no early read."""
    return Workspace.find(folder)


LAYOUTS = ["top", "subfolder", "worktree", "configured", "include"]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_an_early_answer_is_the_answer_git_gives_then(
    kind: str, tmp_path: Path, git: GitRunner
) -> None:
    folder, _root = _layout(kind, tmp_path, git)
    expected = _asked_now(folder)
    before = early_reads.taken
    early_reads.start(folder)
    try:
        workspace = Workspace.find(folder)
    finally:
        early_reads.discard()
    assert early_reads.taken - before == 1
    assert workspace == expected


def _edit_config(repo: Path, tmp_path: Path, git: GitRunner) -> None:
    git(repo, "config", "core.excludesFile", str(tmp_path / "other-ignore"))


def _edit_include(repo: Path, tmp_path: Path, git: GitRunner) -> None:
    (tmp_path / "more.config").write_text(f"[core]\n\texcludesFile = {tmp_path}/y\n")


def _edit_global(repo: Path, tmp_path: Path, git: GitRunner) -> None:
    with open(os.environ["GIT_CONFIG_GLOBAL"], "a") as handle:
        handle.write(f"[core]\n\tattributesFile = {tmp_path}/global-attributes\n")


def _switch_head(repo: Path, tmp_path: Path, git: GitRunner) -> None:
    git(repo, "checkout", "-q", "-b", "elsewhere")


EDITS: dict[str, Callable[[Path, Path, GitRunner], None]] = {
    "config": _edit_config,
    "include": _edit_include,
    "global": _edit_global,
    "head": _switch_head,
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_change_to_what_an_answer_is_made_of_drops_it(
    edit: str, tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration (the repository's file, an included one, the global one) or HEAD
    changed between the start and the question: git is asked again, and says the new thing."""
    (tmp_path / "global.config").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global.config"))
    folder, root = _layout("include", tmp_path, git)
    early_reads.start(folder)
    try:
        EDITS[edit](root, tmp_path, git)
        before = early_reads.taken
        workspace = Workspace.find(folder)
        assert early_reads.taken == before
    finally:
        early_reads.discard()
    assert workspace == _asked_now(folder)


def test_another_folder_environment_or_question_takes_nothing(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, root = _layout("subfolder", tmp_path, git)
    before = early_reads.taken
    early_reads.start(folder)
    try:
        assert early_reads.take(Git(root), WORKSPACE_ARGS) is None  # asked from the subfolder
        early_reads.start(folder)
        monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.excludesfile=/elsewhere'")
        assert early_reads.take(Git(folder.resolve()), WORKSPACE_ARGS) is None  # another env
        early_reads.start(folder)
        assert early_reads.take(Git(folder.resolve()), ["config", "--list"]) is None
    finally:
        early_reads.discard()
    assert early_reads.taken == before


def test_each_answer_is_used_once_and_nothing_is_left_running(
    tmp_path: Path, git: GitRunner
) -> None:
    folder, _root = _layout("top", tmp_path, git)
    early_reads.start(folder)
    procs = [read.proc for read in early_reads._reads.values()]
    assert len(procs) == 1
    assert early_reads.take(Git(folder.resolve()), WORKSPACE_ARGS) is not None
    assert early_reads.take(Git(folder.resolve()), WORKSPACE_ARGS) is None
    early_reads.discard()
    assert all(proc.returncode is not None for proc in procs)  # reaped, never a zombie
    assert early_reads._reads == {}


PROBE = r"""
import contextlib, io, sys
from paella_tui.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["checkpoint"])
from paella_tui.supervisor.store import early_reads, scan_listing
print(code, early_reads.taken, scan_listing.used)
"""


def test_paella_checkpoint_takes_the_early_answer_and_the_early_scan_once_a_memo_is_there(
    tmp_path: Path, git: GitRunner
) -> None:
    """Each checkpoint takes the workspace's early answer; the second (a snapshot left its memo)
    the early scan's too."""
    folder, _root = _layout("configured", tmp_path, git)
    answers = []
    for _ in range(2):
        (folder / "README.md").write_text(f"{len(answers)}\n")
        proc = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=folder, capture_output=True, text=True, check=True
        )
        answers.append(proc.stdout.split())
    assert answers == [["0", "1", "0"], ["0", "1", "1"]]
