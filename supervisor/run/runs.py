"""Runs on disk: ids, folders, the frozen contract copy, the ``current`` pointer.

Layout (SPEC 4), under the workspace's state dir::

    runs/<run-id>/contract.toml   frozen copy of paella.toml (its sha256 is in the ledger)
    runs/<run-id>/events.jsonl    the ledger
    current                       the id of the newest run
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.base.files import ensure_dir, read_regular_file, write_atomic
from paella_tui.supervisor.run.ledger import Ledger, LedgerRead
from paella_tui.supervisor.store.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.contract.model import Contract

RUN_ID_PATTERN = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run id: ``YYYYmmdd-HHMMSS-xxxx`` in UTC with four random hex digits."""
    import secrets  # here: only a new run needs it (base64, hmac, random: ~2 ms a command)

    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Run:
    """One supervised job toward the contract: its folder, its ledger, its git refs."""

    workspace: Workspace
    run_id: str

    @property
    def dir(self) -> Path:
        """The run's state folder."""
        return self.workspace.state_dir / "runs" / self.run_id

    @property
    def ledger(self) -> Ledger:
        """The run's append-only event record."""
        return Ledger(self.dir / "events.jsonl")

    @property
    def contract_copy(self) -> Path:
        """The frozen copy of ``paella.toml`` the run is held to."""
        return self.dir / "contract.toml"

    @property
    def ref_prefix(self) -> str:
        """The git ref namespace holding this run's checkpoints and salvage snapshots."""
        return f"{self.workspace.ref_namespace}/{self.run_id}"

    def load_contract(self, read: LedgerRead | None = None) -> Contract | None:
        """The frozen contract, verified against its recorded sha256 (a changed copy gives way to
        the mirror's); None for a manual run, or when no trusted copy is left (see integrity)."""
        from paella_tui.supervisor.run.frozen_contract import verified_contract

        # The first record holds the contract's hash: reading the whole ledger here made every
        # command that loads the contract (a checkpoint's size cap) cost the history.
        read = read if read is not None else self.ledger.read_first()
        text = verified_contract(self.workspace, self.run_id, self.contract_copy, read).text
        if text is None:
            return None
        # The reader only when there is a contract: a manual run's checkpoint never parses one.
        from paella_tui.supervisor.contract.loader import parse_contract

        return parse_contract(
            text, self.contract_copy, default_name=self.workspace.root.name, frozen=True
        )


