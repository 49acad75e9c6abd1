"""What the handoff says, gathered before it is rendered: :class:`HandoffInputs`, built from the
run's state (:mod:`paella_tui.supervisor.run.state`) and its gate logs alone, so that
``paella handoff`` works from disk after a crash and says what ``status`` and the TUI say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.judge.break_report import break_reports, handoff_section
from paella_tui.supervisor.judge.failures import failing_tests_in_log
from paella_tui.supervisor.run.events import RED, GateResult, GateStatus, Usage
from paella_tui.supervisor.run.run_view import RunView, drift_rows
from paella_tui.supervisor.run.state import GateNow, RunState
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord


@dataclass(frozen=True)
class EpisodeState:
    """One episode of the contract and where the run stands on it."""

    n: int
    """1-based, in contract order."""
    name: str
    goal: str
    gates: tuple[str, ...]
    """The gates this episode adds (it also needs those of the episodes before it)."""
    complete: bool
    """Complete on the current tree: every gate of episodes 1..n passes."""
    checkpoint: int | None = None
    """The newest checkpoint that completed it, if any (it may have regressed since)."""


@dataclass(frozen=True)
class HandoffInputs:
    """Everything the handoff document says, gathered before rendering."""

    contract: Contract
    run_id: str
    episodes: tuple[EpisodeState, ...]
    base: SnapshotRecord | None
    """The last green checkpoint, if any."""
    gates_now: tuple[GateResult, ...]
    """The newest result of each contract gate; a red one carries the end of its output."""
    regressed: tuple[str, ...] = ()
    """Gates that were green earlier in this run and are red now."""
    gate_log_lines: Mapping[str, int] = field(default_factory=dict)
    """How many lines each gate's full log holds, when known (for the cut notes)."""
    drift: tuple[Mapping[str, Any], ...] = ()
    """Drift warnings as the ledger holds them: ``kind``, ``message``, ``t`` (and gate, path)."""
    ending: str | None = None
    """How the last attempt ended, in words (``exit 1 after 42m, attempt 2``)."""
    last_output: tuple[str, ...] = ()
    """The agent's last output lines."""
    agent_log: str | None = None
    """Where the agent's whole output is (``agent.log``), for the cut note."""
    changes: tuple[tuple[str, int, int], ...] = ()
    """Files changed since the base (or the run start): path, lines added, lines removed."""
    attempt: int | None = None
    """The number of the attempt that ended last."""
    usage: Usage | None = None
    """Turns, tokens and cost the agent's stream reported over the run, when it reports them."""
    session_id: str | None = None
    """The agent's own session id, when its stream reported one (a resume continues it)."""
    where_it_broke: tuple[str, ...] = ()
    """The "Where it broke" section's lines (:mod:`paella_tui.supervisor.judge.break_report`)."""
    rolled_back: Mapping[str, Any] | None = None
    """The ledger's ``rollback-done`` record when the tree was rolled back after the last
    attempt started: that attempt's work is gone from the tree, kept in a salvage snapshot."""


_STATUSES = frozenset(get_args(GateStatus))
_LOG_WINDOW = 256 * 1024
_LOG_KEEP_LINES = 200


def read_log_tail(path: Path) -> tuple[tuple[str, ...], int] | None:
    """The last lines of a log and how many lines it holds in all, or None if it is unreadable."""
    try:
        size = path.stat().st_size
        count, window, ends_in_newline = 0, b"", True
        with path.open("rb") as handle:
            # Counted in chunks: a gate can write a 100 MB log, and only its end is kept.
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
                window = (window + chunk)[-_LOG_WINDOW:]
                ends_in_newline = chunk.endswith(b"\n")
    except OSError:
        return None
    lines = window.split(b"\n")
    if ends_in_newline:
        lines.pop()
    if size > len(window) and lines:
        lines.pop(0)  # the window starts mid-line
    total = count + (0 if ends_in_newline else 1)
    decoded = tuple(raw.decode("utf-8", errors="replace") for raw in lines[-_LOG_KEEP_LINES:])
    return decoded, total


