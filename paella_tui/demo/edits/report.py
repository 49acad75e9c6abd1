"""The summary report: what the ledger holds, in a few lines a person can read."""

from __future__ import annotations

from collections import Counter

from ledger.export import format_cents
from ledger.ingest import Ledger


def summary(ledger: Ledger) -> str:
    """Events by kind, distinct customers, and net revenue (purchases less refunds)."""
    events = ledger.events()
    kinds = Counter(event.kind for event in events)
    by_kind = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    customers = len({event.email.casefold() for event in events})
    net = sum(e.amount_cents for e in events if e.kind == "purchase") - sum(
        e.amount_cents for e in events if e.kind == "refund"
    )
    return (
        f"events: {len(events)} ({by_kind})\n"
        f"customers: {customers}\n"
        f"net revenue: {format_cents(net)}\n"
    )
