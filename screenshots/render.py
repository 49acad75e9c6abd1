"""Render the README screenshots: every screen at 120×36 from a scripted, synthetic run.

    python screenshots/render.py   # writes screenshots/*.svg, main.png, recovery.png, gatelog.png

Like Harlequin's ``export_screenshots.py``, it opens each screen in a headless App at a fixed
size with ``run_test`` and saves what it shows. The run is real (a repository in a fixed
temporary folder, real checkpoints and a real rollback) but scripted: its id, its clock, its
commit dates and its file contents are fixed, so the pictures change only when the UI does.
The PNGs need ``rsvg-convert`` (Debian: ``apt-get install librsvg2-bin``); without it the SVGs
are still written, and the script says so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

SIZE = (120, 36)
WORKSPACE = Path("/tmp/paella-screenshots/ledger-service")
RUN_ID = "20261129-021455-ab12"
START = datetime(2026, 11, 29, 2, 14, 55, tzinfo=UTC)

CONTRACT = """\
[run]
name = "ledger-service"
prompt = "Build the event ledger, episode by episode."
profile = "claude"
agent = "claude -p {prompt} --permission-mode acceptEdits --output-format stream-json --verbose"
resume = "claude -r {session_id} -p {handoff} --permission-mode acceptEdits --output-format stream-json --verbose"
scope = ["src/**", "tests/**"]

[[gate]]
name = "idempotency"
cmd = "pytest -q tests/test_idempotency.py"

[[gate]]
name = "privacy"
cmd = "pytest -q tests/test_privacy.py"

[[gate]]
name = "export"
cmd = "pytest -q tests/test_export.py"

[[gate]]
name = "lint"
cmd = "ruff check src"

[[episode]]
name = "idempotent ingest"
goal = "Replaying an event twice changes nothing."
gates = ["idempotency"]

[[episode]]
name = "privacy"
goal = "No raw e-mail address reaches a log or an export."
gates = ["privacy"]

[[episode]]
name = "csv export"
goal = "Every ledger entry can be exported as CSV, one row per event."
gates = ["export", "lint"]

[[constraint]]
text = "The public function ingest(event) keeps its signature."
protect = ["tests/**", "paella.toml"]
"""

INGEST_V1 = '''\
"""The event ledger: ingest events once, however often they arrive."""

_seen: set[str] = set()
_entries: list[dict] = []


def ingest(event: dict) -> list[dict]:
    """Add ``event`` to the ledger unless its id was seen before."""
    if event["id"] in _seen:
        return _entries
    _seen.add(event["id"])
    _entries.append(event)
    return _entries
'''

PRIVACY = '''\
"""Keep raw e-mail addresses out of logs and exports."""

import hashlib


def mask(address: str) -> str:
    """A stable stand-in for an e-mail address."""
    return "user-" + hashlib.sha256(address.encode()).hexdigest()[:12]
'''

# The agent's "refactor" during episode 3: it drops the seen-set, and replays double up.
INGEST_NOW = '''\
"""The event ledger: ingest events, and export them as CSV."""

import csv
import io

_entries: list[dict] = []


def ingest(event: dict) -> list[dict]:
    """Add ``event`` to the ledger."""
    _entries.append(event)
    return _entries


def export_csv() -> str:
    """Every entry as one CSV row."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["id", "kind", "who"])
    writer.writeheader()
    for entry in _entries:
        writer.writerow({k: entry.get(k, "") for k in ("id", "kind", "who")})
    return out.getvalue()
