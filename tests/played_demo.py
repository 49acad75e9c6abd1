"""One ``paella demo --headless --fast`` played per test process, for every test that reads what
it prints and leaves behind (test_demo's story, test_json_schemas' outputs).

The demo is the same real command each of them played for itself (about 4 s of CPU a play): it
runs once, in a folder that also holds its mirror (a private ``XDG_STATE_HOME``), and the folder
is saved; each test that asks for it gets it put back byte for byte at the same path
(``SavedFolder``), so a test that adds to the ledger (``paella gates``) never changes what the
next one reads. The tests that share it name the xdist group ``GROUP``, so one worker plays it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import SavedFolder, run_paella

from paella_tui.demo import scenario

GROUP = "played-demo"
"""The xdist group of the tests that read the played demo: one worker, one play."""

PLAY_TIMEOUT_S = 300.0
"""The bound for a broken play (the tests assert on how long it really took)."""


@dataclass(frozen=True)
class PlayedDemo:
    """A finished headless demo: where it is, what the command printed, how long it took."""

    root: Path
    """The demo's repository (``--dir``)."""
    proc: subprocess.CompletedProcess[str]
    """The command's exit status and output."""
    took: float
    """Its wall time, in seconds."""
    agents_left: tuple[int, ...]
    """Processes of the demo's agent still alive the moment the command ended (none expected)."""


def agent_processes(root: Path) -> list[psutil.Process]:
    """Live processes running the demo's scripted agent in the workspace at ``root``.

    Only this test's agents count: other tests (other xdist workers) may be playing the demo too.
    """
    found = []
    for proc in psutil.process_iter(["cmdline", "status", "cwd"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or []
            cwd = proc.info["cwd"] or ""
            if (
                str(scenario.AGENT) in cmdline
                and proc.info["status"] != psutil.STATUS_ZOMBIE
                and Path(cwd).is_relative_to(root)
            ):
                found.append(proc)
    return found


# This process's play, once made: (the demo, its saved folder, its XDG state folder).
_PLAYED: list[tuple[PlayedDemo, SavedFolder, Path]] = []


@contextlib.contextmanager
def played_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlayedDemo]:
    """The finished demo, as the command left it, with ``XDG_STATE_HOME`` on its mirror for the
    block (readers find the mirror the run wrote)."""
    if not _PLAYED:
        world = tmp_path_factory.mktemp("played-demo")
        root, xdg_state = world / "demo", world / "xdg-state"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XDG_STATE_HOME", str(xdg_state))
            started = time.monotonic()
            proc = run_paella(
                world, "demo", "--headless", "--fast", "--dir", str(root), timeout=PLAY_TIMEOUT_S
            )
            took = time.monotonic() - started
        agents = tuple(p.pid for p in agent_processes(root))
        saved = SavedFolder(world)
        saved.save()
        _PLAYED.append((PlayedDemo(root, proc, took, agents), saved, xdg_state))
    demo, saved, xdg_state = _PLAYED[0]
    saved.restore()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(xdg_state))
        yield demo
