"""Snapshots of the recovery, picker, diff, handoff and help screens at 80×24 and 120×36.

They are deterministic: the recovery facts are synthetic; the screens that read a run read a
real one whose run id, ledger times, commit dates and state folder are fixed, and whose files
have fixed contents, so every tree and blob id is the same on every machine. Update them after
a deliberate UI change with ``pytest tests/test_tui_screens_snapshots.py --snapshot-update``,
and look at the SVGs before committing them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_tui_screens import Host, Scripted, make_facts, no_run, settle
from textual.pilot import Pilot
from textual.screen import Screen

from paella_tui.diff_screen import DiffScreen
from paella_tui.handoff_screen import HandoffScreen
from paella_tui.help_screen import HelpScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.recovery_screen import RecoveryScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 36), id="120x36")]

FIXED_RUN_ID = "20261129-021455-ab12"


# The handoff preview shows its size, and the handoff names files in the state folder: the
# folder's path must have the same length on every run (31 characters), but not be the same path,
# or two checkouts testing at once would share it. So: a fresh folder per test, made by mkdtemp
# (unique, private), with a fixed-length name (/tmp/paella-snap-XXXXXXXX/state).
STATE_DIR_PARENT = "/tmp"
STATE_DIR_PREFIX = "paella-snap-"
STATE_DIR_LENGTH = 31

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots in colour (the session sets NO_COLOR); restored after each test."""
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def fixed_run(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scripted]:
    """The scripted run of test_tui_screens with a fixed id, clock, commit dates and state folder."""
    state_dir = Path(tempfile.mkdtemp(prefix=STATE_DIR_PREFIX, dir=STATE_DIR_PARENT)) / "state"
    assert len(str(state_dir)) == STATE_DIR_LENGTH
    monkeypatch.setenv("PAELLA_STATE_DIR", str(state_dir))
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setattr("paella_tui.supervisor.run.runs.new_run_id", lambda now=None: FIXED_RUN_ID)
    start = datetime(2026, 11, 29, 2, 14, 55, tzinfo=UTC)
    ticks = iter(range(10_000))

    def clock() -> str:
        t = start + timedelta(minutes=7 * next(ticks))
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    monkeypatch.setattr("paella_tui.supervisor.run.ledger.utc_now", clock)
    monkeypatch.setattr("paella_tui.supervisor.store.checkpoints.utc_now", clock)
    yield Scripted(repo)
    shutil.rmtree(state_dir.parent, ignore_errors=True)


def host(make: Callable[[], Screen[Any]]) -> Host:
    return Host(make)


async def wait_for_workers(pilot: Pilot[Any]) -> None:
    await settle(pilot)


class TestRecoverySnapshots:
    @pytest.mark.parametrize("size", SIZES)
    def test_with_a_regression(self, snap_compare: SnapCompare, size: tuple[int, int]) -> None:
        facts = make_facts(regressed=True)
        app = host(lambda: RecoveryScreen(facts, run=no_run()))
        assert snap_compare(app, terminal_size=size)

    @pytest.mark.parametrize("size", SIZES)
    def test_without_a_regression(self, snap_compare: SnapCompare, size: tuple[int, int]) -> None:
        facts = make_facts(regressed=False)
        app = host(lambda: RecoveryScreen(facts, run=no_run()))
        assert snap_compare(app, terminal_size=size)

    @pytest.mark.parametrize("size", SIZES)
    def test_stopped_without_a_base_after_r_was_refused(
        self, snap_compare: SnapCompare, size: tuple[int, int]
    ) -> None:
        facts = make_facts(
            regressed=False, base=False, ending="stopped", how="stopped by you", attempt=1
        )
        app = host(lambda: RecoveryScreen(facts, run=no_run()))
        assert snap_compare(app, press=["r"], terminal_size=size)


class TestPickerSnapshot:
    @pytest.mark.parametrize("size", SIZES)
    def test_checkpoints_and_salvage_with_diff_stats(
        self, snap_compare: SnapCompare, fixed_run: Scripted, size: tuple[int, int]
    ) -> None:
        app = host(lambda: PickerScreen(fixed_run.run))
        assert snap_compare(app, terminal_size=size, run_before=wait_for_workers)


class TestDiffSnapshot:
    @pytest.mark.parametrize("size", SIZES)
    def test_from_checkpoint_1_to_now(
        self, snap_compare: SnapCompare, fixed_run: Scripted, size: tuple[int, int]
    ) -> None:
        record = fixed_run.checkpoint(1)
        app = host(lambda: DiffScreen(fixed_run.run, record))
        assert snap_compare(app, terminal_size=size, run_before=wait_for_workers)


class TestHandoffSnapshot:
    @pytest.mark.parametrize("size", SIZES)
    def test_the_preview(
        self, snap_compare: SnapCompare, fixed_run: Scripted, size: tuple[int, int]
    ) -> None:
        app = host(lambda: HandoffScreen(fixed_run.run))
        assert snap_compare(app, terminal_size=size, run_before=wait_for_workers)


class TestHelpSnapshot:
    @pytest.mark.parametrize("size", SIZES)
    def test_keys_and_symbols(self, snap_compare: SnapCompare, size: tuple[int, int]) -> None:
        assert snap_compare(host(HelpScreen), terminal_size=size)
