"""Snapshots (SPEC 5): the whole workspace in a git tree, built in paella's private index, without
ever changing the user's HEAD, branch, index or work tree, nor taking the repository's index lock."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_paella_in_process

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store import checkpoints
from paella_tui.supervisor.store.snapshot import REBUILDS, Snapshot, Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The commands through ``cli.main`` in the test process (conftest's ``run_paella_in_process``):
    these tests check the snapshot a command takes, not how its process starts."""
    return run_paella_in_process


def snapshot(repo: Path, **kwargs: int) -> Snapshot:
    """One snapshot of ``repo`` through the Python API, as a checkpoint takes it."""
    snapshotter = Snapshotter(Workspace.find(repo), **kwargs)
    with snapshotter.locked():
        return snapshotter.take()


def write(path: Path, data: str | bytes, *, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    if mode is not None:
        path.chmod(mode)
    return path


def user_view(repo: Path, git, tree_state) -> dict[str, object]:
    """Everything of the user's a checkpoint must leave alone."""
    index = repo / ".git" / "index"
    return {
        "head": git.head(repo),
        "branch": git.branch(repo),
        "HEAD file": (repo / ".git" / "HEAD").read_bytes(),
        "index bytes": index.read_bytes() if index.exists() else None,
        "index mtime": index.stat().st_mtime_ns if index.exists() else None,
        "refs/heads": git(repo, "for-each-ref", "refs/heads"),
        "work tree": tree_state(repo),
    }


def test_untracked_files_are_in_and_ignored_files_out(repo: Path, git) -> None:
    write(repo / ".gitignore", "*.log\nbuild/\n")
    write(repo / "new.txt", "new\n")
    write(repo / "deep" / "er" / "file.txt", "deep\n")
    write(repo / "debug.log", "ignored\n")
    write(repo / "build" / "out.o", b"\0ignored")
    write(repo / "README.md", "changed\n")

    tree = git.tree(repo, snapshot(repo).tree)

    assert tree == {
        ".gitignore": ("100644", b"*.log\nbuild/\n"),
        "README.md": ("100644", b"changed\n"),
        "new.txt": ("100644", b"new\n"),
        "deep/er/file.txt": ("100644", b"deep\n"),
    }


def test_checkpoint_leaves_head_branch_index_and_work_tree_alone(
    repo: Path, git, paella, tree_state
) -> None:
    write(repo / "staged.txt", "staged\n")
    git(repo, "add", "staged.txt")
    write(repo / "README.md", "unstaged change\n")
    write(repo / "untracked.txt", "untracked\n")
    write(repo / "run.sh", "#!/bin/sh\n", mode=0o755)
    os.symlink("README.md", repo / "link")
    before = user_view(repo, git, tree_state)

    for label in ("first", "second"):
        result = paella(repo, "checkpoint", "--label", label)
        assert result.returncode == 0, result.stderr
        assert user_view(repo, git, tree_state) == before

    # The checkpoint did hold the work: staged, unstaged and untracked files alike.
    ckpt = json.loads(paella(repo, "checkpoints", "--json").stdout)["checkpoints"][-1]
    tree = git.tree(repo, ckpt["tree"])
    assert tree["staged.txt"] == ("100644", b"staged\n")
    assert tree["README.md"] == ("100644", b"unstaged change\n")
    assert tree["untracked.txt"] == ("100644", b"untracked\n")
    assert tree["run.sh"] == ("100755", b"#!/bin/sh\n")
    assert tree["link"] == ("120000", b"README.md")
    assert ckpt["head"] == before["head"]
    assert ckpt["branch"] == "main"


def test_checkpoint_succeeds_while_the_index_lock_is_held(
    repo: Path, git, paella, tree_state
) -> None:
    lock = repo / ".git" / "index.lock"
    lock.write_bytes(b"held by another git process")
    write(repo / "README.md", "edited while git holds the lock\n")
    write(repo / "new.txt", "new\n")
    before = user_view(repo, git, tree_state)

    result = paella(repo, "checkpoint")

    assert result.returncode == 0, result.stderr
    assert lock.read_bytes() == b"held by another git process"
    assert user_view(repo, git, tree_state) == before
    ckpt = json.loads(paella(repo, "checkpoints", "--json").stdout)["checkpoints"][0]
    tree = git.tree(repo, ckpt["tree"])
    assert tree["README.md"] == ("100644", b"edited while git holds the lock\n")
    assert tree["new.txt"] == ("100644", b"new\n")


def test_private_index_persists_between_snapshots(repo: Path, git) -> None:
    for n in range(20):
        write(repo / "src" / f"f{n}.txt", f"file {n}\n")
    first = snapshot(repo)
    private = Workspace.find(repo).state_dir / "snapshot.index"
    assert private.is_file()
    assert not (repo / ".git" / "paella" / "snapshot.index.lock").exists()

    write(repo / "src" / "f3.txt", "changed\n")
    # A new process (a fresh Snapshotter) finds the private index with valid stat data: git sees
    # only the changed file as changed, so only that file is hashed again.
    env = {**os.environ, "GIT_INDEX_FILE": str(private)}
    changed = subprocess.run(
        ["git", "diff-files", "--name-only"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert changed.stdout.split() == ["src/f3.txt"]

    second = snapshot(repo)
    assert second.tree != first.tree
    assert git.tree(repo, second.tree)["src/f3.txt"] == ("100644", b"changed\n")
    assert git.tree(repo, second.tree)["src/f4.txt"] == ("100644", b"file 4\n")


@pytest.mark.parametrize("times", [1, REBUILDS])
@pytest.mark.parametrize("follow", [False, True], ids=["full", "followed"])
def test_a_snapshot_survives_paellas_state_deleted_under_it(
    repo: Path, git, follow: bool, times: int
) -> None:
    """A hostile agent deletes paella's state folder (``.git/paella``) while a snapshot runs:
    the snapshot makes the folder again and rebuilds its private index (it raised "Unable to
    create ...snapshot.index.lock: No such file or directory" through the gates, a traceback).
    An ``rm -rf`` still under way deletes the folder made again too: ``times`` deletions, each
    before a ``write-tree``, up to :data:`REBUILDS` (one more is an error, below)."""
    import shutil

    write(repo / "a.txt", "one\n")
    snapshotter = Snapshotter(Workspace.find(repo))
    if follow:
        snapshotter.changes.follow()
    with snapshotter.locked():
        snapshotter.take()
    write(repo / "a.txt", "two\n")
    if follow:
        snapshotter.changes.note(["a.txt"])
    real_out = snapshotter.git.out
    deleted: list[str] = []

    def out(args: list[str], **kwargs: object) -> str:
        if args[:1] == ["write-tree"] and len(deleted) < times:
            # The agent's `rm -rf .git/paella` lands between the index's update and its tree.
            shutil.rmtree(snapshotter.index_file.parent)
            deleted.append("state")
        return real_out(args, **kwargs)  # type: ignore[arg-type]

    snapshotter.git.out = out  # type: ignore[method-assign]
    snap = snapshotter.take(follow_changes=follow)
    assert len(deleted) == times, "the deletions never happened"
    assert git.tree(repo, snap.tree)["a.txt"] == ("100644", b"two\n")
    assert snapshotter.index_file.is_file()
    assert snap.tree == snapshot(repo).tree  # what a fresh snapshot of the workspace says


def test_a_state_folder_deleted_at_every_attempt_is_an_error_not_a_loop(repo: Path) -> None:
    import shutil

    write(repo / "a.txt", "one\n")
    snapshotter = Snapshotter(Workspace.find(repo))
    real_out = snapshotter.git.out
    deleted: list[str] = []

    def out(args: list[str], **kwargs: object) -> str:
        if args[:1] == ["write-tree"]:
            shutil.rmtree(snapshotter.index_file.parent)
            deleted.append("state")
        return real_out(args, **kwargs)  # type: ignore[arg-type]

    snapshotter.git.out = out  # type: ignore[method-assign]
    with pytest.raises(GitError, match=r"index\.lock"):
        snapshotter.take()
    assert len(deleted) == REBUILDS + 1


def test_files_over_the_size_cap_are_left_out_and_named(repo: Path, git) -> None:
    write(repo / "small.txt", "tiny\n")
    write(repo / "big.bin", b"x" * 100)
    write(repo / "README.md", "a tracked file grown past the cap\n")
    ws = Workspace.find(repo)
    run = RunStore(ws).current_or_manual("test")

    record = checkpoints.take_checkpoint(run, Snapshotter(ws, max_file_size=16))

    skipped = {s["path"]: s for s in record.skipped_files}
    assert set(skipped) == {"big.bin", "README.md"}
    assert skipped["big.bin"]["size"] == 100
    assert "max_file_size" in skipped["big.bin"]["reason"]
    tree = git.tree(repo, record.tree)
    assert "big.bin" not in tree
    assert tree["small.txt"] == ("100644", b"tiny\n")
    # The ledger record names them too, so `status --json` and the UI can show them.
    ledger = [r for r in run.ledger.read().records if r["kind"] == "checkpoint"]
    assert {s["path"] for s in ledger[-1]["skipped_files"]} == {"big.bin", "README.md"}


def test_the_cli_names_files_left_out_by_the_contracts_cap(repo: Path, paella) -> None:
    write(
        repo / "paella.toml",
        '[run]\nprompt = "p"\nagent = "true"\nmax_file_size = "1KiB"\n\n'
        '[[gate]]\nname = "ok"\ncmd = "true"\n\n[[episode]]\nname = "one"\ngates = ["ok"]\n',
    )
    write(repo / "large data.bin", b"y" * 2000)

    result = paella(repo, "checkpoint")

    assert result.returncode == 0, result.stderr
    assert "left out: large data.bin (2,000 bytes)" in result.stdout
    assert "paella.toml" not in result.stdout
    listed = paella(repo, "checkpoints")
    assert "1 left out" in listed.stdout


def test_nested_repository_with_commits_is_a_gitlink_and_never_altered(
    repo: Path, git, tree_state
) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q", "-b", "trunk")
    write(nested / "lib.py", "x = 1\n")
    git(nested, "add", "lib.py")
    git(nested, "commit", "-q", "-m", "nested")
    write(nested / "lib.py", "x = 2  # uncommitted inside\n")
    write(nested / "scratch.txt", "untracked inside\n")
    nested_head = git.head(nested)
    inside = tree_state(nested, exclude=())  # its .git too: HEAD, index, refs

    snap = snapshot(repo)

    tree = git.tree(repo, snap.tree)
    assert tree["vendor/lib"] == ("160000", nested_head)
    assert not any(p.startswith("vendor/lib/") for p in tree)
    assert snap.uncovered == ("vendor/lib",)
    assert tree_state(nested, exclude=()) == inside
    assert git.head(nested) == nested_head


def test_nested_repository_without_commits_is_named_and_not_fatal(
    repo: Path, git, tree_state
) -> None:
    nested = repo / "fresh"
    nested.mkdir()
    git(nested, "init", "-q")
    write(nested / "wip.txt", "no commit yet\n")
    write(repo / "other.txt", "other\n")
    inside = tree_state(nested, exclude=())

    snap = snapshot(repo)

    assert [s.path for s in snap.skipped] == ["fresh"]
    assert "no commit" in snap.skipped[0].reason
    tree = git.tree(repo, snap.tree)
    assert tree["other.txt"] == ("100644", b"other\n")
    assert not any(p == "fresh" or p.startswith("fresh/") for p in tree)
    assert tree_state(nested, exclude=()) == inside


def test_submodule_is_recorded_by_its_commit_and_listed_as_uncovered(
    repo: Path, tmp_path: Path, git, tree_state
) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    write(upstream / "mod.txt", "module\n")
    git(upstream, "add", "mod.txt")
    git(upstream, "commit", "-q", "-m", "module")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(upstream), "sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    write(repo / "sub" / "mod.txt", "changed inside the submodule\n")
    inside = tree_state(repo / "sub", exclude=())

    snap = snapshot(repo)

    tree = git.tree(repo, snap.tree)
    assert tree["sub"] == ("160000", git.head(upstream))
    assert ".gitmodules" in tree
    assert "sub/mod.txt" not in tree
    assert snap.uncovered == ("sub",)
    assert tree_state(repo / "sub", exclude=()) == inside


def test_unborn_head(tmp_path: Path, git, paella) -> None:
    repo = tmp_path / "unborn"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "first.txt", "before any commit\n")
    write(repo / "staged.txt", "staged before any commit\n")
    git(repo, "add", "staged.txt")

    result = paella(repo, "checkpoint")

    assert result.returncode == 0, result.stderr
    assert "no commit yet" in result.stdout
    ckpt = json.loads(paella(repo, "checkpoints", "--json").stdout)["checkpoints"][0]
    assert ckpt["head"] is None
    assert ckpt["branch"] == "main"
    assert git.tree(repo, ckpt["tree"]) == {
        "first.txt": ("100644", b"before any commit\n"),
        "staged.txt": ("100644", b"staged before any commit\n"),
    }
    assert git.head(repo) is None
    # The checkpoint commit has no parent: there is nothing to sit on.
    assert git(repo, "rev-list", "--parents", "-n1", ckpt["commit"]) == ckpt["commit"]


def test_detached_head(repo: Path, git, paella) -> None:
    write(repo / "second.txt", "2\n")
    git(repo, "add", "second.txt")
    git(repo, "commit", "-q", "-m", "second")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    write(repo / "wip.txt", "on a detached HEAD\n")
    head = git.head(repo)

    result = paella(repo, "checkpoint")

    assert result.returncode == 0, result.stderr
    assert "detached HEAD" in result.stdout
    ckpt = json.loads(paella(repo, "checkpoints", "--json").stdout)["checkpoints"][0]
    assert ckpt["head"] == head
    assert ckpt["branch"] is None
    assert git.branch(repo) is None and git.head(repo) == head
    assert git(repo, "rev-parse", f"{ckpt['commit']}^") == head
    assert "wip.txt" in git.tree(repo, ckpt["tree"])


def test_a_path_that_becomes_ignored_is_dropped_unless_the_index_tracks_it(repo: Path, git) -> None:
    write(repo / "later.txt", "untracked, ignored later\n")
    write(repo / "kept.txt", "tracked, ignored later\n")
    write(repo / "forced.log", "force-added\n")
    write(repo / ".gitignore", "*.log\n")
    git(repo, "add", "kept.txt", ".gitignore")
    git(repo, "add", "-f", "forced.log")
    git(repo, "commit", "-q", "-m", "tracked")
    first = git.tree(repo, snapshot(repo).tree)
    assert {"later.txt", "kept.txt", "forced.log"} <= set(first)

    write(repo / ".gitignore", "*.log\nlater.txt\nkept.txt\n")
    second = git.tree(repo, snapshot(repo).tree)

    assert "later.txt" not in second
    assert second["kept.txt"] == ("100644", b"tracked, ignored later\n")
    assert second["forced.log"] == ("100644", b"force-added\n")
    assert second[".gitignore"] == ("100644", b"*.log\nlater.txt\nkept.txt\n")


ODD_NAMES = [
    "with space.txt",
    "  leading and trailing  ",
    "ünïcødé ☃ 日本.txt",
    "new\nline.txt",
    "tab\there.txt",
    "-leading-dash.txt",
    "--exclude=x",
    ":(exclude)magic.txt",
    "*glob[1]?.txt",
    'quote"and\\backslash.txt',
    "dir with space/-dash/ü.txt",
]


def test_odd_file_names_are_snapshotted_byte_for_byte(repo: Path, git) -> None:
    for n, name in enumerate(ODD_NAMES):
        write(repo / name, f"content {n}\n")
    non_utf8 = os.fsdecode(b"latin1-\xe9.txt")
    write(repo / non_utf8, b"not utf-8 named\n")
    # A tracked file with an odd name, then changed.
    git(repo, "add", "--", ODD_NAMES[0])
    git(repo, "commit", "-q", "-m", "odd")
    write(repo / ODD_NAMES[0], "changed\n")

    tree = git.tree(repo, snapshot(repo).tree)

    assert tree[ODD_NAMES[0]] == ("100644", b"changed\n")
    for n, name in enumerate(ODD_NAMES[1:], start=1):
        assert tree.get(name) == ("100644", f"content {n}\n".encode()), name
    assert tree.get(non_utf8) == ("100644", b"not utf-8 named\n")


def test_a_state_dir_inside_the_work_tree_is_never_snapshotted(
    repo: Path, git, paella, tree_state
) -> None:
    state = repo / "paella-state"
    write(repo / "work.txt", "work\n")
    env = {"PAELLA_STATE_DIR": str(state)}

    first = paella(repo, "checkpoint", env=env)
    second = paella(repo, "checkpoint", env=env)

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert (state / "current").is_file()
    assert not (repo / ".git" / "paella").exists()
    listing = json.loads(paella(repo, "checkpoints", "--json", env=env).stdout)
    for ckpt in listing["checkpoints"]:
        tree = git.tree(repo, ckpt["tree"])
        assert "work.txt" in tree
        assert not any(p.startswith("paella-state") for p in tree), sorted(tree)


def test_works_with_no_git_identity_configured(repo: Path, tmp_path: Path, git, paella) -> None:
    # git must not be able to guess one either: useConfigOnly makes it refuse.
    git(repo, "config", "user.useConfigOnly", "true")
    home = tmp_path / "home"
    home.mkdir()
    no_identity = {
        name: None
        for name in (
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "GIT_COMMITTER_EMAIL",
            "EMAIL",
        )
    }
    write(repo / "wip.txt", "wip\n")
    bare_env = {k: v for k, v in os.environ.items() if k not in no_identity}
    bare_env["HOME"] = str(home)
    # The precondition: in this environment git itself refuses to commit.
    probe = subprocess.run(
        ["git", "commit-tree", "-m", "probe", "HEAD^{tree}"],
        cwd=repo,
        env=bare_env,
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0, "the test environment still has a git identity"

    result = paella(repo, "checkpoint", env={**no_identity, "HOME": str(home)})

    assert result.returncode == 0, result.stderr
    ckpt = json.loads(paella(repo, "checkpoints", "--json").stdout)["checkpoints"][0]
    author = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", ckpt["commit"])
    assert author == "paella <paella@localhost>|paella <paella@localhost>"


def test_paths_that_changed_kind_are_snapshotted_as_they_are_now(repo: Path, git) -> None:
    """A folder now a file, a file now a folder, a folder now a symlink: the snapshot holds the
    work tree as it is, with nothing left out (regression: git refused these as conflicts)."""
    write(repo / "pkg" / "a.py", "a\n")
    write(repo / "pkg" / "sub" / "b.py", "b\n")
    write(repo / "module", "a file\n")
    write(repo / "linked" / "c.py", "c\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "kinds")
    snapshot(repo)  # the private index now holds the old kinds

    for folder in ("pkg", "linked"):
        for path in sorted((repo / folder).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / folder).rmdir()
    write(repo / "pkg", "now a file\n")
    (repo / "module").unlink()
    write(repo / "module" / "__init__.py", "now a folder\n")
    os.symlink("README.md", repo / "linked")
    snap = snapshot(repo)

    assert snap.skipped == ()
    tree = git.tree(repo, snap.tree)
    assert tree == {
        "README.md": ("100644", b"hello\n"),
        "pkg": ("100644", b"now a file\n"),
        "module/__init__.py": ("100644", b"now a folder\n"),
        "linked": ("120000", b"README.md"),
    }


@pytest.mark.parametrize(
    "variable",
    ["GIT_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "GIT_WORK_TREE"],
)
def test_a_callers_git_variables_do_not_redirect_a_checkpoint(
    repo: Path, git, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """paella run from a git hook or an alias inherits variables that point git elsewhere: its
    own git scrubs them (one list for the repository's git and the mirror's)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(repo / "a.txt", "mine\n")
    monkeypatch.setenv(variable, str(elsewhere))
    monkeypatch.setenv("GIT_ALTERNATE_OBJECT_DIRECTORIES", str(elsewhere))
    run = RunStore(Workspace.find(repo)).current_or_manual("test")
    record = checkpoints.take_checkpoint(run, Snapshotter(Workspace.find(repo)), label="env")
    monkeypatch.delenv(variable)
    monkeypatch.delenv("GIT_ALTERNATE_OBJECT_DIRECTORIES")
    assert git.tree(repo, record.tree)["a.txt"] == ("100644", b"mine\n")
    assert list(elsewhere.iterdir()) == []
