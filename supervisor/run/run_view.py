"""The state of a run, folded from its ledger: what ``paella status`` prints and the UI starts from.

Everything here is read from disk, so another process (a second tmux pane, a status bar) sees the
same truth as the process running the agent.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.base.files import read_regular_file
from paella_tui.supervisor.base.start_ticks import TICKS_PER_SECOND, boot_time, process_state
from paella_tui.supervisor.run.ledger import ChainBreak, ledger_iso
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.run.state import ContractSpec, Phase, RunState
from paella_tui.supervisor.run.state_store import Folded, StateStore, snapshot_read
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

if TYPE_CHECKING:
    from paella_tui.supervisor.contract.model import Contract

RUN_STATES = ("running", "retry-wait", "recovering", "stopped", "dead", "done")


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """Whether ``pid`` still names the same live process (a reused pid is not mistaken for it)."""
    if not pid:
        return False
    known = _alive_in_proc(pid, create_time)
    if known is not None:
        return known
    return alive_by_psutil(pid, create_time)  # no /proc (macOS), or a negative pid


def alive_by_psutil(pid: int, create_time: float | None) -> bool:
    """``process_alive`` as psutil tells it (where /proc cannot; a negative pid: ValueError)."""
    import psutil  # only here: a status with /proc never loads it

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _alive_in_proc(pid: int, create_time: float | None) -> bool | None:
    """``process_alive`` from ``/proc`` as psutil reads it on Linux (the state letter its
    ``status`` reads; its ``create_time``: the start ticks over the tick rate, plus the boot
    time), without importing psutil (~10 ms of a ``paella status`` whose run has an agent);
    None where ``/proc`` cannot tell (no ``/proc``, a negative pid): psutil answers then."""
    if pid < 0 or not TICKS_PER_SECOND:
        return None
    read = process_state(pid)
    if read is None:
        return False if os.path.isdir("/proc/self") else None  # no such process
    state, ticks = read
    if state == b"Z":
        return False
    try:
        started = ticks / TICKS_PER_SECOND + boot_time()
    except (OSError, ValueError):
        return None
    return create_time is None or abs(started - create_time) < 1.0


@dataclass
class RunView:
    """A run as its ledger tells it (the folded :class:`RunState`), with the contract it is held
    to and what is alive now."""

    run: Run
    contract: Contract | None
    folded: Folded
    verify_mirror: bool = True
    """Whether rollback targets are confirmed with the mirror (off only for a cheap glance)."""
    _records: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    _trusted_refs: set[str] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, run: Run, *, verify_mirror: bool = True) -> RunView:
        """The run's frozen contract and its state, folding only the records new since the
        state kept beside the ledger."""
        contract = run.load_contract(run.ledger.read_first())
        folded = StateStore(run.ledger.path).load(spec=ContractSpec.of(contract))
        return cls(run=run, contract=contract, folded=folded, verify_mirror=verify_mirror)

    @property
    def run_state(self) -> RunState:
        """The run's state, folded from its ledger."""
        return self.folded.state

    @property
    def warnings(self) -> list[str]:
        """Descriptions of ledger lines that could not be used."""
        return list(self.folded.said)

    @property
    def chain_break(self) -> ChainBreak | None:
        """Where the ledger's hash chain breaks: records from ``chain_break.index`` on are untrusted."""
        return self.folded.chain_break

    @property
    def records(self) -> tuple[dict[str, Any], ...]:
        """Every usable ledger record (a whole read: only for what the state does not hold)."""
        if self._records is None:
            self._records = self.run.ledger.read().records
        return self._records

    def trusted(self, index: int) -> bool:
        """Whether ``records[index]`` comes before any break of the ledger's hash chain."""
        return self.chain_break is None or index < self.chain_break.index

    def rollback_target_ok(self, record: SnapshotRecord) -> bool:
        """Whether a snapshot may be restored: its record is trusted (before any chain break, and
        agreeing with the mirror on ref, commit and tree where the mirror holds the run)."""
        if self._trusted_refs is None:
            untrusted = self.run_state.untrusted_refs
            snapshots = (*self.run_state.checkpoints, *self.run_state.salvage)
            if self.verify_mirror:
                from paella_tui.supervisor.run.integrity import trusted_snapshot_refs

                self._trusted_refs = trusted_snapshot_refs(self.run, snapshot_read(self.run_state))
            else:
                # A glance (the tmux line): the chain alone; a rollback always asks the mirror.
                self._trusted_refs = {s.ref for s in snapshots if s.ref not in untrusted}
        return record.ref in self._trusted_refs

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        """Ledger records of the given kinds, oldest first (a whole read of the ledger)."""
        return [r for r in self.records if r.get("kind") in kinds]

    @property
    def checkpoints(self) -> list[SnapshotRecord]:
        """Every checkpoint of the run, oldest first."""
        return list(self.run_state.checkpoints)

    @property
    def salvage(self) -> list[SnapshotRecord]:
        """Every salvage snapshot of the run, oldest first."""
        return list(self.run_state.salvage)

    @property
    def last_green_checkpoint(self) -> SnapshotRecord | None:
        """The base (the state's rule, SPEC 6) that the mirror vouches for: a forged record never
        becomes the state a rollback restores; the newest confirmed one before it is the base."""
        state = self.run_state
        by_ref = {c.ref: c for c in state.checkpoints}
        line = [by_ref[ref] for ref in reversed(state.base_line) if ref in by_ref]
        if line and self._trusted_refs is None and self._trusted_among(line[:1]):
            # The newest alone first: one commit asked of git, however many checkpoints the
            # run holds; the whole line is checked only when the mirror refuses it.
            return line[0]
        return next((record for record in line if self.rollback_target_ok(record)), None)

    def _trusted_among(self, records: list[SnapshotRecord]) -> bool:
        """Whether every one of ``records`` may be restored (what :meth:`rollback_target_ok`
        decides, checked for these records alone)."""
        refs = {r.ref for r in records}
        if not self.verify_mirror:
            return not refs & self.run_state.untrusted_refs
        from paella_tui.supervisor.run.integrity import trusted_snapshot_refs

        return refs <= trusted_snapshot_refs(self.run, snapshot_read(self.run_state, refs))

    def agent(self) -> dict[str, Any]:
        """The newest attempt's agent as the ledger tells it, with liveness checked now."""
        agent = self.run_state.agent
        end = self.run_state.last_exit
        alive = agent is not None and end is None and process_alive(agent.pid, agent.create_time)
        return {
            "pid": agent.pid if agent else None,
            "alive": alive,
            "attempt": agent.attempt if agent else 0,
            "exit_code": end.exit_code if end else None,
            "signal": end.signal if end else None,
            "cpu_percent": agent.cpu_percent if agent and alive else None,
            "rss_bytes": agent.rss_bytes if agent and alive else None,
            "descendants": agent.descendants if agent and alive else None,
            "started": ledger_iso(agent.started_at) if agent else None,
            "session_id": self.session_id(),
            "usage": self.usage_json() if agent else None,
        }

    def session_id(self) -> str | None:
        """The agent's own session id its stream reported last (what `{session_id}` resumes);
        None when none was, or when paella dropped it (the agent said it no longer exists)."""
        return self.run_state.session_id

    def usage(self) -> Usage | None:
        """Turns, tokens and cost the agent's stream reported, summed over the attempts; an
        attempt paella did not see end counts with its last sample. None: no stream reported."""
        return self.run_state.usage

    def usage_json(self) -> dict[str, Any] | None:
        """`usage()` as `status --json` gives it."""
        usage = self.usage()
        return None if usage is None else asdict(usage)

    def ever_green(self) -> set[str]:
        """Gates green on some tree since the start or the last rollback."""
        return {name for name, trees in self.run_state.green_on.items() if trees}

    def regressions(self, gates: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """``status --json``'s ``regressions``: each regressed gate and where it broke."""
        found = self.run_state.breaks
        out = []
        for name, result in gates.items():
            if not result.get("regressed"):
                continue
            point = found.get(name)
            out.append(
                {
                    "gate": name,
                    "bisect": point.verdict if point is not None else None,
                    "broke_at": _broke_at(point),
                    "message": point.message if point is not None else "",
                }
            )
        return out

    def gate_results(self) -> dict[str, dict[str, Any]]:
        """The latest result of each gate that has one, with whether it was ever green and
        whether it is a regression (the state's one rule)."""
        state = self.run_state
        results: dict[str, dict[str, Any]] = {}
        for name, gate in state.gates.items():
            if gate.status == "pending" and gate.tree is None:
                continue  # never started
            result: dict[str, Any] = {
                "name": name,
                "status": gate.status,
                "tree": gate.tree,
                "duration_s": gate.duration_s,
            }
            if gate.status != "running":
                result["running"] = gate.running
            result["ever_green"] = state.ever_green(name)
            result["regressed"] = state.is_regressed(name) and gate.red
            results[name] = result
        return results

    def state(self) -> str:
        """One of RUN_STATES: the state's phase, with what is alive now."""
        phase = self.run_state.phase
        if phase is Phase.DONE:
            return "done"
        if phase is Phase.STOPPED:
            return "stopped"
        if phase is not Phase.STARTING and not self.supervisor()["alive"]:
            # The paella that supervised it is gone (killed, crashed): nothing drives this run.
            return "dead"
        if self.agent()["alive"]:
            return "running"
        if phase is Phase.RETRY_WAIT:
            return "retry-wait"
        if phase is Phase.RECOVERING:
            return "recovering"
        if phase is Phase.RUNNING:
            return "dead"  # the ledger says it runs, but no such process lives: paella was killed
        return "stopped"

    def supervisor(self) -> dict[str, Any]:
        """The paella process that supervises the run now (the newest run or resume), and
        whether it still lives."""
        pid = self.run_state.supervisor_pid
        return {"pid": pid, "alive": process_alive(pid, None)}

    def to_json(self) -> dict[str, Any]:
        """The ``paella status --json`` object (SPEC 11)."""
        state = self.run_state
        contract_info = state.contract_info
        changed = False
        if self.contract is not None and contract_info:
            live = self.run.workspace.root / "paella.toml"
            try:
                import hashlib

                from paella_tui.supervisor.contract.model import MAX_CONTRACT_BYTES

                data = read_regular_file(live, MAX_CONTRACT_BYTES)
                changed = hashlib.sha256(data).hexdigest() != contract_info.get("sha256")
            except (OSError, ValueError):
                changed = True
        gates_now = self.gate_results()
        complete = state.complete_episodes
        episodes = []
        gates = []
        if self.contract is not None:
            for k, (name, _needed) in enumerate(state.spec.episodes, start=1):
                checkpoint = state.checkpoint_of_episode(k)
                episodes.append(
                    {
                        "n": k,
                        "name": name,
                        "complete": k <= complete,
                        "checkpoint": checkpoint.n if checkpoint else None,
                    }
                )
            for gate in state.spec.gates:
                gates.append(
                    gates_now.get(gate)
                    or {
                        "name": gate,
                        "status": "pending",
                        "tree": None,
                        "duration_s": None,
                        "ever_green": False,
                        "regressed": False,
                    }
                )
        base = self.last_green_checkpoint
        word = self.state()
        return {
            "run_id": self.run.run_id,
            "state": word,
            "contract": {
                "path": contract_info.get("path") if contract_info else None,
                "sha256": contract_info.get("sha256") if contract_info else None,
                "changed": changed,
            },
            "agent": self.agent(),
            "episodes": episodes,
            "current_episode": state.current_episode if self.contract is not None else None,
            "gates": gates,
            "checkpoints": [c.to_json() for c in state.checkpoints],
            "salvage": [s.to_json() for s in state.salvage],
            "last_green_checkpoint": base.n if base else None,
            "drift": drift_rows(state),
            "regressions": self.regressions(gates_now),
            "steps": {
                "count": state.steps.count,
                "last": state.steps.last,
                "pruned": state.steps.pruned,
            },
            "done": word == "done",
            "supervisor": self.supervisor(),
            "retry": self.retry(word),
        }

    def retry(self, word: str | None = None) -> dict[str, Any] | None:
        """During a wait for the next attempt, until when (epoch seconds) and why; also after a
        run stopped on a far reset (until then `paella resume` waits or refuses). Else None."""
        word = word or self.state()
        state = self.run_state
        if word == "retry-wait" and state.retry is not None:
            return {"until": state.retry.until, "reason": state.retry.reason}
        if word == "stopped" and state.stop is not None and state.stop.until:
            return {"until": state.stop.until, "reason": state.stop.reason}
        return None


def _is_step_ref(ref: object) -> bool:
    return isinstance(ref, str) and "/steps/" in ref


def _broke_at(point: Any) -> dict[str, Any] | None:
    """Where a gate broke (a ``found`` bisect verdict), as ``regressions[].broke_at``."""
    if point is None or point.verdict != "found":
        return None
    return {
        "step": point.step,
        "t": point.t,
        "last_green_step": point.last_green_step,
        "files": [{"path": p, "added": a, "removed": r} for p, a, r in point.files],
        "added": point.added,
        "removed": point.removed,
        "runs": point.runs,
        "headline": point.headline(),
    }


def drift_rows(state: RunState) -> list[dict[str, Any]]:
    """The run's drift as ``status --json`` and the handoff give it: one row per drift noted."""
    return [
        {
            "kind": d.drift,
            "gate": d.gate,
            "path": d.path,
            "message": d.message,
            "t": ledger_iso(d.at),
        }
        for d in state.drift
    ]
