"""Rollback (SPEC 5, 13): ``paella rollback`` restores a checkpoint byte for byte, puts HEAD, the
branch and the index back, never touches ignored files, and is itself undone by ``paella rollback
salvage:N``. It refuses (exit 3, nothing changed) while git is busy.

The commands run through ``cli.main`` in the test process (``run_paella_in_process``): what is
checked is what rollback does to the repository. The real command in a subprocess, killed at
each of its steps, is test_rollback_faults.py and test_rollback_kill9.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_paella_in_process

# Paths rollback must leave exactly as they were before it: ignored files, and a nested
# repository with no commit (which no snapshot can hold).
UNMANAGED = ("debug.log", "build", "nested_without")


def write(path: Path, data: str | bytes, *, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def symlink(target: str, path: Path) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The commands in this process (see the module's docstring)."""
    return run_paella_in_process


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def listing(paella, repo: Path) -> dict[str, list[dict[str, object]]]:
    return json.loads(ok(paella(repo, "checkpoints", "--json")).stdout)


def salvage_refs(git, repo: Path) -> list[str]:
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/paella/")
    return [r for r in refs.splitlines() if "/salvage/" in r]


def nul_list(git, repo: Path, *args: str) -> set[str]:
    return {p for p in git(repo, *args).split("\0") if p}


@dataclass
class Story:
    """The issue's story: a rich checkpoint, then the agent's typical damage."""

    repo: Path
    checkpoint_state: object
    checkpoint_head: str
    damaged_state: object
    damaged_head: str
    agent_commits: list[str]


def make_upstream(path: Path, git) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    write(path / "mod.txt", "module\n")
    git(path, "add", "mod.txt")
    git(path, "commit", "-q", "-m", "module")
    return path


