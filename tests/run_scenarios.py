"""What the run-loop tests (``test_run_loop.py``) and the headless-command tests
(``test_headless.py``) set up alike: a repository with a committed contract whose scripted agent
(``tests/run_agents/plan_agent.py``) follows a plan per attempt, and the checks that nothing the
test started is left running.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import tomli_w
from conftest import GitRunner, TreeState, capture_tree

from paella_tui.supervisor.store import death_group

AGENT = Path(__file__).parent / "run_agents" / "plan_agent.py"

Step = list[Any]


def gate(name: str, cmd: str, **extra: Any) -> dict[str, Any]:
    """A gate with a short timeout."""
    return {"name": name, "cmd": cmd, "timeout": "10s", **extra}


ABC_GATES = [
    gate("g1", "test -f a.txt"),
    gate("g2", "test -f b.txt"),
    gate("g3", "test -f c.txt"),
]
"""Gate ``gN`` passes once the N-th of a.txt, b.txt, c.txt exists."""


class PlannedRepo:
    """A repository with a committed contract (``settle = "0.2s"``) whose agent follows a plan."""

    def __init__(
        self,
        repo: Path,
        tmp_path: Path,
        git: GitRunner,
        plan: dict[int | str, list[Step]],
        *,
        gates: list[dict[str, Any]],
        episodes: list[dict[str, Any]],
        agent: list[str] | None = None,
        run: dict[str, Any] | None = None,
        retry: dict[str, Any] | None = None,
        constraints: list[dict[str, Any]] | None = None,
    ) -> None:
        self.repo = repo
        self.git = git
        self.outside = tmp_path / "outside"
        """A folder outside the repository, for the plan and the agent's reports."""
        self.outside.mkdir()
        plan_file = self.outside / "plan.json"
        text = json.dumps({str(k): v for k, v in plan.items()})
        # "{outside}" in a step is a folder outside the repository, for the agent's reports.
        plan_file.write_text(text.replace("{outside}", str(self.outside)))
        self.trace_file = self.outside / "trace.txt"
        self.pids_file = self.outside / "pids.txt"
        self.flood_file = self.outside / "flood.json"
        self.env = {
            "PLAN_TRACE": str(self.trace_file),
            "PLAN_PIDS": str(self.pids_file),
            "PLAN_FLOOD": str(self.flood_file),
        }
        """Where the agent writes its trace, the pids it spawned and its flood report."""
        data: dict[str, Any] = {
            "run": {
                "prompt": "Make the gates pass, episode by episode.",
                "agent": agent or [sys.executable, str(AGENT), str(plan_file)],
                **(run or {}),
            },
            "retry": {"backoff": "0.5s", **(retry or {})},
            "watch": {"settle": "0.2s"},
            "gates": {"jobs": 2},
            "gate": gates,
            "episode": episodes,
        }
        if constraints:
            data["constraint"] = constraints
        (repo / "paella.toml").write_text(tomli_w.dumps(data))
        git(repo, "add", "paella.toml")
        git(repo, "commit", "-q", "-m", "contract")
        self.head0 = git.head(repo)
        self.children_before: set[tuple[int, float]] = set()
        """This test process's children before the test began."""

    def trace(self) -> str:
        """What the agent did, step by step, for assertion messages."""
        return self.trace_file.read_text() if self.trace_file.exists() else "(no agent trace)"

    def spawned(self) -> dict[str, int]:
        """The pids of the processes the agent spawned, by name."""
        if not self.pids_file.exists():
            return {}
        return {
            name: int(pid)
            for name, pid in (line.split() for line in self.pids_file.read_text().splitlines())
        }

    def reported(self, name: str) -> dict[str, Any]:
        """What the agent recorded (a ``record`` step) in ``{outside}/name``."""
        data: dict[str, Any] = json.loads((self.outside / name).read_text())
        return data

    def ref(self, name: str) -> str | None:
        """The commit ``name`` names in the repository, or None."""
        return self.git.run(self.repo, "rev-parse", "--verify", "-q", name).stdout.strip() or None

    def refs(self, *names: str) -> list[str | None]:
        """What each of ``names`` names in the repository (as ``ref`` says, one each), or None:
        through one ``git cat-file --batch-check`` rather than a ``rev-parse`` a name."""
        if not names:
            return []
        out = self.git(
            self.repo, "cat-file", "--batch-check=%(objectname)", input="\n".join(names) + "\n"
        ).splitlines()
        assert len(out) == len(names), (names, out)
        return [None if line.endswith((" missing", " ambiguous")) else line for line in out]

    def tree(self) -> TreeState:
        """The work tree (everything but .git), byte for byte."""
        return capture_tree(self.repo)


def new_children(before: set[tuple[int, float]]) -> list[psutil.Process]:
    """This process's descendants that were not there when the test began (zombies included),
    but for its death group's leader and keeper (store/death_group.py): this process's own for
    as long as it lives, made by the first write that needed them, whichever test that was."""
    found = []
    own = set(death_group.members())
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if (child.pid, child.create_time()) not in before and child.pid not in own:
                found.append(child)
    return found


