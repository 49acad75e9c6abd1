"""How gitcli starts git (``start_kind``, ``start_argv``): what each command can write decides
how its child gets the death signal, and none of the ways forks paella where ``setpriv`` works.

Each classification is checked against real git: a command called ``read`` leaves the work
tree, every index and every ref as they were; one called ``store`` changes nothing but objects
and paella's refs. The kill -9 tests of the death signal itself are in test_rollback_kill9.py.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import resource
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from paella_tui.supervisor.store import death_group, git_start
from paella_tui.supervisor.store.git_start import StartKind, start_kind
from paella_tui.supervisor.store.gitcli import Git

SETPRIV = shutil.which("setpriv")
needs_setpriv = pytest.mark.skipif(
    git_start.death_signal_program(os.environ.get("PATH")) is None,
    reason="no setpriv with --pdeathsig here: only the fallback hook can be exercised",
)

# (arguments, stdin, private index?, expected kind): as paella runs them, and their neighbours.
CASES: list[tuple[list[str], bytes | None, bool, StartKind]] = [
    (["rev-parse", "--verify", "-q", "HEAD"], None, False, "read"),
    (["diff-files", "-z", "--name-status"], None, True, "read"),
    (["ls-files", "-z", "--stage"], None, True, "read"),
    (["check-attr", "-z", "--stdin", "--all"], b"README.md\0", True, "read"),
    (["check-ignore", "--no-index", "-z", "-v", "-n", "--stdin"], b"a.txt\0", False, "read"),
    (["config", "-z", "--get-regexp", r"^filter\."], None, False, "read"),
    (["config", "--get", "core.autocrlf"], None, False, "read"),
    (["worktree", "list", "--porcelain", "-z"], None, False, "read"),
    (["symbolic-ref", "-q", "--short", "HEAD"], None, False, "read"),
    (["merge-base", "--is-ancestor", "HEAD", "HEAD"], None, False, "read"),
    (["rev-list", "--first-parent", "HEAD"], None, False, "read"),
    (["cat-file", "-e", "HEAD"], None, False, "read"),
    (["hash-object", "-w", "--stdin"], b"an object\n", False, "store"),
    (["mktree"], b"", False, "store"),
    (["commit-tree", "HEAD^{tree}", "-p", "HEAD"], b"message\n", False, "store"),
    (["write-tree"], None, True, "checked"),
    (["read-tree", "HEAD"], None, True, "checked"),
    (["update-index", "--add", "-z", "--stdin"], b"a.txt\0", True, "checked"),
    (["update-ref", "refs/paella/run/checkpoints/1", "HEAD", ""], None, False, "store"),
    (["update-ref", "-m", "a message", "refs/paella-state/run", "HEAD"], None, False, "store"),
    (["update-ref", "--stdin"], b"create refs/paella/run/steps/1 HEAD\n", False, "store"),
    (
        ["update-ref", "-z", "--stdin"],
        b"start\0delete refs/paella-mirror/x\0\0commit\0",
        False,
        "store",
    ),
    (["write-tree"], None, False, "checked"),  # the user's index: write-tree records its cache tree
    (["read-tree", "--reset", "HEAD"], None, False, "checked"),
    (["read-tree", "--reset", "-u", "HEAD"], None, True, "checked"),
    (["update-index", "-q", "--refresh"], None, False, "checked"),
    (["update-ref", "-m", "rollback", "refs/heads/main", "HEAD"], None, False, "checked"),
    (["update-ref", "--no-deref", "-m", "rollback", "HEAD", "HEAD"], None, False, "checked"),
    (
        ["update-ref", "--stdin"],
        b"delete refs/paella/a\ndelete refs/heads/main\n",
        False,
        "checked",
    ),
    (["symbolic-ref", "-m", "rollback", "HEAD", "refs/heads/main"], None, False, "checked"),
    (["config", "core.bare", "false"], None, False, "checked"),
    (["add", "-A"], None, True, "checked"),  # not on the store list: the conservative default
    (["fetch", "--quiet", "."], None, False, "checked"),
]


def _state(repo: Path, private: Path) -> dict[str, str]:
    """The work tree, both indexes and every ref, as digests (the object store left out)."""
    state = {}
    for path in sorted(repo.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(repo).parts:
            state[f"tree:{path.relative_to(repo)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for index in (repo / ".git" / "index", private):
        if index.exists():
            state[f"index:{index.name}"] = hashlib.sha256(index.read_bytes()).hexdigest()
    refs = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in refs.splitlines():
        name, oid = line.split()
        state[f"ref:{name}"] = oid
    head = (repo / ".git" / "HEAD").read_text()
    state["HEAD"] = head
    return state


def _users(state: dict[str, str]) -> dict[str, str]:
    """What of ``state`` a ``store`` command may not change: all but paella's refs."""
    paella = ("ref:refs/paella/", "ref:refs/paella-state/", "ref:refs/paella-mirror/")
    return {k: v for k, v in state.items() if not k.startswith(paella)}


