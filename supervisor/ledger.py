"""The ledger: a run's append-only event record, one JSON object a line, fsynced per record.

A reader tolerates a torn last line (paella killed mid-write) and reports it instead of failing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paella_tui.supervisor.files import FILE_MODE, ensure_dir


def utc_now() -> str:
    """The current time as ISO 8601 UTC with milliseconds, as every record's ``t`` holds it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class LedgerRead:
    """What a read of the ledger found: the records, and any lines it had to skip."""

    records: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...]
    """Descriptions of unreadable lines (a torn last line after a crash), for a warning."""

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        """The records of the given kinds, in order."""
        return (r for r in self.records if r.get("kind") in kinds)


class Ledger:
    """Appends event records to ``events.jsonl`` and reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record durably (fsync) and return it; ``t`` and ``kind`` come first."""
        record: dict[str, Any] = {"t": utc_now(), "kind": kind, **fields}
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            self._repair_torn_tail(fd)
            # One write call per record: O_APPEND keeps concurrent writers' records whole.
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def _repair_torn_tail(self, fd: int) -> None:
        # After a crash mid-write the file may end without a newline; start the next record on a
        # fresh line so that only the torn record is lost, never the one written after it.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")

    def read(self) -> LedgerRead:
        """All readable records; unreadable lines are skipped and described, never fatal."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return LedgerRead((), ())
        records: list[dict[str, Any]] = []
        skipped: list[str] = []
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise ValueError("not an object")
            except ValueError:
                torn = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
                what = (
                    "a torn last line (paella stopped mid-write)" if torn else "an unreadable line"
                )
                skipped.append(f"{self.path}:{number}: skipped {what}")
                continue
            records.append(record)
        return LedgerRead(tuple(records), tuple(skipped))
