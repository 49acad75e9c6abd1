"""Episode 2, privacy: no raw e-mail address reaches a log."""

import logging

from harness import run  # first: it makes `ledger` importable
from ledger.ingest import Event, Ledger
from ledger.privacy import mask_email, redact


class Captured(logging.Handler):
    """Keeps every message logged to it."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_mask_email_hides_the_name_and_keeps_the_domain() -> None:
    assert mask_email("ada@example.com") == "a***@example.com"
    assert mask_email("not an address") == "***"


def test_redact_masks_every_address_in_a_text() -> None:
    text = "from ada@example.com to bob.smith@mail.example.org"
    assert redact(text) == "from a***@example.com to b***@mail.example.org"


def test_ingest_logs_no_raw_address() -> None:
    logger = logging.getLogger("ledger")
    captured = Captured()
    logger.addHandler(captured)
    logger.setLevel(logging.DEBUG)
    try:
        ledger = Ledger()
        event = Event("e1", "signup", "ada@example.com")
        ledger.ingest(event)
        ledger.ingest(event)
    finally:
        logger.removeHandler(captured)
    assert captured.messages, "ingest logs what it does"
    assert not [m for m in captured.messages if "ada@example.com" in m], captured.messages


if __name__ == "__main__":
    raise SystemExit(run(globals()))
