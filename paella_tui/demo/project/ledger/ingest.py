"""Ingesting events into the ledger."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("ledger")


@dataclass(frozen=True)
class Event:
    """One thing that happened to a customer."""

    id: str
    kind: str  # "signup", "purchase" or "refund"
    email: str
    amount_cents: int = 0


class Ledger:
    """The events received so far."""

    def __init__(self) -> None:
        self._events: list[Event] = []

    def ingest(self, event: Event) -> bool:
        """Record ``event``; True when it was recorded."""
        self._events.append(event)
        log.info("ingested %s %s from %s", event.kind, event.id, event.email)
        return True

    def events(self) -> list[Event]:
        """The recorded events, in the order they arrived."""
        return list(self._events)
