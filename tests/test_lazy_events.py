"""The fold loads the run loop's event classes only for the records that need them (issue 17),
and reads every ledger exactly as a process that has them all loaded.

Each case writes a real ledger through the engine's writer and folds it in a fresh interpreter
(``StateStore.load``, as every command does), then compares that state, field by field in its
kept JSON form, with the fold of the same ledger in this process, where every event module is
imported; it also checks which event modules the fresh interpreter loaded.

The fresh interpreter is a fork: one interpreter per test process imports what a command's
fold imports (and nothing more; it never folds), then forks a child per ledger, which folds it
and reports. Each child starts exactly as a fresh interpreter is after those imports, for 2 ms
of CPU instead of a new interpreter's ~130 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_run_state import EVERY_KIND, TREES, _write, snapshot

from paella_tui.supervisor.run import ledger_events, record_events, state_codec
from paella_tui.supervisor.run.events import CheckpointTaken, Event
from paella_tui.supervisor.run.ledger import Ledger
from paella_tui.supervisor.run.ledger_events import LedgerRecord, RollbackDone, record_of
from paella_tui.supervisor.run.state_store import StateStore

RUN_LOOP_MODULES = {
    "paella_tui.supervisor.run.events",
    "paella_tui.supervisor.run.ledger_events",
}

FOLD = r"""
import json, os, sys, traceback
from pathlib import Path
from paella_tui.supervisor.run import state_codec
from paella_tui.supervisor.run.state_store import StateStore

# One ledger a line (its path and "save" or "no"); each folded in a child of this interpreter,
# which has imported what a command's fold imports and never folds itself.
for request in iter(sys.stdin.readline, ""):
    path, save = json.loads(request)
    child = os.fork()
    if child == 0:
        try:
            folded = StateStore(Path(path)).load(save=save == "save")
            print(json.dumps({
                "state": state_codec.encode(folded.state),
                "position": state_codec.encode(folded.position),
                "said": list(folded.said),
                "modules": sorted(m for m in sys.modules if m.startswith("paella_tui")),
            }), flush=True)
        except BaseException:
            print(json.dumps({"error": traceback.format_exc()}), flush=True)
        os._exit(0)
    if os.waitpid(child, 0)[1]:  # it died before it could answer
        print(json.dumps({"error": "the folding child died"}), flush=True)
"""

# Every test here runs in one worker: one folding interpreter serves them all.
pytestmark = pytest.mark.xdist_group("lazy-events-fold")

_FOLDER: list[subprocess.Popen[str]] = []


@pytest.fixture(scope="module", autouse=True)
def _folder() -> Iterator[None]:
    """The folding interpreter of this module's tests (stopped after the last)."""
    yield
    while _FOLDER:
        folder = _FOLDER.pop()
        assert folder.stdin is not None
        folder.stdin.close()
        assert folder.wait(30) == 0


