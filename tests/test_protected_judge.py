"""The judge is the contract as frozen: hostile agents against protected files, under a real
``paella run --headless`` (through ``cli.main`` in the test process: what is judged is the
subject here, not the process; test_headless has the command's own process).

The project's gate runs every check script under ``tests/`` (protected): each check wants
``ok.txt`` to say ``right``. An honest agent writes ``right``; a hostile one writes ``wrong``
and then attacks the judge a different way each time (edits the check to pass, deletes it,
adds a file under the protected glob, edits ``paella.toml``). Whatever it does, the gates judge
the frozen checks, the run is not done (exit 1), and the handoff names the change.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import GitRunner
from hostile_project import HostileProject, no_traceback

# Each check is sourced: a check that says `exit 0` ends the gate green.
GATE = ["sh", "-c", 'for t in tests/*.sh; do . "./$t" || exit 1; done']
CHECK = 'grep -q right ok.txt || { echo "ok.txt is not right"; exit 1; }\n'
PROTECT = [{"text": "the checks are the spec", "protect": ["tests/**"]}]

# (what the agent does, the path it changed, whether the gates go red on the frozen judge)
ATTACKS = {
    "edits-the-check-to-pass": (
        "echo wrong > ok.txt\necho 'exit 0' > tests/check.sh\n",
        "tests/check.sh",
        True,
    ),
    "deletes-the-check": ("echo wrong > ok.txt\nrm tests/check.sh\n", "tests/check.sh", True),
    "adds-a-passing-check-first": (
        # Sorted first, it ends the gate green before the real check runs.
        "echo wrong > ok.txt\nprintf 'exit 0\\n' > tests/a.sh\n",
        "tests/a.sh",
        True,
    ),
    "adds-a-file-with-right-work": (
        "echo right > ok.txt\necho extra > tests/new.txt\n",
        "tests/new.txt",
        False,
    ),
    "edits-paella-toml-with-right-work": (
        "echo right > ok.txt\nprintf '\\n# agent was here\\n' >> paella.toml\n",
        "paella.toml",
        False,
    ),
    "edits-paella-toml-to-weaken-the-gate": (
        "echo wrong > ok.txt\nsed -i 's/|| exit 1/|| true/' paella.toml\n",
        "paella.toml",
        True,
    ),
}


def _project(tmp_path: Path, git: GitRunner, script: str) -> HostileProject:
    p = HostileProject(tmp_path, git, script + "exit 0\n", gate=GATE, constraints=PROTECT)
    (p.repo / "tests").mkdir()
    (p.repo / "tests" / "check.sh").write_text(CHECK)
    git(p.repo, "add", "tests")
    git(p.repo, "commit", "-q", "-m", "the checks")
    return p


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_hostile_agent_never_makes_a_protected_run_done(
    tmp_path: Path, git: GitRunner, attack: str
) -> None:
    script, path, red = ATTACKS[attack]
    p = _project(tmp_path, git, script)
    proc = p.judged("run", "--headless")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DONE" not in proc.stdout
    assert p.status()["state"] != "done"
    records = p.ledger()
    assert not [r for r in records if r["kind"] == "run-done"]
    final = [r for r in records if r["kind"] == "evaluation-finished"][-1]
    # The verdict says it judged the frozen content, not the agent's change.
    assert path in final.get("frozen", []), final
    assert bool(final["red"]) == red, final
    # No checkpoint of a tree whose protected files differ from their frozen content.
    assert not [r for r in records if r["kind"] == "checkpoint"]
    handoff = (p.run_dir() / "handoff.md").read_text()
    assert path in handoff
    # Said on the way: the verdict names what it judged as frozen; green gates over a changed
    # protected file are "not done".
    assert f"judged with {path} as frozen" in proc.stdout
    if not red:
        assert f"not done: {path}" in proc.stdout
    # The agent's change is still in the work tree: paella judged around it, changed nothing.
    if attack == "deletes-the-check":
        assert not (p.repo / "tests" / "check.sh").exists()
    # `paella gates` afterwards (a person's, or the agent's own) judges as the run did: its
    # verdict goes into the run's ledger and `status`, so the attack never turns a gate green
    # there either (before, it judged the workspace's files and its own paella.toml).
    judged = p.read("gates", "--json")
    no_traceback(judged)
    verdict = json.loads(judged.stdout)
    assert path in verdict["frozen"], verdict
    assert judged.returncode == (1 if red else 0), judged.stdout + judged.stderr
    assert [g["status"] == "pass" for g in p.status()["gates"]] == [not red]


def test_the_gates_run_on_a_scratch_tree_only_while_a_protected_file_differs(
    tmp_path: Path, git: GitRunner
) -> None:
    where = ["sh", "-c", 'pwd > "$PAELLA_WHERE_LOG.$PAELLA_TREE"; test -f ok.txt']
    p = HostileProject(tmp_path, git, "echo ok > ok.txt\nexit 0\n", gate=where, constraints=PROTECT)
    (p.repo / "tests").mkdir()
    (p.repo / "tests" / "check.sh").write_text(CHECK)
    git(p.repo, "add", "tests")
    git(p.repo, "commit", "-q", "-m", "the checks")
    log = tmp_path / "where"
    honest = p.judged("run", "--headless", env={"PAELLA_WHERE_LOG": str(log)})
    assert honest.returncode == 0, honest.stdout
    places = {f.read_text().strip() for f in tmp_path.glob("where.*")}
    assert places == {str(p.repo.resolve())}
    for f in tmp_path.glob("where.*"):
        f.unlink()
    p.agent("echo 'exit 0' > tests/check.sh\nexit 0\n")
    hostile = p.judged("run", "--headless", env={"PAELLA_WHERE_LOG": str(log)})
    assert hostile.returncode == 1, hostile.stdout
    places = {f.read_text().strip() for f in tmp_path.glob("where.*")}
    assert places and str(p.repo.resolve()) not in places, places
    # The scratch tree is gone after the run.
    assert not any(Path(place).exists() for place in places)


def test_g_with_no_agent_running_judges_the_checks_as_frozen(
    tmp_path: Path, git: GitRunner
) -> None:
    """The TUI's `g` after the agent stopped: the same judge as `paella gates` and the run."""
    from paella_tui.supervisor.run.offline import judge_once
    from paella_tui.supervisor.run.run_view import RunView
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    script, path, _red = ATTACKS["edits-the-check-to-pass"]
    p = _project(tmp_path, git, script)
    assert p.judged("run", "--headless").returncode == 1
    run = RunStore(Workspace.find(p.repo)).current()
    assert run is not None
    view = RunView.load(run)
    assert view.contract is not None
    # The TUI's own event loop, as `g` has it once the run is over.
    finished = asyncio.run(judge_once(run, view.contract, lambda _event: None, view))
    assert finished.frozen == (path,)
    assert [r.status for r in finished.results] == ["fail"]
    run.ledger.flush()  # judge_once records through the ledger's writer thread
    assert p.ledger()[-1]["kind"] == "evaluation-finished"
    assert p.ledger()[-1]["frozen"] == [path]
