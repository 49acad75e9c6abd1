"""The recovery, picker, diff, handoff and help screens, driven with keys in a small host App.

Recovery facts are synthetic (they are the engine's input to the screen); the picker, diff and
handoff screens read a real run: a real repository in ``tmp_path``, real checkpoints, a real
rollback (so there is a salvage snapshot), and ledger records of gate results and an agent death.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import GitRunner, SavedFolder, make_repo
from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable, Markdown, OptionList, Static

from paella_tui.diff_screen import MAX_DIFF_LINES, DiffScreen
from paella_tui.handoff_screen import HandoffScreen
from paella_tui.help_screen import MAIN_KEYS, RECOVERY_KEYS, SYMBOLS, HelpScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.recovery_screen import RecoveryScreen
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.contract.model import CONTRACT_FILE
from paella_tui.supervisor.run.decisions import Decision
from paella_tui.supervisor.run.events import Ending, EvaluationFinished, GateResult, RecoveryFacts
from paella_tui.supervisor.run.runs import Run, RunStore, wait_for_mirror
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, take_checkpoint
from paella_tui.supervisor.store.rollback import rollback
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.widgets.recovery_panel import RecoveryPanel

RUN_ID = "20261129-021455-ab12"


@pytest.fixture(autouse=True)
def restore_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual's App pops NO_COLOR from the environment; put it back after each test, so later
    tests (and the subprocesses they start) still see it."""
    monkeypatch.setenv("NO_COLOR", "1")


class Host(App[None]):
    """Pushes one screen and records what it dismisses with."""

    def __init__(self, make_screen: Callable[[], Screen[Any]]) -> None:
        super().__init__()
        self.make_screen = make_screen
        self.results: list[Any] = []

    def on_mount(self) -> None:
        self.push_screen(self.make_screen(), self.results.append)


def screen_text(app: App[Any]) -> str:
    """What the terminal shows now, as plain text lines."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def settle(pilot: Pilot[Any]) -> None:
    """Wait until the screen's thread workers, and the messages they posted, are done."""
    for _ in range(4):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


# --- synthetic recovery facts --------------------------------------------------------------


def base_record(n: int = 2) -> SnapshotRecord:
    return SnapshotRecord(
        kind="checkpoints",
        n=n,
        ref=f"refs/paella/{RUN_ID}/checkpoints/{n}",
        commit="c" * 40,
        tree="d" * 40,
        head="e" * 40,
        branch="main",
        t="2026-11-29T03:12:44.120Z",
        episode=n,
        gates_green=("idempotency", "privacy"),
        label=f"episode {n}: privacy",
    )


def gates(*, regressed: bool) -> tuple[GateResult, ...]:
    return (
        GateResult(gate="idempotency", status="fail" if regressed else "pass", tree="a" * 40),
        GateResult(gate="privacy", status="pass", tree="a" * 40),
        GateResult(gate="export", status="fail", tree="a" * 40),
        GateResult(gate="audit", status="pending", tree=""),
    )


def make_facts(
    *,
    regressed: bool = True,
    base: bool = True,
    ending: Ending = "crash",
    how: str = "exit 1",
    attempt: int | None = 2,
) -> RecoveryFacts:
    record = base_record() if base else None
    return RecoveryFacts(
        ending=ending,
        how=how,
        attempt=attempt,
        tail=(
            *(f"● Editing src/ledger/ingest.py step {i}" for i in range(30)),
            "Error: unexpected end of stream",
        ),
        base=record,
        gates_now=gates(regressed=regressed),
        regressions=("idempotency",) if regressed else (),
        changed_files=("src/ledger/ingest.py", "src/ledger/export.py", "tests/test_export.py"),
        lines_added=120,
        lines_removed=14,
        default="rollback" if regressed and record is not None else "continue",
    )


def no_run() -> Run:
    """A run for screens that never read it (keys that only dismiss)."""
    nowhere = Path("/nonexistent")
    return Run(
        Workspace(root=nowhere, git_dir=nowhere / ".git", common_dir=nowhere / ".git"), RUN_ID
    )


def recovery_host(facts: RecoveryFacts, run: Run | None = None) -> Host:
    return Host(lambda: RecoveryScreen(facts, run=run or no_run()))


