"""The mirror is talked to from paella's own git directory: nothing the agent writes in the
repository's configuration sends a save or a read elsewhere, runs a program or refuses the
transfer (:mod:`paella_tui.supervisor.store.mirror_link`).

Each plant is what an agent can write with ``git config`` in the repository (directly, or in a
file the repository's configuration includes): an address rewrite to a mirror of its own
(``insteadOf``, ``pushInsteadOf``), an address rewrite to ssh with ``core.sshCommand`` naming a
program, a credential helper, ``protocol.file.allow=never``. Each is planted alone and all at
once, against a mirror elsewhere (``PAELLA_MIRROR=file://...``) and the private local one, and
every operation that talks to a mirror runs: a checkpoint's save (refs and state), reading the
refs, the state and the run list back, a ref brought back after the agent deleted it and pruned
its objects, and forgetting a run. The canary program must never run, the agent's mirror must
stay empty, and every answer must be the real mirror's. On the code before (these commands ran
in the work tree) the rewrites sent the saves to the agent's mirror and the canary ran.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner

from paella_tui.supervisor.run.runs import Run, RunStore, save_to_mirror
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.mirror import LEDGER_NAME, STATE_REF, Mirror
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

Plant = Callable[[GitRunner, Path, str, Path, Path], None]
"""(git, repo, the mirror's address, the agent's mirror, the canary program) -> None."""


def _redirect(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    git(repo, "config", f"url.file://{fake}.insteadOf", url)


def _push_redirect(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    git(repo, "config", f"url.file://{fake}.pushInsteadOf", url)


def _ssh_program(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    git(repo, "config", "url.ssh://agent.invalid/mirror.git.insteadOf", url)
    git(repo, "config", "core.sshCommand", str(canary))


def _credential_helper(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    git(repo, "config", "credential.helper", f"!{canary}")
    git(repo, "config", "core.askPass", str(canary))


def _refuse(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    git(repo, "config", "protocol.file.allow", "never")


def _included(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    included = repo / ".git" / "agent.cfg"
    git(repo, "config", "-f", str(included), f"url.file://{fake}.insteadOf", url)
    git(repo, "config", "-f", str(included), "core.sshCommand", str(canary))
    git(repo, "config", "include.path", "agent.cfg")


def _everything(git: GitRunner, repo: Path, url: str, fake: Path, canary: Path) -> None:
    for plant in (_push_redirect, _ssh_program, _credential_helper, _refuse, _included):
        plant(git, repo, url, fake, canary)


PLANTS: dict[str, Plant] = {
    "insteadOf": _redirect,
    "pushInsteadOf": _push_redirect,
    "ssh program": _ssh_program,
    "credential helper": _credential_helper,
    "file protocol refused": _refuse,
    "included": _included,
    "everything": _everything,
}


def _canary(tmp_path: Path) -> tuple[Path, Path]:
    """A program that records that it ran (and fails, as a refused connection would)."""
    ran = tmp_path / "canary-ran"
    program = tmp_path / "canary.sh"
    program.write_text(f"#!/bin/sh\necho \"$@\" >> '{ran}'\nexit 1\n")
    program.chmod(0o755)
    return program, ran


def _mirrored_run(repo: Path, git: GitRunner) -> tuple[Workspace, Run, list[tuple[str, str]]]:
    """A manual run with two checkpoints (files committed and untracked) saved to the mirror."""
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    snapshotter = Snapshotter(ws)
    saved = []
    for i in range(2):
        (repo / f"f{i}.txt").write_text(f"content {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"agent {i}")
        (repo / "untracked.txt").write_text(f"untracked {i}\n")
        record = take_checkpoint(run, snapshotter, label=f"c{i}")
        saved.append((record.ref, record.commit))
    run.ledger.append("note", text="after the checkpoints")
    assert save_to_mirror(run) is None
    return ws, run, saved


def _destroy_refs(git: GitRunner, repo: Path) -> None:
    """What a hostile agent does to paella's refs in the repository: deleted, objects pruned."""
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/paella").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "reset", "-q", "--hard", "HEAD~2")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")


