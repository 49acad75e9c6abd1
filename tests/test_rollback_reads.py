"""A rollback reads each file once (issue 17): the fast paths against the slow ones.

- A snapshot hashes again from raw bytes only the paths an attribute may convert (the private
  index runs with ``core.autocrlf=false``); its tree must equal the tree of every file's raw
  bytes (``hash-object --no-filters``), whatever attributes, macros and contents are in play.
- The verification is the fresh snapshot alone (no separate re-reading pass): a restored file
  whose bytes are wrong after the write, even with its size and modification time kept, must
  still fail the rollback loudly.
- The user's index is refreshed beside the verification: afterwards it is clean (``git
  diff-files`` quiet), as the refresh before it left it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints, rollback
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

# One attribute per file kind, a macro among them; ".raw" files have none, ".bin" are binary.
ATTRIBUTES = (
    "[attr]conv text eol=crlf\n"
    "*.auto text=auto\n*.crlf text eol=crlf\n*.lf text eol=lf\n*.id ident\n"
    "*.rot filter=rot13\n*.mac conv\n*.bin binary\n"
)
KINDS = ("auto", "crlf", "lf", "id", "rot", "mac", "bin", "raw")
PIECES = (b"a\r\n", b"b\n", b"$Id$\n", b"\r", b"plain", b"\x00", b"\xff\xfe")


def raw_tree(root: Path, git) -> str:
    """The tree of every file under ``root`` as its raw bytes (the slow, obvious way)."""
    index = root.parent / f"{root.name}-raw.index"
    index.unlink(missing_ok=True)
    info = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            full = Path(folder) / name
            rel = full.relative_to(root).as_posix()
            oid = git.run(root, "hash-object", "-w", "--no-filters", str(full)).stdout.strip()
            mode = "100755" if os.access(full, os.X_OK) else "100644"
            info.append(f"{mode} {oid}\t{rel}\n")
    runner = Git(root, index_file=index)
    runner.run(["update-index", "--index-info"], input="".join(info).encode())
    return runner.out(["write-tree"])


def make(repo: Path, git) -> None:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "filter.rot13.clean", "tr a-zA-Z n-za-mN-ZA-M")
    git(repo, "config", "filter.rot13.smudge", "tr a-zA-Z n-za-mN-ZA-M")
    (repo / ".gitattributes").write_text(ATTRIBUTES)
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rounds=st.lists(
        st.dictionaries(
            st.tuples(st.sampled_from(KINDS), st.integers(0, 2)),
            st.lists(st.sampled_from(PIECES), max_size=5).map(b"".join),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_snapshot_is_the_raw_bytes_whatever_the_attributes(
    rounds: list[dict[tuple[str, int], bytes]], tmp_path_factory: pytest.TempPathFactory, git
) -> None:
    repo = tmp_path_factory.mktemp("attrs") / "repo"
    make(repo, git)
    snapshotter = Snapshotter(Workspace.find(repo))
    for files in rounds:
        for (kind, n), data in files.items():
            (repo / f"f{n}.{kind}").write_bytes(data)
        tree = snapshotter.take_locked().tree
        assert tree == raw_tree(repo, git)


@pytest.mark.parametrize("attributes", ["", "* text=auto\n", "* ident\n", "*.txt text eol=crlf\n"])
def test_a_wrong_byte_written_fails_the_verification(
    attributes: str, tmp_path: Path, git, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes changed in place right after the restore wrote them (same size, same mtime): the
    fresh snapshot reads the file again and the rollback is not verified."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    if attributes:
        (repo / ".gitattributes").write_text(attributes)
    (repo / "a.txt").write_bytes(b"checkpointed line\r\n")
    (repo / "b.txt").write_bytes(b"untouched\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    workspace = Workspace.find(repo)
    run = RunStore(workspace).current_or_manual("test")
    snapshotter = Snapshotter(workspace)
    target = checkpoints.take_checkpoint(run, snapshotter, label="base")
    (repo / "a.txt").write_bytes(b"the agent's version\n")
    real = rollback.apply_changes

    def write_then_spoil(*args: object) -> list[str]:
        written = real(*args)  # type: ignore[arg-type]
        full = repo / "a.txt"
        before = os.stat(full)
        with open(full, "r+b") as handle:
            handle.write(b"X")  # same size
        os.utime(full, ns=(before.st_atime_ns, before.st_mtime_ns))
        return written

    monkeypatch.setattr(rollback, "apply_changes", write_then_spoil)
    with pytest.raises(rollback.RollbackError, match=r"ROLLBACK NOT VERIFIED.*a\.txt"):
        rollback.rollback(run, target, snapshotter=snapshotter)


def test_the_users_index_is_clean_after_a_rollback(tmp_path: Path, git) -> None:
    """The refresh that runs beside the verification leaves the user's index with the restored
    files' stat data: ``git diff-files`` reports nothing, ``git status`` nothing either."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in range(40):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    workspace = Workspace.find(repo)
    run = RunStore(workspace).current_or_manual("test")
    snapshotter = Snapshotter(workspace)
    target = checkpoints.take_checkpoint(run, snapshotter, label="base")
    for n in range(0, 40, 2):
        (repo / f"f{n}.txt").write_text("changed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the agent")

    result = rollback.rollback(run, target, snapshotter=snapshotter)

    assert result.changed == 20
    assert git.run(repo, "diff-files", "--quiet").returncode == 0
    assert git(repo, "status", "--porcelain") == ""
