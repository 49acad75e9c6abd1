"""The status bar's line from the facts kept in the seal (``supervisor/run/bar_facts.py``,
``paella_tui/commands/tmux_line.py``): the same line the ordinary way prints, over varied run
states, and refused, for the ordinary way, whenever the facts may not be the run's.

The ordinary way is the real one: ``tmux_line(RunView(...).to_json())`` on a real run (a
repository with a contract of three gates and two episodes, opened by ``paella checkpoint``),
its state varied through hypothesis; the liveness the line checks is real too (this test
process, a process that has ended, a wrong start time, pid 1). The refusals run the real
commands (through ``cli.main``, as a new process runs them: ``run_paella_in_process``) and the
fast line on the files they leave.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import make_repo, run_paella_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paella_tui.commands.tmux_line import FACTS_FORMAT, facts_line, fast_line, is_run_id, tmux_line
from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.base import state_seal
from paella_tui.supervisor.run import bar_facts
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import RUN_ID_PATTERN, RunStore
from paella_tui.supervisor.run.state import AgentNow, AttemptEnd, ContractSpec, GateNow, Phase
from paella_tui.supervisor.run.state_events import DriftDetected
from paella_tui.supervisor.store.workspace import Workspace

CONTRACT = """\
[run]
prompt = "Do the task."
agent = "true"

[[gate]]
name = "unit"
cmd = "true"

[[gate]]
name = "lint"
cmd = "true"

[[gate]]
name = "types"
cmd = "true"

[[episode]]
name = "one"
gates = ["unit"]

