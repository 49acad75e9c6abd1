"""The mirror written with plumbing (no ``git push``) and the ledger kept there as parts.

Real repositories in tmp_path, a real local mirror under a private ``XDG_STATE_HOME``, real
``kill -9``. What must hold whatever happens: every ref the mirror holds reaches only objects it
holds (``git fsck --connectivity-only``), a checkpoint survives the repository's refs being
deleted and pruned, the mirror's copy of the ledger is always a prefix of the ledger paella
wrote, and an edited, rewritten, cut or deleted ledger is told from an appended one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import GitRunner, make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run.integrity import ledger_against_mirror
from paella_tui.supervisor.run.ledger import line_hash, parse
from paella_tui.supervisor.run.runs import Run, RunStore, save_to_mirror
from paella_tui.supervisor.store import mirror_local
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.mirror import LEDGER_NAME, STATE_REF, Mirror
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


def open_run(repo: Path) -> tuple[Workspace, Run]:
    ws = Workspace.find(repo)
    return ws, RunStore(ws).create(None, manual=True)


def fsck(git: GitRunner, mirror: Mirror) -> None:
    assert mirror.local is not None
    proc = git.run(mirror.local, "--git-dir", str(mirror.local), "fsck", "--connectivity-only")
    assert proc.returncode == 0, proc.stderr


def state_chain(git: GitRunner, mirror: Mirror, run_id: str) -> list[str]:
    assert mirror.local is not None
    out = git(mirror.local, "--git-dir", str(mirror.local), "rev-list", f"{STATE_REF}/{run_id}")
    return out.split()


def test_checkpoints_survive_deleted_refs_and_a_prune_and_come_back_whole(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws, run = open_run(repo)
    snapshotter = Snapshotter(ws)
    records = []
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"content {i}\n" * (i + 1))
        # The agent's own commits too: the checkpoint's parent chain must be in the mirror.
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"agent {i}")
        (repo / "untracked.bin").write_bytes(os.urandom(2000 + i))
        records.append(take_checkpoint(run, snapshotter, label=f"c{i}"))
    mirror = Mirror.for_workspace(ws)
    fsck(git, mirror)
    assert "mirror-failed" not in run.ledger.path.read_text()
    assert mirror.refs(run.run_id) == {r.ref: r.commit for r in records}
    # The agent destroys paella's refs and every object only they reached.
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/paella").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "reset", "-q", "--hard", "HEAD~3")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    assert git.run(repo, "cat-file", "-e", records[-1].commit).returncode != 0
    for record in records:
        assert mirror.restore_ref(record.ref)
        assert git(repo, "rev-parse", record.ref) == record.commit
        assert git(repo, "rev-parse", f"{record.commit}^{{tree}}") == record.tree
    assert git.run(repo, "fsck", "--connectivity-only").returncode == 0
    assert git.run(repo, "cat-file", "-e", f"{records[-1].commit}:untracked.bin").returncode == 0


def test_a_checkpoint_copies_what_changed_not_what_every_snapshot_holds(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    """Untracked files are in every checkpoint and in no commit of HEAD: the second checkpoint
    copies the changed file and the trees above it, not them again."""
    ws, run = open_run(repo)
    for i in range(40):
        (repo / "untracked" / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (repo / "untracked" / f"d{i % 4}" / f"u{i}.txt").write_text(f"untracked {i}\n")
    snapshotter = Snapshotter(ws)
    take_checkpoint(run, snapshotter, label="one")
    mirror = Mirror.for_workspace(ws)
    assert mirror.local is not None
    packs = mirror.local / "objects" / "pack"
    before = set(packs.glob("*.idx"))
    (repo / "untracked" / "d1" / "u1.txt").write_text("changed\n")
    second = take_checkpoint(run, snapshotter, label="two")
    (new,) = set(packs.glob("*.idx")) - before
    shown = subprocess.run(
        ["git", "show-index"], input=new.read_bytes(), capture_output=True, check=True
    )
    listed = shown.stdout.decode().splitlines()
    # The commit, the root tree, untracked/, untracked/d1, the blob: nothing else.
    assert len(listed) == 5, listed
    fsck(git, mirror)
    assert (mirror.refs(run.run_id) or {}).get(second.ref) == second.commit


def test_a_ref_the_mirror_holds_is_never_moved(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws, run = open_run(repo)
    first = take_checkpoint(run, Snapshotter(ws), label="one")
    other = git(repo, "commit-tree", "HEAD^{tree}", "-m", "forged", "-p", "HEAD")
    mirror = Mirror.for_workspace(ws)
    assert mirror.save(run.run_id, run.dir, {first.ref: other}, state=False) is None
    assert mirror.refs(run.run_id) == {first.ref: first.commit}
    fsck(git, mirror)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 6), st.booleans(), st.booleans()), min_size=1, max_size=8
    )
)
def test_the_mirrored_ledger_is_the_ledger_written_part_by_part(
    tmp_path_factory: pytest.TempPathFactory,
    git: GitRunner,
    steps: list[tuple[int, bool, bool]],
) -> None:
    """Random appends and saves (some with a torn last line left by a killed writer): after
    each save the mirror holds exactly the ledger's whole lines, one part a save that added any,
    and the check says the ledger extends it."""
    base = tmp_path_factory.mktemp("parts")
    # Hypothesis runs this many times in one test: monkeypatch (function-scoped) cannot, so the
    # session's private state home is put back by hand (popping it sent every later test of
    # the worker to the real ~/.local/state/paella).
    session_home = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(base / "xdg")
    try:
        ws, run = open_run(make_repo(base / "repo", git))
        mirror = Mirror.for_workspace(ws)
        opened = mirror.state(run.run_id)  # a run's first record reaches the mirror at once
        assert opened is not None and opened.ledger_bytes == run.ledger.path.stat().st_size
        held = opened.ledger_bytes
        for records, save, torn in steps:
            for i in range(records):
                run.ledger.append("note", text="é" * i, n=i)
            if torn:
                with run.ledger.path.open("ab") as handle:
                    handle.write(b'{"t":"x","kind":"agent-sta')
            data = run.ledger.path.read_bytes()
            whole = data[: data.rfind(b"\n") + 1]
            before = state_chain(git, mirror, run.run_id)
            if save:
                assert save_to_mirror(run) is None
                added = len(state_chain(git, mirror, run.run_id)) - len(before)
                assert added == (1 if len(whole) > held else 0)
                held = len(whole)
            assert mirror.read_file(run.run_id, LEDGER_NAME) == whole[:held]
            copy = mirror.state(run.run_id)
            assert copy is not None and copy.ledger_bytes == held
            assert copy.extended_by(run.ledger.path)
            assert ledger_against_mirror(run) == []
        fsck(git, mirror)
    finally:
        if session_home is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = session_home


def _ledger_with_saves(repo: Path) -> tuple[Run, Mirror]:
    ws, run = open_run(repo)
    mirror = Mirror.for_workspace(ws)
    for save in range(4):
        for i in range(5):
            run.ledger.append("note", text=f"record {save}.{i}")
        assert save_to_mirror(run) is None
    return run, mirror


def _rechain(lines: list[bytes], start: int) -> list[bytes]:
    """``lines`` with every record from ``start`` on re-linked to the line before (a chain
    rewritten by someone who read the code)."""
    out = list(lines)
    for index in range(start, len(out)):
        record = json.loads(out[index])
        record["prev"] = line_hash(out[index - 1]) if index else line_hash(b"")
        out[index] = json.dumps(record, separators=(",", ":")).encode()
    return out


def _edit(lines: list[bytes], index: int) -> list[bytes]:
    record = json.loads(lines[index])
    # The same length, so that no offset moves.
    if "text" in record:
        record["text"] = record["text"].replace("record", "forged")
    else:
        record["t"] = "1999" + record["t"][4:]
    return [*lines[:index], json.dumps(record, separators=(",", ":")).encode(), *lines[index + 1 :]]


TAMPERING = {
    "cut by one record": lambda lines: lines[:-1],
    "cut to nothing": lambda lines: [],
    "newest record edited": lambda lines: _edit(lines, len(lines) - 1),
    "old record edited, chain rewritten": lambda lines: _rechain(_edit(lines, 2), 3),
    "first record edited, chain rewritten": lambda lines: _rechain(_edit(lines, 0), 1),
    "old record deleted, chain rewritten": lambda lines: _rechain(lines[:3] + lines[4:], 3),
    "forged record inserted, chain rewritten": lambda lines: _rechain(
        [*lines[:5], lines[5], *lines[5:]], 6
    ),
    "whole ledger rewritten same length": lambda lines: _rechain(
        [line.replace(b"record", b"RECORD") for line in lines], 0
    ),
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_a_ledger_rewritten_or_cut_is_told_from_an_appended_one_and_restored(
    repo: Path, state_home: Path, how: str
) -> None:
    run, mirror = _ledger_with_saves(repo)
    original = run.ledger.path.read_bytes()
    run.ledger.append("note", text="appended after the last save")
    assert ledger_against_mirror(run) == []
    lines = original.rstrip(b"\n").split(b"\n")
    run.ledger.path.write_bytes(b"".join(line + b"\n" for line in TAMPERING[how](lines)))
    found = ledger_against_mirror(run, restore=True)
    assert len(found) == 1 and "restored from the mirror" in found[0], found
    assert run.ledger.path.read_bytes() == original
    assert parse(original, run.ledger.path).chain_break is None
    # The mirror refused to take the tampered copy meanwhile, and still holds the original.
    assert mirror.read_file(run.run_id, LEDGER_NAME) == original


def test_an_old_record_edited_without_the_chain_is_named_by_the_chain_and_never_reaches_the_mirror(
    repo: Path, state_home: Path
) -> None:
    """The one edit the newest part cannot see (README: the chain's job): the chain breaks right
    after it, and the mirror's copy stays the one paella wrote."""
    run, mirror = _ledger_with_saves(repo)
    original = run.ledger.path.read_bytes()
    lines = original.rstrip(b"\n").split(b"\n")
    tampered = b"".join(line + b"\n" for line in _edit(lines, 2))
    run.ledger.path.write_bytes(tampered)
    chain_break = parse(tampered, run.ledger.path).chain_break
    assert chain_break is not None and chain_break.line == 4
    run.ledger.append("note", text="more")
    assert save_to_mirror(run) is None
    assert (
        mirror.read_file(run.run_id, LEDGER_NAME)
        == original + tampered[len(original) :] + (run.ledger.path.read_bytes()[len(tampered) :])
    )
    assert (mirror.read_file(run.run_id, LEDGER_NAME) or b"").startswith(original)


def test_a_save_refuses_a_ledger_that_no_longer_extends_the_copy(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    run, mirror = _ledger_with_saves(repo)
    original = run.ledger.path.read_bytes()
    tip = state_chain(git, mirror, run.run_id)[0]
    run.ledger.path.write_bytes(original[: len(original) // 2])
    problem = save_to_mirror(run, record=False)
    assert problem is not None and "no longer extends" in problem
    assert state_chain(git, mirror, run.run_id)[0] == tip
    assert mirror.read_file(run.run_id, LEDGER_NAME) == original


def test_a_state_from_before_the_parts_is_read_checked_and_chained_onto(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    """A mirror written before the parts holds the whole ledger in one commit: it still reads
    and checks, and the next save chains its first part (the whole ledger) onto it."""
    ws, run = open_run(repo)
    mirror = Mirror.for_workspace(ws)
    assert mirror.ensure() is None and mirror.local is not None
    data = run.ledger.path.read_bytes()
    m = ["--git-dir", str(mirror.local)]
    blob = git(repo, *m, "hash-object", "-w", "--stdin", input=data)
    tree = git(repo, *m, "mktree", input=f"100644 blob {blob}\tevents.jsonl\n")
    message = f"paella state {run.run_id}\n\nledger-bytes: {len(data)}\nledger-sha256: {hashlib.sha256(data).hexdigest()}\n"
    old = git(repo, *m, "commit-tree", tree, input=message)
    git(repo, *m, "update-ref", f"{STATE_REF}/{run.run_id}", old)
    assert mirror.read_file(run.run_id, LEDGER_NAME) == data
    assert ledger_against_mirror(run) == []
    run.ledger.path.write_bytes(data[:-3] + b"X}\n")
    assert ledger_against_mirror(run) != []
    run.ledger.path.write_bytes(data)
    run.ledger.append("note", text="after the upgrade")
    assert save_to_mirror(run) is None
    assert state_chain(git, mirror, run.run_id)[1] == old
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()
    run.ledger.append("note", text="a second part")
    assert save_to_mirror(run) is None
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()


def test_a_remote_mirror_is_pushed_to_in_parts(
    repo: Path, git: GitRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = tmp_path / "elsewhere.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    monkeypatch.setenv("PAELLA_MIRROR", f"file://{remote}")
    ws, run = open_run(repo)
    record = take_checkpoint(run, Snapshotter(ws), label="one")
    for i in range(3):
        run.ledger.append("note", text=f"n{i}")
        assert save_to_mirror(run) is None
    mirror = Mirror.for_workspace(ws)
    assert mirror.local is None
    assert mirror.refs(run.run_id) == {record.ref: record.commit}
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()
    assert len(git(remote, "rev-list", f"{STATE_REF}/{run.run_id}").split()) == 4
    assert mirror.run_ids() == [run.run_id]


def test_many_saves_keep_the_pack_count_bounded(
    repo: Path, git: GitRunner, state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_local, "PACKS_BEFORE_REPACK", 4)
    ws, run = open_run(repo)
    snapshotter = Snapshotter(ws)
    for i in range(12):
        (repo / "f.txt").write_text(f"{i}\n")
        take_checkpoint(run, snapshotter, label=str(i))
        assert save_to_mirror(run) is None
    mirror = Mirror.for_workspace(ws)
    assert mirror.local is not None
    packs = list((mirror.local / "objects" / "pack").glob("*.pack"))
    assert len(packs) < 4 + 1, packs
    assert "mirror-failed" not in run.ledger.path.read_text()
    fsck(git, mirror)
    assert len(mirror.refs(run.run_id) or {}) == 12
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()


def test_a_mirror_forgets_a_pruned_run(repo: Path, git: GitRunner, state_home: Path) -> None:
    ws, run = open_run(repo)
    take_checkpoint(run, Snapshotter(ws), label="one")
    save_to_mirror(run)
    mirror = Mirror.for_workspace(ws)
    assert mirror.run_ids() == [run.run_id]
    mirror.forget(run.run_id)
    assert mirror.run_ids() == [] and mirror.refs(run.run_id) == {}
    assert mirror.state(run.run_id) is None


SAVER = """
import os, sys, traceback
from pathlib import Path
from paella_tui.supervisor.run.runs import RunStore, save_to_mirror
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace


def save_until_killed(repo):
    ws = Workspace.find(repo)
    store = RunStore(ws)
    run = store.current()
    snapshotter = Snapshotter(ws)
    i = 0
    print("ready", os.getpid(), flush=True)
    while True:
        i += 1
        (repo / f"new-{i}.bin").write_bytes(os.urandom(3000))
        take_checkpoint(run, snapshotter, label=str(i))
        save_to_mirror(run)
        print("saved", flush=True)


# The engine is imported once; each line read starts a saver, a fork of this process (no thread
# runs here), which the test kills; this process says when it is gone.
while sys.stdin.readline():
    pid = os.fork()
    if pid == 0:
        try:
            save_until_killed(Path(sys.argv[1]))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(1)
    os.waitpid(pid, 0)
    print("dead", flush=True)
"""


@pytest.mark.slow
def test_a_kill_9_in_the_middle_of_saves_never_leaves_a_ref_without_its_objects(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws, run = open_run(repo)
    mirror = Mirror.for_workspace(ws)
    assert mirror.ensure() is None
    script = repo.parent / "saver.py"
    script.write_text(SAVER)
    delays = [0.15, 0.4, 0.25, 0.7, 0.33, 0.55]
    # Each saver is a real process killed with SIGKILL, forked from one that imported the engine
    # once (an interpreter's start and the imports were ~0.1 s of CPU a saver).
    savers = subprocess.Popen(
        [sys.executable, str(script), str(repo)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert savers.stdin is not None and savers.stdout is not None
    try:
        for delay in delays:
            savers.stdin.write("start\n")
            savers.stdin.flush()
            ready = savers.stdout.readline()
            # One whole save first (however loaded the machine), then a kill somewhere in a
            # later one: the delays spread it over the steps of a save.
            first = savers.stdout.readline()
            if not ready.startswith("ready ") or first != "saved\n":  # what it said is the failure
                savers.kill()
                assert (ready.split()[:1], first) == (["ready"], "saved\n"), savers.communicate()[1]
            time.sleep(delay)
            os.kill(int(ready.split()[1]), signal.SIGKILL)
            while savers.stdout.readline() not in ("dead\n", ""):  # the saves before the kill
                pass
            # Whatever step was cut short: every ref reaches only objects the mirror holds ...
            fsck(git, mirror)
            # ... and the mirror's ledger is a prefix of the ledger paella wrote.
            mirrored = mirror.read_file(run.run_id, LEDGER_NAME)
            assert mirrored is not None and run.ledger.path.read_bytes().startswith(mirrored)
    finally:
        savers.kill()
        savers.communicate()
    held = mirror.refs(run.run_id) or {}
    assert len(held) >= len(delays), held
    # Every checkpoint the mirror holds comes back after the repository lost everything.
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/paella").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "add", "-A")
    git(repo, "stash", "-q")
    git(repo, "stash", "clear")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    for ref in held:
        assert mirror.restore_ref(ref)
    assert git.run(repo, "fsck", "--connectivity-only").returncode == 0


def test_two_processes_saving_at_once_keep_one_consistent_chain(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws, run = open_run(repo)
    assert save_to_mirror(run) is None
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from paella_tui.supervisor.run.runs import RunStore, save_to_mirror\n"
        "from paella_tui.supervisor.store.workspace import Workspace\n"
        "run = RunStore(Workspace.find(Path(sys.argv[1]))).current()\n"
        "for i in range(15):\n"
        "    run.ledger.append('note', text=f'{sys.argv[2]} {i}')\n"
        "    assert save_to_mirror(run, record=False) is None\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(repo), name]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert save_to_mirror(run) is None
    mirror = Mirror.for_workspace(ws)
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()
    assert parse(run.ledger.path.read_bytes(), run.ledger.path).chain_break is None


ONE_CHECKPOINT = """
import sys
from pathlib import Path
from paella_tui.supervisor.run.runs import RunStore, save_to_mirror
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

ws = Workspace.find(Path(sys.argv[1]))
run = RunStore(ws).current()
(ws.root / "new.bin").write_bytes(bytes(range(256)) * 40)
take_checkpoint(run, Snapshotter(ws), label="killed")
save_to_mirror(run)
"""


@pytest.mark.parametrize("step", ["mirror-objects", "mirror-state"])
def test_paella_killed_at_each_step_of_a_save_leaves_the_mirror_whole(
    repo: Path, git: GitRunner, state_home: Path, step: str
) -> None:
    """Killed after the objects are in and before the ref (``mirror-objects``), or halfway
    through the ledger's part (``mirror-state``): no ref moved to what is not there, and the
    next save brings the mirror up to date."""
    ws, run = open_run(repo)
    first = take_checkpoint(run, Snapshotter(ws), label="before")
    assert save_to_mirror(run) is None
    mirror = Mirror.for_workspace(ws)
    tip = state_chain(git, mirror, run.run_id)[0]
    proc = subprocess.run(
        [sys.executable, "-c", ONE_CHECKPOINT, str(repo)],
        env={**os.environ, "PAELLA_TEST_KILL_AT": step},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    fsck(git, mirror)
    assert state_chain(git, mirror, run.run_id)[0] == tip
    held = mirror.refs(run.run_id) or {}
    if step == "mirror-objects":
        assert held == {first.ref: first.commit}  # the second ref never made it: no record either
    else:
        assert len(held) == 2  # the ref went first, its record after, the ledger's copy last
    assert ledger_against_mirror(run) == []
    run.ledger.append("note", text="after the kill")
    assert save_to_mirror(run) is None
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()
    fsck(git, mirror)


def _writer_caught_writing(mirror_dir: Path, objects: Path, oid: str) -> subprocess.Popen[bytes]:
    """A ``git pack-objects`` into the mirror, as a save runs it, stopped (SIGSTOP) once its
    temporary pack exists: a writer caught in the middle of writing."""
    pack_dir = mirror_dir / "objects" / "pack"
    before = set(pack_dir.glob("tmp_*"))
    for _ in range(5):
        writer = subprocess.Popen(
            [
                "git",
                "--git-dir",
                str(mirror_dir),
                "pack-objects",
                "-q",
                "--window=0",
                "--compression=1",
                str(pack_dir / "pack"),
            ],
            stdin=subprocess.PIPE,
            env={**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects)},
        )
        assert writer.stdin is not None
        writer.stdin.write(f"{oid}\n".encode())
        writer.stdin.close()
        while writer.poll() is None and not set(pack_dir.glob("tmp_pack_*")) - before:
            time.sleep(0.001)
        writer.send_signal(signal.SIGSTOP)
        if writer.poll() is None:
            return writer
        writer.wait()  # it finished first: the pack is whole (and harmless); try again
    raise AssertionError("pack-objects never was caught writing")


def test_temporary_packs_of_killed_writers_go_at_the_next_save_a_live_writers_stay(
    repo: Path, git: GitRunner, state_home: Path
) -> None:
    ws, run = open_run(repo)
    snapshotter = Snapshotter(ws)
    take_checkpoint(run, snapshotter, label="first")
    mirror = Mirror.for_workspace(ws)
    assert mirror.local is not None
    pack_dir = mirror.local / "objects" / "pack"
    # A blob big enough that packing it takes a moment (random: it does not compress).
    big = repo / "big.bin"
    big.write_bytes(os.urandom(24 * 1024 * 1024))
    oid = git(repo, "hash-object", "-w", str(big)).strip()
    objects = repo / ".git" / "objects"

    def caught(kill: bool) -> tuple[subprocess.Popen[bytes], set[Path]]:
        before = set(pack_dir.glob("tmp_*"))
        writer = _writer_caught_writing(mirror.local, objects, oid)  # type: ignore[arg-type]
        if kill:
            writer.kill()
            writer.wait()
        return writer, set(pack_dir.glob("tmp_*")) - before

    _, old_dead = caught(kill=True)
    _, young_dead = caught(kill=True)
    live, old_live = caught(kill=False)
    try:
        assert old_dead and young_dead and old_live
        long_ago = time.time() - mirror_local.STALE_TEMPORARY_S - 60
        for path in old_dead | old_live:
            os.utime(path, (long_ago, long_ago))

        (repo / "f.txt").write_text("next\n")
        take_checkpoint(run, snapshotter, label="next")  # the mirror is written again

        left = set(pack_dir.glob("tmp_*"))
        assert not old_dead & left, "a killed writer's old temporary pack is still there"
        assert young_dead <= left, "a recent one went: its writer might still be at work"
        assert old_live <= left, "the file of a writer that is still running went"
    finally:
        live.kill()
        live.wait()
    fsck(git, mirror)
    assert "mirror-failed" not in run.ledger.path.read_text()
