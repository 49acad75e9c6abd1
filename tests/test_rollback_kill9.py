"""``kill -9`` of paella at random moments of a rollback (issue 10, SPEC 5 and 13): no git child
outlives it, and the undo paella prints at the next start works when run at once, byte for byte.
Plus the honest-failure cases: a full disk mid-rollback (on a small tmpfs), a corrupt private
index, a failing ``reference-transaction`` hook."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from conftest import run_paella, run_paella_in_process
from waiting import wait_until

UNDO = re.compile(r"to undo it:\s+paella rollback (salvage:\d+) --yes")
SALVAGE = re.compile(r"`paella rollback (salvage:\d+) --yes`")


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The commands before and after a kill run through ``cli.main`` in the test process
    (``run_paella_in_process``); the rollbacks killed, or out of disk space, are real processes."""
    return run_paella_in_process


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def populate(repo: Path, git, *, files: int, size: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(files):
        path = repo / f"d{i % 7}" / f"f{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(rng.randbytes(size))
    (repo / "run.sh").write_bytes(b"#!/bin/sh\r\n")
    (repo / "run.sh").chmod(0o755)


def git_children_in(repo: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cwd"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "git" and proc.info["cwd"] == str(repo):
                found.append(proc)
    return found


@pytest.mark.slow
def test_kill_9_at_random_moments_of_a_rollback_then_the_printed_undo_works(
    repo: Path, git, paella, tree_state
) -> None:
    populate(repo, git, files=600, size=3000, seed=1)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    ok(paella(repo, "checkpoint"))
    # The damage: every file rewritten, some removed, some added, one committed.
    populate(repo, git, files=500, size=2000, seed=2)
    (repo / "new.txt").write_text("the agent's file\n")
    git(repo, "add", "new.txt")
    git(repo, "commit", "-q", "-m", "agent")
    damaged, damaged_head = tree_state(repo), git.head(repo)

    rng = random.Random(10)
    outcomes = set()
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "paella_tui", "rollback", "1", "--yes"],
            cwd=repo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The git children died with it: nothing keeps writing the work tree or an index.
        deadline = time.monotonic() + 2
        while git_children_in(repo) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not git_children_in(repo), "a git child outlived the killed paella"

        status = ok(paella(repo, "status"))
        undo = UNDO.search(status.stderr)
        if undo:
            outcomes.add("interrupted")
            ok(paella(repo, "rollback", undo.group(1), "--yes"))
        elif tree_state(repo) != damaged:
            outcomes.add("finished")  # killed after the rollback was done: undo it the usual way
            listed = ok(paella(repo, "checkpoints")).stdout
            newest = re.findall(r"salvage:(\d+)", listed)[-1]
            ok(paella(repo, "rollback", f"salvage:{newest}", "--yes"))
        else:
            outcomes.add("not started")
        now = tree_state(repo)
        assert now == damaged, "\n".join(now.differences(damaged))
        assert git.head(repo) == damaged_head
        assert git.branch(repo) == "main"
    assert outcomes, outcomes


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill the file system holding ``disk`` until only ``leave`` bytes are free."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as handle:
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
    with contextlib.suppress(OSError):
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - leave))
    return filler


@pytest.mark.parametrize("leave_kb", [0, 64, 400])
def test_disk_full_mid_rollback_says_what_changed_and_the_salvage_restores_it(
    tmp_path: Path, git, paella, tree_state, leave_kb: int
) -> None:
    with small_tmpfs(tmp_path / "disk", "12m") as disk:
        repo = disk / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        populate(repo, git, files=40, size=50_000, seed=3)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "big files")
        ok(paella(repo, "checkpoint"))
        for path in sorted(repo.glob("d*/*.bin")):
            path.write_bytes(b"small now\n")
        (repo / "untracked.txt").write_text("the agent's note\n")
        damaged = tree_state(repo)
        filler = fill(disk, leave_kb * 1024)

        result = run_paella(repo, "rollback", "1", "--yes")  # the real command runs out of room

        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 3, result.stderr
        assert result.stderr.startswith("paella: ")
        if leave_kb == 400:
            # Room for the salvage, not for the restore: it stops part-way and says so.
            assert "part-way" in result.stderr
        filler.unlink()
        salvage = SALVAGE.search(result.stderr) or UNDO.search(ok(paella(repo, "status")).stderr)
        if "part-way" in result.stderr:
            # It said exactly what it changed, and how many paths.
            assert re.search(r"changed (\d+) of (\d+) paths|changed nothing", result.stderr)
            assert salvage, result.stderr
        if salvage:
            ok(paella(repo, "rollback", salvage.group(1), "--yes"))
        now = tree_state(repo)
        assert now == damaged, "\n".join(now.differences(damaged))


