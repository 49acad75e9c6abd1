"""``paella status --tmux``: one short line for a status bar, refreshed every few seconds.

:func:`tmux_line` formats it from ``status --json``'s object. :func:`fast_line` makes the same
line from the facts paella keeps in the seal of the run's kept state
(:mod:`~paella_tui.supervisor.run.bar_facts`, written with every ``state.json``) and ``/proc``,
with one git process and no engine module loaded: a status bar calls it every few seconds, so it
costs about a bare Python start and a ``git rev-parse`` (issue 17). Nothing on that way imports
``re``, ``json``, ``typing``, ``pathlib``, ``subprocess`` or ``contextlib`` (a test holds it). It
answers None, and the command takes the ordinary way (which folds the new records and keeps the
state and its seal for the next call), when there are no facts in a format it knows, when the
kept file is not the one paella wrote with them (forged or rewritten since: the agent can write
there, not where the seal lives), or when they are older than the ledger by more than
:data:`MAX_LAG_S`.
"""

from __future__ import annotations

import os

from paella_tui.supervisor.base.state_seal import seal_facts

# What the line imports is most of what it costs (a status bar runs it every few seconds):
# `typing`, `pathlib` and `subprocess` are ~15 ms of a 36 ms start, `re` and `json` ~4 ms more, so
# the fast way does without them (os paths, `os.posix_spawnp`, string methods). mypy reads any
# TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_LAG_S = 10.0
"""How far the kept state may trail the ledger (a live run keeps it every few seconds)."""
FACTS_FORMAT = "1"
"""The seal facts' format this reads (``bar_facts.FORMAT``, not imported: this line loads no
engine module past the seal's; a test holds the two equal)."""
_GREEN = ("pass", "flaky")
_RED = ("fail", "timeout", "error")
_ICONS = {"done": "✓", "running": "●", "retry-wait": "◌", "recovering": "✗", "dead": "✗"}


def tmux_line(status: dict[str, Any] | None) -> str:
    """``paella ● running ep 1/3 ✓2 ✗1 ⚠1 $0.84`` from ``status --json``'s object."""
    if status is None:
        return "paella: no run"
    cost, tokens = _spent(status["agent"].get("usage"))
    return _line(
        status["state"],
        (sum(e["complete"] for e in status["episodes"]), len(status["episodes"])),
        (
            sum(g["status"] in _GREEN for g in status["gates"]),
            sum(g["status"] in _RED for g in status["gates"]),
            len(status["gates"]),
        ),
        len(status["drift"]),
        cost,
        tokens,
    )


def _line(
    word: str,
    episodes: tuple[int, int],
    gates: tuple[int, int, int],
    drift: int,
    cost: float | None,
    tokens: int,
) -> str:
    """The line of a run whose word is ``word``, from its counts (the one formatter of both ways)."""
    parts = [f"paella {_ICONS.get(word, '◌')} {word}"]
    if episodes[1]:
        parts.append(f"ep {episodes[0]}/{episodes[1]}")
    if gates[2]:
        parts.append(f"✓{gates[0]} ✗{gates[1]}")
    if drift:
        parts.append(f"⚠{drift}")
    if cost is not None:
        parts.append(f"${cost:.2f}")
    elif tokens:
        # Imported here: a line with a cost (or nothing spent) never needs it.
        from paella_tui.supervisor.base.counts import compact_count

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
    """The line from the kept state's seal, or None when the ordinary way must answer."""
    try:
        facts = _facts(os.fspath(cwd))
        return None if facts is None else facts_line(facts)
    except (OSError, ValueError, KeyError, IndexError):
        return None


def facts_line(facts: dict[str, str]) -> str:
    """The line of a run from the facts kept in its seal, with what lives now."""
    episodes = facts["episodes"].split()
    gates = facts["gates"].split()
    cost = facts["cost"]
    return _line(
        _word(facts["phase"], facts["supervisor"], facts["agent"]),
        (int(episodes[0]), int(episodes[1])),
        (int(gates[0]), int(gates[1]), int(gates[2])),
        int(facts["drift"]),
        None if cost == "-" else float(cost),
        int(facts["tokens"]),
    )


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
    with open(read_end, "rb") as answer:
        out = answer.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    return out.decode(errors="surrogateescape").strip() or None


def is_run_id(text: str) -> bool:
    """``20261202-064801-0414``: what ``runs.RUN_ID_PATTERN`` takes, in ASCII digits (a test holds
    the two together), read with string methods: ``re`` is ~4 ms of the line's start."""
    parts = text.split("-")
    if len(parts) != 3 or not text.isascii():
        return False
    date, clock, tag = parts
    return (
        len(date) == 8
        and date.isdigit()
        and len(clock) == 6
        and clock.isdigit()
        and len(tag) == 4
        and all(c in "0123456789abcdef" for c in tag)
    )


def _facts(cwd: str) -> dict[str, str] | None:
    """The seal's facts of the current run, when they are paella's, current and readable."""
    state_dir = _state_dir(cwd)
    if state_dir is None:
        return None
    with open(os.path.join(state_dir, "current"), "rb") as handle:
        run_id = handle.read().decode().strip()
    if not is_run_id(run_id):
        return None
    folder = os.path.join(state_dir, "runs", run_id)
    kept_path = os.path.join(folder, "state.json")
    facts = seal_facts(kept_path)
    if facts is None or facts.get("facts") != FACTS_FORMAT:
        return None
    kept = os.stat(kept_path)
    if facts["kept"] != f"{kept.st_ino} {kept.st_size} {kept.st_mtime_ns} {kept.st_ctime_ns}":
        return None  # not the file paella wrote with these facts: the ordinary way folds
    ledger = os.stat(os.path.join(folder, "events.jsonl"))
    offset = int(facts["offset"])
    current = offset == ledger.st_size
    recent = ledger.st_mtime - kept.st_mtime <= MAX_LAG_S
    if offset > ledger.st_size or not (current or recent):
        return None
    return facts


def _word(phase: str, supervisor: str, agent: str) -> str:
    """The run's word as ``status`` says it (``RunView.state``): its phase, with what lives now."""
    if phase in ("done", "stopped"):
        return phase
    if phase != "starting" and not _alive(_pid(supervisor), None):
        return "dead"
    if agent != "-":
        pid, started = agent.split()
        if _alive(_pid(pid), None if started == "-" else float(started)):
            return "running"
    if phase in ("retry-wait", "recovering"):
        return phase
    return "dead" if phase == "running" else "stopped"


def _pid(text: str) -> int | None:
    return None if text == "-" else int(text)


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
