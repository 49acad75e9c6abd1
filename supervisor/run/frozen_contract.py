"""The contract a run is held to, as frozen at its start: its text verified against the sha256
the ledger recorded (and the mirror's copy), and the runs brought back from the mirror. Knows no
:class:`~paella_tui.supervisor.run.runs.Run` (which loads its contract through this), so the two
import in one direction."""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from paella_tui.supervisor.base.files import read_regular_file, write_atomic
from paella_tui.supervisor.run.ledger import LedgerRead, utc_now
from paella_tui.supervisor.store.mirror import CONTRACT_NAME, LEDGER_NAME, Mirror
from paella_tui.supervisor.store.workspace import Workspace


@dataclass
class FrozenContract:
    """The text a run is held to, and what was wrong with the copy in the repository."""

    text: str | None
    findings: list[str] = field(default_factory=list)


def recorded_contract_sha(read: LedgerRead) -> str | None:
    """The sha256 of the frozen contract as the run's first (trusted) ``run-started`` says."""
    for index, record in enumerate(read.records):
        if record.get("kind") == "run-started":
            if not read.trusted(index):
                return None
            info = record.get("contract")
            sha = info.get("sha256") if isinstance(info, dict) else None
            return sha if isinstance(sha, str) else None
    return None


def verified_contract(
    workspace: Workspace, run_id: str, path: Path, read: LedgerRead, *, restore: bool = False
) -> FrozenContract:
    """The frozen contract's text, verified against its recorded sha256 and the mirror's copy.

    A copy that differs from the recorded hash is drift: the mirror's copy (when its hash is the
    recorded one) is the contract the run is judged by, and with ``restore`` it is put back.
    """
    try:
        data: bytes | None = path.read_bytes() if path.is_file() else None
    except OSError:
        data = None
    recorded = recorded_contract_sha(read)
    if data is not None and recorded is not None and sha256_hex(data) == recorded:
        return FrozenContract(data.decode("utf-8", errors="replace"))  # the common case: no git
    mirror = Mirror.for_workspace(workspace)
    copy = mirror.state(run_id)
    expected = recorded or (copy.contract_sha256 if copy is not None else None)
    if expected is None:
        # No hash anywhere: a manual run (no contract), or a ledger from before hashes.
        return FrozenContract(data.decode("utf-8", errors="replace") if data is not None else None)
    if data is not None and sha256_hex(data) == expected:
        return FrozenContract(data.decode("utf-8", errors="replace"))
    what = "is missing" if data is None else "was changed after the run started"
    findings = [
        f"the run's frozen contract {path} {what} (its sha256 is no longer the one recorded)"
    ]
    mirrored = mirror.read_file(run_id, CONTRACT_NAME)
    if mirrored is not None and sha256_hex(mirrored) == expected:
        findings[0] += f"; the run is judged by the mirror's copy ({mirror.describe()})"
        if restore:
            with contextlib.suppress(OSError):
                if data is not None:
                    write_atomic(path.with_name(f"contract.toml.changed-{stamp()}"), data)
                write_atomic(path, mirrored)
                findings[0] += ", restored"
        return FrozenContract(mirrored.decode("utf-8", errors="replace"), findings)
    from paella_tui.supervisor.contract.model import MAX_CONTRACT_BYTES  # the rare path only

    live = workspace.root / "paella.toml"
    with contextlib.suppress(OSError, ValueError):
        text = read_regular_file(live, MAX_CONTRACT_BYTES)
        if sha256_hex(text) == expected:
            findings[0] += "; paella.toml still holds the frozen text, so the run is judged by it"
            return FrozenContract(text.decode("utf-8", errors="replace"), findings)
    findings[0] += "; no trusted copy is left (not in the mirror, not paella.toml)"
    return FrozenContract(None, findings)


def restore_runs(run_dir_parent: Path, mirror: Mirror) -> list[str]:
    """Bring back from the mirror the state folders of runs missing from ``runs/``."""
    restored: list[str] = []
    for run_id in mirror.run_ids():
        folder = run_dir_parent / run_id
        if folder.exists():
            continue
        files = {name: mirror.read_file(run_id, name) for name in (LEDGER_NAME, CONTRACT_NAME)}
        if files[LEDGER_NAME] is None:
            continue
        try:
            folder.mkdir(mode=0o700, parents=True)
            for name, data in files.items():
                if data is not None:
                    write_atomic(folder / name, data)
        except OSError:
            continue
        restored.append(run_id)
    return restored


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def stamp() -> str:
    """Now, for a file name (``20261201T150000Z``-like)."""
    return utc_now().replace(":", "").replace("-", "").replace(".", "")
