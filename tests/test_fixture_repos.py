"""The suite's own repositories: ``make_repo`` copies a template instead of running ``git init``,
``add`` and ``commit`` each time, and what it leaves must be exactly what those three leave (the
tests that use it were written against them)."""

from __future__ import annotations

import re
from pathlib import Path

import conftest
import pytest
from conftest import GitRunner, capture_tree


def _stat_free(listing: str) -> str:
    """``git ls-files --debug`` without the fields every file has its own (times, inode)."""
    return re.sub(r"^\s+(ctime|mtime|dev):.*\n", "", listing, flags=re.M)


def test_a_copied_repository_is_what_init_add_and_commit_make(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One commit time for both, so that their objects, refs and reflogs can be compared.
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setattr(conftest, "_REPO_TEMPLATE_HOME", tmp_path / "template-home")
    (tmp_path / "template-home").mkdir()
    conftest.make_repo(tmp_path / "first", git)  # builds the template
    copied = conftest.make_repo(tmp_path / "copied", git)
    made = tmp_path / "made"
    made.mkdir()
    conftest._init_repo(made, git)
    assert (tmp_path / "template-home" / "repo" / ".git").is_dir()

    copied_git, made_git = capture_tree(copied / ".git"), capture_tree(made / ".git")
    assert copied_git.without("index") == made_git.without("index"), "\n".join(
        copied_git.without("index").differences(made_git.without("index"))
    )
    assert capture_tree(copied) == capture_tree(made)
    # The index: the same entries and extensions (cache tree included), the same size.
    assert _stat_free(git(copied, "ls-files", "--debug")) == _stat_free(
        git(made, "ls-files", "--debug")
    )
    assert len((copied / ".git" / "index").read_bytes()) == len(
        (made / ".git" / "index").read_bytes()
    )
    assert git(copied, "status", "--porcelain", "--ignored") == ""
    assert git(copied, "rev-parse", "HEAD") == git(made, "rev-parse", "HEAD")
    assert git.branch(copied) == "main"


def test_copies_are_independent(tmp_path: Path, git: GitRunner) -> None:
    one = conftest.make_repo(tmp_path / "one", git)
    two = conftest.make_repo(tmp_path / "two", git)
    (one / "a.txt").write_text("a\n")
    git(one, "add", "a.txt")
    git(one, "commit", "-q", "-m", "a")
    assert git(two, "log", "--format=%s") == "initial"
    assert git(two, "status", "--porcelain") == ""


def test_the_index_holds_the_files_own_stat_data(tmp_path: Path, git: GitRunner) -> None:
    # make_repo writes the index itself: its entry must hold README.md's own times, device,
    # inode, owner and size, as git would store them, or git would see the file as changed.
    copied = conftest.make_repo(tmp_path / "copied", git)
    st = (copied / "README.md").lstat()
    listing = git(copied, "ls-files", "--debug")
    assert f"ctime: {int(st.st_ctime)}:{st.st_ctime_ns % 10**9}" in listing
    assert f"mtime: {int(st.st_mtime)}:{st.st_mtime_ns % 10**9}" in listing
    assert f"dev: {st.st_dev & 0xFFFFFFFF}\tino: {st.st_ino & 0xFFFFFFFF}" in listing
    assert f"uid: {st.st_uid}\tgid: {st.st_gid}" in listing
    assert f"size: {st.st_size}\tflags: 0" in listing
    # Git reads it (its checksum holds) and, refreshing it, finds nothing to change.
    before = (copied / ".git" / "index").read_bytes()
    assert git(copied, "diff-files") == ""
    git(copied, "update-index", "--refresh")
    assert (copied / ".git" / "index").read_bytes() == before