def test_a_corrupt_private_index_is_rebuilt_on_its_own(repo: Path, git, paella) -> None:
    (repo / "a.txt").write_bytes(b"a\r\n")
    ok(paella(repo, "checkpoint"))
    index = repo / ".git" / "paella" / "snapshot.index"
    assert index.exists()
    index.write_bytes(b"DIRC" + os.urandom(200))
    (repo / "b.txt").write_bytes(b"b\n")

    result = ok(paella(repo, "checkpoint"))

    assert "failed" not in result.stderr.lower()
    tree = git(
        repo,
        "rev-parse",
        "refs/paella/"
        + next(p.name for p in (repo / ".git" / "paella" / "runs").iterdir())
        + "/checkpoints/2^{tree}",
    )
    listing = git(repo, "ls-tree", "-r", "--name-only", tree).splitlines()
    assert listing == ["README.md", "a.txt", "b.txt"]
    blob = subprocess.run(
        ["git", "cat-file", "blob", f"{tree}:a.txt"], cwd=repo, capture_output=True, check=True
    ).stdout
    assert blob == b"a\r\n"


def test_a_private_index_naming_lost_objects_is_rebuilt_on_its_own(repo: Path, git, paella) -> None:
    """An agent's `git gc --prune=now` (after deleting paella's refs) can take objects the private
    index still names: the next snapshot re-hashes the files instead of failing in write-tree."""
    (repo / "a.txt").write_bytes(b"only in snapshots\n")
    ok(paella(repo, "checkpoint"))
    blob = git(repo, "hash-object", "a.txt")
    loose = repo / ".git" / "objects" / blob[:2] / blob[2:]
    assert loose.exists()
    loose.unlink()
    (repo / "b.txt").write_bytes(b"b\n")

    result = ok(paella(repo, "checkpoint"))

    assert "traceback" not in result.stderr.lower(), result.stderr
    runs = repo / ".git" / "paella" / "runs"
    ref = f"refs/paella/{next(p.name for p in runs.iterdir())}/checkpoints/2"
    data = subprocess.run(
        ["git", "cat-file", "blob", f"{ref}:a.txt"], cwd=repo, capture_output=True, check=True
    ).stdout
    assert data == b"only in snapshots\n"


def test_a_failing_reference_transaction_hook_does_not_block_checkpoints(
    repo: Path, git, paella
) -> None:
    hook = repo / ".git" / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    assert git.run(repo, "update-ref", "refs/heads/probe", "HEAD").returncode != 0  # it does fail

    ok(paella(repo, "checkpoint"))
    ok(paella(repo, "checkpoint"))
    (repo / "README.md").write_text("changed\n")
    ok(paella(repo, "rollback", "1", "--yes"))
    assert (repo / "README.md").read_text() == "hello\n"


