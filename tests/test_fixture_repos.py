"""The suite's own repositories: ``make_repo`` copies a template instead of running ``git init``,
``add`` and ``commit`` each time, and what it leaves must be exactly what those three leave (the
tests that use it were written against them)."""

from __future__ import annotations

import re
import shutil
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


def _stat_in_index(repo: Path, git: GitRunner) -> dict[str, str]:
    """Each entry's stat data as ``git ls-files --debug`` shows it."""
    entries = re.split(
        r"^(?=\S)", git(repo, "-c", "core.quotepath=false", "ls-files", "--debug"), flags=re.M
    )
    return {e.split("\n", 1)[0]: " ".join(e.split("\n", 1)[1].split()) for e in entries if e}


def _stat_of(file: Path) -> str:
    """A file's stat data as git stores it and ``ls-files --debug`` shows it."""
    st = file.lstat()
    return (
        f"ctime: {int(st.st_ctime)}:{st.st_ctime_ns % 10**9} "
        f"mtime: {int(st.st_mtime)}:{st.st_mtime_ns % 10**9} "
        f"dev: {st.st_dev & 0xFFFFFFFF} ino: {st.st_ino & 0xFFFFFFFF} "
        f"uid: {st.st_uid} gid: {st.st_gid} size: {st.st_size} flags: 0"
    )


def test_the_index_holds_the_files_own_stat_data(tmp_path: Path, git: GitRunner) -> None:
    # make_repo writes the index itself: its entry must hold README.md's own times, device,
    # inode, owner and size, as git would store them, or git would see the file as changed.
    copied = conftest.make_repo(tmp_path / "copied", git)
    assert _stat_in_index(copied, git) == {"README.md": _stat_of(copied / "README.md")}
    # Git reads it (its checksum holds) and, refreshing it, finds nothing to change.
    before = (copied / ".git" / "index").read_bytes()
    assert git(copied, "diff-files") == ""
    git(copied, "update-index", "--refresh")
    assert (copied / ".git" / "index").read_bytes() == before


def test_an_index_written_for_a_copy_holds_the_copys_own_stat_data(
    tmp_path: Path, git: GitRunner
) -> None:
    source = conftest.make_repo(tmp_path / "source", git)
    (source / "d" / "e").mkdir(parents=True)
    (source / "d" / "e" / "run.sh").write_text("#!/bin/sh\n")
    (source / "d" / "e" / "run.sh").chmod(0o755)
    (source / "a name with spaces \u00fc").write_bytes(b"\0binary" * 300)
    (source / "link").symlink_to("d/e/run.sh")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "more")
    (source / "README.md").write_text("changed, not staged\n")
    (source / "untracked.txt").write_text("u\n")

    # A copy of it, its index written for the copy's files.
    copied = tmp_path / "copied"
    shutil.copytree(source, copied, symlinks=True)
    (copied / ".git" / "index").write_bytes(
        conftest.index_of_copy(source / ".git" / "index", copied)
    )
    assert capture_tree(copied, exclude=()).without(".git/index") == capture_tree(
        source, exclude=()
    ).without(".git/index")
    # Every entry whose file is its blob holds the copy's own stat data; the changed file's
    # entry is left as it was (another file's stat data), so git still looks at it.
    stats = _stat_in_index(copied, git)
    assert sorted(stats) == sorted(_stat_in_index(source, git))
    for name in ("d/e/run.sh", "a name with spaces \u00fc", "link"):
        assert stats[name] == _stat_of(copied / name), name
    assert stats["README.md"] == _stat_in_index(source, git)["README.md"]
    assert git(copied, "diff-files", "--name-only") == "README.md"
    assert git(copied, "status", "--porcelain") == git(source, "status", "--porcelain")
    assert git(copied, "ls-files", "-s") == git(source, "ls-files", "-s")