@pytest.mark.parametrize("where", ["elsewhere", "local"])
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_nothing_in_the_repository_configuration_reaches_the_mirror_commands(
    repo: Path,
    git: GitRunner,
    tmp_path: Path,
    state_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    plant: str,
    where: str,
) -> None:
    program, ran = _canary(tmp_path)
    fake = tmp_path / "agents-mirror.git"
    git(tmp_path, "init", "-q", "--bare", str(fake))
    if where == "elsewhere":
        real = tmp_path / "elsewhere.git"
        git(tmp_path, "init", "-q", "--bare", str(real))
        url = f"file://{real}"
        monkeypatch.setenv("PAELLA_MIRROR", url)
        ws = Workspace.find(repo)
        PLANTS[plant](git, repo, url, fake, program)
    else:
        ws = Workspace.find(repo)
        mirror = Mirror.for_workspace(ws)
        assert mirror.ensure() is None and mirror.local is not None
        real, url = mirror.local, str(mirror.local)
        PLANTS[plant](git, repo, url, fake, program)

    ws, run, saved = _mirrored_run(repo, git)
    mirror = Mirror.for_workspace(ws)
    assert mirror.url == url
    ledger = run.ledger.path.read_bytes()

    # The saves reached the real mirror, and nothing the agent's.
    held = git(real, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    assert {f"{ref} {commit}" for ref, commit in saved} <= set(held)
    assert any(line.startswith(f"{STATE_REF}/{run.run_id} ") for line in held)
    assert git(fake, "for-each-ref") == ""
    # Every read is the real mirror's answer.
    assert mirror.refs(run.run_id) == dict(saved)
    assert mirror.read_file(run.run_id, LEDGER_NAME) == ledger
    assert mirror.run_ids() == [run.run_id]
    # A ref the agent destroyed comes back from the real mirror, objects and all.
    _destroy_refs(git, repo)
    for ref, commit in saved:
        assert git.run(repo, "cat-file", "-e", commit).returncode != 0
        assert mirror.restore_ref(ref)
        assert git(repo, "rev-parse", ref) == commit
    assert git(repo, "cat-file", "-p", f"{saved[-1][1]}:untracked.txt") == "untracked 1"
    assert git.run(repo, "fsck", "--connectivity-only").returncode == 0
    # Forgetting the run empties the real mirror of it.
    mirror.forget(run.run_id)
    assert mirror.run_ids() == []
    assert not ran.exists(), ran.read_text()
    assert git(fake, "for-each-ref") == ""


def test_the_link_keeps_no_ref_and_no_object_and_the_repository_no_ref_of_it(
    repo: Path, git: GitRunner, tmp_path: Path, state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a read of a remote mirror fetched is read and let go: no ref in the repository
    (where the agent could move it between the fetch and the read), none in the link (a
    ``gc`` in the repository may prune what it reached), no object of the link's own."""
    real = tmp_path / "elsewhere.git"
    git(tmp_path, "init", "-q", "--bare", str(real))
    monkeypatch.setenv("PAELLA_MIRROR", f"file://{real}")
    ws, run, _ = _mirrored_run(repo, git)
    before = git(repo, "for-each-ref", "--format=%(refname)").split()
    mirror = Mirror.for_workspace(ws)
    assert mirror.state(run.run_id) is not None
    assert git(repo, "for-each-ref", "--format=%(refname)").split() == before
    link = mirror.link.path
    assert link.is_relative_to(state_home) and (link / "HEAD").is_file()
    assert git(link, "--git-dir", str(link), "for-each-ref") == ""
    assert not any(p.is_file() for p in (link / "objects").rglob("*"))


def test_a_ref_a_killed_paella_left_in_the_link_does_not_stop_the_next_fetch(
    repo: Path, git: GitRunner, tmp_path: Path, state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "elsewhere.git"
    git(tmp_path, "init", "-q", "--bare", str(real))
    monkeypatch.setenv("PAELLA_MIRROR", f"file://{real}")
    ws, run, saved = _mirrored_run(repo, git)
    link = Mirror.for_workspace(ws).link.path
    # A fetch killed before it let go of its ref, then the objects that ref reached pruned.
    # (The loose ref file a fetch writes: git itself refuses to name a missing object.)
    (link / "refs" / "fetched").mkdir(parents=True, exist_ok=True)
    (link / "refs" / "fetched" / "1").write_text(f"{saved[-1][1]}\n")
    _destroy_refs(git, repo)
    mirror = Mirror.for_workspace(ws)
    assert mirror.read_file(run.run_id, LEDGER_NAME) == run.ledger.path.read_bytes()
    for ref, commit in saved:
        assert mirror.restore_ref(ref) and git(repo, "rev-parse", ref) == commit
    assert git(link, "--git-dir", str(link), "for-each-ref") == ""


def test_a_link_that_cannot_be_made_is_a_warning_never_a_traceback(
    repo: Path, git: GitRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """paella's state home is a file (or unwritable): a remote mirror cannot be reached, which
    every caller says as a failure (a save's warning, no refs, no state) and none raises."""
    real = tmp_path / "elsewhere.git"
    git(tmp_path, "init", "-q", "--bare", str(real))
    monkeypatch.setenv("PAELLA_MIRROR", f"file://{real}")
    blocked = tmp_path / "state-home-is-a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    ws = Workspace.find(repo)
    run = RunStore(ws).create(None, manual=True)
    (repo / "f.txt").write_text("x\n")
    record = take_checkpoint(run, Snapshotter(ws), label="one")
    said = save_to_mirror(run)
    assert said is not None and "mirror" in said
    mirror = Mirror.for_workspace(ws)
    assert mirror.refs(run.run_id) is None
    assert mirror.state(run.run_id) is None
    assert mirror.run_ids() == []
    assert mirror.restore_ref(record.ref) is False
    mirror.forget(run.run_id)
    assert git(real, "for-each-ref") == ""
