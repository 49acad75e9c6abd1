"""What a run loop does once before its first attempt: stop an agent a killed paella left
running (an agent never runs unsupervised), and find the tree the run started on."""

from __future__ import annotations

from collections.abc import Callable

from paella_tui.supervisor.agent.orphans import stop_session
from paella_tui.supervisor.run.run_view import RunView, process_alive
from paella_tui.supervisor.run.runs import Run


def stop_orphans(run: Run, grace: float) -> str | None:
    """Stop the run's last agent if it still runs, recorded; the notice to show, or None."""
    last = RunView.load(run).run_state.agent
    if last is None:
        return None
    pid, create_time = last.pid, last.create_time
    if not process_alive(pid, create_time):
        return None
    assert isinstance(pid, int)
    stopped = stop_session(pid, grace)
    run.ledger.append(
        "orphan-stopped",
        pid=pid,
        attempt=last.attempt,
        processes=[f"{p.pid} {p.name}" for p in stopped],
    )
    return f"stopped agent pid {pid} left running by an earlier paella"


def run_start_tree(run: Run, snapshot_tree: Callable[[], str]) -> str:
    """The tree the run started on (drift is judged against it), recorded once per run (the
    run's state keeps the first record's)."""
    kept = RunView.load(run).run_state.start_tree
    if kept is not None:
        return kept
    tree = snapshot_tree()
    run.ledger.append("run-tree", tree=tree)
    return tree
