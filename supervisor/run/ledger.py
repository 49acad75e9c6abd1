"""The ledger: a run's append-only event record, one JSON object a line, fsynced per record.

Records are hash-chained: each carries ``prev``, a hash of the line before it, so an edited,
inserted, deleted or forged line breaks the chain where it was made. A reader names the first
break, keeps reading what it can, and marks every record from the break on as untrusted (a
checkpoint among them is a rollback target only when the mirror agrees with it). Ledgers
written before the chain read as before; the chain starts at their first chained record.

Every record is validated by kind (:mod:`ledger_schema`): a torn last line (paella killed
mid-write), a line that is not a JSON object or a record missing what readers use is skipped
with a warning, never a traceback.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paella_tui.supervisor.base.files import FILE_MODE, ensure_dir
from paella_tui.supervisor.run.ledger_schema import problem

CHAIN_FIELD = "prev"
# A ledger bigger than this is not read whole (a reader must never exhaust memory on a file an
# agent grew on purpose); it is far beyond any real run (100,000 records are ~30 MB).
MAX_LEDGER_BYTES = 1 << 30


def utc_now() -> str:
    """The current time as ISO 8601 UTC with milliseconds, as every record's ``t`` holds it."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def line_hash(line: bytes) -> str:
    """The chain hash of one ledger line (without its newline): 128 bits of sha256, in hex."""
    return hashlib.sha256(line).hexdigest()[:32]


GENESIS = line_hash(b"")
"""The ``prev`` of a ledger's first record."""


@dataclass(frozen=True)
class ChainBreak:
    """Where the ledger's hash chain stops holding: the first record that cannot be trusted."""

    line: int
    """The line number (from 1) of the first bad line."""
    index: int
    """How many good records come before it: ``records[index:]`` are untrusted."""
    reason: str

    def describe(self, path: Path) -> str:
        """One line for a warning and a ``history`` drift."""
        return (
            f"{path}:{self.line}: the ledger's hash chain breaks here ({self.reason}): it was "
            "edited outside paella; records from this line on are not trusted"
        )


@dataclass(frozen=True)
class LedgerRead:
    """What a read of the ledger found: the usable records, and the lines it had to skip."""

    records: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...]
    """Descriptions of unusable lines (a torn last line, a malformed record), for a warning."""
    chain_break: ChainBreak | None = None
    """The first place the hash chain fails, if it does."""

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        """The records of the given kinds, in order."""
        return (r for r in self.records if r.get("kind") in kinds)

    def trusted(self, index: int) -> bool:
        """Whether ``records[index]`` comes before any chain break."""
        return self.chain_break is None or index < self.chain_break.index


class Ledger:
    """Appends event records to ``events.jsonl`` and reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record durably (fsync) and return it; ``t`` and ``kind`` come first."""
        ensure_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            # Writers in two processes (a run and `paella checkpoint`) must not both chain onto
            # the same last line.
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._repair_torn_tail(fd)
            fields.pop(CHAIN_FIELD, None)
            record: dict[str, Any] = {
                "t": utc_now(),
                "kind": kind,
                **fields,
                CHAIN_FIELD: line_hash(_last_line(fd)),
            }
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
            # One write call per record: O_APPEND keeps concurrent writers' records whole.
            os.write(fd, line.encode() + b"\n")
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
        """All usable records; unusable lines are skipped and described, never fatal."""
        try:
            if self.path.exists() and not self.path.is_file():
                return LedgerRead((), (f"{self.path}: not a regular file; no record read",))
            if self.path.stat().st_size > MAX_LEDGER_BYTES:
                return LedgerRead((), (f"{self.path}: over {MAX_LEDGER_BYTES} bytes; not read",))
            data = self.path.read_bytes()
        except FileNotFoundError:
            return LedgerRead((), ())
        except OSError as err:
            return LedgerRead((), (f"{self.path}: cannot be read ({err.strerror or err})",))
        return parse(data, self.path)


def parse(data: bytes, path: Path) -> LedgerRead:
    """Validate ``data`` (a whole ledger) line by line and follow its hash chain."""
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    chain_break: ChainBreak | None = None
    chained = False
    previous = b""
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        expected, previous = line_hash(previous), raw
        record, why = _decode(raw)
        if record is None:
            torn = number == len(lines) or (number == len(lines) - 1 and not lines[-1])
            what = "a torn last line (paella stopped mid-write)" if torn else f"a line ({why})"
            skipped.append(f"{path}:{number}: skipped {what}")
            continue
        link = record.get(CHAIN_FIELD)
        bad_link = None
        if link is not None or chained:
            if link != expected:
                bad_link = (
                    "a record without its link" if link is None else "its link does not match"
                )
            chained = True
        if bad_link is not None and chain_break is None:
            chain_break = ChainBreak(number, len(records), bad_link)
        issue = problem(record)
        if issue is not None:
            skipped.append(f"{path}:{number}: skipped a record: {issue}")
            continue
        records.append(record)
    if chain_break is not None:
        skipped.append(chain_break.describe(path))
    return LedgerRead(tuple(records), tuple(skipped), chain_break)


def _decode(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None, "not JSON"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    return record, ""


def _last_line(fd: int) -> bytes:
    """The file's last line without its newline (b"" when empty), read backwards in blocks."""
    end = os.fstat(fd).st_size
    if end and os.pread(fd, 1, end - 1) == b"\n":
        end -= 1
    chunks: list[bytes] = []
    pos = end
    while pos > 0:
        size = min(65536, pos)
        pos -= size
        block = os.pread(fd, size, pos)
        cut = block.rfind(b"\n")
        if cut >= 0:
            chunks.append(block[cut + 1 :])
            break
        chunks.append(block)
    line = b"".join(reversed(chunks))
    # Blank lines carry no record and are skipped by readers, so they are not chained over.
    if not line.strip():
        return _last_nonblank(fd, end)
    return line


def _last_nonblank(fd: int, end: int) -> bytes:
    data = os.pread(fd, end, 0)
    for line in reversed(data.split(b"\n")):
        if line.strip():
            return line
    return b""
