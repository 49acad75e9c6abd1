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
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.supervisor.errors import UsageError
from paella_tui.supervisor.files import ensure_dir, write_atomic
from paella_tui.supervisor.ledger import Ledger
from paella_tui.supervisor.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.contract import Contract

RUN_ID_PATTERN = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run id: ``YYYYmmdd-HHMMSS-xxxx`` in UTC with four random hex digits."""
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

    def load_contract(self) -> Contract | None:
        """The frozen contract, or None for a manual run started without one."""
        if not self.contract_copy.exists():
            return None
        from paella_tui.supervisor.contract import load_contract

        return load_contract(self.contract_copy, default_name=self.workspace.root.name)


class RunStore:
    """Creates, finds and deletes runs in a workspace's state dir."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.state_dir = workspace.state_dir
        self.runs_dir = self.state_dir / "runs"

    def run_ids(self) -> list[str]:
        """Every run id on disk, oldest first."""
        if not self.runs_dir.is_dir():
            return []
        return sorted(p.name for p in self.runs_dir.iterdir() if RUN_ID_PATTERN.match(p.name))

    def get(self, run_id: str) -> Run:
        """The run with this id, or a UsageError naming the runs that exist."""
        if not RUN_ID_PATTERN.match(run_id) or not (self.runs_dir / run_id).is_dir():
            known = ", ".join(self.run_ids()[-5:]) or "none yet"
            raise UsageError(f"no run {run_id!r} in {self.runs_dir}", hint=f"runs: {known}")
        return Run(self.workspace, run_id)

    def current(self) -> Run | None:
        """The newest run (the ``current`` pointer, else the newest folder), or None."""
        pointer = self.state_dir / "current"
        try:
            run_id = pointer.read_text().strip()
        except FileNotFoundError:
            run_id = ""
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
        return run

    def current_or_manual(self, reason: str) -> Run:
        """The newest run, or a new manual run opened to hold ``reason`` (e.g. a checkpoint)."""
        run = self.current()
        if run is not None:
            return run
        from paella_tui.supervisor.contract import CONTRACT_FILE, ContractError, load_contract

        contract_path = self.workspace.root / CONTRACT_FILE
        contract = None
        if contract_path.exists():
            # A checkpoint needs no task: a contract still being written (no prompt yet) or
            # broken opens the manual run without one (size cap and byproducts at defaults).
            with contextlib.suppress(ContractError):
                contract = load_contract(contract_path)
        return self.create(contract, manual=True, reason=reason)

    def delete(self, run: Run) -> None:
        """Remove a run's state folder and repoint ``current`` at the newest run left."""
        shutil.rmtree(run.dir)
        remaining = self.run_ids()
        pointer = self.state_dir / "current"
        if remaining:
            write_atomic(pointer, remaining[-1] + "\n")
        elif pointer.exists():
            pointer.unlink()
