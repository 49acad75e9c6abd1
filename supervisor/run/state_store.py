"""The folded state of a run kept beside its ledger, so that a command folds only new records.

``state.json`` holds the :class:`~paella_tui.supervisor.run.state.RunState` folded so far, with
the ledger's byte offset it covers and the chain hash of the last line folded. A reader checks
that the ledger still has that line at that offset (the hash chain makes any edit before it show
there), folds the records written since, and saves the result. The file is rebuilt from the
whole ledger when it is missing, unreadable, of another format, of another contract, or when it
disagrees with the ledger: the agent can write there, so it is data to check, never to trust.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from paella_tui.supervisor.base.files import write_atomic
from paella_tui.supervisor.base.state_seal import seal_facts, sealed, write_seal
from paella_tui.supervisor.run import state_codec
from paella_tui.supervisor.run.bar_facts import FORMAT as BAR_FORMAT
from paella_tui.supervisor.run.bar_facts import bar_facts, kept_identity
from paella_tui.supervisor.run.ledger import (
    GENESIS,
    MAX_LEDGER_BYTES,
    ChainBreak,
    LedgerRead,
    flush_handed,
    ledger_time,
    line_hash,
    parse,
)
from paella_tui.supervisor.run.record_events import event_of
from paella_tui.supervisor.run.state import ContractSpec, RunState, initial
from paella_tui.supervisor.run.state_handlers import apply
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

STATE_FILE = "state.json"
FORMAT = 3
MAX_WARNINGS = 100
SAVE_EVERY = 500
"""A live run keeps its state on disk every this many records (a reader folds the rest)..."""
SAVE_AFTER_S = 5.0
"""...and at most this long after a record (the status bar reads the kept state alone)."""
_MAX_LINE = 1 << 22
"""The longest last line looked for backwards when checking the kept position."""


@dataclass(frozen=True)
class LedgerPosition:
    """How far a fold has read the ledger."""

    offset: int = 0
    tail_hash: str = GENESIS
    chained: bool = False
    lines: int = 0
    records: int = 0


@dataclass(frozen=True)
class Folded:
    """A run's state and where in the ledger it stands, with what the reads had to skip."""

    state: RunState
    position: LedgerPosition = field(default_factory=LedgerPosition)
    warnings: tuple[str, ...] = ()
    chain_break: ChainBreak | None = None
    torn: str | None = None
    """A last line without its newline (paella stopped mid-write), said but never kept: the
    next record written starts on a fresh line, and the torn one is then skipped as bad."""

    @property
    def said(self) -> tuple[str, ...]:
        """Every warning about the ledger, the torn last line included."""
        return (*self.warnings, self.torn) if self.torn else self.warnings


# What this process folded last, per ledger: a command that asks twice reads nothing twice.
_MEMO: dict[Path, tuple[tuple[int, int, int], Folded]] = {}