def build_checkpoint(tmp_path: Path, git, paella) -> Path:
    """A workspace holding every kind of path, checkpointed as checkpoint 1."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "tracked.txt", "tracked\n")
    write(repo / "modified.txt", "original\n")
    write(repo / "staged.txt", "original staged\n")
    write(repo / "run.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    symlink("tracked.txt", repo / "link")
    write(repo / "binary.bin", bytes(range(256)) * 4 + b"\0\0\xff\xfe")
    write(repo / "with space.txt", "spaced\n")
    write(repo / "ünïcødé ☃.txt", "unicode\n")
    write(repo / "deleted.txt", "deleted before the checkpoint\n")
    write(repo / "dir_to_file" / "inner.txt", "inner\n")
    write(repo / "dir_to_file" / "sub" / "deeper.txt", "deeper\n")
    write(repo / "file_to_dir", "was a file\n")
    write(repo / ".gitignore", "*.log\nbuild/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    upstream = make_upstream(tmp_path / "upstream", git)
    git(repo, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(upstream), "sub")
    git(repo, "commit", "-q", "-m", "submodule")

    # Uncommitted work at the checkpoint.
    write(repo / "modified.txt", "modified, not staged\n")
    write(repo / "staged.txt", "staged change\n")
    write(repo / "new_staged.txt", "new and staged\n")
    git(repo, "add", "staged.txt", "new_staged.txt")
    write(repo / "untracked.txt", "untracked\n")
    write(repo / "tool.py", "#!/usr/bin/env python3\n", mode=0o755)
    symlink("does/not/exist", repo / "dangling")
    write(repo / "untracked space ü.txt", "untracked unicode\n")
    (repo / "deleted.txt").unlink()
    (repo / "empty_dir").mkdir()
    write(repo / "debug.log", "ignored log\n")
    write(repo / "build" / "out.o", b"\x7fELF ignored")
    nested = repo / "nested_with"
    nested.mkdir()
    git(nested, "init", "-q", "-b", "main")
    write(nested / "n.txt", "nested\n")
    git(nested, "add", "n.txt")
    git(nested, "commit", "-q", "-m", "nested")
    (repo / "nested_without").mkdir()
    git(repo / "nested_without", "init", "-q")
    write(repo / "nested_without" / "wip.txt", "no commit\n")

    result = ok(paella(repo, "checkpoint", "--label", "before the agent"))
    assert "checkpoint 1" in result.stdout
    assert "nested_without" in result.stdout  # named as left out
    return repo


def damage(repo: Path, git) -> list[str]:
    """What an agent typically does; returns the commits it made."""
    (repo / "tracked.txt").unlink()
    write(repo / "modified.txt", "rewritten by the agent\n")
    (repo / "untracked.txt").chmod(0o755)
    (repo / "run.sh").chmod(0o644)
    symlink("binary.bin", repo / "link")
    symlink("tracked.txt", repo / "dangling")
    shutil.rmtree(repo / "dir_to_file")
    write(repo / "dir_to_file", "now a file\n")
    (repo / "file_to_dir").unlink()
    write(repo / "file_to_dir" / "x.txt", "now a folder\n")
    write(repo / "binary.bin", b"\0" * 300)
    write(repo / "with space.txt", "agent was here\n")
    write(repo / "newdir" / "deep" / "file.txt", "new untracked\n")
    git(repo, "checkout", "--", "deleted.txt")
    write(repo / "debug.log", "the agent's log\n")
    write(repo / "build" / "new.o", b"new ignored")
    write(repo / "nested_without" / "wip.txt", "changed, still no commit\n")
    commits = []
    write(repo / "agent_new.txt", "agent\n")
    git(repo, "add", "agent_new.txt", "modified.txt")
    git(repo, "commit", "-q", "-m", "agent 1")
    commits.append(git.head(repo))
    write(repo / "agent2.txt", "agent 2\n")
    git(repo, "add", "agent2.txt")
    git(repo, "commit", "-q", "-m", "agent 2")
    commits.append(git.head(repo))
    write(repo / "staged.txt", "the agent staged this\n")
    git(repo, "add", "staged.txt", "tool.py")
    git(repo, "reset", "-q")
    return commits


@pytest.fixture
def story(tmp_path: Path, git, paella, tree_state) -> Story:
    repo = build_checkpoint(tmp_path, git, paella)
    checkpoint_state, checkpoint_head = tree_state(repo), git.head(repo)
    commits = damage(repo, git)
    return Story(
        repo=repo,
        checkpoint_state=checkpoint_state,
        checkpoint_head=checkpoint_head,
        damaged_state=tree_state(repo),
        damaged_head=git.head(repo),
        agent_commits=commits,
    )


def test_rollback_restores_the_checkpoint_and_salvage_undoes_it(
    story: Story, git, paella, tree_state
) -> None:
    repo = story.repo
    assert story.damaged_state != story.checkpoint_state

    result = ok(paella(repo, "rollback", "1", "--yes"))
    assert "undo with: paella rollback salvage:1 --yes" in result.stdout

    after = tree_state(repo)
    restored, expected = after.without(*UNMANAGED), story.checkpoint_state.without(*UNMANAGED)
    assert restored == expected, "\n".join(restored.differences(expected))
    # Ignored files and the nested repository with no commit: exactly as before the rollback.
    untouched = after.only(*UNMANAGED)
    assert untouched == story.damaged_state.only(*UNMANAGED), "\n".join(
        untouched.differences(story.damaged_state.only(*UNMANAGED))
    )
    assert git.head(repo) == story.checkpoint_head
    assert git.branch(repo) == "main"
    assert git.run(repo, "diff", "--cached", "--quiet").returncode == 0
    # What was uncommitted at the checkpoint is uncommitted again.
    assert nul_list(git, repo, "diff", "--name-only", "-z") == {
        "modified.txt",
        "staged.txt",
        "deleted.txt",
    }
    assert nul_list(git, repo, "ls-files", "-z", "--others", "--exclude-standard") == {
        "untracked.txt",
        "tool.py",
        "dangling",
        "untracked space ü.txt",
        "new_staged.txt",
        "nested_with/",
        "nested_without/",
    }
    # The agent's commits stay reachable through the salvage snapshot.
    salvage = listing(paella, repo)["salvage"]
    assert [s["n"] for s in salvage] == [1]
    for commit in story.agent_commits:
        assert (
            git.run(repo, "merge-base", "--is-ancestor", commit, salvage[0]["ref"]).returncode == 0
        )
    status = ok(paella(repo, "status"))
    assert "warning" not in status.stderr

    ok(paella(repo, "rollback", "salvage:1", "--yes"))

    back = tree_state(repo)
    assert back == story.damaged_state, "\n".join(back.differences(story.damaged_state))
    assert git.head(repo) == story.damaged_head
    assert git.branch(repo) == "main"
    for commit in story.agent_commits:
        assert git.run(repo, "merge-base", "--is-ancestor", commit, "main").returncode == 0


def test_detached_head_checkpoint_and_rollback(repo: Path, git, paella, tree_state) -> None:
    git(repo, "checkout", "-q", "--detach")
    write(repo / "wip.txt", "detached work\n")
    ok(paella(repo, "checkpoint"))
    checkpoint_state, checkpoint_head = tree_state(repo), git.head(repo)
    write(repo / "wip.txt", "agent\n")
    git(repo, "add", "wip.txt")
    git(repo, "commit", "-q", "-m", "agent on a detached HEAD")
    git(repo, "checkout", "-q", "main")  # and it wandered back onto the branch
    damaged_state, damaged_branch = tree_state(repo), git.branch(repo)

    ok(paella(repo, "rollback", "1", "--yes"))

    assert tree_state(repo) == checkpoint_state
    assert git.branch(repo) is None and git.head(repo) == checkpoint_head
    assert git(repo, "rev-parse", "main") == checkpoint_head  # main itself never moved

    ok(paella(repo, "rollback", "salvage:1", "--yes"))
    assert tree_state(repo) == damaged_state
    assert git.branch(repo) == damaged_branch == "main"


def test_rollback_to_a_checkpoint_on_an_unborn_branch(
    tmp_path: Path, git, paella, tree_state
) -> None:
    repo = tmp_path / "unborn"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "a.txt", "first\n")
    write(repo / "b.txt", "second\n")
    ok(paella(repo, "checkpoint"))
    checkpoint_state = tree_state(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the agent's first commit")
    write(repo / "a.txt", "changed\n")
    git(repo, "commit", "-q", "-am", "the agent's second commit")
    agent_head = git.head(repo)
    damaged_state = tree_state(repo)

    ok(paella(repo, "rollback", "1", "--yes"))

    assert tree_state(repo) == checkpoint_state
    assert git.head(repo) is None
    assert git.branch(repo) == "main"
    assert git(repo, "ls-files") == ""  # nothing staged: the files are untracked again
    salvage = listing(paella, repo)["salvage"][0]
    assert git.run(repo, "merge-base", "--is-ancestor", agent_head, salvage["ref"]).returncode == 0

    ok(paella(repo, "rollback", "salvage:1", "--yes"))
    assert tree_state(repo) == damaged_state
    assert git.head(repo) == agent_head
    assert git.branch(repo) == "main"


def test_rollback_puts_head_back_on_the_checkpoints_branch(
    repo: Path, git, paella, tree_state
) -> None:
    git(repo, "checkout", "-q", "-b", "feature-a")
    write(repo / "a.txt", "on A\n")
    ok(paella(repo, "checkpoint"))
    checkpoint_state, head_a = tree_state(repo), git.head(repo)
    git(repo, "checkout", "-q", "-b", "feature-b")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "the agent commits on B")
    head_b = git.head(repo)

    ok(paella(repo, "rollback", "1", "--yes"))

    assert git.branch(repo) == "feature-a"
    assert git.head(repo) == head_a
    assert git(repo, "rev-parse", "feature-b") == head_b  # B keeps the agent's commit
    assert tree_state(repo) == checkpoint_state
    assert git.run(repo, "diff", "--cached", "--quiet").returncode == 0


# --- refusals ------------------------------------------------------------------------------


def conflicting_branches(repo: Path, git) -> None:
    """main and `other` both change README.md differently."""
    git(repo, "checkout", "-q", "-b", "other")
    write(repo / "README.md", "other\n")
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    write(repo / "README.md", "main\n")
    git(repo, "commit", "-q", "-am", "main")


def start_merge(repo: Path, git) -> None:
    assert git.run(repo, "merge", "other").returncode != 0
    assert (repo / ".git" / "MERGE_HEAD").exists()


def start_rebase(repo: Path, git) -> None:
    assert git.run(repo, "rebase", "other").returncode != 0
    assert (repo / ".git" / "rebase-merge").exists() or (repo / ".git" / "rebase-apply").exists()


def start_cherry_pick(repo: Path, git) -> None:
    assert git.run(repo, "cherry-pick", "other").returncode != 0
    assert (repo / ".git" / "CHERRY_PICK_HEAD").exists()


def hold_index_lock(repo: Path, git) -> None:
    (repo / ".git" / "index.lock").write_bytes(b"")


@pytest.mark.parametrize(
    ("start", "says"),
    [
        (start_merge, "git merge --abort"),
        (start_rebase, "git rebase --abort"),
        (start_cherry_pick, "git cherry-pick --abort"),
        (hold_index_lock, "index.lock"),
    ],
    ids=["merge", "rebase", "cherry-pick", "index-lock"],
)
def test_rollback_refuses_while_git_is_busy(
    repo: Path, git, paella, tree_state, start, says: str
) -> None:
    conflicting_branches(repo, git)
    write(repo / "untracked.txt", "mine\n")
    ok(paella(repo, "checkpoint"))
    write(repo / "untracked.txt", "changed since\n")
    start(repo, git)
    before, head = tree_state(repo), git(repo, "rev-parse", "HEAD")
    index = (repo / ".git" / "index").read_bytes()

    result = paella(repo, "rollback", "1", "--yes")

    assert result.returncode == 3, result.stderr
    assert says in result.stderr
    assert "Nothing was changed" in result.stderr
    assert tree_state(repo) == before
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / ".git" / "index").read_bytes() == index
    assert listing(paella, repo)["salvage"] == []
    assert salvage_refs(git, repo) == []


def test_rollback_outside_a_repository_is_a_workspace_error(tmp_path: Path, paella) -> None:
    folder = tmp_path / "not-a-repo"
    folder.mkdir()
    result = paella(
        folder, "rollback", "1", "--yes", env={"GIT_CEILING_DIRECTORIES": str(tmp_path)}
    )
    assert result.returncode == 3
    assert "not a git repository" in result.stderr
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "no green checkpoint"),
        (("7",), "no checkpoint 7"),
        (("salvage:1",), "no salvage snapshot 1"),
        (("1",), "--yes"),  # no --yes and no terminal to confirm on
    ],
    ids=["no-green-checkpoint", "unknown-number", "unknown-salvage", "no-yes-no-terminal"],
)
def test_rollback_usage_errors_change_nothing(
    repo: Path, git, paella, tree_state, args: tuple[str, ...], says: str
) -> None:
    write(repo / "wip.txt", "wip\n")
    ok(paella(repo, "checkpoint"))  # a manual checkpoint: not green
    write(repo / "wip.txt", "changed\n")
    before, head = tree_state(repo), git.head(repo)
    extra = () if args == ("1",) else ("--yes",)

    result = paella(repo, "rollback", *args, *extra)

    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert tree_state(repo) == before
    assert git.head(repo) == head
    assert listing(paella, repo)["salvage"] == []
    assert salvage_refs(git, repo) == []


def test_a_nested_repository_that_moved_is_reported_not_failed(
    repo: Path, git, paella, tree_state
) -> None:
    """Rollback never enters a nested repository, so one whose commit moved since the checkpoint
    stays where it is: the rollback succeeds, says so, and leaves its inside untouched."""
    nested = repo / "nested"
    nested.mkdir()
    git(nested, "init", "-q", "-b", "main")
    write(nested / "n.txt", "1\n")
    git(nested, "add", "n.txt")
    git(nested, "commit", "-q", "-m", "one")
    write(repo / "work.txt", "checkpointed\n")
    ok(paella(repo, "checkpoint"))
    write(nested / "n.txt", "2\n")
    git(nested, "commit", "-q", "-am", "the agent commits inside the nested repository")
    write(repo / "work.txt", "damaged\n")
    nested_before = tree_state(nested, exclude=())

    result = ok(paella(repo, "rollback", "1", "--yes"))

    assert "nested: nested repository or submodule at another commit" in result.stdout
    assert (repo / "work.txt").read_text() == "checkpointed\n"
    assert tree_state(nested, exclude=()) == nested_before  # never entered


def test_a_failed_verification_is_loud_and_names_the_salvage(repo: Path, paella) -> None:
    """Something still writing into the workspace during a rollback (a leftover of the agent)
    makes the restored tree differ from the checkpoint: step 5 says so loudly, names the salvage,
    and records the failure instead of success."""
    write(repo / "work.txt", "checkpointed\n")
    ok(paella(repo, "checkpoint"))
    write(repo / "work.txt", "damaged\n")
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import itertools, pathlib, time\n"
            "for n in itertools.count():\n"
            "    pathlib.Path(f'noise-{n}.txt').write_text(str(n))\n"
            "    time.sleep(0.002)\n",
        ],
        cwd=repo,
    )
    try:
        time.sleep(0.2)
        result = paella(repo, "rollback", "1", "--yes")
    finally:
        writer.kill()
        writer.wait()

    assert result.returncode == 3, result.stdout + result.stderr
    assert "ROLLBACK NOT VERIFIED" in result.stderr
    salvage = listing(paella, repo)["salvage"]
    assert len(salvage) == 1
    assert salvage[0]["ref"] in result.stderr
    assert "paella rollback salvage:1 --yes" in result.stderr
    run_dir = next((repo / ".git" / "paella" / "runs").iterdir())
    kinds = [
        json.loads(line)["kind"] for line in (run_dir / "events.jsonl").read_text().splitlines()
    ]
    assert kinds[-1] == "rollback-failed"
    assert "rollback-done" not in kinds


# --- ignored files and exact bytes ----------------------------------------------------------


def test_rollback_never_deletes_an_ignored_file_in_the_way(repo: Path, git, paella) -> None:
    """A folder the agent put where the checkpoint had a file holds an ignored file, which no
    snapshot holds: rollback must leave it (refuse, or restore around it), never delete it."""
    write(repo / ".gitignore", "*.log\n")
    write(repo / "x", "a file at the checkpoint\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    ok(paella(repo, "checkpoint"))
    (repo / "x").unlink()
    write(repo / "x" / "build.log", "precious ignored output\n")

    paella(repo, "rollback", "1", "--yes")

    assert (repo / "x" / "build.log").is_file(), (
        "rollback deleted an ignored file that is in no snapshot: it is lost"
    )
    assert (repo / "x" / "build.log").read_text() == "precious ignored output\n"


def test_rollback_never_overwrites_an_ignored_file(repo: Path, git, paella) -> None:
    """A path snapshotted while untracked, then changed and ignored: the new bytes are in no
    snapshot, so rollback must not overwrite them."""
    write(repo / "notes.txt", "checkpointed\n")
    ok(paella(repo, "checkpoint"))
    write(repo / "notes.txt", "the only copy of this text\n")
    write(repo / ".gitignore", "notes.txt\n")

    paella(repo, "rollback", "1", "--yes")

    assert (repo / "notes.txt").read_text() == "the only copy of this text\n", (
        "rollback overwrote an ignored file that is in no snapshot: its content is lost"
    )


def test_line_endings_survive_a_rollback_under_text_attributes(
    repo: Path, git, paella, tree_state
) -> None:
    """``* text=auto`` is common; a snapshot must still hold the file's bytes, CRLF included."""
    write(repo / ".gitattributes", "* text=auto\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    write(repo / "windows.txt", b"line one\r\nline two\r\n")
    ok(paella(repo, "checkpoint"))
    checkpoint_state = tree_state(repo)
    (repo / "windows.txt").unlink()

    ok(paella(repo, "rollback", "1", "--yes"))

    assert (repo / "windows.txt").read_bytes() == b"line one\r\nline two\r\n", (
        "the checkpoint did not keep the file's bytes: CRLF became LF"
    )
    assert tree_state(repo) == checkpoint_state


def test_autocrlf_input_keeps_crlf_bytes_through_checkpoint_and_salvage(
    repo: Path, git, paella
) -> None:
    """``core.autocrlf=input`` converts CRLF on the way in; snapshots keep the raw bytes both ways."""
    git(repo, "config", "core.autocrlf", "input")
    write(repo / "dos.txt", b"one\r\ntwo\r\n")
    ok(paella(repo, "checkpoint"))
    write(repo / "dos.txt", b"damaged\r\n")

    ok(paella(repo, "rollback", "1", "--yes"))
    assert (repo / "dos.txt").read_bytes() == b"one\r\ntwo\r\n"
    ok(paella(repo, "rollback", "salvage:1", "--yes"))
    assert (repo / "dos.txt").read_bytes() == b"damaged\r\n"


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_replace_ref_the_agent_planted_never_changes_what_a_checkpoint_holds(
    repo: Path, git, paella, packed: bool
) -> None:
    """`git replace` (a ref under refs/replace/, which the agent can write) makes git read another
    object wherever the replaced one is named. paella reads its checkpoints as written: the
    checkpoint's own tree is what a rollback restores, whether paella reads the commit from its
    loose file or asks git (packed: before, git's answer was the forgery's tree, which the
    mirror did not confirm, and the rollback was refused)."""
    write(repo / "a.txt", "good\n")
    ok(paella(repo, "checkpoint"))
    [checkpoint] = [
        r
        for r in git(repo, "for-each-ref", "--format=%(refname)", "refs/paella/").splitlines()
        if "/checkpoints/" in r
    ]
    commit = git(repo, "rev-parse", checkpoint)
    # The agent's forgery: a commit with another a.txt, put in place of the checkpoint's.
    write(repo / "a.txt", "forged\n")
    git(repo, "add", "a.txt")
    forged_tree = git(repo, "write-tree")
    forged = git(repo, "commit-tree", forged_tree, "-m", "forged")
    git(repo, "replace", commit, forged)
    assert git(repo, "rev-parse", f"{checkpoint}^{{tree}}") == forged_tree  # git is fooled
    git(repo, "reset", "-q", "--hard")
    write(repo / "a.txt", "later\n")
    if packed:
        git(repo, "gc", "-q")
        assert not (repo / ".git" / "objects" / commit[:2] / commit[2:]).exists()

    ok(paella(repo, "rollback", "1", "--yes"))

    assert (repo / "a.txt").read_bytes() == b"good\n"
