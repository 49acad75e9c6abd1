"""A snapshot asks ``check-attr`` only when an attribute can apply, and its tree is the same.

``check-attr`` finds the hashed paths git may have converted (their raw bytes are then stored
instead). It is skipped when no attributes file can reach them (:class:`AttributeSources`): a
wrong skip would store converted bytes, so each case of the matrix takes the second snapshot of a
repository both ways, skipping where it may and always asking (on a copy, whose index is hashed
again from scratch), and the trees must be equal, every blob the bytes on disk.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner, make_repo

from paella_tui.supervisor.store.index_update import AttributeSources, system_attribute_files
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# CRLF and an ident keyword: `text`, `eol` and `ident` would each change these bytes.
CONVERTIBLE = b"first\r\n$Id$\r\nlast\r\n"
RULES = b"* text eol=lf ident\n"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _commit(git: GitRunner, repo: Path, *paths: str) -> None:
    git(repo, "add", "-f", *paths)
    git(repo, "commit", "-q", "-m", "setup")


def _tracked(repo: Path, git: GitRunner, path: str) -> None:
    _write(repo / path, RULES)
    _commit(git, repo, path)


Setup = Callable[[Path, GitRunner, Path], None]
"""(repo, git, config home) -> None."""

# name -> (before the first snapshot, before the second, whether check-attr must run)
CASES: dict[str, tuple[Setup, Setup, bool]] = {
    "no attributes anywhere": (lambda r, g, h: None, lambda r, g, h: None, False),
    "core.autocrlf=true, no attribute": (
        lambda r, g, h: g(r, "config", "core.autocrlf", "true"),
        lambda r, g, h: None,
        False,
    ),
    "a filter configured, no attribute": (
        lambda r, g, h: g(r, "config", "filter.up.clean", "tr a-z A-Z"),
        lambda r, g, h: None,
        False,
    ),
    "attributes in an unrelated folder": (
        lambda r, g, h: _tracked(r, g, "other/.gitattributes"),
        lambda r, g, h: None,
        False,
    ),
    "tracked at the top": (
        lambda r, g, h: _tracked(r, g, ".gitattributes"),
        lambda r, g, h: None,
        True,
    ),
    "untracked, in the changed file's folder": (
        lambda r, g, h: None,
        lambda r, g, h: _write(r / "sub" / "deep" / ".gitattributes", RULES),
        True,
    ),
    "ignored (git reads it all the same)": (
        lambda r, g, h: _write(r / ".gitignore", b".gitattributes\n"),
        lambda r, g, h: _write(r / "sub" / ".gitattributes", RULES),
        True,
    ),
    "info/attributes": (
        lambda r, g, h: None,
        lambda r, g, h: _write(r / ".git" / "info" / "attributes", RULES),
        True,
    ),
    "the global file": (
        lambda r, g, h: None,
        lambda r, g, h: _write(h / "git" / "attributes", RULES),
        True,
    ),
    "core.attributesFile configured": (
        lambda r, g, h: _write(h / "elsewhere", RULES),
        lambda r, g, h: g(r, "config", "core.attributesFile", str(h / "elsewhere")),
        True,
    ),
    "in the private index, gone from the disk": (
        lambda r, g, h: _write(r / "sub" / ".gitattributes", RULES),
        lambda r, g, h: (r / "sub" / ".gitattributes").unlink(),
        True,
    ),
}


def _tree_blobs(repo: Path, tree: str) -> dict[str, bytes]:
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "-z", tree], cwd=repo, capture_output=True, check=True
    ).stdout
    found = {}
    for entry in filter(None, listed.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        mode, _kind, oid = meta.split()
        if mode in (b"100644", b"100755"):
            found[path.decode()] = subprocess.run(
                ["git", "cat-file", "blob", oid], cwd=repo, capture_output=True, check=True
            ).stdout
    return found


def _second_snapshot(
    repo: Path, *, always_ask: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, int]:
    with monkeypatch.context() as patch:
        if always_ask:
            patch.setattr(AttributeSources, "may_apply", lambda *_: True)
        snapshotter = Snapshotter(Workspace.find(repo))  # a new command: a new snapshotter
        return snapshotter.take_locked().tree, snapshotter.attribute_checks


@pytest.mark.parametrize("case", list(CASES))
def test_check_attr_is_skipped_only_where_no_attribute_can_apply_and_the_tree_is_the_same(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    before, between, asks = CASES[case]
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))  # the global attributes file's folder
    repo = make_repo(tmp_path / "repo", git)
    _write(repo / "sub" / "deep" / "file.txt", b"plain\n")
    _write(repo / "top.txt", b"plain\n")
    _commit(git, repo, "sub", "top.txt")
    before(repo, git, home)
    Snapshotter(Workspace.find(repo)).take_locked()  # the memo the next snapshot starts from
    between(repo, git, home)
    _write(repo / "sub" / "deep" / "file.txt", CONVERTIBLE)
    _write(repo / "sub" / "deep" / "new.txt", CONVERTIBLE)
    _write(repo / "top.txt", CONVERTIBLE)
    reference = tmp_path / "reference"
    shutil.copytree(repo, reference, symlinks=True)

    tree, checks = _second_snapshot(repo, always_ask=False, monkeypatch=monkeypatch)
    expected, _ = _second_snapshot(reference, always_ask=True, monkeypatch=monkeypatch)

    assert checks == (1 if asks else 0)
    assert tree == expected
    blobs = _tree_blobs(repo, tree)
    for path in ("sub/deep/file.txt", "sub/deep/new.txt", "top.txt"):
        assert blobs[path] == CONVERTIBLE, path
    for path, data in blobs.items():
        assert (repo / path).read_bytes() == data, path


def test_a_third_snapshot_after_the_attributes_went_skips_again(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memo's list of the private index's .gitattributes entries follows their removal."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = make_repo(tmp_path / "repo", git)
    snapshotter = Snapshotter(Workspace.find(repo))
    _write(repo / "sub" / ".gitattributes", RULES)
    snapshotter.take_locked()
    (repo / "sub" / ".gitattributes").unlink()
    _write(repo / "sub" / "a.txt", CONVERTIBLE)
    snapshotter.take_locked()
    _write(repo / "sub" / "a.txt", CONVERTIBLE + b"more\r\n")
    checks = snapshotter.attribute_checks
    tree = snapshotter.take_locked().tree
    assert snapshotter.attribute_checks == checks
    assert _tree_blobs(repo, tree)["sub/a.txt"] == CONVERTIBLE + b"more\r\n"


def test_the_sources_named_by_the_index_reach_only_the_folders_below_them(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sources = AttributeSources(Workspace.find(repo), b"")
    sources.files = []  # this machine's own files aside: the index alone speaks
    assert not sources.may_apply(["a/b/c.txt"], [])
    assert sources.may_apply(["a/b/c.txt"], ["a/.gitattributes"])
    assert sources.may_apply(["a/b/c.txt"], [".gitattributes"])
    assert not sources.may_apply(["a/b/c.txt"], ["a/b/c/.gitattributes", "x/.gitattributes"])
    assert sources.may_apply(["a/b/c.txt"], None)
    assert not sources.may_apply([], None)
    assert AttributeSources(Workspace.find(repo), b"core.attributesfile\n/x\0").configured
    assert Path("/etc/gitattributes") in system_attribute_files()


def test_an_attributes_file_configured_during_a_run_never_changes_the_stored_bytes(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's snapshotter lives as long as the run: a ``core.attributesFile`` the agent (or
    the user) configures meanwhile must not make git convert what the snapshot hashes unseen."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = make_repo(tmp_path / "repo", git)
    snapshotter = Snapshotter(Workspace.find(repo))
    snapshotter.take_locked()
    _write(tmp_path / "elsewhere", RULES)
    git(repo, "config", "core.attributesFile", str(tmp_path / "elsewhere"))
    _write(repo / "sub" / "a.txt", CONVERTIBLE)
    tree = snapshotter.take_locked().tree
    assert _tree_blobs(repo, tree)["sub/a.txt"] == CONVERTIBLE