class TestRecoveryFacts:
    async def test_the_facts_read_at_80x24_with_every_choice_visible(self) -> None:
        app = recovery_host(make_facts())
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            text = screen_text(app)
        lines = text.splitlines()
        assert lines[0].strip() == "✗ The agent died: exit 1 (attempt 2)"
        assert "● checkpoint 2 · episode 2: privacy · Nov 29 03:12 UTC" in text
        assert "green there: idempotency, privacy" in " ".join(text.split())
        # The regression is marked with a symbol and a word, not colour alone.
        assert "⚠ idempotency fails: REGRESSED (green at checkpoint 2)" in text
        assert "✗ export fails" in text and "✓ privacy" in text and "◌ audit pending" in text
        assert "3 files, +120 −14 lines since checkpoint 2" in text
        # The newest output line is there; the oldest ones gave way to the facts.
        assert "│ Error: unexpected end of stream" in text
        assert "step 0\n" not in text
        assert "Default: roll back — gate idempotency regressed after checkpoint 2" in text
        for line in (
            "r  Roll back to checkpoint 2 and resume",
            "c  Resume from the current state",
            "p  Pick a checkpoint",
            "d  View the diff since checkpoint 2",
            "h  Write the handoff and stop",
        ):
            assert line in text
        assert "◀ default" in next(line for line in lines if "Roll back to checkpoint" in line)

    async def test_titles_say_plainly_how_it_ended(self) -> None:
        cases = [
            (
                make_facts(ending="stopped", how="stopped by you", attempt=3),
                "■ You stopped the agent",
            ),
            (
                make_facts(ending="claimed-done", how="exit 0", attempt=1, regressed=False),
                "⚠ The agent said it was done, but gates are red",
            ),
            (
                make_facts(ending="signal", how="killed by SIGKILL", attempt=4),
                "✗ The agent died: killed by SIGKILL (attempt 4)",
            ),
        ]
        for facts, title in cases:
            app = recovery_host(facts)
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.pause()
                assert screen_text(app).splitlines()[0].strip() == title

    async def test_without_a_base_the_facts_say_none_yet(self) -> None:
        app = recovery_host(make_facts(base=False, regressed=False))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            text = screen_text(app)
        assert "Last good   none yet" in text
        assert "since the run started" in text
        assert "Roll back: not possible, there is no green checkpoint yet" in text
        assert "Default: resume from here — there is no green checkpoint" in text

    async def test_the_tail_grows_with_the_terminal(self) -> None:
        app = recovery_host(make_facts())
        async with app.run_test(size=(120, 50)) as pilot:
            await pilot.pause()
            tall = screen_text(app).count("│ ● Editing")
        app = recovery_host(make_facts())
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            short = screen_text(app).count("│ ● Editing")
        assert tall > short >= 3

    async def test_the_panel_follows_its_facts_reactive(self) -> None:
        app = recovery_host(make_facts())
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.screen.query_one(RecoveryPanel).facts = make_facts(regressed=False)
            await pilot.pause()
            text = screen_text(app)
        assert "REGRESSED" not in text
        assert "✓ idempotency" in text


