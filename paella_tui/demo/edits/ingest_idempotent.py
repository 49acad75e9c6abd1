"""Ingesting events into the ledger: replaying an event changes nothing."""

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
    """The events received so far, each recorded once."""

    def __init__(self) -> None:
        # Keyed by id, so a replayed event finds its id taken; a dict keeps arrival order.
        self._events: dict[str, Event] = {}

    def ingest(self, event: Event) -> bool:
        """Record ``event``; False, changing nothing, when its id was recorded before."""
        if event.id in self._events:
            log.info("skipped replayed event %s", event.id)
            return False
        self._events[event.id] = event
        log.info("ingested %s %s from %s", event.kind, event.id, event.email)
        return True

    def events(self) -> list[Event]:
        """The recorded events, in the order they arrived."""
        return list(self._events.values())
