"""``paella status --tmux``: one short line for a status bar, refreshed every few seconds.

:func:`tmux_line` formats it from ``status --json``'s object. :func:`fast_line` makes the same
line from the run's kept state (``state.json``, the fold of its ledger) and ``/proc`` alone, with
one git process and no engine module loaded: a status bar calls it every few seconds, so it costs
about a bare Python start and a ``git rev-parse`` (issue 17). It answers None, and the command
takes the ordinary way (which folds the new records and keeps the state for the next call), when
the kept state is missing, unreadable, not what paella wrote last (its seal,
:mod:`~paella_tui.supervisor.base.state_seal`), or older than the ledger by more than
:data:`MAX_LAG_S`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from paella_tui.supervisor.base.counts import compact_count
from paella_tui.supervisor.base.state_seal import sealed

MAX_LAG_S = 10.0
"""How far the kept state may trail the ledger (a live run keeps it every few seconds)."""
_RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-z]+$")
_GREEN = ("pass", "flaky")
KEPT_FORMAT = 3
"""The ``state.json`` format this reads (``state_store.FORMAT``, not imported: this line loads no
engine module; a test holds the two equal)."""
_RED = ("fail", "timeout", "error")


def tmux_line(status: dict[str, Any] | None) -> str:
    """``paella ● running ep 1/3 ✓2 ✗1 ⚠1 $0.84`` from ``status --json``'s object."""
    if status is None:
        return "paella: no run"
    icon = {"done": "✓", "running": "●", "retry-wait": "◌", "recovering": "✗", "dead": "✗"}.get(
        status["state"], "◌"
    )
    done = sum(e["complete"] for e in status["episodes"])
    green = sum(g["status"] in _GREEN for g in status["gates"])
    red = sum(g["status"] in _RED for g in status["gates"])
    parts = [f"paella {icon} {status['state']}"]
    if status["episodes"]:
        parts.append(f"ep {done}/{len(status['episodes'])}")
    if status["gates"]:
        parts.append(f"✓{green} ✗{red}")
    if status["drift"]:
        parts.append(f"⚠{len(status['drift'])}")
    cost, tokens = _spent(status["agent"].get("usage"))
    if cost is not None:
        parts.append(f"${cost:.2f}")
    elif tokens:
        parts.append(f"{compact_count(tokens)} tok")
    return " ".join(parts)


def _spent(usage: object) -> tuple[float | None, int]:
    """(cost, tokens) of a usage record, read as ``Usage.from_record`` reads it (anything
    unexpected counts as nothing), without loading the dataclass machinery."""
    if not isinstance(usage, dict):
        return None, 0

    def number(key: str) -> int:
        value = usage.get(key)
        return int(value) if isinstance(value, int | float) and value >= 0 else 0

    cost = usage.get("cost_usd")
    tokens = number("input_tokens") + number("cached_input_tokens") + number("output_tokens")
    return (float(cost) if isinstance(cost, int | float) and cost >= 0 else None), tokens


def fast_line(cwd: Path) -> str | None:
    """The line from the kept state, or None when the ordinary way must answer."""
    try:
        status = _status_from_kept(cwd)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return None if status is None else tmux_line(status)


def _state_dir(cwd: Path) -> Path | None:
    override = os.environ.get("PAELLA_STATE_DIR")
    if override:
        return Path(override).resolve()
    proc = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir"],
        cwd=cwd,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.decode().strip()) / "paella"


def _status_from_kept(cwd: Path) -> dict[str, Any] | None:
    state_dir = _state_dir(cwd)
    if state_dir is None:
        return None
    run_id = (state_dir / "current").read_text(encoding="ascii").strip()
    if not _RUN_ID.match(run_id):
        return None
    folder = state_dir / "runs" / run_id
    kept_path = folder / "state.json"
    ledger = os.stat(folder / "events.jsonl")
    kept_stat = os.stat(kept_path)
    data = kept_path.read_bytes()
    if not sealed(kept_path, data):
        return None  # not what paella wrote last: the ordinary way folds the ledger
    body = json.loads(data)
    if body.get("format") != KEPT_FORMAT:
        return None
    state = body["state"]
    current = body["position"]["offset"] == ledger.st_size
    recent = ledger.st_mtime - kept_stat.st_mtime <= MAX_LAG_S
    if not (current or recent) or body["position"]["offset"] > ledger.st_size:
        return None
    spec = state["spec"]
    if not spec["known"]:
        return None  # kept by a reader without the contract: the ordinary way knows it
    gates = state["gates"]
    green = {name for name, g in gates.items() if g["status"] in _GREEN}
    done = 0
    for _name, needed in spec["episodes"]:
        if not all(g in green for g in needed):
            break
        done += 1
    usage: dict[str, Any] | None = None
    if state["usage_by_attempt"]:
        usage = _sum_usage(state["usage_by_attempt"].values())
    return {
        "state": _word(state),
        "episodes": [{"complete": k <= done} for k in range(1, len(spec["episodes"]) + 1)],
        "gates": [
            {"status": (gates.get(name) or {}).get("status", "pending")} for name in spec["gates"]
        ],
        "drift": state["drift"],
        "agent": {"usage": usage},
    }


def _sum_usage(usages: Any) -> dict[str, Any]:
    """The attempts' usage summed as ``Usage.__add__`` does (a cost only when one was known)."""
    costs = [c for c in (_spent(u)[0] for u in usages) if c is not None]
    tokens = sum(_spent(u)[1] for u in usages)
    return {"cost_usd": sum(costs) if costs else None, "input_tokens": tokens}


def _word(state: dict[str, Any]) -> str:
    """The run's word as ``status`` says it: its phase, with what lives now."""
    phase = state["phase"]
    if phase in ("done", "stopped"):
        return str(phase)
    if phase != "starting" and not _alive(state["supervisor_pid"], None):
        return "dead"
    agent = state["agent"]
    if (
        agent is not None
        and state["last_exit"] is None
        and _alive(agent["pid"], agent["create_time"])
    ):
        return "running"
    if phase in ("retry-wait", "recovering"):
        return str(phase)
    return "dead" if phase == "running" else "stopped"


def _alive(pid: object, create_time: object) -> bool:
    """Whether ``pid`` names a live process that started at ``create_time`` (as psutil tells it:
    the boot time plus the process's start in clock ticks), read from ``/proc``."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return False
    if not isinstance(create_time, int | float):
        return True
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return abs(started - create_time) < 1.0