class TestRecoveryKeys:
    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            ("r", Decision("rollback", base_record())),
            ("c", Decision("continue")),
            ("h", Decision("stop")),
        ],
    )
    async def test_a_key_dismisses_with_its_decision(self, key: str, expected: Decision) -> None:
        app = recovery_host(make_facts())
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press(key)
            await pilot.pause()
            assert app.results == [expected]
            assert not isinstance(app.screen, RecoveryScreen)

    @pytest.mark.parametrize("final", [True, False])
    async def test_accept_is_offered_only_when_every_gate_is_green_on_the_final_tree(
        self, final: bool
    ) -> None:
        green = tuple(
            GateResult(gate=name, status="pass", tree="a" * 40) for name in ("lint", "tests")
        )
        facts = dataclasses.replace(
            make_facts(regressed=False), gates_now=green, gates_final=final, tree="a" * 40
        )
        app = recovery_host(facts)
        async with app.run_test(size=(80, 24)) as pilot:
            text = screen_text(app)
            assert ("a  Accept: every gate is green" in text) is final, text
            await pilot.press("a")
            await pilot.pause()
            if not final:
                assert app.results == [] and isinstance(app.screen, RecoveryScreen)
                # A verdict on another tree (a pass that snapshotted before the death) is not
                # the final one: nothing changes.
                other = tuple(dataclasses.replace(r, tree="b" * 40) for r in green)
                earlier = EvaluationFinished(tree="b" * 40, results=other, complete_episodes=0)
                await app.screen.final_gates(earlier, regressed=set())  # type: ignore[attr-defined]
                await pilot.pause()
                assert "Accept: every gate is green" not in screen_text(app)
                assert "still running on the final tree" in screen_text(app)
                # The final tree's verdict comes: the choice appears.
                verdict = EvaluationFinished(tree="a" * 40, results=green, complete_episodes=0)
                await app.screen.final_gates(verdict, regressed=set())  # type: ignore[attr-defined]
                await pilot.pause()
                assert "Accept: every gate is green" in screen_text(app)
                await pilot.press("a")
                await pilot.pause()
        assert app.results == [Decision("accept")]

    async def test_accept_is_not_offered_with_a_red_gate(self) -> None:
        app = recovery_host(make_facts(regressed=False))
        async with app.run_test(size=(80, 24)) as pilot:
            assert "Accept" not in screen_text(app)
            await pilot.press("a")
            await pilot.pause()
            assert app.results == []

    async def test_enter_takes_the_default_rollback_when_a_gate_regressed(self) -> None:
        app = recovery_host(make_facts(regressed=True))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("enter")
            await pilot.pause()
        assert app.results == [Decision("rollback", base_record())]

    async def test_enter_takes_the_default_continue_without_a_regression(self) -> None:
        app = recovery_host(make_facts(regressed=False))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert "Default: resume from here" in screen_text(app)
            await pilot.press("enter")
            await pilot.pause()
        assert app.results == [Decision("continue")]

    async def test_enter_takes_the_default_even_when_the_list_is_not_focused(self) -> None:
        app = recovery_host(make_facts(regressed=True))
        async with app.run_test(size=(80, 24)) as pilot:
            app.set_focus(None)
            await pilot.press("enter")
            await pilot.pause()
        assert app.results == [Decision("rollback", base_record())]

    async def test_arrows_then_enter_take_the_highlighted_choice(self) -> None:
        app = recovery_host(make_facts(regressed=True))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("down", "enter")
            await pilot.pause()
        assert app.results == [Decision("continue")]

    async def test_r_without_a_base_is_refused_with_a_visible_reason(self) -> None:
        app = recovery_host(make_facts(base=False, regressed=False))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("r")
            await pilot.pause()
            text = screen_text(app)
            assert app.results == []
            assert isinstance(app.screen, RecoveryScreen)
            assert "✗ Cannot roll back: there is no green checkpoint yet" in text
            # The disabled choice cannot be reached with the arrows either.
            choices = app.screen.query_one("#recovery-choices", OptionList)
            assert choices.get_option("rollback").disabled
            await pilot.press("c")
            await pilot.pause()
        assert app.results == [Decision("continue")]

    async def test_p_opens_the_picker_and_escape_comes_back(self, scripted_run: Scripted) -> None:
        app = recovery_host(make_facts(), scripted_run.run)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("p")
            await settle(pilot)
            assert isinstance(app.screen, PickerScreen)
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, RecoveryScreen)
            assert app.results == []

    async def test_p_then_a_pick_rolls_back_to_the_picked_record(
        self, scripted_run: Scripted
    ) -> None:
        facts = make_facts()
        app = recovery_host(facts, scripted_run.run)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("p")
            await settle(pilot)
            await pilot.press("down", "enter")  # from the base (checkpoint 2) to checkpoint 1
            await pilot.pause()
        assert app.results == [Decision("rollback", scripted_run.checkpoint(1))]

    async def test_d_shows_the_diff_and_comes_back(self, scripted_run: Scripted) -> None:
        facts = make_facts()
        facts = RecoveryFacts(**{**facts.__dict__, "base": scripted_run.checkpoint(2)})
        app = recovery_host(facts, scripted_run.run)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("d")
            await settle(pilot)
            assert isinstance(app.screen, DiffScreen)
            assert "from checkpoint 2" in screen_text(app)
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, RecoveryScreen)
            assert app.results == []


