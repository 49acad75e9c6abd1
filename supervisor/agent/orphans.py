"""The orphan sweep: an agent a killed paella left running is stopped before a new attempt starts,
so that an agent never runs unsupervised."""

from __future__ import annotations

import contextlib
import os

from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import LeftoverProcess


def stop_session(pid: int, grace: float) -> list[LeftoverProcess]:
    """Stop the agent ``pid`` and every process of its session (the agent leads one): SIGTERM,
    up to ``grace`` seconds, then SIGKILL. Returns the processes that had to be stopped. Blocks."""
    members = [pid]
    for proc_pid in _pids():
        with contextlib.suppress(OSError):
            if os.getsid(proc_pid) == pid and proc_pid != pid:
                members.append(proc_pid)
    return stop_tree(members, grace)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]