'''

SESSION = "c0ffee00-1d2e-4f5a-9b8c-7d6e5f4a3b2c"


def _said(*content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": list(content)}, "session_id": SESSION}


def _tool(name: str, **given: str) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": given}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


STREAM: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "session_id": SESSION},
    _said(_text("Episode 3: csv export. Adding export_csv() next to ingest().")),
    _said(_tool("Read", file_path="src/ledger/ingest.py")),
    _said(_text("Simplifying ingest(): the seen-set looks redundant now that ids are unique.")),
    _said(_tool("Edit", file_path="src/ledger/ingest.py")),
    _said(_tool("Bash", command="pytest -q tests/test_export.py")),
    {
        "type": "user",
        "message": {
            "content": [
                {
                    "type": "tool_result",
                    "is_error": True,
                    "content": "FAILED tests/test_export.py::test_header_row - KeyError: 'who'",
                }
            ]
        },
    },
    _said(_tool("Edit", file_path="src/ledger/ingest.py")),
    _said(_tool("Bash", command="pytest -q tests/test_export.py")),
    _said(_text("3 passed. Episode 3 looks done; writing the summary.")),
    {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "result": 'API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}',
        "num_turns": 23,
        "total_cost_usd": 2.57,
        "usage": {"input_tokens": 812_400, "output_tokens": 31_050},
        "session_id": SESSION,
    },
]
"""What the agent (Claude Code's stream-json) printed in the scripted run."""


def stream_bytes(records: list[dict[str, Any]]) -> bytes:
    """The records as the agent writes them: one JSON object a line."""
    import json

    return "".join(json.dumps(record) + "\n" for record in records).encode()


def agent_output() -> list[str]:
    """The stream as the log view shows it (through the claude profile's decoder)."""
    from paella_tui.supervisor.agent.profiles.registry import PROFILES

    decoder = PROFILES["claude"].new_decoder()
    lines = decoder.feed(stream_bytes(STREAM)) + decoder.finish()
    return [line.text for line in lines]


def fixed_environment() -> None:
    """Pin every input that would make two renders differ: ids, clocks, commit dates, paths."""
    import paella_tui.supervisor.run.ledger
    import paella_tui.supervisor.run.runs
    import paella_tui.supervisor.store.checkpoints

    os.environ["PAELLA_STATE_DIR"] = str(WORKSPACE.parent / "state")
    for name in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        os.environ[name] = START.isoformat()
    os.environ.setdefault("GIT_CONFIG_GLOBAL", os.devnull)
    os.environ.pop("NO_COLOR", None)
    ticks = iter(range(1_000_000))

    def clock() -> str:
        t = START + timedelta(minutes=9 * next(ticks))
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    paella_tui.supervisor.run.runs.new_run_id = lambda now=None: RUN_ID  # type: ignore[assignment]
    paella_tui.supervisor.run.ledger.utc_now = clock
    paella_tui.supervisor.store.checkpoints.utc_now = clock  # type: ignore[attr-defined]


def git(*args: str) -> None:
    """Run git in the scripted workspace (the script's own commits, not paella's)."""
    subprocess.run(
        ["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.invalid", *args],
        cwd=WORKSPACE,
        check=True,
        capture_output=True,
    )


def write(path: str, text: str) -> None:
    """Write a file of the scripted workspace."""
    target = WORKSPACE / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def scripted_run() -> tuple[Any, Any]:
    """A run at the moment the agent died: two green episodes, then a regression.

    Returns the run and its recovery facts, built as the engine builds them.
    """
    from paella_tui.supervisor.contract.loader import load_contract
    from paella_tui.supervisor.run.events import GateResult, RecoveryFacts
    from paella_tui.supervisor.run.run_view import RunView
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.checkpoints import take_checkpoint
    from paella_tui.supervisor.store.rollback import rollback
    from paella_tui.supervisor.store.snapshot import Snapshotter
    from paella_tui.supervisor.store.tree_diff import changes_between, totals
    from paella_tui.supervisor.store.workspace import Workspace

    shutil.rmtree(WORKSPACE.parent, ignore_errors=True)
    WORKSPACE.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    write("paella.toml", CONTRACT)
    write("README.md", "# ledger-service\n")
    write("tests/test_idempotency.py", "def test_replay_twice():\n    ...\n")
    git("add", "-A")
    git("commit", "-q", "-m", "contract and tests")
    workspace = Workspace.find(WORKSPACE)
    run = RunStore(workspace).create(load_contract(WORKSPACE / "paella.toml"), manual=False)
    snapshotter = Snapshotter(workspace)
    ledger = run.ledger
    ledger.append("agent-started", attempt=1, pid=4242, create_time=0.0, argv=["claude"])
    ledger.append("agent-session", attempt=1, session_id=SESSION)

    def gates(tree: str, **statuses: str) -> None:
        for gate, status in statuses.items():
            ledger.append(
                "gate-finished",
                gate=gate,
                status=status,
                tree=tree,
                duration_s=1.4,
                exit_code=0 if status == "pass" else 1,
                attempts=1,
                log=None,
                cached=False,
                stale=False,
                message="",
            )

    write("src/ledger/ingest.py", INGEST_V1)
    gates("1" * 40, idempotency="pass", privacy="fail", export="fail", lint="pass")
    take_checkpoint(
        run,
        snapshotter,
        episode=1,
        gates_green=("idempotency", "lint"),
        label="episode 1: idempotent ingest",
    )
    write("src/ledger/privacy.py", PRIVACY)
    gates("2" * 40, idempotency="pass", privacy="pass", export="fail", lint="pass")
    base = take_checkpoint(
        run,
        snapshotter,
        episode=2,
        gates_green=("idempotency", "privacy", "lint"),
        label="episode 2: privacy",
    )
    # An earlier mistake, rolled back: it leaves a salvage snapshot (the undo of that rollback).
    write("src/ledger/privacy.py", PRIVACY.replace("sha256", "md5"))
    rollback(run, base, snapshotter=snapshotter)
    write("src/ledger/ingest.py", INGEST_NOW)
    write("tests/test_export.py", "def test_header_row():\n    ...\n")
    gates("3" * 40, idempotency="fail", privacy="pass", export="pass", lint="pass")
    ledger.append(
        "drift",
        drift="regression",
        message="idempotency fails; it passed at checkpoint 2",
        gate="idempotency",
        path=None,
    )
    ledger.append(
        "drift",
        drift="protected",
        message="tests/test_export.py changed (protected by a constraint)",
        gate=None,
        path="tests/test_export.py",
    )
    output = agent_output()
    ledger.append(
        "agent-exited",
        attempt=1,
        exit_code=1,
        signal=None,
        tail=output,
        usage={"turns": 23, "input_tokens": 812_400, "output_tokens": 31_050, "cost_usd": 2.57},
    )
    (run.dir / "agent.log").write_bytes(stream_bytes(STREAM))

    with snapshotter.locked():
        now = snapshotter.take().tree
    changes = changes_between(workspace, base.tree, now)
    added, removed = totals(changes)
    view = RunView.load(run)
    facts = RecoveryFacts(
        ending="crash",
        how="exit 1, attempt 1",
        tail=tuple(output),
        base=view.last_green_checkpoint,
        gates_now=(
            GateResult(gate="idempotency", status="fail", tree=now, exit_code=1),
            GateResult(gate="privacy", status="pass", tree=now),
            GateResult(gate="export", status="pass", tree=now),
            GateResult(gate="lint", status="pass", tree=now),
        ),
        regressions=("idempotency",),
        changed_files=tuple(c.path for c in changes),
        lines_added=added,
        lines_removed=removed,
        default="rollback",
    )
    return run, facts


async def settle(pilot: Any) -> None:
    """Wait for the screen's thread workers and the messages they posted."""
    for _ in range(4):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


async def shoot(app: Any, name: str, before: Callable[[Any], Any] | None = None) -> Path:
    """Open ``app`` at 120×36, let it settle, and save ``screenshots/<name>.svg``."""
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        if before is not None:
            await before(pilot)
            await settle(pilot)
        app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    return OUT / f"{name}.svg"


def host(make_screen: Callable[[], Any]) -> Any:
    """A bare App titled "paella" that shows one screen."""
    from textual.app import App

    class Host(App[None]):
        TITLE = "paella"

        def on_mount(self) -> None:
            self.push_screen(make_screen())

    return Host()


async def main_screen(run: Any) -> Path | None:
    """The other engineer's main screen, fed the scripted run's events; None if not importable."""
    try:
        from paella_tui.app import PaellaApp
    except ImportError as err:
        print(f"main screen: not rendered ({err})")
        return None
    from paella_tui.supervisor.agent.decoded_tail import DecodedTail
    from paella_tui.supervisor.agent.output_tail import OutputTail
    from paella_tui.supervisor.agent.profiles.registry import PROFILES
    from paella_tui.supervisor.run.events import (
        AgentStarted,
        AgentStats,
        GateFinished,
        GateResult,
        Usage,
    )
    from paella_tui.supervisor.run.run_view import RunView

    view = RunView.load(run)
    contract = run.load_contract()
    now = (START + timedelta(hours=3)).timestamp()
    app = PaellaApp(contract=contract, run=run, engine=False, clock=lambda: now)
    tail = OutputTail()
    # Attempt 2 is at work: its stream so far, decoded as the run loop decodes it.
    DecodedTail(tail, PROFILES["claude"].new_decoder()).feed(stream_bytes(STREAM[:-1]))
    events: list[Any] = [
        AgentStarted(attempt=2, pid=4242, create_time=now - 2520, argv=("claude",), at=now - 2520)
    ]
    events += [
        AgentStats(
            attempt=2,
            cpu_percent=cpu,
            rss_bytes=412_000_000,
            descendants=3,
            uptime_s=2500 + i,
            usage=Usage(turns=15, input_tokens=472_000, output_tokens=17_300, cost_usd=1.55),
            at=now - 30 + i,
        )
        for i, cpu in enumerate([3, 8, 31, 54, 22, 12, 48, 71, 35, 18, 9, 26, 61, 40, 14])
    ]
    for gate, status in (
        ("idempotency", "fail"),
        ("privacy", "pass"),
        ("export", "pass"),
        ("lint", "pass"),
    ):
        result = GateResult(gate=gate, status=status, tree="3" * 40, duration_s=1.4)  # type: ignore[arg-type]
        events.append(GateFinished(result=result, at=now - 40))

    async def feed(pilot: Any) -> None:
        # What the ledger says so far (attempt 1, the checkpoints, the regression), as the
        # engine's worker seeds the board before the run loop's first event.
        app.board.seed(view)
        for event in events:
            app.feed(event)
        main = getattr(app, "main", None) or app.screen
        main.attach_output(tail)
        await pilot.pause(0.3)

    try:
        return await shoot(app, "main", feed)
    except Exception as err:  # the main screen is another engineer's, and may be mid-change
        print(f"main screen: not rendered ({type(err).__name__}: {err})")
        return None


def to_png(svg: Path) -> Path | None:
    """``svg`` as a PNG beside it, through rsvg-convert; None (and a message) without it."""
    tool = shutil.which("rsvg-convert")
    if tool is None:
        print(f"{svg.name}: no PNG (rsvg-convert is missing: apt-get install librsvg2-bin)")
        return None
    # rsvg gives a leading no-break space no width when textLength stretches the run, so
    # styled words would touch; plain spaces kept by xml:space render as the terminal does.
    text = svg.read_text().replace("&#160;", " ").replace("<svg ", '<svg xml:space="preserve" ', 1)
    png = svg.with_suffix(".png")
    subprocess.run([tool, "--zoom", "1.0", "-o", str(png)], input=text.encode(), check=True)
    return png


EXPORT_LOG_FAILED = """\
----- paella: gate "export" on tree 3333333333: pytest -q tests/test_export.py -----
..F.F                                                                    [100%]
=================================== FAILURES ===================================
____________________ test_header_row[semicolon-separated] _____________________

sep = ';'

    @pytest.mark.parametrize("sep", [",", ";"], ids=["comma", "semicolon-separated"])
    def test_header_row(sep):
>       assert export_csv(sep=sep).splitlines()[0] == sep.join(HEADER)
E       TypeError: export_csv() got an unexpected keyword argument 'sep'

tests/test_export.py:14: TypeError
___________________________ test_masked_addresses ____________________________

    def test_masked_addresses():
        rows = export_csv().splitlines()[1:]
>       assert all("@" not in row for row in rows)
E       assert False

tests/test_export.py:21: AssertionError
=========================== short test summary info ============================
FAILED tests/test_export.py::test_header_row[semicolon-separated] - TypeError: export_csv() got an unexpected keyword argument 'sep'
FAILED tests/test_export.py::test_masked_addresses - assert False
2 failed, 3 passed in 0.21s
----- paella: exit 1 after 0.4s -----
"""


def gate_logs(run: Any) -> None:
    """Two runs of the export gate: an older one that could not collect, the newest red."""
    folder = run.dir / "gates" / "export"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "1.log").write_text(
        "ERROR tests/test_export.py - ModuleNotFoundError: No module named 'ledger.export'\n"
    )
    (folder / "2.log").write_text(EXPORT_LOG_FAILED)


async def render() -> list[Path]:
    """Every screenshot, and the PNGs of the main, recovery and gate log screens."""
    fixed_environment()
    run, facts = scripted_run()

    from paella_tui.diff_screen import DiffScreen
    from paella_tui.gate_log_screen import GateLogScreen
    from paella_tui.handoff_screen import HandoffScreen
    from paella_tui.help_screen import HelpScreen
    from paella_tui.picker_screen import PickerScreen
    from paella_tui.recovery_screen import RecoveryScreen

    written: list[Path] = []
    recovery = await shoot(host(lambda: RecoveryScreen(facts, run=run)), "recovery")
    written.append(recovery)
    written.append(await shoot(host(lambda: PickerScreen(run)), "picker"))
    written.append(await shoot(host(lambda: DiffScreen(run, None)), "diff"))
    written.append(await shoot(host(lambda: HandoffScreen(run)), "handoff"))
    written.append(await shoot(host(lambda: HelpScreen(run)), "help"))
    gate_logs(run)
    gate_log = await shoot(host(lambda: GateLogScreen(run.dir, "export", status="fail")), "gatelog")
    written.append(gate_log)
    main = await main_screen(run)
    for svg in (main, recovery, gate_log):
        if svg is not None and (png := to_png(svg)) is not None:
            written.append(png)
    if main is not None:
        written.insert(0, main)
    return written


if __name__ == "__main__":
    for path in asyncio.run(render()):
        print(path.relative_to(ROOT))