# --- a real run --------------------------------------------------------------------------------

CONTRACT = """\
[run]
name = "ledger-service"
prompt = "Build the event ledger, episode by episode."
agent = "true"

[[gate]]
name = "ingest"
cmd = "true"

[[gate]]
name = "export"
cmd = "true"

[[episode]]
name = "ingest"
goal = "Events go in."
gates = ["ingest"]

[[episode]]
name = "export"
goal = "Rows come out."
gates = ["export"]

[[constraint]]
text = "ingest(event) keeps its signature."
"""

LEDGER_V1 = "def ingest(event):\n    return [event]\n"
EXPORT = "def export(rows):\n    return ','.join(rows)\n"
LEDGER_BROKEN = "def ingest(event):\n    return [event, event]\n"
LEDGER_NOW = "def ingest(event):\n    seen = set()\n    return [event]\n"


class Scripted:
    """A run with checkpoints 1 and 2, a rollback to 2 (salvage:1), then one more change."""

    def __init__(self, repo: Path) -> None:
        (repo / CONTRACT_FILE).write_text(CONTRACT)
        workspace = Workspace.find(repo)
        contract = load_contract(repo / CONTRACT_FILE)
        self.repo = repo
        self.run = RunStore(workspace).create(contract, manual=True)
        snapshotter = Snapshotter(workspace)
        (repo / "src").mkdir()
        (repo / "src" / "ledger.py").write_text(LEDGER_V1)
        take_checkpoint(
            self.run, snapshotter, episode=1, gates_green=("ingest",), label="episode 1: ingest"
        )
        (repo / "src" / "export.py").write_text(EXPORT)
        cp2 = take_checkpoint(
            self.run,
            snapshotter,
            episode=2,
            gates_green=("ingest", "export"),
            label="episode 2: export",
        )
        (repo / "src" / "ledger.py").write_text(LEDGER_BROKEN)
        result = rollback(self.run, cp2, snapshotter=snapshotter)
        self.salvage = result.salvage
        (repo / "src" / "ledger.py").write_text(LEDGER_NOW)
        ledger = self.run.ledger
        ledger.append("agent-started", attempt=1, pid=1, create_time=0.0, argv=["true"])
        ledger.append(
            "agent-exited",
            attempt=1,
            exit_code=1,
            signal=None,
            tail=["Editing src/ledger.py", "Error: unexpected end of stream"],
        )
        for gate, status in (("ingest", "fail"), ("export", "pass")):
            ledger.append(
                "gate-finished",
                gate=gate,
                status=status,
                tree="f" * 40,
                duration_s=0.1,
                exit_code=0 if status == "pass" else 1,
                attempts=1,
                log=None,
                cached=False,
                stale=False,
                message="",
            )

    def checkpoint(self, n: int) -> SnapshotRecord:
        from paella_tui.supervisor.store.checkpoints import find

        return find(self.run, str(n))

    def reopened(self) -> Scripted:
        """The same run read afresh from disk (after its folder was put back): a new ``Run``
        and no cached reads of the last test's state."""
        copy = object.__new__(Scripted)
        copy.repo = self.repo
        copy.run = RunStore(Workspace.find(self.repo)).get(self.run.run_id)
        copy.salvage = self.salvage
        return copy


# This process's scripted run, once built: (the run, its saved folder, its XDG state folder).
_SCRIPTED: list[tuple[Scripted, SavedFolder, Path]] = []


@pytest.fixture
def scripted_run(
    tmp_path_factory: pytest.TempPathFactory, git: GitRunner, monkeypatch: pytest.MonkeyPatch
) -> Scripted:
    """A real run in a real repository (see Scripted), built once per test process and put back
    byte for byte, at the same path, before each test (``SavedFolder``): every test starts from
    the run it would have built itself (two checkpoints, a rollback, git's objects and refs, the
    ledger, the mirror) and may change it freely. The mirror lives in the saved folder too (a
    private ``XDG_STATE_HOME``), so it is put back with the repository it mirrors."""
    if not _SCRIPTED:
        world = tmp_path_factory.mktemp("scripted-run")
        xdg_state = world / "xdg-state"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XDG_STATE_HOME", str(xdg_state))
            built = Scripted(make_repo(world / "repo", git))
            wait_for_mirror()  # the checkpoints' ledger copies land before the folder is saved
        saved = SavedFolder(world)
        saved.save()
        _SCRIPTED.append((built, saved, xdg_state))
    built, saved, xdg_state = _SCRIPTED[0]
    saved.restore()
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg_state))
    return built.reopened()


