"""Snapshots of the main screen at 80×24 and 120×36, built from a fixed, synthetic run.

No agent and no engine: the App is fed a fixed sequence of engine events (fixed times, pids and
hashes) and a fixed output tail, its clock is frozen, and local time is UTC, so every cell is the
same on every machine. Update after an intended UI change with ``pytest --snapshot-update``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest
from textual.pilot import Pilot

from paella_tui.app import PaellaApp
from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.contract.loader import parse_contract
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentStarted,
    AgentStats,
    CheckpointTaken,
    DriftDetected,
    Event,
    GateFinished,
    GateResult,
    GateStarted,
    RunDone,
    Usage,
)
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
RUN_ID = "20270115-061455-ab12"
TREE = "5903030f89236f0237a4b9d0141ed6606fd462f0"

CONTRACT = """
[run]
name = "ledger-service"
prompt = "Build the event ledger, episode by episode."
agent = ["claude", "-p", "{prompt}"]

[[gate]]
name = "idempotency"
cmd = "pytest -q tests/test_idempotency.py"

[[gate]]
name = "privacy"
cmd = "pytest -q tests/test_privacy.py"

[[gate]]
name = "export-format"
cmd = "pytest -q tests/test_export.py"

[[gate]]
name = "lint"
cmd = "ruff check ."

[[episode]]
name = "idempotent ingest"
goal = "Replaying an event twice changes nothing."
gates = ["idempotency", "lint"]

[[episode]]
name = "privacy"
goal = "No raw e-mail address reaches a log or an export."
gates = ["privacy"]

[[episode]]
name = "stable exports"
goal = "Exports are byte-stable across runs."
gates = ["export-format"]
"""


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC while a snapshot is taken, and colour is on unless a test says not."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def contract() -> Contract:
    """The snapshot run's contract."""
    return parse_contract(CONTRACT, Path("/work/ledger/paella.toml"), default_name="ledger")


def checkpoint(n: int, episode: int, green: tuple[str, ...], minutes_ago: int) -> SnapshotRecord:
    """A checkpoint record taken ``minutes_ago`` before T0."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(T0 - 60 * minutes_ago))
    return SnapshotRecord(
        kind="checkpoints",
        n=n,
        ref=f"refs/paella/{RUN_ID}/checkpoints/{n}",
        commit=f"{n:040x}",
        tree=f"{n + 100:040x}",
        head="a" * 40,
        branch="main",
        t=stamp,
        episode=episode,
        gates_green=green,
        label=f"episode {episode}",
    )


def gate(name: str, status: str, duration: float, at: float) -> GateFinished:
    """A gate verdict at ``at``, on the tree of that moment (a red on the very tree a gate passed
    on is flakiness, not a regression: the trees differ as the work moves on)."""
    tree = f"{int(at) % (1 << 32):040x}"
    result = GateResult(gate=name, status=status, tree=tree, duration_s=duration)  # type: ignore[arg-type]
    return GateFinished(result=result, at=at)


FIRST_ATTEMPT_USAGE = Usage(turns=8, input_tokens=30_000, output_tokens=5_000, cost_usd=0.52)
LIVE_USAGE = Usage(turns=4, input_tokens=12_000, output_tokens=1_300, cost_usd=0.32)
"""What attempt 1 (seeded from the ledger) and the live attempt 2 reported: together, the
header's ``12 turns · 48.3k tok · $0.84``."""


