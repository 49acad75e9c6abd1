"""Episode 3, export: one numbered CSV row per event, amounts exact, addresses masked."""

from harness import run  # first: it makes `ledger` importable
from ledger.export import to_csv
from ledger.ingest import Event, Ledger

EVENTS = (
    Event("e1", "signup", "ada@example.com"),
    Event("e2", "purchase", "ada@example.com", 1250),
    Event("e3", "refund", "ada@example.com", 5),
)


def ledger_of(*events: Event) -> Ledger:
    ledger = Ledger()
    for event in events:
        ledger.ingest(event)
    return ledger


def test_a_header_then_a_row_per_event() -> None:
    assert to_csv(ledger_of(*EVENTS)) == (
        "row,id,kind,customer,amount\n"
        "1,e1,signup,a***@example.com,0.00\n"
        "2,e2,purchase,a***@example.com,12.50\n"
        "3,e3,refund,a***@example.com,0.05\n"
    )


def test_an_empty_ledger_exports_the_header_only() -> None:
    assert to_csv(Ledger()) == "row,id,kind,customer,amount\n"


def test_no_raw_address_in_the_export() -> None:
    assert "ada@example.com" not in to_csv(ledger_of(*EVENTS))


if __name__ == "__main__":
    raise SystemExit(run(globals()))
