"""How long the event loop is held per ledger record: the durable ``append`` (write + fsync on
the caller's thread, as every run-loop event was written before issue 14) against ``append_soon``
(handed to the ledger's writer thread), side by side in one run, on the same disk.

Each round writes the same number of records both ways into fresh ledgers and measures, on the
event loop's thread, the time each call held it; then how long the writer took to make the
handed-over records durable (a flush). Prints a Markdown table.

    python -m benchmarks.ledger_writer [--records 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from benchmarks.stats import median, ms, p95
from paella_tui.supervisor.run.ledger import Ledger


def us(seconds: float) -> str:
    """Microseconds, for the calls that only hand a record over."""
    return f"{seconds * 1e6:,.0f} µs"


FIELDS = {"drift": "scope", "message": "src/x.py is outside the scope " * 3}


async def _held(ledger: Ledger, n: int, *, soon: bool) -> tuple[list[float], float]:
    held: list[float] = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        if soon:
            ledger.append_soon("drift", **FIELDS)
        else:
            ledger.append("drift", **FIELDS)
        held.append(time.perf_counter() - t0)
        await asyncio.sleep(0)
    await asyncio.to_thread(ledger.flush)
    return held, time.perf_counter() - start


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    with tempfile.TemporaryDirectory(prefix="paella-bench-ledger-") as tmp:
        for round_ in range(args.rounds):
            for soon in (False, True):
                ledger = Ledger(Path(tmp) / f"{round_}-{soon}" / "events.jsonl")
                held, total = asyncio.run(_held(ledger, args.records, soon=soon))
                results[soon][0].extend(held)
                results[soon][1].append(total)
                assert len(ledger.read().records) == args.records
    print(f"{args.records} records × {args.rounds} rounds, each fsynced before acknowledged\n")
    print("| how | loop held per record: median | p95 | max | all durable after (median) |")
    print("|---|---|---|---|---|")
    for soon, name in ((False, "`append` on the loop (before)"), (True, "`append_soon` (now)")):
        held, totals = results[soon]
        print(
            f"| {name} | {us(median(held))} | {us(p95(held))} | {ms(max(held))} "
            f"| {ms(median(totals))} |"
        )


if __name__ == "__main__":
    main()