@pytest.mark.parametrize(("args", "stdin", "private", "kind"), CASES, ids=lambda v: str(v)[:40])
def test_each_command_is_classed_by_what_it_really_writes(
    repo: Path, args: list[str], stdin: bytes | None, private: bool, kind: StartKind
) -> None:
    assert start_kind(args, input=stdin) == kind
    (repo / "a.txt").write_text("an untracked file\n")
    index = repo / ".git" / "private"
    git = Git(repo, index_file=index if private else None)
    if private:
        git.run(["read-tree", "HEAD"])
    before = _state(repo, index)
    git.run(args, input=stdin, check=False)
    after = _state(repo, index)
    if kind == "read":
        assert after == before
    elif kind == "store":
        assert _users(after) == _users(before)


@needs_setpriv
def test_writes_start_through_setpriv_and_checked_ones_check_their_parent(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(death_group, "disabled", True)  # setpriv's way, as where no group is
    setpriv = git_start.death_signal_program(os.environ.get("PATH"))
    git = Git(repo)
    program = git.command([])[0]

    argv, hook, group = git.how_to_start(["rev-parse", "HEAD"])
    assert (argv[0], hook, group) == (program, None, None)

    argv, hook, group = git.how_to_start(["hash-object", "-w", "--stdin"])
    assert argv[:5] == [setpriv, "--pdeathsig", "KILL", "--", program]
    assert (hook, group) == (None, None)

    argv, hook, group = git.how_to_start(["read-tree", "--reset", "HEAD"])
    assert group is None
    assert argv[:4] == [setpriv, "--pdeathsig", "KILL", "--"]
    assert argv[4:6] == ["/bin/sh", "-c"]
    assert argv[7:10] == ["sh", str(os.getpid()), program]
    assert hook is None


@needs_setpriv
def test_a_checked_write_whose_paella_is_gone_never_starts_git(repo: Path) -> None:
    """The window setpriv leaves (paella killed before the signal is set) is closed for the
    checked writes: started by anything but the paella it names, the command runs no git."""
    git = Git(repo)
    args = ["update-ref", "refs/heads/stray", "HEAD"]
    argv, hook, group = git.how_to_start(args)
    assert (hook, group) == (None, None)  # the user's branch: never the death group
    # A shell in between: setpriv's parent is then not this process, as when paella died
    # and setpriv was adopted.
    proc = subprocess.run(
        ["/bin/sh", "-c", '"$@"; exit $?', "sh", *argv], cwd=repo, env=git.env, check=False
    )
    assert proc.returncode != 0
    assert git.rev_parse("refs/heads/stray") is None
    # Started by this process, the same argv writes.
    assert subprocess.run(argv, cwd=repo, env=git.env, check=False).returncode == 0
    assert git.rev_parse("refs/heads/stray") == git.rev_parse("HEAD")


def _faults_after(start: Callable[[], object]) -> int:
    """Page faults this thread takes rewriting 64 MiB it wrote before ``start()``: a fork of
    this process (a ``preexec_fn``) makes every page copy-on-write, a vfork none."""
    size = 64 << 20
    with mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as memory:
        memory.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per 4 KiB page, countable
        pages = range(0, size, mmap.PAGESIZE)
        for offset in pages:
            memory[offset] = 1
        start()
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for offset in pages:
            memory[offset] = 2
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@needs_setpriv
@pytest.mark.parametrize(
    ("args", "private"),
    [(["write-tree"], True), (["update-index", "-q", "--refresh"], False)],
    ids=["private-index", "user-index"],
)
def test_a_write_does_not_fork_paella(repo: Path, args: list[str], private: bool) -> None:
    git = Git(repo, index_file=repo / ".git" / "private" if private else None)
    if private:
        git.run(["read-tree", "HEAD"])
    forked = _faults_after(
        lambda: subprocess.run(git.command(args), cwd=repo, env=git.env, preexec_fn=lambda: None)
    )
    assert forked > 8000, f"{forked} faults: the fork this compares with did not copy-on-write"
    assert _faults_after(lambda: git.run(args)) < forked / 10


def test_without_setpriv_writes_fall_back_to_the_hook(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(death_group, "disabled", True)
    bin_dir = tmp_path / "only-git"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "git")
    monkeypatch.setenv("PATH", str(bin_dir))
    git = Git(repo)
    for args in (["hash-object", "-w", "--stdin"], ["read-tree", "--reset", "HEAD"]):
        argv, hook, _group = git.how_to_start(args)
        assert argv[0] == str(bin_dir / "git")
        assert hook is not None and hook is git_start.die_with_parent()
    assert git.out(["hash-object", "-w", "--stdin"], input=b"x\n")
    assert git.how_to_start(["rev-parse", "HEAD"])[1] is None


# Stand-ins for a setpriv that cannot give the signal: util-linux before 2.33 (getopt names the
# program as it was started), and a sandbox refusing the prctl (util-linux's own error prefix).
OLD_SETPRIV = {
    "old-util-linux": "echo \"$0: unrecognized option '$1'\" >&2; echo \"Try '$0 --help'\" >&2",
    "prctl-refused": "echo 'setpriv: set parent death signal failed: Operation not permitted' >&2",
}


@pytest.mark.parametrize("why", OLD_SETPRIV)
def test_a_setpriv_that_cannot_is_tried_once_and_passed_over(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    bin_dir = tmp_path / why
    bin_dir.mkdir()
    old = bin_dir / "setpriv"
    old.write_text(
        f"#!/bin/sh\necho started >> {tmp_path / 'starts'}\n{OLD_SETPRIV[why]}\nexit 1\n"
    )
    old.chmod(0o755)
    path_var = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setattr(death_group, "disabled", True)

    # Through Git.run, the first write is the trial: refused, it runs again with the hook.
    monkeypatch.setenv("PATH", path_var)
    git = Git(repo)
    oid = git.out(["hash-object", "-w", "--stdin"], input=b"tried\n")
    assert git.out(["cat-file", "blob", oid]) == "tried"
    assert (tmp_path / "starts").read_text() == "started\n"
    assert git.how_to_start(["hash-object", "-w", "--stdin"]) == (
        git.command(["hash-object", "-w", "--stdin"]),
        git_start.die_with_parent(),
        None,
    )
    git.run(["update-ref", "refs/heads/checked", "HEAD"])
    assert (tmp_path / "starts").read_text() == "started\n"  # never again in this process
    assert git.rev_parse("refs/heads/checked") == git.rev_parse("HEAD")

    # Asked beforehand (popen's streams cannot be run twice), it is tried on its own.
    git_start._setpriv_works.clear()
    assert git_start.death_signal_program(path_var) is None
    argv, hook = git_start.start_argv(["git", "write-tree"], "store", path_var)
    assert (argv, hook) == (["git", "write-tree"], git_start.die_with_parent())
