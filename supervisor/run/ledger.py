"""The ledger: a run's append-only event record, one JSON object a line, fsynced per record.

One writer thread per ledger file writes every record of the process, in the order they were
handed over, each fsynced before it is acknowledged: :meth:`Ledger.append` waits for that (a
checkpoint's record is on disk before the call returns, after its ref reached the mirror), and
:meth:`Ledger.append_soon` does not (the run loop's events: Textual's event loop never waits on
an fsync). :meth:`Ledger.read` first waits for what was handed over, so a reader in the same
process sees every record written before it asked; :meth:`Ledger.flush` waits without reading.

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

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import threading
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


def ledger_time(iso: object) -> float:
    """Seconds since the epoch from a record's ``t`` (``…Z``); 0.0 when unreadable."""
    if not isinstance(iso, str):
        return 0.0
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def ledger_iso(at: float) -> str:
    """A record's ``t`` (ISO 8601 UTC, milliseconds) from epoch seconds: the inverse of
    :func:`ledger_time` for every ``t`` the writer makes (milliseconds survive the float)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


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
    tail_hash: str = GENESIS
    """The chain hash of the last line read (what the next record's ``prev`` must be)."""
    chained: bool = False
    """Whether the records read so far are hash-chained (a ledger from before the chain is not)."""

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        """The records of the given kinds, in order."""
        return (r for r in self.records if r.get("kind") in kinds)

    def trusted(self, index: int) -> bool:
        """Whether ``records[index]`` comes before any chain break."""
        return self.chain_break is None or index < self.chain_break.index


class Ledger:
    """Appends event records to ``events.jsonl`` (through the file's one writer) and reads them."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Write one record durably (fsync) and return it; ``t`` and ``kind`` come first.
        Blocks until it is on disk (never call it on an event loop: :meth:`append_soon`)."""
        fields.pop(CHAIN_FIELD, None)
        record = {"kind": kind, **fields}
        # Tried even after a failed write (the disk may have room again): a success clears it.
        return writer_for(self.path).submit(record, check=False).wait()

    def append_soon(self, kind: str, **fields: Any) -> Pending:
        """Hand one record to the writer and return at once; its :meth:`Pending.wait` returns the
        record once it is on disk. Raises the error that stopped an earlier record."""
        fields.pop(CHAIN_FIELD, None)
        return writer_for(self.path).submit({"kind": kind, **fields})

    def flush(self) -> None:
        """Wait until every record handed over so far is on disk (raises what stopped one)."""
        writer_for(self.path).flush()

    def read(self) -> LedgerRead:
        """All usable records; unusable lines are skipped and described, never fatal."""
        with contextlib.suppress(OSError):
            # What could not be written is not there to read: the file says the rest.
            self.flush()
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

    def read_first(self) -> LedgerRead:
        """The first record only (the run's start, with its frozen contract's hash): what a
        reader needs before it folds the rest from the state kept beside the ledger."""
        flush_handed(self.path)
        try:
            with self.path.open("rb") as handle:
                line = handle.readline(1 << 20)
        except OSError:
            return LedgerRead((), ())
        read = parse(line.split(b"\n")[0] + b"\n", self.path)
        if not read.records or read.records[0].get("kind") != "run-started":
            return self.read()  # an unusual ledger: read it all, as before
        return read


class Pending:
    """A record handed to the writer: :meth:`wait` returns it once it is on disk."""

    def __init__(self, record: dict[str, Any] | None) -> None:
        self.record = record
        """The record (None: a marker that only waits for the ones before it)."""
        self.error: OSError | None = None
        self._done = threading.Event()

    @property
    def durable(self) -> bool:
        """It is on disk (fsynced)."""
        return self._done.is_set() and self.error is None

    @property
    def settled(self) -> bool:
        """The writer is done with it (on disk, or failed)."""
        return self._done.is_set()

    def wait(self) -> dict[str, Any]:
        """Block until the record is on disk; the record as written (with its chain link)."""
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.record or {}

    def settle(self, error: OSError | None) -> None:
        """The writer is done with it (``error``: why it is not on disk)."""
        self.error = error
        self._done.set()


class LedgerWriter:
    """The one thread that writes a ledger file for this process, records in the order handed."""

    BATCH = 256
    """At most this many records share one lock, one write pass and one fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[Pending] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._last: Pending | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="paella-ledger", daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The writer thread (the only one that writes or fsyncs this ledger)."""
        return self._thread

    def submit(self, record: dict[str, Any] | None, *, check: bool = True) -> Pending:
        """Queue ``record`` behind everything queued before it; with ``check``, raises the error
        of the newest batch written if it failed (the disk is full: the caller stops instead of
        handing over more that cannot be kept)."""
        if check and self._error is not None:
            raise self._error
        with self._lock:  # the queue's order is the order of ``_last`` and of the times
            pending = Pending({"t": utc_now(), **record} if record is not None else None)
            self._queue.put(pending)
            self._last = pending
        return pending

    def flush(self) -> None:
        """Wait until everything submitted so far is on disk."""
        with self._lock:
            last = self._last
        if last is not None:
            last.wait() if last.record is not None else last._done.wait()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            error: OSError | None = None
            try:
                _write_batch(self.path, [p.record for p in batch if p.record is not None])
            except OSError as err:
                error = err
            self._error = error  # a later batch that is written clears it
            for pending in batch:
                pending.settle(error)


def _write_batch(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` in order, each chained to the line before it; one fsync for all."""
    if not records:
        return
    ensure_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        # Writers in two processes (a run and `paella checkpoint`) must not both chain onto
        # the same last line.
        fcntl.flock(fd, fcntl.LOCK_EX)
        _repair_torn_tail(fd)
        previous = _last_line(fd)
        for record in records:
            record[CHAIN_FIELD] = line_hash(previous)
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
            previous = line.encode()
            # One write call per record: O_APPEND keeps concurrent writers' records whole.
            os.write(fd, previous + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _repair_torn_tail(fd: int) -> None:
    # After a crash mid-write the file may end without a newline; start the next record on a
    # fresh line so that only the torn record is lost, never the one written after it.
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")


_WRITERS: dict[Path, LedgerWriter] = {}
_WRITERS_LOCK = threading.Lock()


def writer_for(path: Path) -> LedgerWriter:
    """The process's writer for the ledger at ``path`` (every :class:`Ledger` of it shares it,
    so a read through one sees what another handed over)."""
    key = Path(os.path.abspath(path))
    with _WRITERS_LOCK:
        writer = _WRITERS.get(key)
        if writer is None:
            writer = _WRITERS[key] = LedgerWriter(key)
        return writer


def flush_handed(path: Path) -> None:
    """Wait until every record this process handed over for the ledger at ``path`` is on disk
    (a reader of the file sees them); nothing to wait for when it handed none."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(Path(os.path.abspath(path)))
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.flush()  # what could not be written is not there to read


@atexit.register
def flush_all() -> None:
    """Every record handed over reaches the disk before the process exits normally."""
    with _WRITERS_LOCK:
        writers = list(_WRITERS.values())
    for writer in writers:
        with contextlib.suppress(OSError):
            writer.flush()  # a failure was said when it happened (to append or flush)


def parse(
    data: bytes,
    path: Path,
    *,
    after: str | None = None,
    chained: bool = False,
    first_line: int = 1,
) -> LedgerRead:
    """Validate ``data`` (a whole ledger) line by line and follow its hash chain.

    ``after`` continues a chain: ``data`` is what follows a line whose hash is ``after`` (with
    ``chained``: that part was chained already), and ``first_line`` is its first line's number
    (a reader that folded the rest already)."""
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    chain_break: ChainBreak | None = None
    expected_next = after if after is not None else GENESIS
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            continue
        expected, expected_next = expected_next, line_hash(raw)
        record, why = _decode(raw)
        if record is None:
            last = first_line + len(lines) - 1
            torn = number == last or (number == last - 1 and not lines[-1])
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
    return LedgerRead(tuple(records), tuple(skipped), chain_break, expected_next, chained)


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
