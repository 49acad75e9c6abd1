"""The ledger's one writer thread: records land in the order they were handed over, each fsynced
before it is acknowledged; a crash loses nothing acknowledged; a reader in the same process sees
what was handed over; and the event loop never waits on an fsync (shown by holding fsync shut
while the loop keeps handing records over, and by the thread of every fsync in a real run)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from paella_tui.supervisor.run.ledger import Ledger, writer_for

KILL_SCRIPT = """
import json, os, signal, sys
from pathlib import Path
from paella_tui.supervisor.run.ledger import Ledger
ledger = Ledger(Path(sys.argv[1]))
acked = int(sys.argv[2])
for i in range(acked):
    ledger.append_soon("notice", message=f"seq {i}", level="info", seq=i)
ledger.flush()
print(acked, flush=True)
for i in range(acked, acked + 20000):
    ledger.append_soon("notice", message=f"seq {i}", level="info", seq=i)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, str]]]:
    """Every fsync of the process while the test runs: (thread id, the file's path). The real
    fsync still runs."""
    calls: list[tuple[int, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append((threading.get_ident(), os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield calls


def _seqs(ledger: Ledger, key: str = "seq") -> list[int]:
    read = ledger.read()
    assert read.chain_break is None and not read.skipped, read.skipped
    return [int(r[key]) for r in read.records if key in r]


def test_records_land_in_the_order_handed_over_from_many_threads(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "events.jsonl")
    threads, each = 8, 150

    def writer(n: int) -> None:
        mine = Ledger(ledger.path)  # another Ledger of the same file shares the writer
        for i in range(each):
            if i % 3:
                mine.append_soon("notice", message="m", level="info", source=n, seq=i)
            else:
                mine.append("notice", message="m", level="info", source=n, seq=i)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    read = ledger.read()
    assert read.chain_break is None and not read.skipped
    assert len(read.records) == threads * each
    for n in range(threads):
        assert [r["seq"] for r in read.records if r["source"] == n] == list(range(each))
    stamps = [r["t"] for r in read.records]
    assert stamps == sorted(stamps), "handed over in this order, written in this order"


def test_a_reader_in_the_process_sees_every_record_handed_over(tmp_path: Path) -> None:
    path = tmp_path / "run" / "events.jsonl"
    for i in range(500):
        Ledger(path).append_soon("notice", message="m", level="info", seq=i)
    assert _seqs(Ledger(path)) == list(range(500))


@pytest.mark.parametrize("acked", [1, 300])
def test_a_crash_mid_queue_loses_nothing_acknowledged(tmp_path: Path, acked: int) -> None:
    path = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(path), str(acked)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == str(acked)
    read = Ledger(path).read()
    assert read.chain_break is None
    # At most the one record being written when the kill came is torn (and skipped).
    assert len(read.skipped) <= 1 and all("torn last line" in s for s in read.skipped)
    seqs = [int(r["seq"]) for r in read.records]
    assert seqs == list(range(len(seqs))), "in order, no gap"
    assert len(seqs) >= acked, "every acknowledged record is on disk"


def test_handing_over_never_waits_for_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync is held shut; the event loop still hands over 200 records and goes on. Only when
    fsync opens are they acknowledged as durable."""
    ledger = Ledger(tmp_path / "events.jsonl")
    ledger.append("notice", message="first", level="info")  # the writer exists already
    gate = threading.Event()
    real = os.fsync

    def held(fd: int) -> None:
        gate.wait()
        real(fd)

    monkeypatch.setattr(os, "fsync", held)

    async def hand_over() -> list[object]:
        return [ledger.append_soon("notice", message="m", level="info", seq=i) for i in range(200)]

    pending = asyncio.run(asyncio.wait_for(hand_over(), 30))
    assert not any(p.durable for p in pending)  # type: ignore[attr-defined]
    gate.set()
    ledger.flush()
    assert all(p.durable for p in pending)  # type: ignore[attr-defined]
    assert _seqs(ledger) == list(range(200))


def test_a_write_error_reaches_the_caller_and_a_later_write_recovers(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "events.jsonl"
    path.mkdir()  # not a file: every write fails
    ledger = Ledger(path)
    with pytest.raises(OSError):
        ledger.append("notice", message="m", level="info")
    with pytest.raises(OSError):
        ledger.append_soon("notice", message="m", level="info")  # the loop stops, not loses
    path.rmdir()
    # The person fixed the disk: a durable append is tried again, and its success clears it.
    assert ledger.append("notice", message="again", level="info")["message"] == "again"
    ledger.append_soon("notice", message="soon", level="info").wait()
    assert [r["message"] for r in ledger.read().records] == ["again", "soon"]


def test_a_real_run_never_fsyncs_the_ledger_on_its_event_loop(
    repo: Path, tmp_path: Path, fsyncs: list[tuple[int, str]]
) -> None:
    from paella_tui.supervisor.contract.loader import parse_contract
    from paella_tui.supervisor.run.decisions import policy
    from paella_tui.supervisor.run.run_loop import RunLoop
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    agent = "import sys; open('done.txt', 'w').write('ok')"
    text = f"""
[run]
prompt = "make done.txt"
agent = [{json.dumps(sys.executable)}, "-c", {json.dumps(agent)}]
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
    loop_thread: list[int] = []

    async def supervise() -> int:
        loop_thread.append(threading.get_ident())
        loop = RunLoop(run=run, contract=contract, emit=lambda _e, _s: None, decide=policy("stop"))
        return await asyncio.wait_for(loop.run(), 120)

    assert asyncio.run(supervise()) == 0
    kinds = [r["kind"] for r in run.ledger.read().records]
    assert "agent-started" in kinds and "run-done" in kinds
    ledger_syncs = [thread for thread, path in fsyncs if path == str(run.ledger.path)]
    assert ledger_syncs, "the ledger was fsynced"
    assert loop_thread[0] not in ledger_syncs
    assert set(ledger_syncs) == {writer_for(run.ledger.path).thread.ident}
