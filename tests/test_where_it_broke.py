"""Where it broke, end to end: a scripted agent makes 30 steps, breaks a gate at step 17 and keeps
working on unrelated files; the run keeps every settled change as a step, bisects the regression
in the background, and every place that says so agrees: the recovery facts, the handoff,
``paella status --json``, ``paella steps``, ``paella log``, and the recovery screen. Then the
"just before the break" rollback restores step 16 and is undone.

One run serves the module (30 real steps with real gates take a while on a busy machine); the
tests after it read what it left. The gate counts its own runs during a bisect (``$PAELLA_BISECT``
is set there) in a file outside the repository.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import GitRunner, capture_tree, make_repo, run_paella_in_process
from run_scenarios import PlannedRepo, Step, gate, section
from textual.app import App

from paella_tui.diff_screen import DiffScreen
from paella_tui.recovery_screen import RecoveryScreen
from paella_tui.run_board import RunBoard
from paella_tui.schemas import load_schema
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.judge.bisect import max_runs
from paella_tui.supervisor.run.decisions import Decision
from paella_tui.supervisor.run.events import BisectFinished, Event, RecoveryFacts
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.steps import StepTaken
from paella_tui.supervisor.store.workspace import Workspace

STEPS = 30
# One module-scoped history serves every test here: they run on one worker, so it is built once.
pytestmark = pytest.mark.xdist_group("where-it-broke")
BREAK = 17
RUN_TIMEOUT = 240.0
GUARD = (
    'if [ -n "$PAELLA_BISECT" ]; then echo "$PAELLA_STEP" >> "$COUNTER"; fi; '
    "grep -q dedupe core.txt"
)


def plan() -> list[Step]:
    """30 changes, one file each, each kept as a step before the next; core.txt breaks at 17.

    The agent starts once the start tree is a green checkpoint: the break is judged against the
    gates green at the base. Writing at once raced the first evaluation (a tree that moves while
    its gates run gets no verdict), and every later one, since each write follows a step noted
    as an evaluation starts: about one run in three then had no base at all.
    """
    steps: list[Step] = [["wait_ledger", "checkpoint", 1, 60]]
    for k in range(1, STEPS + 1):
        if k == BREAK:
            steps.append(["write_atomic", "core.txt", "def ingest(event):\n    store(event)\n"])
        else:
            steps.append(["write_atomic", f"notes/{k}.txt", f"note {k}\n"])
        steps.append(["print", f"made change {k}"])
        steps.append(["wait_ledger", "step", k + 1, 30])
    steps.append(["wait_ledger", "bisect", 1, 120])
    steps.append(["print", "giving up"])
    steps.append(["exit", 1])
    return steps


class Story:
    """The run, once: its events, the recovery facts, and its repository."""

    def __init__(self, root: Path) -> None:
        git = GitRunner()
        self.git = git
        self.repo = make_repo(root / "repo", git)
        (self.repo / "core.txt").write_text(
            "def ingest(event):\n    if seen(event):  # dedupe\n        return\n    store(event)\n"
        )
        (self.repo / "notes").mkdir()
        (self.repo / "notes" / "0.txt").write_text("notes\n")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "core")
        self.counter = root / "bisect-runs.txt"
        self.planned = PlannedRepo(
            self.repo,
            root,
            git,
            {1: plan()},
            gates=[gate("idempotency", ["sh", "-c", GUARD]), gate("lint", "true")],
            episodes=[{"name": "ingest", "goal": "dedupe", "gates": ["idempotency", "lint"]}],
            run={"stall_after": "5m"},
        )
        self.env = {**self.planned.env, "COUNTER": str(self.counter)}
        self.workspace = Workspace.find(self.repo)
        self.contract = load_contract(self.repo / "paella.toml")
        self.run: Run = RunStore(self.workspace).create(self.contract, manual=False)
        self.events: list[Event] = []
        self.facts: list[RecoveryFacts] = []

    async def decide(self, facts: RecoveryFacts) -> Decision:
        self.facts.append(facts)
        return Decision("stop")

    def play(self) -> int:
        loop = RunLoop(
            run=self.run,
            contract=self.contract,
            emit=lambda event, _state: self.events.append(event),
            decide=self.decide,
            stop_grace=2.0,
        )
        # 30 changes in a few seconds would be flapping (SPEC 8), which pauses watching: this
        # story is about steps, so the watcher tolerates the pace.
        loop.watcher.flaps.limit = 10_000

        async def main() -> int:
            return await asyncio.wait_for(loop.run(), RUN_TIMEOUT)

        return asyncio.run(main())

    def paella(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A command that reads or mends the run (status, steps, log, diff, bisect, rollback)
        through ``cli.main`` in this process: the same code on the same files, without the
        interpreter's start-up (0.2 s of CPU a command)."""
        return run_paella_in_process(self.repo, *args, env=self.env)

    def process(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real command in a subprocess (for what only a process shows: no traceback)."""
        return subprocess.run(
            [sys.executable, "-m", "paella_tui", *args],
            cwd=self.repo,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
            env={**os.environ, **self.env},
        )


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    made = Story(tmp_path_factory.mktemp("broke"))
    saved = {k: os.environ.get(k) for k in made.env}
    os.environ.update(made.env)
    try:
        made.exit_code = made.play()  # type: ignore[attr-defined]
        yield made
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_change_is_a_step_and_the_bisect_names_step_17(story: Story) -> None:
    steps = [e.record_ for e in story.events if isinstance(e, StepTaken)]
    assert [s.n for s in steps] == list(range(STEPS + 1)), story.planned.trace()
    assert steps[BREAK].files == (("core.txt", 0, 2),)
    assert steps[BREAK].tail[-1] == f"made change {BREAK}", "what the agent said as it made it"
    refs = story.git(
        story.repo, "for-each-ref", "--format=%(refname)", f"{story.run.ref_prefix}/steps/"
    )
    assert len(refs.split()) == STEPS + 1
    finished = [e for e in story.events if isinstance(e, BisectFinished)]
    assert finished, story.planned.trace()
    point = finished[0].point
    assert (point.verdict, point.step, point.last_green_step) == ("found", BREAK, BREAK - 1)
    runs = story.counter.read_text().split() if story.counter.exists() else []
    assert point.runs == len(runs) <= max_runs(STEPS)
    assert finished[0].before_break is not None
    assert finished[0].before_break.name == f"step:{BREAK - 1}"


def test_recovery_handoff_status_and_steps_agree(story: Story) -> None:
    assert story.exit_code == 1  # type: ignore[attr-defined]
    facts = story.facts[-1]
    assert facts.regressions == ("idempotency",)
    assert [(b.gate, b.step) for b in facts.breaks] == [("idempotency", BREAK)]
    assert facts.before_break is not None and facts.before_break.n == BREAK - 1
    headline = facts.breaks[0].headline()
    assert f"in step {BREAK}: core.txt, +0 −2" in headline

    handoff = (story.run.dir / "handoff.md").read_text()
    where = section(handoff, "Where it broke")
    assert f"in step {BREAK}: core.txt, +0 −2" in where
    assert "-    if seen(event):  # dedupe" in where, "the breaking step's diff"
    assert f"Of the {STEPS - BREAK} later step(s), {STEPS - BREAK} did not touch" in where
    assert f"paella rollback step:{BREAK - 1}" in where

    status = json.loads(story.paella("status", "--json").stdout)
    jsonschema.Draft202012Validator(load_schema("status")).validate(status)
    [regression] = status["regressions"]
    assert regression["gate"] == "idempotency"
    assert regression["bisect"] == "found"
    broke_at = regression["broke_at"]
    assert broke_at["step"] == BREAK
    assert broke_at["files"] == [{"path": "core.txt", "added": 0, "removed": 2}]
    assert broke_at["headline"] == headline
    assert status["steps"] == {"count": STEPS + 1, "last": STEPS, "pruned": False}

    listed = json.loads(story.paella("steps", "--json").stdout)
    jsonschema.Draft202012Validator(load_schema("steps")).validate(listed)
    assert [s["n"] for s in listed["steps"]] == list(range(STEPS + 1))
    assert listed["steps"][BREAK]["gates"].get("idempotency") == "fail"
    assert listed["steps"][BREAK - 1]["gates"].get("idempotency") == "pass"
    text = story.paella("steps").stdout
    assert "⚠ idempotency broke here" in text
    assert f"idempotency {headline}" in text

    log = story.paella("log").stdout
    assert f"⚠ idempotency {headline}" in log
    plain = story.paella("status").stdout
    assert f"⚠ idempotency {headline}: `paella diff step:{BREAK}`" in plain

    # The drift feed (the TUI's board, live and folded from the ledger) says it too.
    live = RunBoard(contract=story.contract, run_id=story.run.run_id)
    for event in story.events:
        live.apply(event)
    seeded = RunBoard(contract=story.contract, run_id=story.run.run_id)
    seeded.seed(RunView.load(story.run))
    for board in (live, seeded):
        [warning] = [d for d in board.drift if d.drift == "regression"]
        assert warning.message.endswith(f"— {headline}")


def test_diff_of_a_step_shows_its_own_change(story: Story) -> None:
    out = story.paella("diff", f"step:{BREAK}")
    assert out.returncode == 0, out.stderr
    assert "core.txt, +0 −2" in out.stdout
    assert "-    if seen(event):  # dedupe" in out.stdout
    assert "notes/" not in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("diff", "step:x"), "'step:x' names no step"),
        (("diff", "step:99"), "has no step 99"),
        (("rollback", "step:99", "--yes"), "has no step 99"),
        (("bisect", "nosuch"), "no gate 'nosuch'"),
    ],
)
def test_bad_step_names_are_one_clear_line(
    story: Story, args: tuple[str, ...], message: str
) -> None:
    out = story.process(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_bisect_on_demand_reuses_every_result_and_touches_nothing(story: Story) -> None:
    before = (
        capture_tree(story.repo),
        (story.workspace.git_dir / "index").read_bytes(),
        story.git.head(story.repo),
        story.git.branch(story.repo),
    )
    runs_before = len(story.counter.read_text().split())
    out = story.paella("bisect", "idempotency")
    assert out.returncode == 0, out.stderr
    assert "idempotency broke at" in out.stdout and f"in step {BREAK}" in out.stdout
    assert f"paella rollback step:{BREAK - 1}" in out.stdout
    # Everything was judged before: only the confirmation of the breaking step runs.
    assert len(story.counter.read_text().split()) == runs_before + 1
    verdict = json.loads(story.paella("bisect", "idempotency", "--json").stdout)
    jsonschema.Draft202012Validator(load_schema("bisect")).validate(verdict)
    assert (verdict["verdict"], verdict["step"], verdict["before_break"]) == (
        "found",
        BREAK,
        BREAK - 1,
    )
    after = (
        capture_tree(story.repo),
        (story.workspace.git_dir / "index").read_bytes(),
        story.git.head(story.repo),
        story.git.branch(story.repo),
    )
    assert after == before


class Host(App[None]):
    """Pushes the recovery screen and records what it dismisses with."""

    def __init__(self, screen: RecoveryScreen) -> None:
        super().__init__()
        self.recovery = screen
        self.results: list[Any] = []

    def on_mount(self) -> None:
        self.push_screen(self.recovery, self.results.append)


def _text(app: App[Any]) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_the_recovery_screen_says_where_it_broke_and_offers_before_the_break(
    story: Story,
) -> None:
    facts = story.facts[-1]
    app = Host(RecoveryScreen(facts, run=story.run))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        text = _text(app)
        assert f"idempotency {facts.breaks[0].headline()}" in text
        assert "x: its diff" in text
        assert f"Roll back to just before the break (step:{BREAK - 1}) and resume" in text
        await pilot.press("x")
        await pilot.pause(0.5)
        assert isinstance(app.screen, DiffScreen)
        await pilot.pause(0.5)
        shown = _text(app)
        assert f"to step {BREAK}" in shown and "core.txt" in shown and "notes/" not in shown
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("b")
        await pilot.pause()
    [decision] = app.results
    assert decision.choice == "rollback"
    assert decision.target == facts.before_break


async def test_a_bisect_that_finishes_after_the_screen_opened_is_shown(story: Story) -> None:
    facts = story.facts[-1]
    early = dataclasses.replace(facts, breaks=(), before_break=None)
    screen = RecoveryScreen(early, run=story.run)
    app = Host(screen)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert "broke at" not in _text(app)
        assert "just before the break" not in _text(app)
        await screen.bisected(facts.breaks[0], facts.before_break)
        await pilot.pause()
        text = _text(app)
        assert f"in step {BREAK}" in text
        assert f"just before the break (step:{BREAK - 1})" in text


def test_roll_back_to_just_before_the_break_then_undo(story: Story) -> None:
    now = capture_tree(story.repo)
    out = story.paella("rollback", "before-break", "--yes")
    assert out.returncode == 0, out.stderr
    assert f"rolled back to step:{BREAK - 1}" in out.stdout
    restored = capture_tree(story.repo)
    assert b"dedupe" in restored["core.txt"][1]  # type: ignore[operator]
    assert {p for p in restored if p.startswith("notes/")} == {
        f"notes/{k}.txt" for k in range(BREAK)
    }
    # The last green checkpoint stays the base: a step is no checkpoint.
    view = RunView.load(story.run)
    assert view.last_green_checkpoint is not None and view.last_green_checkpoint.n == 1
    salvage = view.salvage[-1]
    undo = story.paella("rollback", salvage.name, "--yes")
    assert undo.returncode == 0, undo.stderr
    assert capture_tree(story.repo) == now
