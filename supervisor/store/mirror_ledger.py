"""The mirror's copy of a run's ledger, kept as append-only parts: a save costs the new records,
and checking the repository's ledger against the copy costs the newest part, not the history.

``refs/paella-state/<run-id>`` is a chain of commits (first parents). Each one's tree holds
``events.part``, the ledger's bytes ``[ledger-from, ledger-bytes)`` new since its parent (whole
lines only: a torn last line is not a record yet), and ``contract.toml``, the frozen contract;
its message holds::

    format: 2
    ledger-from: M            where this part starts (its parent's ledger-bytes)
    ledger-bytes: N           how much of the ledger the mirror holds
    part-sha256: ...          sha256 of the ledger's bytes [M, N)
    contract-sha256: ...      sha256 of the frozen contract
    contract-blob: ...        its blob, which the next commit's tree reuses without reading it

A state commit from before the parts (``format`` absent) holds the whole ledger as
``events.jsonl`` with ``ledger-sha256`` of it; the next save chains onto it with a first part
that starts at 0, and a reader stops at it.

Why the newest part is enough for each command's check (:meth:`StateCopy.extended_by`): an
append-only ledger always extends the copy; a ledger cut short is shorter than ``ledger-bytes``;
an edit of a record in the newest part changes its sha256; and the ledger's own hash chain (each
record carries a hash of the line before it) means that rewriting any older record without a
break in the chain rewrites every record after it, the newest part's included. An older record
edited *with* a break in the chain is named by the chain itself, by any reader of the whole
ledger; the mirror's copy is never changed by it (a save only ever appends the bytes after
``ledger-bytes``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from paella_tui.supervisor.store.gitcli import PAELLA_IDENTITY
from paella_tui.supervisor.store.loose_objects import signature, write_loose

FORMAT = "2"
PART_NAME = "events.part"
WHOLE_NAME = "events.jsonl"
"""The whole-ledger blob of a state commit from before the parts."""
CONTRACT_NAME = "contract.toml"
_FIELD = re.compile(r"^([a-z0-9-]+): (\S+)$", re.MULTILINE)
_READ_BLOCK = 1 << 20


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def _int(fields: dict[str, str], key: str) -> int:
    try:
        return max(0, int(fields.get(key, "0")))
    except ValueError:
        return 0


@dataclass(frozen=True)
class StateCopy:
    """What one state commit says of the run's ledger and contract."""

    commit: str
    ledger_bytes: int
    """How much of the ledger the mirror holds (``N``)."""
    contract_sha256: str | None
    parts: bool = False
    """Whether it is a part commit (format 2); else a whole copy from before the parts."""
    part_from: int = 0
    """Where its newest part starts (``M``); 0 for a whole copy."""
    part_sha256: str = ""
    """sha256 of the ledger's bytes ``[part_from, ledger_bytes)``; of the whole copy before."""
    parent: str | None = None
    contract_blob: str | None = None

    @classmethod
    def parse(cls, commit: str, raw: bytes) -> StateCopy:
        """The state copy a commit object (``git cat-file commit``) describes."""
        text = raw.decode(errors="replace")
        head, _, message = text.partition("\n\n")
        parent = next(
            (line[7:].strip() for line in head.splitlines() if line.startswith("parent ")), None
        )
        fields = dict(_FIELD.findall(message))
        parts = fields.get("format") == FORMAT
        size = _int(fields, "ledger-bytes")
        return cls(
            commit=commit,
            ledger_bytes=size,
            contract_sha256=fields.get("contract-sha256"),
            parts=parts,
            part_from=min(_int(fields, "ledger-from"), size) if parts else 0,
            part_sha256=fields.get("part-sha256" if parts else "ledger-sha256", ""),
            parent=parent,
            contract_blob=fields.get("contract-blob"),
        )

    def extended_by(self, path: Path) -> bool:
        """Whether the ledger at ``path`` still begins with what the mirror holds: at least
        ``ledger_bytes`` long, with the newest part's bytes unchanged (the whole copy's, for a
        state from before the parts, read in blocks)."""
        if not path.is_file():
            return False  # missing, a folder, or a FIFO (whose open would wait for a writer)
        try:
            with path.open("rb") as handle:
                if os.fstat(handle.fileno()).st_size < self.ledger_bytes:
                    return False
                handle.seek(self.part_from)
                digest = hashlib.sha256()
                left = self.ledger_bytes - self.part_from
                while left > 0:
                    block = handle.read(min(left, _READ_BLOCK))
                    if not block:
                        return False
                    digest.update(block)
                    left -= len(block)
        except OSError:
            return False
        return digest.hexdigest() == self.part_sha256

    def message(self, run_id: str) -> str:
        """The commit message that records this copy."""
        lines = [
            f"paella state {run_id}",
            "",
            f"format: {FORMAT}",
            f"ledger-from: {self.part_from}",
            f"ledger-bytes: {self.ledger_bytes}",
            f"part-sha256: {self.part_sha256}",
        ]
        if self.contract_sha256:
            lines.append(f"contract-sha256: {self.contract_sha256}")
        if self.contract_blob:
            lines.append(f"contract-blob: {self.contract_blob}")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class NewPart:
    """What a save adds: the ledger's bytes new since the mirror's copy, and the contract."""

    start: int
    data: bytes
    contract: bytes | None
    contract_sha256: str | None

    def state(self, tip: StateCopy | None, contract_blob: str | None) -> StateCopy:
        """The copy the new state commit records (its ``commit`` is not known yet)."""
        return StateCopy(
            commit="",
            ledger_bytes=self.start + len(self.data),
            contract_sha256=self.contract_sha256,
            parts=True,
            part_from=self.start,
            part_sha256=sha256_hex(self.data),
            parent=tip.commit if tip is not None else None,
            contract_blob=contract_blob,
        )