# A paella in miniature: it starts one long write through gitcli (an ``update-index --stdin``
# that holds the index's lock and writes the index only once its stdin ends), feeds it paths and
# waits. Killed, it closes that stdin: a git that outlived it would see the end of its input and
# write the index, the very "behind its back" the death signal prevents.
#
# What no death signal prevents: the kernel closes a dying process's descriptors (do_exit's
# exit_files, whose last close runs in exit_task_work) before it signals its children
# (exit_notify: the death signal; the death group's keeper, woken by that same close, kills later
# still). So git sees its input end a moment before its SIGKILL, and one scheduled in that moment
# writes the index of everything it was given, as git writes one: whole (to its lock, then renamed
# in), never torn, and no lock left (seen on each route under load: a load average of 26 for the
# group's, once in four whole-suite runs for the hook's). That is what paella dying just after
# that git returned leaves; for the private index it is another index than the memo saw, which the
# next snapshot scans in full (store/death_group.py).
HOLDER = """
import sys, time
from pathlib import Path
from paella_tui.supervisor.store import death_group
from paella_tui.supervisor.store.gitcli import Git
repo, index, route = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
death_group.disabled = route != "group"
git = Git(repo, index_file=Path(index) if index not in ("", "objects") else None)
if index == "objects":  # a store write: fast-import packs the blobs once its stdin ends
    proc = git.popen(["fast-import", "--quiet"])
    proc.stdin.write(b"blob\\ndata 24\\nwritten behind its back\\n\\n")
else:
    proc = git.popen(["update-index", "--add", "-z", "--stdin"])
    proc.stdin.write(b"".join(b"d%d/f%d.bin\\0" % (i % 7, i) for i in range(200)))
proc.stdin.flush()
print(proc.pid, proc.args[0], flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("index", "route"),
    [
        pytest.param("private", "group", id="private-index-death-group"),
        pytest.param("private", "setpriv", id="private-index-setpriv-then-parent-check"),
        pytest.param("user", "setpriv", id="user-index-setpriv-then-parent-check"),
        pytest.param("private", "hook", id="private-index-no-setpriv-hook"),
        pytest.param("user", "hook", id="user-index-no-setpriv-hook"),
    ],
)
def test_kill_9_mid_git_write_leaves_no_git_and_no_write(
    repo: Path, git, tmp_path: Path, index: str, route: str
) -> None:
    populate(repo, git, files=200, size=10, seed=4)
    index_file = repo / ".git" / "paella-private.index" if index == "private" else None
    written = index_file or repo / ".git" / "index"
    before = written.read_bytes() if written.exists() else None
    holder, child = _start_holder(repo, str(index_file or ""), tmp_path, route=route)
    lock = written.with_name(written.name + ".lock")
    wait_until(lambda: lock.exists() and child.name() == "git", "git to hold the index's lock")

    holder.send_signal(signal.SIGKILL)
    holder.wait()

    # It got SIGKILL from the kernel when paella died (and was reaped by whoever adopted it).
    _gone, alive = psutil.wait_procs([child], timeout=10)
    assert not alive, "a git child outlived the killed paella"
    assert not git_children_in(repo)
    now = written.read_bytes() if written.exists() else None
    if now == before:
        # Killed mid-write: the index is as it was, the lock git took is left (left_locks' case).
        assert lock.exists()
        return
    # Or git won the race above (HOLDER's comment): the whole index of what it was given, read
    # back by git (which checks its checksum), and no lock left.
    assert not lock.exists()
    given = {f"d{i % 7}/f{i}.bin" for i in range(200)}
    if before is not None:
        (tmp_path / "before.index").write_bytes(before)
    listed_before = _index_paths(repo, tmp_path / "before.index") if before is not None else set()
    assert _index_paths(repo, written) == listed_before | given


@pytest.mark.parametrize("route", ["group", "setpriv", "hook"])
def test_kill_9_mid_object_write_leaves_no_git_and_no_object(
    repo: Path, git, tmp_path: Path, route: str
) -> None:
    """The ``store`` kind (the death group; or setpriv alone, no parent check) dies with paella
    all the same."""
    blob = git.run(repo, "hash-object", "--stdin", input="written behind its back\n").stdout
    packs = repo / ".git" / "objects" / "pack"
    packed = sorted(packs.glob("*.pack"))
    holder, child = _start_holder(repo, "objects", tmp_path, route=route)
    wait_until(
        lambda: child.name() == "git" and any(packs.glob("tmp_pack_*")),
        "fast-import to open its temporary pack",
    )

    holder.send_signal(signal.SIGKILL)
    holder.wait()

    _gone, alive = psutil.wait_procs([child], timeout=10)
    assert not alive, "a git child outlived the killed paella"
    shown = git.run(repo, "cat-file", "-p", blob.strip())
    if shown.returncode == 0:
        # As above (HOLDER's comment): fast-import saw its input end before its SIGKILL and wrote
        # the one whole blob it had been given, an object nobody names: packed, or loose (under
        # fastimport.unpackLimit it unpacks a small pack; seen once in 45 group runs under load).
        assert shown.stdout == "written behind its back\n"
        return
    assert sorted(packs.glob("*.pack")) == packed


def _index_paths(repo: Path, index: Path) -> set[str]:
    """The paths the index file ``index`` lists, read by git (a torn one fails its checksum)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"],
        cwd=repo,
        env={**os.environ, "GIT_INDEX_FILE": str(index)},
        capture_output=True,
        check=True,
    ).stdout
    return {path.decode() for path in listed.split(b"\0") if path}


def _start_holder(
    repo: Path, what: str, tmp_path: Path, *, route: str
) -> tuple[subprocess.Popen[str], psutil.Process]:
    """A small paella (HOLDER) holding a git write of ``what`` open, and that git's process
    (setpriv's, until it execs git): in the death group (``group``), or with the death group
    off, through setpriv (``setpriv``) or, on a PATH with git and nothing else, gitcli's
    fallback hook (``hook``)."""
    env = dict(os.environ)
    if route == "hook":
        only_git = tmp_path / "only-git"
        only_git.mkdir()
        (only_git / "git").symlink_to(shutil.which("git") or "git")
        env["PATH"] = str(only_git)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(repo), what, route],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None
    pid, program = holder.stdout.readline().split()
    assert Path(program).name == ("setpriv" if route == "setpriv" else "git")
    child = psutil.Process(int(pid))
    if route == "group":  # in the holder's death group, not the holder's own process group
        assert os.getpgid(child.pid) not in (os.getpgid(holder.pid), os.getpgid(0))
    return holder, child
