"""Episode 1, idempotent ingest: replaying an event changes nothing."""

from harness import run  # first: it makes `ledger` importable
from ledger.ingest import Event, Ledger

SIGNUP = Event("e1", "signup", "ada@example.com")
PURCHASE = Event("e2", "purchase", "ada@example.com", 1250)


def test_a_replayed_event_is_recorded_once() -> None:
    ledger = Ledger()
    assert ledger.ingest(SIGNUP) is True
    assert ledger.ingest(SIGNUP) is False
    assert ledger.events() == [SIGNUP]


def test_replaying_a_whole_stream_changes_nothing() -> None:
    ledger = Ledger()
    for event in (SIGNUP, PURCHASE):
        ledger.ingest(event)
    before = ledger.events()
    for event in (SIGNUP, PURCHASE):
        ledger.ingest(event)
    assert ledger.events() == before


def test_events_keep_their_arrival_order() -> None:
    ledger = Ledger()
    for event in (PURCHASE, SIGNUP, PURCHASE):
        ledger.ingest(event)
    assert [event.id for event in ledger.events()] == ["e2", "e1"]


if __name__ == "__main__":
    raise SystemExit(run(globals()))
