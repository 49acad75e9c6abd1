"""The state of a run, folded from its ledger: what ``paella status`` prints and the UI starts from.

Everything here is read from disk, so another process (a second tmux pane, a status bar) sees the
same truth as the process running the agent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from paella_tui.supervisor.agent.usage import Usage
from paella_tui.supervisor.base.files import read_regular_file
from paella_tui.supervisor.contract.model import MAX_CONTRACT_BYTES, Contract
from paella_tui.supervisor.run.ledger import ChainBreak, LedgerRead
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

RUN_STATES = ("running", "retry-wait", "recovering", "stopped", "dead", "done")


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """Whether ``pid`` still names the same live process (a reused pid is not mistaken for it)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


@dataclass
class RunView:
    """A run as its ledger tells it, with the contract it is held to."""

    run: Run
    contract: Contract | None
    records: tuple[dict[str, Any], ...]
    warnings: list[str] = field(default_factory=list)
    chain_break: ChainBreak | None = None
    """Where the ledger's hash chain breaks: records from ``chain_break.index`` on are untrusted."""
    verify_mirror: bool = True
    """Whether rollback targets are confirmed with the mirror (off only for a cheap glance)."""
    _trusted_refs: set[str] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, run: Run, *, verify_mirror: bool = True) -> RunView:
        """Read the run's ledger and frozen contract."""
        read = run.ledger.read()
        return cls(
            run=run,
            contract=run.load_contract(read),
            records=read.records,
            warnings=list(read.skipped),
            chain_break=read.chain_break,
            verify_mirror=verify_mirror,
        )

    def trusted(self, index: int) -> bool:
        """Whether ``records[index]`` comes before any break of the ledger's hash chain."""
        return self.chain_break is None or index < self.chain_break.index

    def rollback_target_ok(self, record: SnapshotRecord) -> bool:
        """Whether a snapshot may be restored: its record is trusted (before any chain break, and
        agreeing with the mirror on ref, commit and tree where the mirror holds the run)."""
        if self._trusted_refs is None:
            if self.verify_mirror:
                from paella_tui.supervisor.run.integrity import trusted_snapshot_refs

                read = LedgerRead(self.records, (), self.chain_break)
                self._trusted_refs = trusted_snapshot_refs(self.run, read)
            else:
                # A glance (the tmux line): the chain alone; a rollback always asks the mirror.
                self._trusted_refs = {
                    str(r.get("ref"))
                    for index, r in enumerate(self.records)
                    if r.get("kind") in ("checkpoint", "salvage") and self.trusted(index)
                }
        return record.ref in self._trusted_refs

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        """Ledger records of the given kinds, oldest first."""
        return [r for r in self.records if r.get("kind") in kinds]

    @property
    def checkpoints(self) -> list[SnapshotRecord]:
        """Every checkpoint of the run, oldest first."""
        return [SnapshotRecord.from_ledger(r) for r in self.of_kind("checkpoint")]

    @property
    def salvage(self) -> list[SnapshotRecord]:
        """Every salvage snapshot of the run, oldest first."""
        return [SnapshotRecord.from_ledger(r) for r in self.of_kind("salvage")]

    @property
    def last_green_checkpoint(self) -> SnapshotRecord | None:
        """The base: the newest green (episode) checkpoint since the run started or the last
        rollback, or the checkpoint that rollback restored (SPEC 6)."""
        base: SnapshotRecord | None = None
        by_ref = {c.ref: c for c in self.checkpoints if self.rollback_target_ok(c)}
        for record in self.records:
            kind = record.get("kind")
            if kind == "checkpoint" and isinstance(record.get("episode"), int):
                candidate = SnapshotRecord.from_ledger(record)
                # A checkpoint the ledger cannot vouch for is never the base (a forged record
                # must not become the state a rollback restores).
                base = candidate if candidate.ref in by_ref else base
            elif kind == "rollback-done" and not _is_step_ref(record.get("target_ref")):
                # A rollback to a step keeps the base it came after (issue 16).
                restored = by_ref.get(record.get("target_ref", ""))
                base = (
                    restored if restored is not None and isinstance(restored.episode, int) else None
                )
        return base

    def agent(self) -> dict[str, Any]:
        """The newest attempt's agent as the ledger tells it, with liveness checked now."""
        started = self.of_kind("agent-started")
        if not started:
            return {
                "pid": None,
                "alive": False,
                "attempt": 0,
                "exit_code": None,
                "signal": None,
                "cpu_percent": None,
                "rss_bytes": None,
                "descendants": None,
                "started": None,
                "session_id": None,
                "usage": None,
            }
        last = started[-1]
        exited = [
            r for r in self.of_kind("agent-exited") if r.get("attempt") == last.get("attempt")
        ]
        stats = [r for r in self.of_kind("agent-stats") if r.get("attempt") == last.get("attempt")]
        alive = not exited and process_alive(last.get("pid"), last.get("create_time"))
        end = exited[-1] if exited else {}
        stat = stats[-1] if stats and alive else {}
        return {
            "pid": last.get("pid"),
            "alive": alive,
            "attempt": last.get("attempt", len(started)),
            "exit_code": end.get("exit_code"),
            "signal": end.get("signal"),
            "cpu_percent": stat.get("cpu_percent"),
            "rss_bytes": stat.get("rss_bytes"),
            "descendants": stat.get("descendants"),
            "started": last.get("t"),
            "session_id": self.session_id(),
            "usage": self.usage_json(),
        }

    def session_id(self) -> str | None:
        """The agent's own session id its stream reported last (what `{session_id}` resumes);
        None when none was, or when paella dropped it (the agent said it no longer exists)."""
        sessions = self.of_kind("agent-session")
        return str(sessions[-1]["session_id"] or "") or None if sessions else None

    def usage(self) -> Usage | None:
        """Turns, tokens and cost the agent's stream reported, summed over the attempts; an
        attempt paella did not see end counts with its last sample. None: no stream reported."""
        per_attempt: dict[object, Usage] = {}
        for record in self.of_kind("agent-stats", "agent-exited"):
            if record.get("usage") is not None:
                per_attempt[record.get("attempt")] = Usage.from_record(record["usage"])
        if not per_attempt:
            return None
        return sum(per_attempt.values(), Usage())

    def usage_json(self) -> dict[str, Any] | None:
        """`usage()` as `status --json` gives it."""
        usage = self.usage()
        return None if usage is None else asdict(usage)

    def gate_history(self) -> list[dict[str, Any]]:
        """The gate-finished records since the last rollback (what counts for regressions)."""
        history: list[dict[str, Any]] = []
        for record in self.records:
            if record.get("kind") == "gate-finished":
                history.append(record)
            elif record.get("kind") == "rollback-done":
                history = []
        return history

    def ever_green(self) -> set[str]:
        """Gates green on some tree of this run; a rollback restarts this from the restored checkpoint."""
        green: set[str] = set()
        by_ref = {c.ref: c for c in self.checkpoints}
        for record in self.records:
            kind = record.get("kind")
            if kind == "gate-finished":
                if record.get("status") in ("pass", "flaky") and not record.get("stale"):
                    green.add(record.get("gate", ""))
            elif kind == "rollback-done":
                restored = by_ref.get(record.get("target_ref", ""))
                if restored is None and _is_step_ref(record.get("target_ref")):
                    restored = self._base_before(record)
                green = set(restored.gates_green) if restored is not None else set()
        return green

    def _base_before(self, rollback: dict[str, Any]) -> SnapshotRecord | None:
        """The base as it stood when ``rollback`` (to a step) was recorded."""
        index = next(i for i, r in enumerate(self.records) if r is rollback)
        return RunView(self.run, self.contract, self.records[:index]).last_green_checkpoint

    def regressions(self, gates: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """``status --json``'s ``regressions``: each regressed gate and where it broke."""
        from paella_tui.supervisor.judge.break_points import breaks_of

        found = breaks_of(self.records)
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
        """The latest result of each gate, with whether it was ever green and has regressed."""
        results: dict[str, dict[str, Any]] = {}
        # Verdicts by (gate, tree): a rollback restores a tree whose verdicts are already known,
        # so the gates shown after it are that tree's (or pending), never the abandoned tree's.
        known: dict[tuple[str, Any], dict[str, Any]] = {}
        ever_green = self.ever_green()
        for record in self.of_kind("gate-finished", "gate-started", "rollback-done"):
            if record["kind"] == "rollback-done":
                tree = record.get("tree")
                results = {
                    name: dict(known[(name, tree)])
                    if (name, tree) in known
                    else {
                        "name": name,
                        "status": "pending",
                        "tree": tree,
                        "duration_s": None,
                        "running": False,
                    }
                    for name in results
                }
                continue
            name = record.get("gate", "")
            if record["kind"] == "gate-started":
                prior = results.get(name)
                if prior is not None and prior["status"] not in ("running", "stale"):
                    # A re-run keeps the last verdict (counters never drop to 0 meanwhile).
                    prior["running"] = True
                    continue
                results[name] = {
                    "name": name,
                    "status": "running",
                    "tree": record.get("tree"),
                    "duration_s": None,
                }
                continue
            status = record.get("status", "error")
            results[name] = {
                "name": name,
                "status": "stale" if record.get("stale") else status,
                "tree": record.get("tree"),
                "duration_s": record.get("duration_s"),
                "running": False,
            }
            if not record.get("stale"):
                known[(name, record.get("tree"))] = dict(results[name])
        for name, result in results.items():
            result["ever_green"] = name in ever_green
            result["regressed"] = name in ever_green and result["status"] in (
                "fail",
                "timeout",
                "error",
            )
        return results

    def state(self) -> str:
        """One of RUN_STATES."""
        agent = self.agent()
        last_kind = ""
        for index, record in enumerate(self.records):
            if record.get("kind") == "run-done" and not self.trusted(index):
                continue  # a "done" written after the chain broke proves nothing
            if record.get("kind") in (
                "run-done",
                "run-stopped",
                "retry-scheduled",
                "recovery-needed",
                "agent-started",
                "agent-exited",
                "resumed",
            ):
                last_kind = record["kind"]
        if last_kind == "run-done":
            return "done"
        if last_kind == "run-stopped":
            return "stopped"
        if not self.supervisor()["alive"] and last_kind:
            # The paella that supervised it is gone (killed, crashed): nothing drives this run.
            return "dead"
        if agent["alive"]:
            return "running"
        if last_kind == "retry-scheduled":
            return "retry-wait"
        if last_kind == "recovery-needed":
            return "recovering"
        if last_kind in ("agent-started", "resumed"):
            return "dead"  # the ledger says it runs, but no such process lives: paella was killed
        return "stopped"

    def supervisor(self) -> dict[str, Any]:
        """The paella process that supervises the run now (the newest run or resume), and
        whether it still lives."""
        pid = None
        for record in self.of_kind("run-started", "resumed"):
            pid = record.get("paella_pid") or pid
        return {"pid": pid, "alive": process_alive(pid, None)}

    def to_json(self) -> dict[str, Any]:
        """The ``paella status --json`` object (SPEC 11)."""
        contract = self.contract
        started = self.of_kind("run-started")
        contract_info = started[0].get("contract") if started else None
        changed = False
        if contract is not None and contract_info:
            live = self.run.workspace.root / "paella.toml"
            try:
                import hashlib

                data = read_regular_file(live, MAX_CONTRACT_BYTES)
                changed = hashlib.sha256(data).hexdigest() != contract_info.get("sha256")
            except (OSError, ValueError):
                changed = True
        gates_now = self.gate_results()
        checkpoints = self.checkpoints
        episodes = []
        current_episode = None
        if contract is not None:
            for k, episode in enumerate(contract.episodes, start=1):
                completing = [c for c in checkpoints if c.episode == k]
                needed = contract.episode_gates(k)
                green_now = all(
                    gates_now.get(g, {}).get("status") in ("pass", "flaky") for g in needed
                )
                complete = bool(needed) and green_now
                episodes.append(
                    {
                        "n": k,
                        "name": episode.name,
                        "complete": complete,
                        "checkpoint": completing[-1].n if completing else None,
                    }
                )
                if not complete and current_episode is None:
                    current_episode = k
        gates = []
        if contract is not None:
            for gate in contract.gates:
                gates.append(
                    gates_now.get(gate.name)
                    or {
                        "name": gate.name,
                        "status": "pending",
                        "tree": None,
                        "duration_s": None,
                        "ever_green": False,
                        "regressed": False,
                    }
                )
        base = self.last_green_checkpoint
        drift = [
            {
                "kind": r.get("drift"),
                "gate": r.get("gate"),
                "path": r.get("path"),
                "message": r.get("message", ""),
                "t": r.get("t"),
            }
            for r in self.of_kind("drift")
        ]
        state = self.state()
        return {
            "run_id": self.run.run_id,
            "state": state,
            "contract": {
                "path": contract_info.get("path") if contract_info else None,
                "sha256": contract_info.get("sha256") if contract_info else None,
                "changed": changed,
            },
            "agent": self.agent(),
            "episodes": episodes,
            "current_episode": current_episode,
            "gates": gates,
            "checkpoints": [c.to_json() for c in checkpoints],
            "salvage": [s.to_json() for s in self.salvage],
            "last_green_checkpoint": base.n if base else None,
            "drift": drift,
            "regressions": self.regressions(gates_now),
            "steps": _steps_summary(self.records),
            "done": state == "done",
            "supervisor": self.supervisor(),
            "retry": self.retry(state),
        }

    def retry(self, state: str | None = None) -> dict[str, Any] | None:
        """During a wait for the next attempt, until when (epoch seconds) and why; also after a
        run stopped on a far reset (until then `paella resume` waits or refuses). Else None."""
        state = state or self.state()
        if state == "retry-wait":
            scheduled = self.of_kind("retry-scheduled")
            if scheduled:
                last = scheduled[-1]
                return {"until": last.get("resume_at"), "reason": last.get("reason")}
        if state == "stopped":
            stopped = self.of_kind("run-stopped")
            if stopped and stopped[-1].get("resume_after"):
                last = stopped[-1]
                return {"until": last.get("resume_after"), "reason": last.get("reason")}
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


def _steps_summary(records: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """How many steps the run kept, the newest, and whether their refs were pruned."""
    count, last = 0, None
    pruned = False
    for record in records:
        kind = record.get("kind")
        if kind == "step":
            count += 1
            last = record.get("n")
        elif kind == "steps-pruned":
            pruned = True
    return {"count": count, "last": last, "pruned": pruned}