def _fold_fresh(path: Path, *, save: bool = False) -> dict[str, object]:
    if not _FOLDER:
        _FOLDER.append(
            subprocess.Popen(
                [sys.executable, "-c", FOLD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    folder = _FOLDER[0]
    assert folder.stdin is not None and folder.stdout is not None
    folder.stdin.write(json.dumps([str(path), "save" if save else "no"]) + "\n")
    folder.stdin.flush()
    answer = folder.stdout.readline()
    assert answer, f"the folding interpreter ended (exit {folder.poll()})"
    result: dict[str, object] = json.loads(answer)
    assert "error" not in result, result["error"]
    return result


def _fold_here(path: Path) -> dict[str, object]:
    folded = StateStore(path).catch_up(StateStore(path).empty())
    return {
        "state": json.loads(json.dumps(state_codec.encode(folded.state))),
        "position": json.loads(json.dumps(state_codec.encode(folded.position))),
        "said": list(folded.said),
    }


# Records every command meets: a run's start, checkpoints and salvage, a rollback's intent and
# end, a drift, and kinds no rule reads (a mirror failure, the run's start tree).
LIGHT: list[Event] = [
    EVERY_KIND[0],  # run-started
    CheckpointTaken(record_=snapshot("checkpoints", 1, TREES[0], 1, ("one",))),
    CheckpointTaken(record_=snapshot("checkpoints", 2, TREES[1], "manual")),
    LedgerRecord(record_kind="run-tree", fields={"tree": TREES[0]}),
    LedgerRecord(record_kind="rollback-intent", fields={"id": "x", "target_ref": "r"}),
    CheckpointTaken(record_=snapshot("salvage", 1, TREES[2])),
    RollbackDone(
        id="x", target_ref="refs/paella/r/checkpoints/1", target="1", tree=TREES[0], salvage=1
    ),
    *(e for e in EVERY_KIND if type(e).__name__ == "DriftDetected"),
    LedgerRecord(record_kind="mirror-failed", fields={"error": "no space"}),
]


def _ledger(folder: Path, events: list[Event]) -> Path:
    ledger = Ledger(folder / "events.jsonl")
    for event in events:
        _write(ledger, event)
    return ledger.path


def test_the_kinds_each_module_reads_are_told_apart_once() -> None:
    """``record_events`` names the kinds ``ledger_events`` reads: the same set, none twice, and
    every typed event's kind is read by one of the two."""
    assert set(ledger_events.READERS) == record_events.MORE_KINDS
    assert not set(record_events.READERS) & record_events.MORE_KINDS
    typed = {record_of(e)[0] for e in EVERY_KIND if not isinstance(e, LedgerRecord)}
    assert typed <= set(record_events.READERS) | record_events.MORE_KINDS


def test_a_ledger_of_the_records_every_command_meets_folds_without_the_run_loop_events(
    tmp_path: Path,
) -> None:
    path = _ledger(tmp_path, LIGHT)
    fresh = _fold_fresh(path)
    assert not RUN_LOOP_MODULES & set(fresh.pop("modules"))  # type: ignore[arg-type]
    assert fresh == _fold_here(path)


@pytest.mark.parametrize(
    "event",
    [e for e in EVERY_KIND if record_of(e)[0] in record_events.MORE_KINDS],
    ids=lambda e: record_of(e)[0],
)
def test_a_record_of_the_run_loop_loads_its_events_and_folds_the_same(
    tmp_path: Path, event: Event
) -> None:
    """Each kind of the run loop's, after the light records: the classes load at that record,
    and the state is the one a process with every class loaded folds."""
    path = _ledger(tmp_path, [*LIGHT, event, *LIGHT[1:3]])
    fresh = _fold_fresh(path)
    assert set(fresh.pop("modules")) >= RUN_LOOP_MODULES  # type: ignore[arg-type]
    assert fresh == _fold_here(path)


def test_every_kind_in_one_ledger_folds_the_same(tmp_path: Path) -> None:
    path = _ledger(tmp_path, [*LIGHT, *EVERY_KIND, *LIGHT[1:]])
    fresh = _fold_fresh(path)
    fresh.pop("modules")
    assert fresh == _fold_here(path)


def test_a_kept_state_caught_up_by_a_checkpoint_record_loads_no_run_loop_events(
    tmp_path: Path,
) -> None:
    """What a ``paella checkpoint`` meets: a kept state.json (here with every kind folded into
    it), then the checkpoint record written after it was kept; and a kept state that was
    tampered with (rebuilt from the whole ledger, loading what that needs)."""
    path = _ledger(tmp_path, [*LIGHT, *EVERY_KIND])
    kept = _fold_fresh(path, save=True)
    kept.pop("modules")
    _write(Ledger(path), CheckpointTaken(record_=snapshot("checkpoints", 3, TREES[3], "manual")))
    fresh = _fold_fresh(path)
    assert not RUN_LOOP_MODULES & set(fresh.pop("modules"))  # type: ignore[arg-type]
    assert fresh == _fold_here(path)
    assert fresh != kept
    state_file = path.with_name("state.json")
    body = json.loads(state_file.read_text())
    body["state"]["checkpoints"] = "forged"  # not a state's: read as none, the ledger folded
    state_file.write_text(json.dumps(body))
    fresh = _fold_fresh(path)
    fresh.pop("modules")
    assert fresh == _fold_here(path)
