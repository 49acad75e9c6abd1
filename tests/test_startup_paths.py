"""The start-up short cuts of issue 17 (item 4) agree with the slow ways they replace.

Each short cut saves a command a process or an import: HEAD's commit and branch in one git call,
the mirror's state tip read from its ref and loose object files, a process's start time read
from ``/proc`` instead of psutil. Each is checked here against what it replaced, on real
repositories, a real mirror and real processes, including the cases where it must step aside.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import GitRunner

from paella_tui.supervisor.base.owned_lock import process_start_time
from paella_tui.supervisor.run.runs import RunStore, save_to_mirror
from paella_tui.supervisor.store import mirror as mirror_module
from paella_tui.supervisor.store import steps
from paella_tui.supervisor.store.loose_reads import (
    loose_head,
    loose_ref,
    plain_ref_name,
    ref_absent,
)
from paella_tui.supervisor.store.mirror import STATE_REF, Mirror
from paella_tui.supervisor.store.workspace import HeadState, Workspace


def _head_two_calls(ws: Workspace) -> HeadState:
    """How HEAD was read before: ``symbolic-ref --short`` and ``rev-parse HEAD^{commit}``."""
    proc = ws.git.run(["symbolic-ref", "-q", "--short", "HEAD"], check=False)
    branch = proc.stdout.decode().strip() or None
    return HeadState(commit=ws.git.rev_parse("HEAD^{commit}"), branch=branch)


def _commit(git: GitRunner, repo: Path, message: str) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


# Each step moves HEAD somewhere; after each, the one-call read equals the two-call read.
HEAD_STEPS = {
    "unborn branch": lambda git, repo: None,
    "a branch": lambda git, repo: _commit(git, repo, "first"),
    "a branch with a slash": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "checkout", "-q", "-b", "feature/x-1"),
    ),
    # A tag of the branch's name: both ways say "heads/main", the unambiguous short name.
    "a branch a tag shadows": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "tag", "main"),
    ),
    "detached HEAD": lambda git, repo: (
        _commit(git, repo, "first"),
        _commit(git, repo, "second"),
        git(repo, "checkout", "-q", "--detach", "HEAD~1"),
    ),
    "an unborn orphan branch after commits": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "checkout", "-q", "--orphan", "fresh"),
    ),
    # The cases HEAD read from the files (loose_reads.loose_head) must leave to git.
    "packed refs": lambda git, repo: (_commit(git, repo, "first"), git(repo, "pack-refs", "--all")),
    "a packed tag shadows": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "tag", "main"),
        git(repo, "pack-refs", "--all"),
    ),
    "a ref under refs/ shadows": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "update-ref", "refs/main", "HEAD"),
    ),
    "a ref in the git dir shadows": lambda git, repo: (
        _commit(git, repo, "first"),
        (repo / ".git" / "main").write_text(git(repo, "rev-parse", "HEAD") + "\n"),
    ),
    "a branch named like a file of the git dir": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "checkout", "-q", "-b", "description"),
    ),
    "a packed commit": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "repack", "-a", "-d", "-q"),
        git(repo, "prune-packed"),
    ),
    "a branch naming a missing commit": lambda git, repo: (
        _commit(git, repo, "first"),
        (repo / ".git" / "refs" / "heads" / "main").write_text("1" * 40 + "\n"),
    ),
    "a branch naming a tree": lambda git, repo: (
        _commit(git, repo, "first"),
        (repo / ".git" / "refs" / "heads" / "main").write_text(
            git(repo, "rev-parse", "HEAD^{tree}") + "\n"
        ),
    ),
    "HEAD with a space after the name": lambda git, repo: (
        _commit(git, repo, "first"),
        (repo / ".git" / "HEAD").write_text("ref: refs/heads/main \n"),
    ),
    "a symbolic link to the branch's ref": lambda git, repo: (
        _commit(git, repo, "first"),
        git(repo, "update-ref", "refs/heads/other", "HEAD"),
        (repo / ".git" / "refs" / "heads" / "main").unlink(),
        (repo / ".git" / "refs" / "heads" / "main").symlink_to("other"),
    ),
}


@pytest.mark.parametrize("step", list(HEAD_STEPS))
def test_head_in_one_call_reads_what_two_calls_read(
    tmp_path: Path, git: GitRunner, step: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    HEAD_STEPS[step](git, repo)
    ws = Workspace.find(repo)
    assert ws.head() == _head_two_calls(ws)
    head, ref = ws.head_and_ref()
    assert head == ws.head()
    assert ref == (git.run(repo, "symbolic-ref", "-q", "HEAD").stdout.strip() or None)
    # A step's reading: HEAD's commit and the branch ``--symbolic-full-name`` names.
    proc = git.run(repo, "rev-parse", "HEAD", "--symbolic-full-name", "HEAD")
    words = proc.stdout.split() if proc.returncode == 0 else []
    if len(words) == 2:
        branch = words[1].removeprefix("refs/heads/") if words[1] != "HEAD" else None
        assert steps._head(SimpleNamespace(workspace=ws)) == (words[0], branch)  # type: ignore[arg-type]
    # The files are read only where they say it plainly: git is asked in every other case.
    plain = step in ("a branch", "a branch with a slash", "detached HEAD")
    assert (loose_head(ws.git_dir, ws.common_dir) is not None) == plain


def _tip_by_git(mirror: Mirror, run_id: str) -> object:
    """The state tip as ``cat-file --batch`` gives it (the only way before)."""
    found = mirror._objects([f"{STATE_REF}/{run_id}"])
    assert found and found[0] is not None
    oid, _, data = found[0]
    return mirror_module.StateCopy.parse(oid, data)


def test_the_mirror_state_tip_read_from_files_equals_gits_and_steps_aside_when_packed(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    for n in range(3):
        run.ledger.append("notice", text=f"record {n}")
        assert save_to_mirror(run) is None
        mirror = Mirror.for_workspace(ws)
        mirror_module._TIPS.clear()  # a fresh command: nothing remembered
        assert mirror.state(run.run_id) == _tip_by_git(mirror, run.run_id)
    assert mirror.local is not None
    store = mirror._store
    assert store is not None
    ref = f"{STATE_REF}/{run.run_id}"
    assert store.loose_commit(ref) is not None
    # Packed refs and objects (a gc in the mirror): no files to read, git answers.
    git(mirror.local, "--git-dir", str(mirror.local), "gc", "-q", "--prune=now")
    assert store.loose_commit(ref) is None
    mirror_module._TIPS.clear()
    assert mirror.state(run.run_id) == _tip_by_git(mirror, run.run_id)


def test_a_damaged_loose_tip_is_never_believed(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    run.ledger.append("notice", text="one")
    assert save_to_mirror(run) is None
    mirror = Mirror.for_workspace(ws)
    store = mirror._store
    assert store is not None and mirror.local is not None
    ref = f"{STATE_REF}/{run.run_id}"
    oid = (mirror.local / ref).read_text().strip()
    path = mirror.local / "objects" / oid[:2] / oid[2:]
    raw = zlib.decompress(path.read_bytes())
    os.chmod(path, 0o644)
    # Same length, other bytes: a file whose content no longer hashes to its name.
    path.write_bytes(zlib.compress(raw.replace(b"paella", b"PAELLA", 1)))
    assert store.loose_commit(ref) is None
    # A ref file that names no object id.
    (mirror.local / ref).write_text("not an object id\n")
    assert store.loose_commit(ref) is None


def _processes(folder: Path) -> list[subprocess.Popen[bytes]]:
    """Children with awkward names (spaces, parentheses: the command name field of
    ``/proc/<pid>/stat`` is the executable's name, in parentheses)."""
    started = []
    for name in ("plain", "with space", "paren) (x", ")) ("):
        link = folder / name
        link.symlink_to(os.path.realpath(sys.executable))
        started.append(subprocess.Popen([str(link), "-c", "import time; time.sleep(30)"]))
    return started


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc, as on Linux")
def test_a_process_start_time_is_psutils_without_psutil(tmp_path: Path) -> None:
    children = _processes(tmp_path)
    try:
        pids = [os.getpid(), os.getppid(), 1, *(c.pid for c in children)]
        # The awkward names are really in the field parsed around.
        stats = b"".join(Path(f"/proc/{c.pid}/stat").read_bytes() for c in children)
        assert b"(paren) (x)" in stats and b"()) ()" in stats
        for pid in pids:
            assert process_start_time(pid) == round(psutil.Process(pid).create_time(), 2), pid
    finally:
        for child in children:
            child.kill()
            child.wait()
    # Pids that can never name a process.
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert process_start_time(pid_max + 1) is None
    assert process_start_time(0) is None
    assert process_start_time(-5) is None


# A snapshot ref's file as an agent may leave it (it writes .git): what to write there.
REF_FILES = {
    "plain": lambda oid: (oid + "\n").encode(),
    "no newline": lambda oid: oid.encode(),
    "more after it": lambda oid: (oid + "\nrefs/heads/main\n").encode(),
    "upper case": lambda oid: (oid.upper() + "\n").encode(),
    "a symbolic ref": lambda oid: b"ref: refs/heads/main\n",
    "a short id": lambda oid: (oid[:12] + "\n").encode(),
}


@pytest.mark.parametrize("kind", [*REF_FILES, "a symbolic link", "a folder", "a reftable folder"])
def test_a_ref_read_from_its_file_is_what_git_reads_or_nothing(
    repo: Path, git: GitRunner, kind: str
) -> None:
    """``loose_reads.loose_ref`` takes a ref's file only when it holds one object id and a
    newline: then git names the same commit; anything else is left to git (None)."""
    oid = git(repo, "rev-parse", "HEAD")
    common = repo / ".git"
    ref = "refs/paella/run-1/checkpoints/1"
    path = common / ref
    path.parent.mkdir(parents=True)
    if kind == "a symbolic link":
        git(repo, "update-ref", "refs/paella/run-1/checkpoints/2", oid)
        path.symlink_to("2")
    elif kind == "a folder":
        path.mkdir()
    else:
        path.write_bytes(REF_FILES.get(kind, REF_FILES["plain"])(oid))
        if kind == "a reftable folder":
            (common / "reftable").mkdir()
    found = loose_ref(common, ref)
    assert (found is not None) == (kind == "plain")
    if found is not None:
        assert found == git(repo, "rev-parse", "--verify", ref) == oid
    # Names whose file is not the ref's path are never read.
    for name in (
        "refs/paella/../../HEAD",
        "refs/.paella/x",
        "refs/paella/x.lock",
        "refs/paella/x.",
        "refs/paella/a..b",
        "refs/paella//x",
        "refs/paella/x@{1}",
        "HEAD",
        "refs",
    ):
        assert not plain_ref_name(name)


# Where a ref ``rev-parse --verify`` looks for may be, or not.
ABSENT_CASES = {
    "nowhere": None,
    "loose": "refs/paella/run-1/frozen/0",
    "packed": "packed",
    "as a tag of that name": "refs/tags/refs/paella/run-1/frozen/0",
    "as a branch of that name": "refs/heads/refs/paella/run-1/frozen/0",
    "a file in its place in the git dir": "file",
}


@pytest.mark.parametrize("case", list(ABSENT_CASES))
def test_a_ref_proven_absent_from_the_files_is_one_git_does_not_find(
    repo: Path, git: GitRunner, case: str
) -> None:
    """``loose_reads.ref_absent`` says a ref is not there only when git's every rule for the
    name finds nothing (a new run's frozen ref): else git is asked."""
    ref = "refs/paella/run-1/frozen/0"
    where = ABSENT_CASES[case]
    if where == "packed":
        git(repo, "update-ref", ref, "HEAD")
        git(repo, "pack-refs", "--all")
    elif where == "file":
        (repo / ".git" / "refs" / "paella").write_text("not a folder\n")
    elif where is not None:
        git(repo, "update-ref", where, "HEAD")
    found = git.run(repo, "rev-parse", "--verify", "-q", ref).returncode == 0
    absent = ref_absent(repo / ".git", repo / ".git", ref)
    # A file where a folder of the name is: no ref there for git either.
    assert absent == (case in ("nowhere", "a file in its place in the git dir"))
    assert absent == (not found)
