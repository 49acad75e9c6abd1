"""The run's state while its loop runs: the fold of its ledger, current with every event emitted.

The loop hands its records to the ledger's writer thread (:meth:`Ledger.append_soon`) and never
waits for the disk, so the file can lag behind the events. The state is therefore the fold of
the file so far (with what others wrote there: a checkpoint's record, a command's) plus the
records this loop handed over and the writer has not settled yet, folded in memory from the
very record the writer will write (its time included). Once the writer has settled them all,
the file is folded again from where the file's fold stood: the in-memory part is replaced by
what is on disk, so the two never disagree for longer than a write takes.
"""

from __future__ import annotations

import time

from paella_tui.supervisor.run.ledger import Pending, ledger_time
from paella_tui.supervisor.run.record_events import event_of
from paella_tui.supervisor.run.state import RunState
from paella_tui.supervisor.run.state_handlers import apply
from paella_tui.supervisor.run.state_store import (
    SAVE_AFTER_S,
    SAVE_EVERY,
    Folded,
    StateStore,
)


class LiveState:
    """A running loop's fold of its ledger, kept in ``state.json`` now and then."""

    def __init__(self, store: StateStore, folded: Folded) -> None:
        self._store = store
        self._folded = folded
        """The fold of the file (its position is the file's)."""
        self._state = folded.state
        """``_folded``'s state with the unsettled records folded in."""
        self._unsettled: list[Pending] = []
        self._saved_at = time.monotonic()

    @property
    def state(self) -> RunState:
        """The state with every record handed over so far."""
        return self._state

    def before_handing(self) -> None:
        """Called before the next record is handed to the writer: once the writer has settled
        every record folded in memory, fold the file instead (with what others wrote there).

        Before, not after: a catch-up waits for whatever this process handed the writer, so
        after the hand-over it would wait for the new record's fsync on the event loop, and
        read it from the file as well as fold it in memory (one record counted twice)."""
        if all(p.settled for p in self._unsettled):
            self._unsettled.clear()
            self._catch_up()

    def handed(self, pending: Pending | None) -> None:
        """Take in the newest record handed to the writer (None: an event with no record)."""
        if pending is not None and pending.record is not None:
            record = dict(pending.record)  # the writer adds its chain link meanwhile
            trusted = self._folded.chain_break is None
            event = event_of(record, ledger_time(record.get("t")))
            self._state = apply(self._state, event, trusted=trusted)
            self._unsettled.append(pending)

    def settle(self) -> None:
        """Everything handed over is on disk (the caller flushed): fold the file, keep it."""
        self._unsettled.clear()
        self._catch_up()
        self._store.save(self._folded)  # the next command folds nothing

    def _catch_up(self) -> None:
        before = self._folded.position.records
        self._folded = self._store.catch_up(self._folded)
        self._state = self._folded.state
        now = time.monotonic()
        moved = self._folded.position.records != before
        if moved and (
            self._folded.position.records // SAVE_EVERY != before // SAVE_EVERY
            or now - self._saved_at >= SAVE_AFTER_S
        ):
            # Kept for the next command and the status bar (which reads only this file).
            self._store.save(self._folded)
            self._saved_at = now
