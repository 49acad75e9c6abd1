"""The mirror's saves with fewer git processes give what the git processes gave.

- A ledger save writes its blob, tree and commit as loose objects itself
  (:func:`state_commit_loose`): the same ids and contents as ``hash-object``, ``mktree`` and
  ``commit-tree`` (:func:`state_commit`), on a matrix of tips and parts, sha1 and sha256.
- A checkpoint's copy skips the history walk when HEAD has not moved since the newest mirrored
  snapshot: the mirror then holds the same objects as with the walk.
- A ``<ref>.lock`` a killed save left is removed once old; a fresh one is left.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import GitRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run.runs import Run, RunStore, save_to_mirror
from paella_tui.supervisor.store import mirror_local
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.mirror import STATE_REF, Mirror
from paella_tui.supervisor.store.mirror_ledger import (
    NewPart,
    StateCopy,
    sha256_hex,
    state_commit,
    state_commit_loose,
)
from paella_tui.supervisor.store.mirror_local import LocalMirror
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

WHEN = (1_700_000_000, "+0130")


def bare(path: Path, object_format: str) -> LocalMirror:
    subprocess.run(
        ["git", "init", "-q", "--bare", f"--object-format={object_format}", str(path)],
        check=True,
    )
    return LocalMirror(path, path / "objects")


def all_objects(path: Path) -> dict[str, bytes]:
    """Every object of a repository: id -> type and content (``cat-file --batch``)."""
    listed = subprocess.run(
        ["git", "--git-dir", str(path), "cat-file", "--batch-all-objects", "--batch-check"],
        capture_output=True,
        check=True,
    ).stdout.split()[0::3]
    out = subprocess.run(
        ["git", "--git-dir", str(path), "cat-file", "--batch"],
        input=b"".join(oid + b"\n" for oid in listed),
        capture_output=True,
        check=True,
    ).stdout
    found, pos = {}, 0
    for oid in listed:
        end = out.index(b"\n", pos)
        header = out[pos:end]
        size = int(header.split()[2])
        found[oid.decode()] = header.split()[1] + b"\0" + out[end + 1 : end + 1 + size]
        pos = end + 2 + size
    return found


def fsck(path: Path) -> None:
    proc = subprocess.run(
        ["git", "--git-dir", str(path), "fsck", "--strict"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


TIPS = ["none", "parts-with-contract", "parts-without-contract", "whole-copy"]


def _tip(kind: str, mirror: LocalMirror, hash_algo: str) -> StateCopy | None:
    """A tip of each shape, written by git (the reference path) into ``mirror``."""
    if kind == "none":
        return None
    contract = b'[gates]\ncmd = "true"\n' if kind != "parts-without-contract" else None
    first = NewPart(0, b'{"kind":"start"}\n', contract, sha256_hex(contract) if contract else None)
    tip = state_commit(mirror.out, "run-1", None, first)
    if kind == "whole-copy":
        # A state commit from before the parts: the whole ledger, no format field.
        return StateCopy(commit=tip.commit, ledger_bytes=17, contract_sha256=None, parts=False)
    return tip


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.binary(max_size=300),
    contract=st.one_of(st.none(), st.binary(max_size=80)),
    tip_kind=st.sampled_from(TIPS),
    object_format=st.sampled_from(["sha1", "sha256"]),
)
def test_a_ledger_save_written_as_loose_objects_is_the_one_git_writes(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    contract: bytes | None,
    tip_kind: str,
    object_format: str,
) -> None:
    # commit-tree's date for the reference; the loose writer is given the same.
    monkeypatch.setenv("GIT_AUTHOR_DATE", f"{WHEN[0]} {WHEN[1]}")
    monkeypatch.setenv("GIT_COMMITTER_DATE", f"{WHEN[0]} {WHEN[1]}")
    for key in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{key}_NAME", "paella")
        monkeypatch.setenv(f"GIT_{key}_EMAIL", "paella@localhost")
    root = tmp_path_factory.mktemp("fold")
    by_git, by_paella = bare(root / "git.git", object_format), bare(root / "py.git", object_format)
    tip = _tip(tip_kind, by_git, object_format)
    _tip(tip_kind, by_paella, object_format)  # the same tip in the other mirror, by git too
    part = NewPart(
        tip.ledger_bytes if tip is not None else 0,
        data,
        contract,
        sha256_hex(contract) if contract is not None else None,
    )
    expected = state_commit(by_git.out, "run-1", tip, part)
    got = state_commit_loose(
        by_paella.path / "objects", object_format, "run-1", tip, part, when=WHEN
    )
    assert got == expected
    assert all_objects(by_paella.path) == all_objects(by_git.path)
    fsck(by_paella.path)
    # And read back as git's own: the tip a reader takes with no git process.
    by_paella.git(["update-ref", "refs/paella-state/run-1", got.commit])
    assert by_paella.loose_commit("refs/paella-state/run-1") is not None


def open_run(repo: Path) -> tuple[Workspace, Run]:
    ws = Workspace.find(repo)
    return ws, RunStore(ws).create(None, manual=True)


def count_git(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The mirror's git processes from now on (each one still run for real)."""
    calls: list[list[str]] = []
    real = mirror_local.run_git

    def counting(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        calls.append([a for a in args if not a.startswith("/")])
        return real(args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mirror_local, "run_git", counting)
    return calls


def test_a_ledger_save_after_the_first_is_one_git_process_and_needs_no_identity(
    repo: Path, git: GitRunner, state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine with no git identity saves too (the state commit is paella's, as every
    commit paella writes), and a save onto a tip is one ``update-ref``."""
    home = repo.parent / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("EMAIL", "")
    for key in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{key}_NAME", raising=False)
        monkeypatch.delenv(f"GIT_{key}_EMAIL", raising=False)
    _ws, run = open_run(repo)
    assert save_to_mirror(run) is None  # the first: by git (no tip to take the hash from)
    run.ledger.append("note", text="next")
    calls = count_git(monkeypatch)
    assert save_to_mirror(run) is None
    assert [c[1] for c in calls] == ["update-ref"], calls
    mirror = Mirror.for_workspace(run.workspace)
    assert mirror.local is not None
    assert mirror.read_file(run.run_id, "events.jsonl") == run.ledger.path.read_bytes()
    head = git(
        mirror.local,
        *("--git-dir", str(mirror.local), "log", "--format=%an %ae %cn"),
        f"{STATE_REF}/{run.run_id}",
    )
    assert head.split("\n") == ["paella paella@localhost paella"] * 2
    fsck(mirror.local)


@pytest.mark.parametrize("head_moves", [False, True, "orphan"])
def test_a_checkpoint_copy_without_the_history_walk_holds_what_the_walk_gave(
    repo: Path,
    git: GitRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    head_moves: bool | str,
) -> None:
    """The same checkpoints copied into two mirrors, one always walking the history: the same
    objects; the walk is skipped exactly when HEAD did not move."""
    ws, run = open_run(repo)
    snapshotter = Snapshotter(ws)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "walked"))
    walked = Mirror.for_workspace(ws)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "folded"))
    folded = Mirror.for_workspace(ws)
    records = [take_checkpoint(run, snapshotter, label="one")]  # into "folded"
    if head_moves == "orphan":
        git(repo, "checkout", "-q", "--orphan", "other")
    (repo / "f.txt").write_text("changed\n")
    if head_moves:
        git(repo, "add", "f.txt")
        git(repo, "commit", "-q", "-m", "moved")
    (repo / "g.txt").write_text("untracked\n")
    skipped: list[bool] = []
    real = LocalMirror._history_known

    def noting(self: LocalMirror, commits: list[str], bounds: list[str]) -> bool:
        skipped.append(real(self, commits, bounds))
        return skipped[-1]

    monkeypatch.setattr(LocalMirror, "_history_known", noting)
    records.append(take_checkpoint(run, snapshotter, label="two"))
    assert skipped == [not head_moves]
    monkeypatch.setattr(LocalMirror, "_history_known", lambda *_: False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "walked"))
    for record in records:
        assert walked.save(run.run_id, run.dir, {record.ref: record.commit}, state=False) is None
    assert walked.local is not None and folded.local is not None
    assert all_objects(folded.local).keys() == all_objects(walked.local).keys()
    assert folded.refs(run.run_id) == walked.refs(run.run_id)
    fsck(folded.local)


@pytest.mark.parametrize("which", ["state", "checkpoint"])
def test_a_ref_lock_a_killed_save_left_goes_once_old_and_a_fresh_one_stays(
    repo: Path, state_home: Path, which: str
) -> None:
    ws, run = open_run(repo)
    snapshotter = Snapshotter(ws)
    take_checkpoint(run, snapshotter, label="one")
    mirror = Mirror.for_workspace(ws)
    assert mirror.local is not None
    n = 2
    ref = (
        f"{STATE_REF}/{run.run_id}"
        if which == "state"
        else f"{ws.ref_namespace}/{run.run_id}/checkpoints/{n}"
    )
    lock = mirror.local / f"{ref}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")  # as a save killed inside update-ref leaves it

    (repo / "f.txt").write_text("changed\n")
    second = take_checkpoint(run, snapshotter, label="two")  # its copy fails on a checkpoint lock
    assert second.ref.endswith(f"/{n}")

    def save() -> str | None:
        return mirror.save(run.run_id, run.dir, {second.ref: second.commit})

    assert save() is not None, "a fresh lock was taken for a stale one"
    assert lock.exists()
    long_ago = time.time() - mirror_local.STALE_REF_LOCK_S - 5
    os.utime(lock, (long_ago, long_ago))
    assert save() is None
    assert not lock.exists()
    assert (mirror.refs(run.run_id) or {}).get(second.ref) == second.commit
    assert mirror.read_file(run.run_id, "events.jsonl") == run.ledger.path.read_bytes()
    fsck(mirror.local)
