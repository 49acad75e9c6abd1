"""Byte-exact checkpoints and rollbacks under every git configuration (issue 10, SPEC 5).

One real repository per configuration; in it every kind of change at once (modified, deleted,
added, renamed, mode change, symlink, names with quotes, CR, newline and non-UTF-8 bytes, content
with CRLF and ``$Id$``, content only staged), then: checkpoint, damage everything, roll back and
compare every byte and mode; roll back to the salvage and compare again, the staged index too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# Bytes that git's conversions would change: CRLF and bare LF lines, an ident keyword, letters
# a rot13 filter changes.
TEXT = b"alpha\r\nbeta\n$Id$\r\n$Id: 0123456789abcdef $\ngamma\r\n"
WEIRD_NAMES = ('"quoted".txt', '"unbalanced.txt', "cr\r", "new\nline.txt", "\udcff\udcfe-latin.txt")


def fs(name: str) -> str:
    return name  # surrogateescape names map back to the raw bytes through os functions


def configure(kind: str, repo: Path, git) -> None:
    """Apply one configuration to a fresh repository before its first file is committed."""
    attributes = {
        "text_auto": "* text=auto\n",
        "eol_lf": "* text eol=lf\n",
        "eol_crlf": "* text eol=crlf\n",
        "ident": "* ident\n",
        "filter": "* filter=rot13\n.gitattributes -filter\n",
    }.get(kind)
    if kind in ("autocrlf_true", "autocrlf_input", "autocrlf_false"):
        git(repo, "config", "core.autocrlf", kind.removeprefix("autocrlf_"))
    if kind == "filter":
        git(repo, "config", "filter.rot13.clean", "tr a-zA-Z n-za-mN-ZA-M")
        git(repo, "config", "filter.rot13.smudge", "tr a-zA-Z n-za-mN-ZA-M")
        git(repo, "config", "filter.rot13.required", "true")
    if kind == "filemode_false":
        git(repo, "config", "core.fileMode", "false")
    if kind == "index_v4_split":
        git(repo, "config", "core.splitIndex", "true")
        git(repo, "config", "core.untrackedCache", "true")
        git(repo, "config", "index.version", "4")
    if attributes is not None:
        (repo / ".gitattributes").write_text(attributes)


def base_commit(repo: Path, git) -> None:
    files = {
        "mod.txt": TEXT,
        "del.txt": TEXT + b"to delete\n",
        "ren_src.txt": TEXT + b"to rename\n",
        "mode.sh": b"#!/bin/sh\r\necho hi\n",
        "staged.txt": b"committed\n",
        "dir/deep.txt": TEXT,
    }
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    os.symlink("mod.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")


def make_checkpoint_state(root: Path, git) -> None:
    """Every kind of change against HEAD, as it sits on disk at the checkpoint."""
    (root / "mod.txt").write_bytes(TEXT + b"modified\r\n")
    (root / "del.txt").unlink()
    (root / "added.txt").write_bytes(b"new\r\nfile $Id$\n")
    (root / "ren_src.txt").rename(root / "ren_dst.txt")
    (root / "mode.sh").chmod(0o755)
    (root / "link").unlink()
    os.symlink("added.txt", root / "link")
    os.symlink("dir/deep.txt", root / "newlink")
    for i, name in enumerate(WEIRD_NAMES):
        with open(os.path.join(root, fs(name)), "wb") as handle:
            handle.write(b"weird %d\r\n$Id$\n" % i + name.encode(errors="surrogateescape"))
    # A file whose name matches a weird one once git un-quotes or strips it: the bytes of one must
    # never be stored for the other.
    (root / "quoted.txt").write_bytes(b"the other file\n")
    (root / "unbalanced.txt").write_bytes(b"another other file\n")


def damage(root: Path, git) -> None:
    """What an agent might do after the checkpoint: every path changed, some staged."""
    (root / "mod.txt").write_bytes(b"damaged\n")
    (root / "added.txt").unlink()
    (root / "ren_dst.txt").write_bytes(b"x" * 5000)
    (root / "mode.sh").chmod(0o644)
    (root / "del.txt").write_bytes(b"back from the dead\r\n")
    (root / "link").unlink()
    (root / "link").write_bytes(b"a file now\n")
    for name in WEIRD_NAMES[:3]:
        os.unlink(os.path.join(root, fs(name)))
    with open(os.path.join(root, fs(WEIRD_NAMES[3])), "wb") as handle:
        handle.write(b"changed\r\n")
    (root / "dir" / "deep.txt").unlink()
    (root / "dir").rmdir()
    (root / "dir").write_bytes(b"dir is a file now\n")
    (root / "junk.bin").write_bytes(bytes(range(256)))
    # Content only staged: the index holds one version, the work tree another.
    (root / "staged.txt").write_bytes(b"staged only\r\n$Id$\n")
    git(root, "add", "staged.txt")
    (root / "staged.txt").write_bytes(b"work tree version\n")


CONFIGS = (
    "autocrlf_true",
    "autocrlf_input",
    "autocrlf_false",
    "text_auto",
    "eol_lf",
    "eol_crlf",
    "ident",
    "filter",
    "filemode_false",
    "index_v4_split",
    "sparse",
    "worktree",
)


@pytest.mark.parametrize("kind", CONFIGS)
def test_checkpoint_rollback_and_undo_are_byte_exact(
    kind: str, tmp_path: Path, git, tree_state: Callable[..., dict[str, object]]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    configure(kind, repo, git)
    base_commit(repo, git)
    root = repo
    if kind == "index_v4_split":
        git(repo, "update-index", "--index-version", "4", "--split-index")
    if kind == "sparse":
        (repo / "out").mkdir()
        (repo / "out" / "kept.txt").write_text("outside the cone\n")
        git(repo, "add", "out")
        git(repo, "commit", "-q", "-m", "out")
        git(repo, "sparse-checkout", "set", "--cone", "dir")
        assert not (repo / "out" / "kept.txt").exists()
        (repo / "out").mkdir(exist_ok=True)
        (repo / "out" / "untracked.txt").write_bytes(b"untracked, outside the cone\r\n")
    if kind == "worktree":
        root = tmp_path / "second"
        git(repo, "worktree", "add", "-q", "-b", "side", str(root))
        main_before = tree_state(repo)

    make_checkpoint_state(root, git)
    at_checkpoint = tree_state(root)
    ws = Workspace.find(root)
    run = RunStore(ws).create(None, manual=True)
    snapshotter = Snapshotter(ws)
    cp = checkpoints.take_checkpoint(run, snapshotter, label="all kinds")

    damage(root, git)
    damaged = tree_state(root)
    index_damaged = git(root, "ls-files", "-s", "-z")
    assert damaged != at_checkpoint

    result = rollback.rollback(run, cp, snapshotter=snapshotter)
    assert tree_state(root) == at_checkpoint, "\n".join(
        tree_state(root).differences(at_checkpoint)  # type: ignore[attr-defined]
    )
    assert git(root, "rev-parse", "HEAD") == cp.head

    undo = checkpoints.find(run, result.salvage.name)
    rollback.rollback(run, undo, snapshotter=snapshotter)
    assert tree_state(root) == damaged, "\n".join(
        tree_state(root).differences(damaged)  # type: ignore[attr-defined]
    )
    # The staged-only content came back with the index.
    assert git(root, "ls-files", "-s", "-z") == index_damaged
    assert (
        git(root, "show", ":staged.txt").encode()
        == git(
            root,
            "cat-file",
            "-p",
            index_damaged.split("\0")[
                [e.endswith("\tstaged.txt") for e in index_damaged.split("\0")].index(True)
            ].split()[1],
        ).encode()
    )

    if kind == "sparse":
        assert not (repo / "out" / "kept.txt").exists(), "a file outside the cone was invented"
        assert (repo / "out" / "untracked.txt").read_bytes() == b"untracked, outside the cone\r\n"
    if kind == "worktree":
        assert tree_state(repo) == main_before, "the main worktree was touched"
        assert ws.state_dir == Path(git(root, "rev-parse", "--absolute-git-dir")) / "paella"
        assert cp.ref.startswith("refs/paella/wt/second/")
        assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