[[episode]]
name = "two"
gates = ["unit", "lint", "types"]
"""
GATES = ("unit", "lint", "types")
STATUSES = ("pass", "flaky", "fail", "timeout", "error", "pending", "running", None)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunView]:
    """A real run with its contract, read as ``paella status`` reads it."""
    repo = make_repo(tmp_path_factory.mktemp("bar-facts") / "repo")
    (repo / "paella.toml").write_text(CONTRACT)
    made = run_paella_in_process(repo, "checkpoint", "--label", "first")
    assert made.returncode == 0, made.stderr
    run = RunStore(Workspace.find(repo)).current()
    assert run is not None
    loaded = RunView.load(run, verify_mirror=False)
    assert loaded.contract is not None and loaded.run_state.spec.known
    yield loaded


def _ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


ME = os.getpid()
MY_START = psutil.Process(ME).create_time()
ENDED = _ended_pid()
# (pid, start time) of an agent: alive with its start time, with none, with another start time;
# a process that has ended; pid 1 (alive, not ours); no pid.
AGENTS = [(ME, MY_START), (ME, None), (ME, MY_START - 5.0), (ENDED, None), (1, None), (None, None)]

usages = st.builds(
    Usage,
    turns=st.integers(0, 50),
    input_tokens=st.integers(-5, 3_000_000),
    output_tokens=st.integers(0, 100_000),
    cost_usd=st.one_of(st.none(), st.floats(-1, 500, allow_nan=False)),
    cached_input_tokens=st.integers(0, 2_000_000),
)


@st.composite
def states(draw: st.DrawFn, view: RunView) -> Any:
    """The run's state with its phase, processes, gates, drift and usage varied."""
    agent = draw(st.sampled_from([None, *AGENTS]))
    gates = {}
    for name in GATES:
        status = draw(st.sampled_from(STATUSES))
        if status is not None:
            tree = draw(st.sampled_from([None, "t"]))  # a pending gate never started has none
            gates[name] = GateNow(name=name, status=status, tree=tree)
    drift = tuple(
        DriftDetected(drift="scope", message="off", gate=None, path=f"p{k}")
        for k in range(draw(st.integers(0, 3)))
    )
    attempts = draw(st.dictionaries(st.integers(1, 3), usages, max_size=3))
    ended = draw(st.booleans())
    return dataclasses.replace(
        view.run_state,
        phase=draw(st.sampled_from(list(Phase))),
        supervisor_pid=draw(st.sampled_from([ME, ENDED, None])),
        agent=None if agent is None else AgentNow(1, agent[0], agent[1], started_at=0.0),
        last_exit=AttemptEnd(1, 0, None) if ended else None,
        gates=gates,
        drift=drift,
        usage_by_attempt=attempts,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_facts_line_is_the_status_line(view: RunView, data: st.DataObject) -> None:
    state = data.draw(states(view))
    varied = dataclasses.replace(view, folded=dataclasses.replace(view.folded, state=state))
    slow = tmux_line(varied.to_json())
    facts = bar_facts.bar_facts(state, 100, os.stat(view.run.dir / "events.jsonl"))
    assert facts is not None
    assert facts_line(facts) == slow


def test_a_state_kept_without_its_contract_has_no_facts(view: RunView) -> None:
    state = dataclasses.replace(view.run_state, spec=ContractSpec())
    assert bar_facts.bar_facts(state, 0, os.stat(view.run.dir)) is None


def test_the_line_and_the_engine_name_one_facts_format() -> None:
    assert FACTS_FORMAT == bar_facts.FORMAT


ID_ALPHABET = "0123456789abcdefxyzABCDEF-\n ٣²"


@given(
    st.text(ID_ALPHABET, max_size=24) | st.from_regex(r"\d{8}-\d{6}-[0-9a-f]{4}", fullmatch=True)
)
def test_the_line_takes_a_run_id_only_where_the_run_store_does(text: str) -> None:
    """``is_run_id`` (no ``re``) takes what ``RUN_ID_PATTERN`` takes in ASCII digits, and never
    what it refuses."""
    ascii_id = re.fullmatch(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}", text) is not None
    assert is_run_id(text) == ascii_id
    if is_run_id(text):
        assert RUN_ID_PATTERN.match(text)


facts_keys = st.text("abcdefghij_-0123456789", min_size=1, max_size=12)
facts_values = st.text(
    st.characters(blacklist_characters="\n", blacklist_categories=["Cs"]), max_size=40
)


@given(data=st.binary(max_size=256), facts=st.dictionaries(facts_keys, facts_values, max_size=8))
def test_the_facts_come_back_from_the_seal_as_written(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, facts: dict[str, str]
) -> None:
    kept = tmp_path_factory.mktemp("seal") / "state.json"
    kept.write_bytes(data)
    state_seal.write_seal(kept, data, facts)
    assert state_seal.sealed(kept, data)
    assert state_seal.seal_facts(kept) == facts


@pytest.mark.parametrize(
    ("key", "value"), [("two words", "x"), ("", "x"), ("key", "two\nlines"), ("new\nline", "x")]
)
def test_a_fact_that_is_not_one_word_and_one_line_is_refused(
    tmp_path: Path, key: str, value: str
) -> None:
    with pytest.raises(ValueError, match="one line"):
        state_seal.write_seal(tmp_path / "state.json", b"{}", {key: value})


# --- refusals, on the files real commands leave --------------------------------------------


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    """A repository whose run's state was kept (and sealed, with its facts) by real commands;
    its state.json."""
    repo = make_repo(tmp_path / "repo")
    (repo / "paella.toml").write_text(CONTRACT)
    for args in (("checkpoint",), ("status",)):
        made = run_paella_in_process(repo, *args)
        assert made.returncode == 0, made.stderr
    run_id = (repo / ".git" / "paella" / "current").read_text().strip()
    return repo / ".git" / "paella" / "runs" / run_id / "state.json"


def _repo(kept: Path) -> Path:
    return kept.parents[4]


def _ordinary(kept: Path) -> str:
    """The line as a real ``paella status --tmux`` prints it (which keeps and seals again)."""
    made = run_paella_in_process(_repo(kept), "status", "--tmux")
    assert made.returncode == 0, made.stderr
    return made.stdout.removesuffix("\n")


def _rewrite_the_same_bytes(kept: Path) -> None:
    data = kept.read_bytes()
    kept.unlink()
    kept.write_bytes(data)


def _touch(kept: Path) -> None:
    st_ = kept.stat()
    os.utime(kept, ns=(st_.st_atime_ns, st_.st_mtime_ns))  # the same times: only ctime moves


def _forge(kept: Path) -> None:
    body = json.loads(kept.read_bytes())
    for gate in body["state"]["gates"].values():
        gate["status"] = "pass"
    body["state"]["phase"] = "done"
    kept.write_text(json.dumps(body, separators=(",", ":")))


def _seal_before_facts(kept: Path) -> None:
    seal = state_seal.seal_path(kept)
    seal.write_bytes(seal.read_bytes().split(b"\n", 1)[0])


def _other_format(kept: Path) -> None:
    seal = state_seal.seal_path(kept)
    seal.write_bytes(seal.read_bytes().replace(b"\nfacts 1\n", b"\nfacts 0\n"))


def _cut_seal(kept: Path) -> None:
    seal = state_seal.seal_path(kept)
    seal.write_bytes(seal.read_bytes()[:-3])


REFUSED = {
    "state.json rewritten with the same bytes": _rewrite_the_same_bytes,
    "state.json touched (ctime)": _touch,
    "state.json forged": _forge,
    "a seal from before the facts": _seal_before_facts,
    "facts of another format": _other_format,
    "a seal cut short": _cut_seal,
}


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_facts_that_may_not_be_the_runs_are_refused_and_written_again(
    kept: Path, change: str
) -> None:
    repo = _repo(kept)
    line = fast_line(repo)
    assert line is not None and line == _ordinary(kept)
    REFUSED[change](kept)
    assert fast_line(repo) is None
    assert _ordinary(kept) == line  # the ordinary way folds the ledger: the truth
    assert fast_line(repo) == line  # and kept the state and its facts again


def test_facts_behind_the_ledger_are_taken_only_within_the_lag(kept: Path) -> None:
    repo = _repo(kept)
    line = fast_line(repo)
    assert line is not None
    ledger = kept.with_name("events.jsonl")
    made = run_paella_in_process(repo, "checkpoint", "--label", "more")  # the ledger grows
    assert made.returncode == 0, made.stderr
    # Facts at an older offset: taken while the ledger is at most MAX_LAG_S newer, then refused.
    seal = state_seal.seal_path(kept)
    facts = state_seal.seal_facts(kept)
    assert facts is not None
    facts["offset"] = str(ledger.stat().st_size - 1)
    state_seal.write_seal(kept, kept.read_bytes(), facts)
    kept_mtime = kept.stat().st_mtime
    os.utime(ledger, (kept_mtime + 5, kept_mtime + 5))
    assert fast_line(repo) == facts_line(facts)
    os.utime(ledger, (kept_mtime + 11, kept_mtime + 11))
    assert fast_line(repo) is None
    # Facts past the ledger's end (the ledger was cut): refused, whatever the times.
    facts["offset"] = str(ledger.stat().st_size + 1)
    state_seal.write_seal(kept, kept.read_bytes(), facts)
    os.utime(ledger, (kept_mtime, kept_mtime))
    assert fast_line(repo) is None
    assert seal.is_file()