class RunStore:
    """Creates, finds and deletes runs in a workspace's state dir."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.state_dir = workspace.state_dir
        self.runs_dir = self.state_dir / "runs"
        self.restored: str | None = None
        """What was brought back from the mirror, for a loud warning (``history`` drift)."""

    def run_ids(self) -> list[str]:
        """Every run id on disk, oldest first."""
        try:
            names = [p.name for p in self.runs_dir.iterdir()]
        except OSError:
            return []
        return sorted(
            name for name in names if RUN_ID_PATTERN.match(name) and (self.runs_dir / name).is_dir()
        )

    def _restore_from_mirror(self) -> None:
        from paella_tui.supervisor.run.frozen_contract import restore_runs
        from paella_tui.supervisor.store.mirror import Mirror

        mirror = Mirror.for_workspace(self.workspace)
        if mirror.local is not None and not (mirror.local / "HEAD").is_file():
            return
        try:
            ensure_dir(self.runs_dir)
        except OSError:
            return
        restored = restore_runs(self.runs_dir, mirror)
        if restored:
            self.restored = (
                f"paella's state folder {self.state_dir} had lost its runs: "
                f"{len(restored)} run(s) restored from the mirror ({mirror.describe()})"
            )
            write_atomic(self.state_dir / "current", restored[-1] + "\n")

    def get(self, run_id: str) -> Run:
        """The run with this id, or a UsageError naming the runs that exist."""
        if not RUN_ID_PATTERN.match(run_id) or not (self.runs_dir / run_id).is_dir():
            known = ", ".join(self.run_ids()[-5:]) or "none yet"
            raise UsageError(f"no run {run_id!r} in {self.runs_dir}", hint=f"runs: {known}")
        return Run(self.workspace, run_id)

    def current(self) -> Run | None:
        """The newest run (the ``current`` pointer, else the newest folder), or None.

        When the state folder lost every run (``rm -rf .git/paella``), the runs the mirror holds
        are brought back first, and ``restored`` says so.
        """
        pointer = self.state_dir / "current"
        try:
            run_id = read_regular_file(pointer, 4096).decode("ascii").strip()
        except (OSError, ValueError):
            # Missing, a folder, unreadable or not text: fall back to the newest run folder.
            run_id = ""
        if not self.run_ids():
            self._restore_from_mirror()
        if RUN_ID_PATTERN.match(run_id) and (self.runs_dir / run_id).is_dir():
            return Run(self.workspace, run_id)
        ids = self.run_ids()
        return Run(self.workspace, ids[-1]) if ids else None

    def create(self, contract: Contract | None, *, manual: bool, reason: str = "") -> Run:
        """Open a new run: its folder (0700), the frozen contract, the first ledger record."""
        ensure_dir(self.runs_dir)
        os.chmod(self.state_dir, 0o700)
        while True:
            run = Run(self.workspace, new_run_id())
            try:
                run.dir.mkdir(mode=0o700)
                break
            except FileExistsError:
                continue
        contract_info = None
        if contract is not None:
            write_atomic(run.contract_copy, contract.text)
            contract_info = {
                "path": str(contract.path),
                "sha256": hashlib.sha256(contract.text.encode()).hexdigest(),
            }
        head = self.workspace.head()
        run.ledger.append(
            "run-started",
            run_id=run.run_id,
            manual=manual,
            reason=reason,
            contract=contract_info,
            workspace=str(self.workspace.root),
            head=head.commit,
            branch=head.branch,
            paella_pid=os.getpid(),
        )
        write_atomic(self.state_dir / "current", run.run_id + "\n")
        save_to_mirror(run)
        return run

    def current_or_manual(self, reason: str) -> Run:
        """The newest run, or a new manual run opened to hold ``reason`` (e.g. a checkpoint)."""
        run = self.current()
        if run is not None:
            return run
        from paella_tui.supervisor.contract.loader import load_contract
        from paella_tui.supervisor.contract.model import CONTRACT_FILE
        from paella_tui.supervisor.contract.problems import ContractError

        contract_path = self.workspace.root / CONTRACT_FILE
        contract = None
        if contract_path.exists():
            # A checkpoint needs no task: a contract still being written (no prompt yet) or
            # broken opens the manual run without one (size cap and byproducts at defaults).
            with contextlib.suppress(ContractError):
                contract = load_contract(contract_path)
        return self.create(contract, manual=True, reason=reason)

    def delete(self, run: Run) -> None:
        """Remove a run's state folder (and its mirror copy) and repoint ``current``."""
        from paella_tui.supervisor.store.mirror import Mirror

        Mirror.for_workspace(self.workspace).forget(run.run_id)
        shutil.rmtree(run.dir)
        remaining = self.run_ids()
        pointer = self.state_dir / "current"
        if remaining:
            write_atomic(pointer, remaining[-1] + "\n")
        elif pointer.exists():
            pointer.unlink()


_MIRROR_LOCK = threading.Lock()
"""One push at a time from this process: the state copies must land in the order they were taken."""


def save_to_mirror(
    run: Run, new_refs: dict[str, str] | None = None, *, state: bool = True, record: bool = True
) -> str | None:
    """Copy ``new_refs`` and (with ``state``) the run's ledger and contract to the mirror; a
    failure is returned, never raised, and (with ``record``) kept in the ledger as
    ``mirror-failed``."""
    from paella_tui.supervisor.store.mirror import Mirror

    with contextlib.suppress(OSError):
        run.ledger.flush()  # the copy carries every record handed over so far
    with _MIRROR_LOCK:
        problem = Mirror.for_workspace(run.workspace).save(
            run.run_id, run.dir, new_refs, state=state
        )
    if problem is not None and record:
        run.ledger.append("mirror-failed", error=problem)
    return problem


def save_to_mirror_soon(run: Run) -> None:
    """``save_to_mirror(run)`` in a background thread: a checkpoint is news at once, and its
    record reaches the mirror a moment later (any later save carries it too)."""
    # It never writes the ledger: a late thread must not add to a ledger its caller has
    # moved on from. A failure shows at the next synchronous save.
    thread = threading.Thread(
        target=save_to_mirror,
        args=(run,),
        kwargs={"record": False},
        name="paella-mirror",
        daemon=True,
    )
    _PENDING.append(thread)
    thread.start()


_PENDING: list[threading.Thread] = []


def wait_for_mirror(timeout: float = 30.0) -> None:
    """Let the background mirror saves finish (a command calls this before it exits)."""
    while _PENDING:
        _PENDING.pop().join(timeout)
