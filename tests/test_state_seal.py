"""A forged ``state.json`` is never taken for the run's state (``base/state_seal.py``).

The kept state sits beside the ledger, where the agent can write. A forgery that keeps the
position (offset, records folded, the chain hash of the last line) passed every check before:
``paella status --tmux`` said "✓ done" for a run whose gates were red, and ``paella checkpoints``
left out a checkpoint. Each forgery below is written over the kept state of a real finished run
(a checkpoint, then the agent failed), keeping everything the position checks read; every
reader (``status``, ``status --json``, the status bar's line, ``checkpoints --json``) must then
answer exactly as before the forgery, and the file is folded again and sealed. A missing or
unreadable seal is the same as a forgery. (The seal lives beside the mirrors, outside the run:
an agent that writes there can forge both, as it could the mirror; README, "what paella cannot
protect against".)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import GitRunner
from hostile_project import FINISHED_GROUP, HostileProject, finished_project, no_traceback
from hypothesis import given
from hypothesis import strategies as st

from paella_tui.supervisor.base import state_seal
from paella_tui.supervisor.base.state_seal import seal_path
from paella_tui.supervisor.run import state_store

pytestmark = pytest.mark.xdist_group(FINISHED_GROUP)

READERS = (("status",), ("status", "--json"), ("status", "--tmux"), ("checkpoints", "--json"))


@pytest.fixture
def finished(tmp_path_factory: pytest.TempPathFactory, git: GitRunner) -> Iterator[HostileProject]:
    with finished_project(tmp_path_factory, git) as (p, _):
        yield p


def kept_state(p: HostileProject) -> Path:
    run_id = (p.repo / ".git" / "paella" / "current").read_text().strip()
    return p.repo / ".git" / "paella" / "runs" / run_id / "state.json"


def answers(p: HostileProject) -> dict[tuple[str, ...], tuple[int, str]]:
    """Each reader's answer, as a command of its own would give it: the commands run in this
    process (``cli.main``), so what a process remembers of a fold is forgotten before each."""
    out = {}
    for args in READERS:
        state_store._MEMO.clear()
        proc = p.read(*args)
        no_traceback(proc)
        out[args] = (proc.returncode, proc.stdout)
    return out


def all_green_and_done(state: dict[str, Any]) -> None:
    for gate in state["gates"].values():
        gate["status"] = "pass"
    state["phase"] = "done"
    state["regressed"] = []


def no_checkpoint(state: dict[str, Any]) -> None:
    assert state["checkpoints"], "the finished run has a checkpoint to leave out"
    state["checkpoints"] = []


def no_drift(state: dict[str, Any]) -> None:
    state["drift"] = []
    state["breaks"] = []


FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "every gate green, the run done": all_green_and_done,
    "a checkpoint left out": no_checkpoint,
    "drift and breaks erased": no_drift,
}


@pytest.mark.parametrize("seal", ["paella's", "deleted", "unreadable"])
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_kept_state_is_folded_again_by_every_reader(
    finished: HostileProject, forgery: str, seal: str
) -> None:
    p = finished
    before = answers(p)
    assert "done" not in before[("status", "--tmux")][1]
    kept = kept_state(p)
    body = json.loads(kept.read_bytes())
    position = body["position"]
    FORGERIES[forgery](body["state"])
    forged = json.dumps(body, separators=(",", ":")).encode()
    kept.write_bytes(forged)
    assert seal_path(kept).is_file()  # paella's seal, of the state it wrote
    if seal == "deleted":
        seal_path(kept).unlink()
    elif seal == "unreadable":
        seal_path(kept).write_bytes(b"\x00not a digest")
    assert answers(p) == before
    # Folded again from the ledger and sealed: the file is paella's again, at the same position.
    again = json.loads(kept.read_bytes())
    assert kept.read_bytes() != forged and again["position"] == position
    assert answers(p) == before


def test_a_kept_state_paella_wrote_is_taken_and_its_seal_lives_outside_the_work_tree(
    finished: HostileProject,
) -> None:
    p = finished
    answers(p)
    kept = kept_state(p)
    seal = seal_path(kept)
    assert seal.is_file() and not seal.is_relative_to(p.repo)
    written = kept.read_bytes()
    answers(p)
    assert kept.read_bytes() == written  # nothing new in the ledger: taken, not folded again


@given(st.binary(max_size=4096))
def test_the_seal_digest_is_sha256_whichever_implementation_computes_it(data: bytes) -> None:
    """The seal takes CPython's own sha256 (no OpenSSL load) when there is one: a seal written by
    one Python is read by another."""
    assert state_seal._sha256(data) == hashlib.sha256(data).hexdigest()