def running_run() -> list[Event]:
    """Attempt 2, an hour in: two episodes done, then a regression of the first one."""
    events: list[Event] = [
        AgentStarted(attempt=2, pid=48213, create_time=T0 - 3725, argv=("claude",), at=T0 - 3725),
        gate("idempotency", "pass", 1.2, T0 - 3000),
        gate("lint", "pass", 0.4, T0 - 3000),
        CheckpointTaken(record_=checkpoint(1, 1, ("idempotency", "lint"), 50)),
        gate("privacy", "pass", 2.6, T0 - 1200),
        CheckpointTaken(record_=checkpoint(2, 2, ("idempotency", "lint", "privacy"), 20)),
        gate("idempotency", "fail", 1.1, T0 - 90),
        DriftDetected(
            drift="regression",
            gate="idempotency",
            message='gate "idempotency" was green at checkpoint 2 (episode 2) and now fails',
            at=T0 - 90,
        ),
        DriftDetected(
            drift="scope",
            path="docs/notes.md",
            message="docs/notes.md changed outside the scope",
            at=T0 - 40,
        ),
        GateStarted(gate="export-format", tree=TREE, at=T0 - 5),
    ]
    for i, cpu in enumerate([3, 5, 40, 80, 22, 12, 5, 60, 91, 34, 8, 15]):
        events.append(
            AgentStats(
                attempt=2,
                cpu_percent=cpu,
                rss_bytes=118 << 20,
                descendants=3,
                uptime_s=3700,
                usage=LIVE_USAGE,
                at=T0 - 12 + i,
            )
        )
    return events


def done_run() -> list[Event]:
    """The same run, finished: every gate green on the final tree."""
    events = running_run()[:6]
    events += [
        gate("idempotency", "pass", 1.1, T0 - 300),
        gate("export-format", "pass", 3.4, T0 - 300),
        CheckpointTaken(
            record_=checkpoint(3, 3, ("idempotency", "lint", "privacy", "export-format"), 5)
        ),
        AgentExited(attempt=2, exit_code=0, signal=None, usage=LIVE_USAGE, at=T0 - 200),
        RunDone(tree=TREE, gates=("idempotency", "privacy", "export-format", "lint"), at=T0 - 199),
    ]
    return events


def output() -> OutputTail:
    """A fixed agent output, with colours and an unfinished last line."""
    tail = OutputTail()
    tail.feed("\n── paella: attempt 2 ──\n".encode())
    for i in range(24):
        tail.feed(f"\x1b[32m✓\x1b[0m step {i}: editing src/ledger/ingest.py\n".encode())
    tail.feed(b"\x1b[1;31mFAILED\x1b[0m tests/test_idempotency.py::test_replay_twice\n")
    tail.feed(b"thinking")
    return tail


async def settled(pilot: Pilot[int], app: PaellaApp, timeout: float = 10.0) -> None:
    """Until the agent's output is on screen and three renders 0.1 s apart read the same (a fixed
    pause raced a loaded machine: the board or the output had not been drawn yet)."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
        seen = [*seen[-2:], text]
        if "thinking" in text and len(seen) == 3 and len(set(seen)) == 1:
            return
    raise AssertionError("the screen did not settle:\n" + (seen[-1] if seen else ""))


def app_for(events: list[Event]) -> tuple[PaellaApp, object]:
    """The App (no engine, frozen clock) and a ``run_before`` that feeds it ``events``."""
    app = PaellaApp(contract=contract(), run_id=RUN_ID, clock=lambda: T0, engine=False)
    # As `RunBoard.seed` has it from the ledger (an AgentExited event would ring its alarm).
    app.board.run = replace(
        app.board.run, usage_by_attempt=MappingProxyType({1: FIRST_ATTEMPT_USAGE})
    )
    # The toasts last until the screenshot: a warning's lasts 6 s of wall time, and at load 30
    # on two cores the start, the feed and the settling took longer (the snapshot missed it).
    notify = app.notify
    setattr(app, "notify", lambda message, **kw: notify(message, **{**kw, "timeout": 3600}))  # noqa: B010

    async def run_before(pilot: Pilot[int]) -> None:
        for event in events:
            app.feed(event)
        app.attach_output(output())
        await settled(pilot, app)

    return app, run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
def test_main_screen_running(snap_compare, size: tuple[int, int]) -> None:
    app, run_before = app_for(running_run())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_main_screen_done_80x24(snap_compare) -> None:
    app, run_before = app_for(done_run())
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_main_screen_no_color_80x24(snap_compare, monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR: the colours go, the symbols and the bold/reverse regression row stay."""
    monkeypatch.setenv("NO_COLOR", "1")
    app, run_before = app_for(running_run())
    assert app.no_color
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