def state_commit(
    out: Callable[[list[str], bytes | None], str],
    run_id: str,
    tip: StateCopy | None,
    part: NewPart,
) -> StateCopy:
    """Write the state commit that adds ``part`` after ``tip`` with git plumbing (``out`` runs
    git where the objects go and returns its stdout), and return what it records. Nothing
    points at it yet: the caller moves the state ref."""
    entries = [f"100644 blob {out(['hash-object', '-w', '--stdin'], part.data)}\t{PART_NAME}"]
    blob = tip.contract_blob if tip is not None else None
    if blob is None and part.contract is not None:
        blob = out(["hash-object", "-w", "--stdin"], part.contract)
    if blob is not None:
        entries.append(f"100644 blob {blob}\t{CONTRACT_NAME}")
    tree = out(["mktree"], "".join(f"{e}\n" for e in entries).encode())
    parents = ["-p", tip.commit] if tip is not None else []
    copy = part.state(tip, blob)
    commit = out(["commit-tree", tree, *parents], copy.message(run_id).encode())
    return replace(copy, commit=commit)


def state_commit_loose(
    objects: Path,
    hash_algo: str,
    run_id: str,
    tip: StateCopy | None,
    part: NewPart,
    *,
    when: tuple[int, str] | None = None,
) -> StateCopy:
    """:func:`state_commit` with no git process: the same blob, tree and commit (paella's
    identity, ``when`` or now), written as loose objects into ``objects``."""
    entries = [(PART_NAME, write_loose(objects, "blob", part.data, hash_algo))]
    blob = tip.contract_blob if tip is not None else None
    if blob is None and part.contract is not None:
        blob = write_loose(objects, "blob", part.contract, hash_algo)
    if blob is not None:
        entries.append((CONTRACT_NAME, blob))
    # A tree's entries sorted by name (files only here), each "mode name\0<raw id>".
    tree_data = b"".join(
        b"100644 " + name.encode() + b"\0" + bytes.fromhex(oid) for name, oid in sorted(entries)
    )
    tree = write_loose(objects, "tree", tree_data, hash_algo)
    copy = part.state(tip, blob)
    author = signature(
        PAELLA_IDENTITY["GIT_AUTHOR_NAME"], PAELLA_IDENTITY["GIT_AUTHOR_EMAIL"], when
    )
    committer = signature(
        PAELLA_IDENTITY["GIT_COMMITTER_NAME"], PAELLA_IDENTITY["GIT_COMMITTER_EMAIL"], when
    )
    head = f"tree {tree}\n" + (f"parent {tip.commit}\n" if tip is not None else "")
    text = f"{head}author {author}\ncommitter {committer}\n\n{copy.message(run_id)}"
    return replace(copy, commit=write_loose(objects, "commit", text.encode(), hash_algo))


def new_part(tip: StateCopy | None, ledger: Path, contract: Path) -> NewPart | str:
    """The bytes to add after ``tip`` (the mirror's newest state), or why the run's files must
    not be added: the ledger no longer extends the copy, or the frozen contract differs from it
    (the mirror keeps the last good copy)."""
    if tip is not None and not ledger.is_file():
        return "the run's ledger is not a file: the mirror keeps its copy"
    if tip is not None and not tip.extended_by(ledger):
        return "the ledger no longer extends the mirror's copy: the mirror keeps its copy"
    # A part chains onto a part commit; onto a whole copy from before, the first part is the
    # whole ledger (read once, when a run from before the parts is first saved again).
    start = tip.ledger_bytes if tip is not None and tip.parts else 0
    try:
        data = b""
        if ledger.is_file():
            with ledger.open("rb") as handle:
                handle.seek(start)
                data = handle.read()
        text = contract.read_bytes() if contract.is_file() else None
    except OSError:
        return f"the run's state in {ledger.parent} is unreadable: the mirror keeps its copy"
    data = data[: data.rfind(b"\n") + 1]  # whole lines: a torn last line is not a record yet
    sha = sha256_hex(text) if text is not None else None
    if tip is not None and tip.contract_sha256 and sha != tip.contract_sha256:
        return "the frozen contract differs from the mirror's copy: the mirror keeps its copy"
    return NewPart(start, data, text, sha or (tip.contract_sha256 if tip else None))


def assemble(chain: list[tuple[StateCopy, bytes]]) -> bytes | None:
    """The whole ledger from a state chain (newest first: each copy with its part, or with the
    whole ledger for a copy from before the parts), or None when the parts do not fit together."""
    pieces: list[bytes] = []
    expected_end: int | None = None
    for copy, data in chain:
        if expected_end is not None and copy.ledger_bytes != expected_end:
            return None
        if sha256_hex(data) != copy.part_sha256 or len(data) != (
            copy.ledger_bytes - copy.part_from
        ):
            return None
        pieces.append(data)
        if not copy.parts or copy.part_from == 0:
            return b"".join(reversed(pieces))
        expected_end = copy.part_from
    return None