def gate_result(gate: GateNow, run_dir: Path) -> tuple[GateResult, int | None]:
    """A GateResult from the state's word on a gate, with its log's end when it is red."""
    status = gate.status if gate.status in _STATUSES else "error"
    log_path = None
    if gate.log:
        log_path = Path(gate.log)
        if not log_path.is_absolute():
            log_path = run_dir / log_path
    tail: tuple[str, ...] = ()
    total = None
    if status in RED and log_path is not None:
        read = read_log_tail(log_path)
        if read is not None:
            tail, total = read
    failed = gate.failed_tests
    if not failed and status in RED and log_path is not None:
        failed = failing_tests_in_log(log_path)  # a ledger written before the field
    result = GateResult(
        gate=gate.name,
        status=cast(GateStatus, status),
        tree=gate.tree or "",
        duration_s=gate.duration_s or 0.0,
        exit_code=gate.exit_code,
        attempts=gate.attempts,
        log_path=str(log_path) if log_path else None,
        tail=tail,
        message=gate.message,
        failed_tests=failed,
    )
    return result, total


def ending_of(state: RunState) -> tuple[str | None, tuple[str, ...], int | None]:
    """How the newest attempt ended, its last output lines, and its number."""
    agent, end = state.agent, state.last_exit
    if agent is not None and end is None:
        attempt = agent.attempt
        return (
            f"attempt {attempt} has no recorded end (paella itself stopped while it ran)",
            (),
            attempt,
        )
    if end is None:
        return None, (), None
    how = end.describe()
    if agent is not None and agent.attempt == end.attempt and end.ended_at >= agent.started_at:
        how += f" after {format_duration(end.ended_at - agent.started_at)}"
    how += f", attempt {end.attempt}"
    return how, end.tail, end.attempt


def handoff_inputs_from_view(
    view: RunView,
    *,
    changes: Sequence[tuple[str, int, int]] = (),
    ending: str | None = None,
) -> HandoffInputs:
    """The handoff's inputs from a run's state and gate logs (so it works after a crash).

    ``changes`` are the files changed since the base; ``ending`` says how the attempt ended in
    the caller's words and is put before what the ledger says.
    """
    contract = view.contract
    if contract is None:
        raise UsageError(
            f"run {view.run.run_id} has no contract (a manual run): there is nothing to hand off",
            hint="start a run with `paella run` in a workspace with a paella.toml.",
        )
    state = view.run_state
    results: list[GateResult] = []
    log_lines: dict[str, int] = {}
    for gate in contract.gates:
        now = state.gates.get(gate.name)
        if now is None or (now.status == "pending" and now.tree is None):
            results.append(GateResult(gate=gate.name, status="pending", tree=""))
            continue
        result, total = gate_result(now, view.run.dir)
        results.append(result)
        if total is not None:
            log_lines[gate.name] = total
    # The state's one rule: red now after green on another tree.
    regressed = tuple(r.gate for r in results if r.status in RED and state.is_regressed(r.gate))
    complete = state.complete_episodes
    episodes = []
    for k, episode in enumerate(contract.episodes, start=1):
        checkpoint = state.checkpoint_of_episode(k)
        episodes.append(
            EpisodeState(
                n=k,
                name=episode.name,
                goal=episode.goal,
                gates=episode.gates,
                complete=k <= complete,
                checkpoint=checkpoint.n if checkpoint else None,
            )
        )
    drift = tuple(drift_rows(state))
    recorded, last_output, attempt = ending_of(state)
    if ending and recorded and ending not in recorded:
        how: str | None = f"{ending}; {recorded}"
    else:
        how = recorded or ending
    rolled = state.last_rollback
    return HandoffInputs(
        contract=contract,
        run_id=view.run.run_id,
        episodes=tuple(episodes),
        base=view.last_green_checkpoint,
        gates_now=tuple(results),
        regressed=regressed,
        gate_log_lines=log_lines,
        drift=drift,
        ending=how,
        last_output=last_output,
        agent_log=str(view.run.dir / "agent.log"),
        changes=tuple(changes),
        attempt=attempt,
        usage=state.usage,
        rolled_back=rolled.record() if rolled is not None else None,
        session_id=state.session_id,
        where_it_broke=tuple(handoff_section(break_reports(view))),
    )
