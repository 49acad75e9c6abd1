"""The git paella runs is found on ``PATH`` once (``gitcli.git_program``): the same git the
child's own ``PATH`` search would start, named by its absolute path so that each start is one
``execve``, not one per ``PATH`` folder before git's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from paella_tui.supervisor.store import gitcli
from paella_tui.supervisor.store.gitcli import Git, git_program
from paella_tui.supervisor.store.mirror_local import run_git

REAL_GIT = shutil.which("git")


def _wrapper(folder: Path, log: Path) -> Path:
    """A ``git`` in ``folder`` that notes each start in ``log``, then runs the real git."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "git"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{REAL_GIT}" "$@"\n')
    script.chmod(0o755)
    return script


def test_the_first_git_on_path_runs_and_is_named_absolutely(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "starts.log"
    wrapper = _wrapper(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    git = Git(repo)
    assert git.command(["status"])[0] == str(wrapper)
    git.run(["rev-parse", "HEAD"])
    run_git(["rev-parse", "--git-dir"], cwd=repo)
    assert log.read_text().count("rev-parse") == 2


def test_a_relative_path_entry_leaves_the_search_to_the_child(tmp_path: Path) -> None:
    assert git_program(f"relative-bin{os.pathsep}{os.environ['PATH']}") == "git"
    assert git_program(str(tmp_path / "empty")) == "git"  # no git there: the start fails as ever


def test_a_git_that_moved_is_looked_up_again(tmp_path: Path) -> None:
    first = _wrapper(tmp_path / "a", tmp_path / "a.log")
    second = _wrapper(tmp_path / "b", tmp_path / "b.log")
    path_var = os.pathsep.join([str(first.parent), str(second.parent)])
    gitcli._find_git.cache_clear()
    assert git_program(path_var) == str(first)
    first.unlink()
    assert git_program(path_var) == str(second)


def test_each_git_runner_takes_the_environment_as_it_is_when_made(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment git gets is built once per state of ``os.environ`` (not decoded per
    runner), yet a variable set, changed or removed is there for the next runner; the scrubbed
    ones never are, and one runner's copy is its own."""
    monkeypatch.delenv("PAELLA_TEST_VAR", raising=False)
    first = Git(repo)
    assert "PAELLA_TEST_VAR" not in first.env
    monkeypatch.setenv("PAELLA_TEST_VAR", "one")
    monkeypatch.setenv("GIT_DIR", str(repo / "elsewhere"))
    assert Git(repo).env["PAELLA_TEST_VAR"] == "one" and "GIT_DIR" not in Git(repo).env
    assert Git(repo).run(["rev-parse", "--git-dir"]).stdout.strip() == b".git"
    monkeypatch.setenv("PAELLA_TEST_VAR", "two")
    private = Git(repo, index_file=repo / "private-index")
    assert private.env["PAELLA_TEST_VAR"] == "two"
    assert private.env["GIT_INDEX_FILE"] == str(repo / "private-index")
    assert "GIT_INDEX_FILE" not in Git(repo).env  # the private runner's own, not shared
    monkeypatch.delenv("PAELLA_TEST_VAR")
    assert "PAELLA_TEST_VAR" not in Git(repo).env
    assert "PAELLA_TEST_VAR" not in first.env and first.env["LC_ALL"] == "C"