class StateStore:
    """Folds a run's ledger incrementally, keeping the result in ``state.json`` beside it."""

    def __init__(self, ledger_path: Path) -> None:
        self.ledger_path = ledger_path
        self.path = ledger_path.with_name(STATE_FILE)

    def empty(self) -> Folded:
        """The state before any record."""
        return Folded(initial())

    def load(self, *, save: bool = True, spec: ContractSpec | None = None) -> Folded:
        """The state of the whole ledger: the kept state caught up, or a fold from the start
        (with ``spec``, the contract's, kept with it for a reader that has no contract)."""
        flush_handed(self.ledger_path)  # the memo's stamp is the file's: what is handed over first
        stamp = self._stamp()
        memo = _MEMO.get(self.ledger_path)
        fresh = memo is not None and stamp is not None and memo[0] == stamp
        if memo is not None and fresh and (spec is None or memo[1].state.spec == spec):
            return memo[1]
        kept = self._read_kept()
        folded = self.catch_up(kept if kept is not None else self.empty())
        new_spec = spec is not None and folded.state.spec != spec
        if spec is not None and new_spec:
            folded = replace(folded, state=replace(folded.state, spec=spec))
        if save and (
            kept is None
            or new_spec
            or folded.position != kept.position
            or not self._bar_facts_kept(folded)
        ):
            self.save(folded)
        if stamp is not None and folded.position.offset == stamp[0]:
            _MEMO[self.ledger_path] = (stamp, folded)
        return folded

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.ledger_path)
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    def catch_up(self, folded: Folded) -> Folded:
        """``folded`` with the records written since it was folded (from the start when the
        ledger no longer holds what it folded)."""
        # What this process handed to the ledger's writer thread is read from the file too.
        flush_handed(self.ledger_path)
        try:
            fd = os.open(self.ledger_path, os.O_RDONLY)
        except FileNotFoundError:
            return self.empty()
        except OSError as err:
            return replace(self.empty(), warnings=(f"{self.ledger_path}: cannot be read ({err})",))
        try:
            size = os.fstat(fd).st_size
            if size > MAX_LEDGER_BYTES:
                return replace(
                    self.empty(), warnings=(f"{self.ledger_path}: over {MAX_LEDGER_BYTES} bytes",)
                )
            pos = folded.position
            if pos.offset and (size < pos.offset or not self._holds(fd, pos)):
                folded, pos = self.empty(), LedgerPosition()
            if size == pos.offset:
                return replace(folded, torn=None)
            data = os.pread(fd, size - pos.offset, pos.offset)
        finally:
            os.close(fd)
        # A line without its newline is torn (a record is written with its newline in one call).
        end = data.rfind(b"\n") + 1
        folded = self._fold_chunk(folded, data[:end]) if end else replace(folded, torn=None)
        if data[end:].strip():
            line = folded.position.lines + 1
            torn = f"{self.ledger_path}:{line}: skipped a torn last line (paella stopped mid-write)"
            folded = replace(folded, torn=torn)
        return folded

    def _holds(self, fd: int, pos: LedgerPosition) -> bool:
        """Whether the ledger's last non-blank line before ``pos.offset`` hashes to its tail."""
        window = 1 << 16
        while True:
            start = max(0, pos.offset - window)
            block = os.pread(fd, pos.offset - start, start)
            if not block.endswith(b"\n"):
                return False
            lines = [line for line in block[:-1].split(b"\n") if line.strip()]
            complete = start == 0 or len(lines) > 1
            if lines and complete:
                return line_hash(lines[-1]) == pos.tail_hash
            if start == 0:
                return pos.tail_hash == GENESIS
            if window >= _MAX_LINE:
                return False
            window *= 4

    def _fold_chunk(self, folded: Folded, chunk: bytes) -> Folded:
        pos = folded.position
        read = parse(
            chunk,
            self.ledger_path,
            after=pos.tail_hash,
            chained=pos.chained,
            first_line=pos.lines + 1,
        )
        state = folded.state
        broken = folded.chain_break is not None
        for index, record in enumerate(read.records):
            trusted = not broken and read.trusted(index)
            state = apply(state, event_of(record, ledger_time(record.get("t"))), trusted=trusted)
        chain_break = folded.chain_break
        if chain_break is None and read.chain_break is not None:
            new = read.chain_break
            chain_break = ChainBreak(new.line, pos.records + new.index, new.reason)
        warnings = (*folded.warnings, *read.skipped)[-MAX_WARNINGS:]
        position = LedgerPosition(
            offset=pos.offset + len(chunk),
            tail_hash=read.tail_hash,
            chained=read.chained,
            lines=pos.lines + chunk.count(b"\n"),
            records=pos.records + len(read.records),
        )
        return Folded(state, position, warnings, chain_break)

    # --- the kept file --------------------------------------------------------------------

    def save(self, folded: Folded) -> None:
        """Keep ``folded`` beside the ledger (best effort: a reader that cannot write folds)."""
        body = {
            "format": FORMAT,
            "position": state_codec.encode(folded.position),
            "warnings": list(folded.warnings),
            "chain_break": state_codec.encode(folded.chain_break),
            "state": state_codec.encode(folded.state),
        }
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        with contextlib.suppress(OSError):
            # No fsync: the file is checked against the ledger at every read (the ledger's
            # records are durable), and whatever a crash leaves of it is caught up or rebuilt.
            write_atomic(self.path, data, durable=False)
            # Statted after the rename (which sets its ctime): the file as the seal vouches for it.
            facts = bar_facts(folded.state, folded.position.offset, os.stat(self.path))
            write_seal(self.path, data, facts)

    def _bar_facts_kept(self, folded: Folded) -> bool:
        """Whether the seal holds the status bar's facts of the kept file as it is (a seal
        written before the facts were, or a file touched since, is written again)."""
        if not folded.state.spec.known:
            return True  # no facts without the contract: the status bar takes the ordinary way
        facts = seal_facts(self.path)
        try:
            return (
                facts is not None
                and facts.get("facts") == BAR_FORMAT
                and facts.get("kept") == kept_identity(os.stat(self.path))
            )
        except OSError:
            return False

    def _read_kept(self) -> Folded | None:
        try:
            data = self.path.read_bytes() if self.path.is_file() else None
        except OSError:
            return None
        if data is None or not sealed(self.path, data):
            return None  # not what paella wrote last (or no seal): fold the ledger again
        try:
            return self._decode(json.loads(data))
        except (ValueError, TypeError, KeyError, RecursionError):
            return None  # unreadable or forged in shape: fold the ledger again

    def _decode(self, body: Any) -> Folded | None:
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            return None
        state = state_codec.decode(RunState, body["state"])
        position = state_codec.decode(LedgerPosition, body["position"])
        raw_break = body["chain_break"]
        chain_break = None if raw_break is None else state_codec.decode(ChainBreak, raw_break)
        warnings = state_codec.decode(_Warnings, {"lines": body["warnings"]}).lines
        if state.folded != position.records:
            return None
        if position.offset < 0 or position.records < 0:
            return None
        return Folded(state, position, warnings, chain_break)


@dataclass(frozen=True)
class _Warnings:
    lines: tuple[str, ...]


def fold_records(records: Iterable[Mapping[str, Any]]) -> RunState:
    """The state of a sequence of (validated) ledger records, all trusted."""
    state = initial()
    for record in records:
        state = apply(state, event_of(record, ledger_time(record.get("t"))))
    return state


def snapshot_read(state: RunState, only: Collection[str] | None = None) -> LedgerRead:
    """The state's snapshot records as a ledger read: the trusted ones first, then (after a
    chain break) the ones recorded after the ledger's hash chain broke (``only``: the records
    of these refs alone)."""

    def row(s: SnapshotRecord) -> dict[str, Any]:
        kind = "checkpoint" if s.kind == "checkpoints" else "salvage"
        return {"kind": kind, "ref": s.ref, "commit": s.commit, "tree": s.tree}

    snapshots = [s for s in (*state.checkpoints, *state.salvage) if only is None or s.ref in only]
    untrusted = state.untrusted_refs
    good = [row(s) for s in snapshots if s.ref not in untrusted]
    bad = [row(s) for s in snapshots if s.ref in untrusted]
    chain_break = ChainBreak(0, len(good), "recorded after a break") if bad else None
    return LedgerRead(tuple(good + bad), (), chain_break)
