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

from paella_tui.supervisor.base.counts import compact_count
from paella_tui.supervisor.base.state_seal import sealed

# What the line imports is most of what it costs (a status bar runs it every few seconds):
# `typing`, `pathlib` and `subprocess` are ~15 ms of a 36 ms start, so the fast path does without
# them (os paths, `os.posix_spawnp`). mypy reads any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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


def fast_line(cwd: str | os.PathLike[str]) -> str | None:
    """The line from the kept state, or None when the ordinary way must answer."""
    try:
        status = _status_from_kept(os.fspath(cwd))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return None if status is None else tmux_line(status)


def _state_dir(cwd: str) -> str | None:
    override = os.environ.get("PAELLA_STATE_DIR")
    if override:
        return os.path.realpath(override)
    git_dir = _git_dir(cwd)
    return None if git_dir is None else os.path.join(git_dir, "paella")


def _git_dir(cwd: str) -> str | None:
    """``git -C CWD rev-parse --absolute-git-dir`` (``-C``: as if started there), or None."""
    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawnp(
            "git",
            ["git", "-C", cwd, "rev-parse", "--absolute-git-dir"],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_CLOSE, read_end),
            ],
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    chunks = []
    with open(read_end, "rb") as answer:
        chunks.append(answer.read())
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    return b"".join(chunks).decode(errors="surrogateescape").strip() or None


def _status_from_kept(cwd: str) -> dict[str, Any] | None:
    state_dir = _state_dir(cwd)
    if state_dir is None:
        return None
    with open(os.path.join(state_dir, "current"), encoding="ascii") as handle:
        run_id = handle.read().strip()
    if not _RUN_ID.match(run_id):
        return None
    folder = os.path.join(state_dir, "runs", run_id)
    kept_path = os.path.join(folder, "state.json")
    ledger = os.stat(os.path.join(folder, "events.jsonl"))
    kept_stat = os.stat(kept_path)
    with open(kept_path, "rb") as handle:
        data = handle.read()
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
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return False
    if not isinstance(create_time, int | float):
        return True
    with open("/proc/stat") as handle:
        boot = next(float(line.split()[1]) for line in handle if line.startswith("btime "))
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return abs(started - create_time) < 1.0
