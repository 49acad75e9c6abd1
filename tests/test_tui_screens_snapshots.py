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
from conftest import GitRunner, SavedFolder, make_repo
from test_tui_screens import Host, Scripted, make_facts, no_run, settle
from textual.pilot import Pilot
from textual.screen import Screen

from paella_tui.diff_screen import DiffScreen
from paella_tui.handoff_screen import HandoffScreen
from paella_tui.help_screen import HelpScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.recovery_screen import RecoveryScreen
from paella_tui.supervisor.run.runs import wait_for_mirror

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 36), id="120x36")]

FIXED_RUN_ID = "20261129-021455-ab12"


# The handoff preview shows its size, and the handoff names files in the state folder: the
# folder's path must have the same length on every run (31 characters), but not be the same path,
# or two checkouts testing at once would share it. So: a fresh folder per test process, made by
# mkdtemp (unique, private), with a fixed-length name (/tmp/paella-snap-XXXXXXXX/state).
STATE_DIR_PARENT = "/tmp"
STATE_DIR_PREFIX = "paella-snap-"
STATE_DIR_LENGTH = 31

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots in colour (the session sets NO_COLOR); restored after each test."""
    monkeypatch.delenv("NO_COLOR", raising=False)


class FixedClock:
    """The ledger's and the checkpoints' clock: 7 minutes a reading from 2026-11-29 02:14:55Z."""

    START = datetime(2026, 11, 29, 2, 14, 55, tzinfo=UTC)

    def __init__(self, readings: int = 0) -> None:
        self.readings = readings
        """How many readings were taken (the next one is that many 7 minutes on)."""

    def __call__(self) -> str:
        t = self.START + timedelta(minutes=7 * self.readings)
        self.readings += 1
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def use(self, monkeypatch: pytest.MonkeyPatch) -> FixedClock:
        """Make this the clock of the ledger and the checkpoints."""
        monkeypatch.setattr("paella_tui.supervisor.run.ledger.utc_now", self)
        monkeypatch.setattr("paella_tui.supervisor.store.checkpoints.utc_now", self)
        return self


def fixed_environment(monkeypatch: pytest.MonkeyPatch, world: Path) -> None:
    """The run's fixed id, commit dates and state folder, and a private mirror in ``world``."""
    monkeypatch.setenv("PAELLA_STATE_DIR", str(world / "state"))
    monkeypatch.setenv("XDG_STATE_HOME", str(world / "xdg-state"))
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-11-29T02:14:55Z")
    monkeypatch.setattr("paella_tui.supervisor.run.runs.new_run_id", lambda now=None: FIXED_RUN_ID)


# This process's fixed run, once built: (the run, its saved folder, the clock readings it took).
_FIXED: list[tuple[Scripted, SavedFolder, int]] = []


@pytest.fixture(scope="module")
def fixed_world() -> Iterator[Path]:
    """The folder of this process's fixed run: the state folder, the repository and the mirror
    (removed, with its saved copy, when the module is done)."""
    world = Path(tempfile.mkdtemp(prefix=STATE_DIR_PREFIX, dir=STATE_DIR_PARENT))
    assert len(str(world / "state")) == STATE_DIR_LENGTH
    yield world
    _FIXED.clear()
    shutil.rmtree(world, ignore_errors=True)
    shutil.rmtree(world.with_name(f"{world.name}.saved"), ignore_errors=True)


@pytest.fixture
def fixed_run(fixed_world: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch) -> Scripted:
    """The scripted run of test_tui_screens with a fixed id, clock, commit dates and state
    folder, built once per test process and put back byte for byte, at the same path, before
    each test (``SavedFolder``): the repository, the state folder and the mirror are all in
    ``fixed_world``, and the clock goes on from where the build left it, so every test starts
    from the run, and the clock, it would have built itself."""
    fixed_environment(monkeypatch, fixed_world)
    if not _FIXED:
        with pytest.MonkeyPatch.context() as mp:
            clock = FixedClock().use(mp)
            built = Scripted(make_repo(fixed_world / "repo", git))
            wait_for_mirror()  # the checkpoints' ledger copies land before the folder is saved
            taken = clock.readings
        saved = SavedFolder(fixed_world)
        saved.save()
        _FIXED.append((built, saved, taken))
    built, saved, taken = _FIXED[0]
    saved.restore()
    FixedClock(taken).use(monkeypatch)
    return built.reopened()


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
