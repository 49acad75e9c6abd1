"""Episode 4, summary report: counts, customers and net revenue, the same after a replay."""

from harness import run  # first: it makes `ledger` importable
from ledger.ingest import Event, Ledger
from ledger.report import summary

STREAM = (
    Event("e1", "signup", "ada@example.com"),
    Event("e2", "purchase", "ada@example.com", 1250),
    Event("e3", "signup", "bob@example.org"),
    Event("e4", "purchase", "bob@example.org", 999),
    Event("e5", "refund", "ada@example.com", 250),
)


def ledger_of(*events: Event) -> Ledger:
    ledger = Ledger()
    for event in events:
        ledger.ingest(event)
    return ledger


def test_the_summary() -> None:
    assert summary(ledger_of(*STREAM)) == (
        "events: 5 (2 purchase, 1 refund, 2 signup)\ncustomers: 2\nnet revenue: 19.99\n"
    )


def test_a_replayed_stream_gives_the_same_report() -> None:
    assert summary(ledger_of(*STREAM, *STREAM)) == summary(ledger_of(*STREAM))


def test_no_raw_address_in_the_report() -> None:
    report = summary(ledger_of(*STREAM))
    assert "@" not in report


if __name__ == "__main__":
    raise SystemExit(run(globals()))
