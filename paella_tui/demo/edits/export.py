"""Exporting the ledger as CSV: one numbered row per event, e-mail addresses masked."""

from __future__ import annotations

import csv
import io

from ledger.ingest import Ledger
from ledger.privacy import mask_email

COLUMNS = ("row", "id", "kind", "customer", "amount")


def format_cents(cents: int) -> str:
    """``1250`` becomes ``12.50``; exact, with no floating point on the way."""
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(cents), 100)
    return f"{sign}{units}.{rest:02d}"


def to_csv(ledger: Ledger) -> str:
    """The ledger as CSV text: a header, then one row per event in arrival order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row, event in enumerate(ledger.events(), start=1):
        writer.writerow(
            (row, event.id, event.kind, mask_email(event.email), format_cents(event.amount_cents))
        )
    return out.getvalue()
