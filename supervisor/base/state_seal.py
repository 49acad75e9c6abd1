"""The seal of a run's kept state: its sha256, kept where the agent's work tree is not.

``state.json`` (the fold of a run's ledger) lives beside the ledger in ``.git/paella``, which the
agent can write. Checking it against the ledger's position (offset, records, the chain hash of
the last line folded) catches a stale or cut file, not a forged one: a ``state.json`` whose
gates all say "pass", or with a checkpoint left out, keeps the same position. So every writer
of the file also writes its sha256 under paella's state home (``$XDG_STATE_HOME/paella/seals``,
beside the mirrors, outside the run), keyed by the run folder's real path, and a reader takes
the file only when the two agree; otherwise it folds the ledger again (the truth), and the
status bar takes the ordinary way. A crash between the two writes costs one full fold.

A seal is text: the digest on its first line, then ``key value`` lines, the facts its writer
kept with it (:func:`write_seal`'s ``facts``): what ``paella status --tmux``'s line needs, so the
status bar reads this one small file, trusted as the seal is, and neither parses nor hashes a
``state.json`` that grows with the run (:mod:`~paella_tui.supervisor.run.bar_facts`).

This module loads nothing of the engine, nor ``contextlib``: the status bar's line reads it too.
"""

from __future__ import annotations

import os

# Not `typing.TYPE_CHECKING`, and `pathlib` only where a Path is made: the status bar's line reads
# seals, and `typing` and `pathlib` are ~10 ms of its start (mypy reads any TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

SEALS = "seals"
"""The folder of seals in ``<state home>/paella``."""


def _sha256(data: bytes) -> str:
    """The sha256 of ``data`` in hex. CPython's own implementation when it has one: ``hashlib``
    loads OpenSSL (about 4 ms), and the status bar's line pays every millisecond of its start."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return str(sha256(data).hexdigest())


def _home() -> str:
    value = os.environ.get("XDG_STATE_HOME", "")
    return (
        value if os.path.isabs(value) else os.path.join(os.path.expanduser("~"), ".local", "state")
    )


def state_home() -> Path:
    """``$XDG_STATE_HOME`` (an absolute path), else ``~/.local/state``."""
    from pathlib import Path

    return Path(_home())


def _seal_file(kept: str | os.PathLike[str]) -> str:
    where = os.path.realpath(os.path.dirname(os.fspath(kept)))
    return os.path.join(
        _home(), "paella", SEALS, _sha256(where.encode(errors="surrogateescape"))[:32]
    )


def seal_path(kept: str | os.PathLike[str]) -> Path:
    """Where the seal of the kept state file ``kept`` lives."""
    from pathlib import Path

    return Path(_seal_file(kept))


def write_seal(
    kept: str | os.PathLike[str], data: bytes, facts: Mapping[str, str] | None = None
) -> None:
    """Record ``data`` (what was just written to ``kept``) as the kept state, with ``facts``
    (one-line keys and values, kept beside the digest for :func:`seal_facts`), best effort."""
    # Imported here: the status bar's line only reads seals, and loads no more than it must.
    import contextlib

    from paella_tui.supervisor.base.files import write_atomic

    lines = [_sha256(data)]
    for key, value in (facts or {}).items():
        if not key or any(c in key for c in " \n") or "\n" in value:
            raise ValueError(f"a seal fact is one line, its key one word: {key!r} {value!r}")
        lines.append(f"{key} {value}")
    # Without a seal the next reader folds the ledger again: nothing is lost but time.
    with contextlib.suppress(OSError):
        write_atomic(seal_path(kept), "\n".join(lines).encode() + b"\n", durable=False)


def _read(kept: str | os.PathLike[str]) -> bytes | None:
    try:
        with open(_seal_file(kept), "rb") as handle:
            return handle.read()
    except OSError:
        return None


def sealed(kept: str | os.PathLike[str], data: bytes) -> bool:
    """``data`` (read from ``kept``) is what paella last wrote there."""
    recorded = _read(kept)
    return recorded is not None and recorded.split(b"\n", 1)[0] == _sha256(data).encode()


def seal_facts(kept: str | os.PathLike[str]) -> dict[str, str] | None:
    """The facts kept with the seal of ``kept`` (None: no seal, or not one paella wrote)."""
    recorded = _read(kept)
    if recorded is None:
        return None
    try:
        digest, *lines = recorded.decode().split("\n")
    except UnicodeDecodeError:
        return None
    if len(digest) != 64 or lines[-1:] != [""]:
        return None  # not a whole seal: no facts rather than some
    facts = {}
    for line in lines[:-1]:
        key, space, value = line.partition(" ")
        if not space:
            return None
        facts[key] = value
    return facts
