"""A gate or agent paella starts is never mistaken for an escaped orphan of another tree.

Between its fork and its registration as a root, a new process in its own session, born while an
agent runs, looks exactly like a daemon the agent escaped with. A tree refreshing at that moment
used to adopt it, and stopping the agent then killed a gate that had just started (a false red).
"""

from __future__ import annotations

import subprocess
import threading

from paella_tui.supervisor.agent.process_tree import ProcessTree
from paella_tui.supervisor.agent.tree_roots import spawning_root


def _start_root(argv: list[str]) -> subprocess.Popen[bytes]:
    with spawning_root() as register:
        popen = subprocess.Popen(argv, start_new_session=True)
        register(popen.pid)
    return popen


def test_roots_started_while_a_tree_refreshes_are_never_adopted() -> None:
    agent = _start_root(["sleep", "30"])
    tree = ProcessTree(agent.pid, marker=("PAELLA_TEST_MARKER", "spawn-race"))
    done = threading.Event()

    def refresh() -> None:
        while not done.is_set():
            tree.refresh()

    refresher = threading.Thread(target=refresh)
    refresher.start()
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(100):
            started.append(_start_root(["sleep", "30"]))
        done.set()
        refresher.join()
        tree.refresh()
        adopted = {proc.pid for proc in tree.alive()} & {p.pid for p in started}
        assert adopted == set()

        # The control: a child in its own session that nobody registered is an escape, adopted.
        escaped = subprocess.Popen(["sleep", "30"], start_new_session=True)
        started.append(escaped)
        tree.refresh()
        assert escaped.pid in {proc.pid for proc in tree.alive()}
    finally:
        done.set()
        refresher.join()
        for popen in [agent, *started]:
            popen.kill()
            popen.wait()