class TestPicker:
    async def test_lists_every_snapshot_newest_first_with_real_diff_stats(
        self, scripted_run: Scripted
    ) -> None:
        app = Host(lambda: PickerScreen(scripted_run.run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            table = app.screen.query_one("#picker-table", DataTable)
            rows = [
                " | ".join(str(getattr(cell, "plain", cell)) for cell in table.get_row_at(i))
                for i in range(table.row_count)
            ]
            text = screen_text(app)
        assert len(rows) == 3
        salvage, cp2, cp1 = rows
        assert salvage.startswith("  salvage:1 |")
        assert "undoes the rollback to 2" in salvage
        # salvage:1 held "return [event, event]"; now has a "seen" line and "return [event]".
        assert salvage.endswith("1 file +2 −1")
        assert cp2.startswith("● checkpoint 2 |") and "episode 2: export" in cp2
        assert cp2.endswith("1 file +1 −0")
        assert cp1.startswith("  checkpoint 1 |") and cp1.endswith("2 files +3 −0")
        assert "✓ 2" in cp2 and "✓ 1" in cp1
        # What the user sees: the rows, and the base in full under the table.
        assert "● checkpoint 2" in text and "salvage:1" in text
        assert "● the last green checkpoint" in text
        assert "green there: ingest, export" in text

    async def test_enter_picks_the_highlighted_record_starting_at_the_base(
        self, scripted_run: Scripted
    ) -> None:
        app = Host(lambda: PickerScreen(scripted_run.run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("enter")
            await pilot.pause()
        assert app.results == [scripted_run.checkpoint(2)]

    async def test_picking_the_salvage_snapshot_returns_it(self, scripted_run: Scripted) -> None:
        app = Host(lambda: PickerScreen(scripted_run.run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("up")
            await pilot.pause()
            assert "picking it puts back the work tree as it was before that rollback" in (
                screen_text(app)
            )
            await pilot.press("enter")
            await pilot.pause()
        assert app.results == [scripted_run.salvage]

    async def test_escape_cancels(self, scripted_run: Scripted) -> None:
        app = Host(lambda: PickerScreen(scripted_run.run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("escape")
            await pilot.pause()
        assert app.results == [None]

    async def test_a_run_without_snapshots_says_so(self, repo: Path) -> None:
        run = RunStore(Workspace.find(repo)).create(None, manual=True)
        app = Host(lambda: PickerScreen(run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert "No checkpoints yet" in screen_text(app)
            await pilot.press("enter")
            await pilot.pause()
            assert app.results == []


def diff_text(app: App[Any]) -> str:
    return str(app.screen.query_one("#diff-text", Static).content)


class TestDiff:
    async def test_shows_the_base_to_now_diff_of_a_real_file(self, scripted_run: Scripted) -> None:
        app = Host(lambda: DiffScreen(scripted_run.run, None))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            text = screen_text(app)
            diff = diff_text(app)
        assert "Diff from checkpoint 2 (episode 2: export) to now: 1 file +1 −0" in text
        assert "src/ledger.py +1 −0" in text
        assert "+    seen = set()" in diff
        assert "     return [event]" in diff
        assert "+    seen = set()" in text  # on screen, prefixed: colour is not the only sign

    async def test_moving_through_the_files_shows_each_diff(self, scripted_run: Scripted) -> None:
        app = Host(lambda: DiffScreen(scripted_run.run, scripted_run.checkpoint(1)))
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            assert "2 files +3 −0" in screen_text(app)
            first = diff_text(app)
            await pilot.press("down")
            await settle(pilot)
            second = diff_text(app)
        export, ledger = (first, second) if "export.py" in first else (second, first)
        assert "+def export(rows):" in export and "seen" not in export
        assert "+    seen = set()" in ledger and "export" not in ledger

    async def test_a_removed_line_shows_with_its_minus(self, scripted_run: Scripted) -> None:
        app = Host(lambda: DiffScreen(scripted_run.run, scripted_run.salvage))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            diff = diff_text(app)
        assert "-    return [event, event]" in diff
        assert "+    return [event]" in diff

    async def test_a_big_diff_is_cut_with_a_note(self, scripted_run: Scripted) -> None:
        big = "".join(f"line {i}\n" for i in range(MAX_DIFF_LINES + 500))
        (scripted_run.repo / "src" / "big.txt").write_text(big)
        app = Host(lambda: DiffScreen(scripted_run.run, scripted_run.checkpoint(2)))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            # src/big.txt sorts before src/ledger.py: it is the first file.
            diff = diff_text(app)
        assert "more lines cut; the whole diff: paella diff 2" in diff
        assert len(diff.splitlines()) == MAX_DIFF_LINES + 1

    async def test_without_any_checkpoint_it_says_so(self, repo: Path) -> None:
        run = RunStore(Workspace.find(repo)).create(None, manual=True)
        app = Host(lambda: DiffScreen(run, None))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert "No checkpoint to diff against yet" in screen_text(app)
            await pilot.press("escape")
            await pilot.pause()
        assert app.results == [None]


class TestHandoff:
    async def test_renders_the_real_runs_handoff(self, scripted_run: Scripted) -> None:
        app = Host(lambda: HandoffScreen(scripted_run.run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, HandoffScreen)
            document = screen.text
            source = screen.query_one("#handoff-doc", Markdown).source
            text = screen_text(app)
        assert document is not None and source == document
        assert document.startswith(f"# Handoff: ledger-service, run {scripted_run.run.run_id}")
        assert "REGRESSED" in document  # ingest was green at checkpoint 2 and fails now
        assert "`src/ledger.py` +1 −0" in document  # the change since checkpoint 2
        assert "Handoff preview" in text and "Handoff: ledger-service" in text

    async def test_w_writes_handoff_md(self, scripted_run: Scripted) -> None:
        app = Host(lambda: HandoffScreen(scripted_run.run))
        path = scripted_run.run.dir / "handoff.md"
        assert not path.exists()
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await pilot.press("w")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, HandoffScreen)
            notified = [n.message for n in app._notifications]
        assert path.read_text() == screen.text
        assert f"Handoff written to {path}" in notified

    async def test_a_run_without_a_contract_shows_why(self, repo: Path) -> None:
        run = RunStore(Workspace.find(repo)).create(None, manual=True)
        app = Host(lambda: HandoffScreen(run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert "has no contract" in screen_text(app)
            await pilot.press("escape")
            await pilot.pause()
        assert app.results == [None]


class TestHelp:
    async def test_lists_every_key_and_symbol(self) -> None:
        app = Host(HelpScreen)
        async with app.run_test(size=(120, 90)) as pilot:
            await pilot.pause()
            text = screen_text(app)
        for key, _ in (*MAIN_KEYS, *RECOVERY_KEYS):
            assert f" {key} " in text, key
        for symbol, _ in SYMBOLS:
            assert symbol in text
        assert {k for k, _ in MAIN_KEYS} == {*"gcrsRdhl/fq?", "Enter"}
        assert {k for k, _ in RECOVERY_KEYS} >= set("rcpdh")
        assert "paella status --watch" in text and "paella log -f" in text
        assert ".git/paella" in text or "<git dir>/paella" in text

    async def test_escape_closes(self) -> None:
        app = Host(HelpScreen)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("escape")
            await pilot.pause()
        assert app.results == [None]


@pytest.mark.parametrize("final", [True, False])
async def test_no_result_yet_says_whether_the_final_tree_is_being_judged(final: bool) -> None:
    """An agent that dies before any gate has finished: "none judged yet", and, while the
    final tree's gates run, that they do (a trial on a real project showed only "none")."""
    facts = dataclasses.replace(make_facts(regressed=False), gates_now=(), gates_final=final)
    app = recovery_host(facts)
    async with app.run_test(size=(100, 30)):
        text = " ".join(screen_text(app).split())
        assert "none judged yet" in text
        assert ("the gates are still running on the final tree" in text) is not final, text
