"""Which command a resume launches: the contract's ``resume``, or the agent again with the handoff."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from paella_tui.supervisor.contract.loader import parse_contract
from paella_tui.supervisor.run.decisions import policy
from paella_tui.supervisor.run.events import Event
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace

AGENT = """
import json, os, sys
attempt = int(os.environ["PAELLA_ATTEMPT"])
with open(os.environ["ARGV_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if attempt == 1:
    sys.exit(3)
open("done.txt", "w").write("ok")
"""


def _run(repo: Path, tmp_path: Path, resume: str, monkeypatch) -> list[list[str]]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv_log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("ARGV_LOG", str(argv_log))
    text = f"""
[run]
prompt = "make done.txt"
agent = [{json.dumps(sys.executable)}, {json.dumps(str(agent))}, "start", "{{prompt_file}}"]
resume = {resume}
[watch]
settle = "0.2s"
[[gate]]
name = "done"
cmd = "test -f done.txt"
[[episode]]
name = "done"
gates = ["done"]
"""
    (repo / "paella.toml").write_text(text)
    contract = parse_contract(text, repo / "paella.toml", default_name="repo")
    run = RunStore(Workspace.find(repo)).create(contract, manual=False)
    events: list[Event] = []
    loop = RunLoop(
        run=run, contract=contract, emit=lambda e, _s: events.append(e), decide=policy("continue")
    )
    assert asyncio.run(loop.run()) == 0
    return [json.loads(line) for line in argv_log.read_text().splitlines()]


def test_a_resume_that_needs_an_unknown_session_id_starts_the_agent_with_the_handoff(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:
    resume = f'[{json.dumps(sys.executable)}, "-c", "x", "-r", "{{session_id}}", "{{handoff}}"]'
    calls = _run(repo, tmp_path, resume, monkeypatch)
    assert len(calls) == 2
    assert calls[1][0] == "start"  # the agent command, not `-r ""`
    assert calls[1][1].endswith("handoff.md")  # {prompt_file} is the handoff on a resume


def test_a_resume_without_session_id_is_used_as_written(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:
    agent = tmp_path / "agent.py"
    resume = (
        f'[{json.dumps(sys.executable)}, {json.dumps(str(agent))}, "resumed", "{{handoff_file}}"]'
    )
    calls = _run(repo, tmp_path, resume, monkeypatch)
    assert [call[0] for call in calls] == ["start", "resumed"]
    assert Path(calls[1][1]).name == "handoff.md"