@contextlib.contextmanager
def children_killed_after() -> Iterator[set[tuple[int, float]]]:
    """Our children when the test began (other tests' leftovers are not this test's to judge);
    after the test and its assertions, whatever it left is killed so a failure cannot spread."""
    before = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            before.add((child.pid, child.create_time()))
    yield before
    for child in new_children(before):
        with contextlib.suppress(psutil.Error, ChildProcessError):
            child.kill()
            child.wait(2)


def section(markdown: str, title: str) -> str:
    """The text of a handoff's ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert match, f"no section {title!r} in:\n{markdown}"
    return match.group(1)


class Recorder(list[Any]):
    """A run loop's consumer for tests: the events (it is their list) and, beside each, the run
    state the loop handed with it."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[Any] = []

    def __call__(self, event: Any, state: Any) -> None:
        self.append(event)
        self.states.append(state)


def assert_handed_states_took_in(recorder: Recorder) -> None:
    """Each state the loop handed a consumer has taken in the event it came with (issue 14: the
    loop updates the state before anything else): a consumer never folds, and never shows a
    state behind the event it was given."""
    from paella_tui.supervisor.run.events import AgentStarted, CheckpointTaken, EvaluationFinished

    folded = 0
    for event, state in zip(recorder, recorder.states, strict=True):
        assert state.folded >= folded, (
            f"the state went back ({folded} → {state.folded}) with {event!r}"
        )
        folded = state.folded
        if isinstance(event, AgentStarted):
            assert state.attempt == event.attempt, event
        elif isinstance(event, CheckpointTaken):
            assert event.record_.n in {c.n for c in state.checkpoints}, event
        elif isinstance(event, EvaluationFinished) and not event.stale:
            for result in event.results:
                gate = state.gates.get(result.gate)
                assert gate is not None and (gate.status, gate.tree) == (
                    result.status,
                    result.tree,
                ), (event, gate)


def assert_one_truth(run: Any, contract: Any, live: Any, events: list[Any] = ()) -> None:  # type: ignore[assignment]
    """The run's state is one truth (issue 14): folding the ledger from disk, fresh or caught up
    from the state kept beside it, gives exactly the live state, and the TUI board, ``status
    --json`` and the handoff agree on the regressions, the episodes and the base.

    ``live`` is the run loop's state when the run ended; ``events`` the events it emitted (a
    board fed only those, folding them itself, must agree too).
    """
    from paella_tui.run_board import RunBoard
    from paella_tui.supervisor.run.handoff import handoff_inputs_from_view
    from paella_tui.supervisor.run.run_view import RunView
    from paella_tui.supervisor.run.state_store import StateStore

    store = StateStore(run.ledger.path)
    fresh = store.catch_up(store.empty()).state
    assert fresh == live, _state_diff(fresh, live)
    assert store.load().state == live  # through the kept state.json
    assert store.load().state == live  # and again, from it alone

    view = RunView.load(run)
    status = view.to_json()
    board = RunBoard(contract=contract, run_id=run.run_id)
    board.seed(view)
    fed = RunBoard(contract=contract, run_id=run.run_id)
    for event in events:
        fed.apply(event)
    inputs = handoff_inputs_from_view(view)

    regressed_status = {r["gate"] for r in status["regressions"]}
    regressed_board = {row.name for row in board.gate_rows() if row.regressed}
    regressed_fed = {row.name for row in fed.gate_rows() if row.regressed}
    assert regressed_status == regressed_board == set(inputs.regressed) == regressed_fed, (
        regressed_status,
        regressed_board,
        inputs.regressed,
        regressed_fed,
    )
    complete_status = [e["complete"] for e in status["episodes"]]
    complete_board = [row.state == "complete" for row in board.episode_rows()]
    complete_fed = [row.state == "complete" for row in fed.episode_rows()]
    complete_handoff = [e.complete for e in inputs.episodes]
    assert complete_status == complete_board == complete_handoff == complete_fed
    # The status bar's fast line (kept state and /proc only) says what the ordinary way says.
    from paella_tui.commands.tmux_line import fast_line, tmux_line

    assert fast_line(run.workspace.root) == tmux_line(status)
    base = inputs.base.n if inputs.base else None
    fed_base = fed.base.n if fed.base else None
    board_base = board.base.n if board.base else None
    assert status["last_green_checkpoint"] == board_base == base == fed_base
    if isinstance(events, Recorder):
        assert_handed_states_took_in(events)
    assert_verdict_last(run)


def assert_verdict_last(run: Any) -> None:
    """A run's verdict (``run-done`` or ``run-stopped``) is its last record: nothing is judged,
    kept or recorded after it (a late step once landed after it, in CI)."""
    kinds = [r["kind"] for r in run.ledger.read().records]
    ended = [i for i, kind in enumerate(kinds) if kind in ("run-done", "run-stopped")]
    if ended:
        # A resume records again after a verdict; its own verdict then closes the ledger.
        assert ended[-1] == len(kinds) - 1, kinds[ended[-1] :]


def _state_diff(a: Any, b: Any) -> str:
    """The fields where two run states differ, for an assertion message."""
    from dataclasses import fields

    return "\n".join(
        f"{f.name}: {getattr(a, f.name)!r} != {getattr(b, f.name)!r}"
        for f in fields(a)
        if f.compare and getattr(a, f.name) != getattr(b, f.name)
    )
