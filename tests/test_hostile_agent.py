"""A careless or hostile agent cannot fool or break its supervisor: real ``paella run --headless``
runs whose agent rewrites the frozen contract, forges and truncates ledger records, deletes
paella's refs and state, daemonizes, or leaves ``index.lock``; two supervisors started at once.
What a person would see or lose is what each test checks.

A run whose subject is what it judges, records and prints goes through ``cli.main`` in the test
process (``HostileProject.judged``); the tests of processes (what outlives an attempt, two
supervisors and their lock) run the command in subprocesses.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import GitRunner
from hostile_project import FINISHED_GROUP, HostileProject, finished_project, no_traceback

from paella_tui.supervisor.agent.process_cage import Cage
from paella_tui.supervisor.store.mirror import Mirror
from paella_tui.supervisor.store.workspace import Workspace

REWRITE_CONTRACT = """\
run=$(cat .git/paella/current)
sed -i 's/test -f ok.txt/true/' .git/paella/runs/$run/contract.toml
exit 1
"""


def test_a_rewritten_frozen_contract_is_history_drift_and_never_makes_a_run_done(
    tmp_path: Path, git: GitRunner
) -> None:
    p = HostileProject(tmp_path, git, REWRITE_CONTRACT)
    first = p.judged("run", "--headless")
    no_traceback(first)
    assert first.returncode == 1, first.stdout
    assert "drift history: the run's frozen contract" in first.stdout
    assert "judged by the mirror's copy" in first.stdout
    # The rewrite is undone, its text kept beside for a person to read.
    assert "test -f ok.txt" in (p.run_dir() / "contract.toml").read_text()
    assert list(p.run_dir().glob("contract.toml.changed-*"))

    p.agent(REWRITE_CONTRACT)  # and again, on the resumed attempt
    resumed = p.judged("resume", "--headless")
    no_traceback(resumed)
    assert resumed.returncode == 1, resumed.stdout
    assert "DONE" not in resumed.stdout
    status = p.status()
    assert status["done"] is False and status["state"] == "stopped"
    assert any(d["kind"] == "history" for d in status["drift"])
    handoff = (p.run_dir() / "handoff.md").read_text()
    assert "frozen contract" in handoff


def test_a_frozen_contract_with_no_trusted_copy_left_stops_resume_with_one_line(
    tmp_path: Path, git: GitRunner
) -> None:
    p = HostileProject(tmp_path, git, "exit 1\n")
    assert p.judged("run", "--headless").returncode == 1
    (p.run_dir() / "contract.toml").write_text('[run]\nprompt = "x"\nagent = "true"\n')
    (p.repo / "paella.toml").write_text("# gone\n")
    mirror_env = {"PAELLA_MIRROR": str(tmp_path / "no-such-mirror")}
    proc = p.judged("resume", "--headless", env=mirror_env)
    no_traceback(proc)
    assert proc.returncode == 3, proc.stderr
    assert "no trusted copy is left" in proc.stderr


# The agent waits for the green checkpoint paella takes of its first work (its record is written
# only after the mirror holds the ref), however loaded the machine: a fixed sleep raced it.
WAIT_FOR_CHECKPOINT = """\
i=0
until grep -qs '"kind": *"checkpoint"' .git/paella/runs/*/events.jsonl; do
  i=$((i+1)); [ $i -gt 1200 ] && break; sleep 0.05
done
"""


FORGE = (
    """\
echo ok > ok.txt
"""
    + WAIT_FOR_CHECKPOINT
    + """\
run=$(cat .git/paella/current)
ledger=.git/paella/runs/$run/events.jsonl
rm -f ok.txt
evil=$(git commit-tree $(git write-tree) -p HEAD -m evil)
tree=$(git rev-parse $evil^{tree})
git update-ref refs/paella/$run/checkpoints/9 $evil
# A forged checkpoint that carries a correct chain link (the agent read the code) ...
prev=$(python3 -c "import hashlib;l=open('$ledger','rb').read().rstrip(b'\\n').split(b'\\n')[-1];print(hashlib.sha256(l).hexdigest()[:32])")
printf '{"t":"2026-12-01T00:00:00.000Z","kind":"checkpoint","n":9,"ref":"refs/paella/%s/checkpoints/9","commit":"%s","tree":"%s","episode":1,"gates_green":["work"],"label":"forged","prev":"%s"}\\n' $run $evil $tree $prev >> $ledger
# ... then records that are well-formed JSON but incomplete, and a torn line.
echo '{"kind":"rollback-intent","id":"x"}' >> $ledger
echo '{"t":"x","kind":"checkpoint","n":"1"}' >> $ledger
echo '{"t":"x","kind":"checkpoint","ref":"refs/paella/x"}' >> $ledger
printf '{"t":"x","kind":"agent-star' >> $ledger
exit 3
"""
)


@pytest.mark.slow
def test_forged_and_broken_ledger_records_are_named_skipped_and_never_rollback_targets(
    tmp_path: Path, git: GitRunner
) -> None:
    p = HostileProject(tmp_path, git, FORGE)
    run = p.judged("run", "--headless")
    no_traceback(run)
    assert run.returncode == 1, run.stdout

    for args in (
        ("status",),
        ("status", "--json"),
        ("status", "--tmux"),
        ("checkpoints",),
        ("checkpoints", "--json"),
        ("log",),
        ("handoff",),
        ("diff",),
    ):
        proc = p.read(*args)
        no_traceback(proc)
        assert proc.returncode == 0, (args, proc.stderr)
    listing = p.read("checkpoints").stdout
    assert "not confirmed by the mirror" in listing
    warned = p.read("status").stderr
    assert "hash chain breaks" in warned and "skipped a record" in warned

    refused = p.read("rollback", "9", "--yes")
    no_traceback(refused)
    assert refused.returncode == 2 and "not a trusted snapshot" in refused.stderr
    rolled = p.read("rollback", "--yes")
    no_traceback(rolled)
    assert rolled.returncode == 0, rolled.stderr
    assert "rolled back to 1" in rolled.stdout
    # Checkpoint 1's tree, not the forged one (which has no ok.txt).
    assert (p.repo / "ok.txt").read_text() == "ok\n"


# This agent destroys the ledger: it waits until the mirror's copy of the ledger (its parts, one
# a commit) holds the checkpoint's record too (in the mirror PAELLA_MIRROR names, or this
# repository's default one, LOCAL_MIRROR: not every mirror in the session's XDG state folder,
# one git process each per poll, and there are as many as the worker's tests that made a run). That copy follows the record a moment later, in the background; an
# agent that strikes inside that moment costs the ledger its newest record (README: what paella
# cannot protect against), though the checkpoint's ref is in the mirror before the record exists.
WAIT_FOR_MIRRORED_LEDGER = """\
run=$(cat .git/paella/current)
i=0
until for m in "${PAELLA_MIRROR#file://}" "LOCAL_MIRROR"; do
        git --git-dir="$m" log -p "refs/paella-state/$run" 2>/dev/null
      done | grep -q '"kind": *"checkpoint"'; do
  i=$((i+1)); [ $i -gt 1200 ] && break; sleep 0.05
done
"""


DELETE_STATE = (
    """\
[ "$PAELLA_ATTEMPT" = 1 ] || exit 1
echo ok > ok.txt
"""
    + WAIT_FOR_MIRRORED_LEDGER
    + """\
git for-each-ref --format='%(refname)' refs/paella | while read r; do git update-ref -d $r; done
git reflog expire --expire=now --all
git gc -q --prune=now
rm -rf .git/paella
echo broken > ok.txt
exit 3
"""
)


# Before destroying, the agent points the mirror's address at a mirror of its own (empty) and
# names a program for ssh: paella's reads and restores must still come from the real mirror
# (tests/test_mirror_link.py has the whole matrix).
REDIRECT_THE_MIRROR = """\
git init -q --bare ../agents-mirror.git
git config url."file://$(cd .. && pwd)/agents-mirror.git".insteadOf "$PAELLA_MIRROR"
git config core.sshCommand "touch $(cd .. && pwd)/ssh-ran"
"""


@pytest.mark.parametrize("mirror", ["default", "remote", "remote, redirected by the agent"])
def test_deleted_refs_gc_and_state_are_restored_from_the_mirror_and_rollback_works(
    tmp_path: Path, git: GitRunner, mirror: str
) -> None:
    script = DELETE_STATE
    if mirror.endswith("redirected by the agent"):
        destroy = script.index("git for-each-ref")
        script = script[:destroy] + REDIRECT_THE_MIRROR + script[destroy:]
    p = HostileProject(tmp_path, git, script)
    p.agent(script.replace("LOCAL_MIRROR", str(Mirror.for_workspace(Workspace.find(p.repo)).local)))
    env = {}
    if mirror.startswith("remote"):
        # PAELLA_MIRROR may name any git remote: here a URL, read through git fetch.
        remote = tmp_path / "elsewhere.git"
        git(tmp_path, "init", "-q", "--bare", str(remote))
        env["PAELLA_MIRROR"] = f"file://{remote}"
    run = p.judged("run", "--headless", "--on-death", "rollback", env=env)
    no_traceback(run)
    out = run.stdout
    assert "drift history: the ledger" in out and "restored from the mirror" in out
    assert "drift history: the snapshot ref" in out
    assert "rolled back to 1" in out, out
    # The rollback came from the mirror: the file is the checkpoint's again.
    assert run.returncode == 1
    assert (p.repo / "ok.txt").read_text() == "ok\n"
    kinds = [r["kind"] for r in p.ledger()]
    assert "checkpoint" in kinds and "rollback-done" in kinds
    refs = git(p.repo, "for-each-ref", "--format=%(refname)", "refs/paella").split()
    assert any(r.endswith("/checkpoints/1") for r in refs)
    if mirror.startswith("remote"):
        held = git(tmp_path / "elsewhere.git", "for-each-ref", "--format=%(refname)").split()
        assert any(r.startswith("refs/paella-state/") for r in held), held
    if mirror.endswith("redirected by the agent"):
        assert git(tmp_path / "agents-mirror.git", "for-each-ref") == ""
        assert not (tmp_path / "ssh-ran").exists()


@pytest.fixture
def finished(tmp_path_factory: pytest.TempPathFactory, git: GitRunner) -> Iterator[HostileProject]:
    """The project after ``paella run --headless`` of ``echo ok > ok.txt; sleep 1; exit 1`` (a
    checkpoint, then the agent failed), as that run left it: the run is made once per test
    process and its folder put back for each test (hostile_project.finished_project)."""
    with finished_project(tmp_path_factory, git) as (p, _):
        yield p


@pytest.mark.xdist_group(FINISHED_GROUP)
def test_a_state_folder_deleted_between_commands_comes_back_for_every_reader(
    finished: HostileProject, git: GitRunner
) -> None:
    p = finished
    before = p.read("checkpoints", "--json").stdout
    for ref in git(p.repo, "for-each-ref", "--format=%(refname)", "refs/paella").split():
        git(p.repo, "update-ref", "-d", ref)
    git(p.repo, "gc", "-q", "--prune=now")
    shutil.rmtree(p.state)
    status = p.read("status")
    no_traceback(status)
    assert status.returncode == 0
    assert "restored from the mirror" in status.stderr
    assert p.read("checkpoints", "--json").stdout == before
    rolled = p.read("rollback", "--yes")
    assert rolled.returncode == 0, rolled.stderr


DAEMONIZE = """\
echo ok > ok.txt
setsid env -i sleep {tag}1 &
python3 {escape} {tag}2
exit 1
"""

DOUBLE_FORK = """\
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", sys.argv[1]], {})
    os._exit(0)
time.sleep(0.2)
"""


@pytest.mark.parametrize("cgroups", ["1", "0"], ids=["cgroup-if-possible", "subreaper-sweep"])
def test_no_process_of_the_agent_or_a_gate_outlives_its_attempt(
    tmp_path: Path, git: GitRunner, cgroups: str
) -> None:
    escape = tmp_path / "escape.py"
    escape.write_text(DOUBLE_FORK)
    tag = str(int(time.time() * 1000) % 10**9 + 10**9)  # unique sleep arguments to look for
    gate = ["sh", "-c", f"setsid env -i sleep {tag}3 & python3 {escape} {tag}4; test -f ok.txt"]
    p = HostileProject(tmp_path, git, DAEMONIZE.format(tag=tag, escape=escape), gate=gate)
    proc = p.paella("run", "--headless", env={"PAELLA_CGROUPS": cgroups})
    no_traceback(proc)
    survivors = [
        q.info["cmdline"]
        for q in psutil.process_iter(["cmdline"])
        if any(tag in arg for arg in (q.info["cmdline"] or []))
    ]
    assert survivors == [], survivors
    # Each one is named where it was stopped: with the agent's end, or with a gate's. (Without
    # a cgroup, an orphan that no tree saw and that carries no marker cannot say which tree it
    # came from: whichever finds it first stops it; tests/test_tree_ownership.py for the rest.)
    exited = next(r for r in p.ledger() if r["kind"] == "agent-exited")
    gate_logs = "".join(f.read_text() for f in (p.run_dir() / "gates").rglob("*.log"))
    named = " ".join(exited["leftovers"]) + gate_logs
    for n in "1234":
        assert f"{tag}{n}" in named, (n, exited["leftovers"], gate_logs)
    if exited["leftovers"]:
        # Said on screen with the agent's end (a gate's are in its log, asserted above). Which
        # end finds the agent's orphans first is a race without cgroups: under load the gate's
        # sweep can find them all, and then the agent's end has none to say.
        assert "leftover" in proc.stdout
    probe = Cage.create("probe") if cgroups == "1" else None
    if probe is not None:
        probe.remove()
        # With cgroups the attribution is exact.
        assert f"{tag}1" in " ".join(exited["leftovers"]) and f"{tag}3" in gate_logs


INDEX_LOCK = (
    """\
echo ok > ok.txt
"""
    + WAIT_FOR_CHECKPOINT
    + """\
echo broken > ok.txt
touch .git/index.lock
kill -9 $$
"""
)


def test_a_recovery_that_cannot_proceed_stops_cleanly_with_the_commands_to_continue(
    tmp_path: Path, git: GitRunner
) -> None:
    p = HostileProject(tmp_path, git, INDEX_LOCK)
    proc = p.judged("run", "--headless", "--on-death", "rollback")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = p.ledger()[-1]
    assert last["kind"] == "run-stopped", last
    assert "index.lock" in last["reason"] and "paella resume" in last["reason"]
    assert "paella rollback 1 --yes" in last["reason"]
    assert p.status()["state"] == "stopped"
    (p.repo / ".git" / "index.lock").unlink()
    rolled = p.read("rollback", "--yes")
    assert rolled.returncode == 0, rolled.stderr


def test_two_supervisors_started_at_once_exactly_one_runs(tmp_path: Path, git: GitRunner) -> None:
    p = HostileProject(tmp_path, git, "sleep 3\necho ok > ok.txt\n")
    first = p.start("run", "--headless")
    time.sleep(0.05)
    second = p.start("run", "--headless")
    out2, err2 = second.communicate(timeout=60)
    status = p.read("status", "--json")
    out1, err1 = first.communicate(timeout=60)
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 3], (out1, err1, out2, err2)
    loser = err2 if second.returncode == 3 else err1
    assert "already supervised by paella pid" in loser
    assert status.returncode == 0 and json.loads(status.stdout)["run_id"]
    assert len(list((p.state / "runs").iterdir())) == 1
    # After the first one ended the lock is free again (for this process's resume too).
    again = p.judged("resume", "--headless")
    assert again.returncode == 0 and "already done" in again.stdout


def test_an_edited_protected_test_is_not_done_headless(tmp_path: Path, git: GitRunner) -> None:
    p = HostileProject(
        tmp_path,
        git,
        "echo ok > ok.txt\necho '# made green' >> tests/spec.txt\nexit 0\n",
        constraints=[{"text": "tests are the spec", "protect": ["tests/**"]}],
    )
    (p.repo / "tests").mkdir()
    (p.repo / "tests" / "spec.txt").write_text("spec\n")
    git(p.repo, "add", "tests")
    git(p.repo, "commit", "-q", "-m", "spec")
    proc = p.judged("run", "--headless")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout
    assert "not done: tests/spec.txt" in proc.stdout
    assert "exit 0, but protected files changed: tests/spec.txt" in proc.stdout
    assert "tests/spec.txt" in (p.run_dir() / "handoff.md").read_text()


@pytest.mark.xdist_group(FINISHED_GROUP)
def test_a_pruned_run_stays_pruned_the_mirror_forgets_it_too(
    finished: HostileProject, git: GitRunner
) -> None:
    p = finished
    run_id = p.run_dir().name
    pruned = p.read("prune", run_id)
    assert pruned.returncode == 0, pruned.stderr
    status = p.read("status")
    no_traceback(status)
    assert "restored from the mirror" not in status.stderr
    assert not (p.state / "runs" / run_id).exists()
    assert git(p.repo, "for-each-ref", "refs/paella") == ""
