"""What ``paella status --tmux`` says of a run, kept in the seal of its kept state.

A status bar runs the line every few seconds, so it must cost about a bare Python start and one
``git rev-parse`` (issue 17). Parsing ``state.json`` and hashing it against its seal grows with
the run; so every writer of the kept state puts these few facts, folded from the same state, in
the seal it writes (:func:`~paella_tui.supervisor.base.state_seal.write_seal`): trusted as the seal
is (it lives outside the work tree), a few hundred bytes whatever the run's length, read with
string methods (no ``json``, no ``re``). The line itself is formatted in
:mod:`paella_tui.commands.tmux_line`, which holds :data:`FORMAT` too (a test holds the two equal).

The facts:

- ``facts``: :data:`FORMAT`; a reader that does not know it takes the ordinary way;
- ``kept``: the kept file as written (inode, size, mtime and ctime in ns): a ``state.json``
  written since by anyone else differs (nobody can set a ctime), and the line is refused;
- ``offset``: the ledger's size folded, so that a reader knows how far behind the facts are;
- ``phase``, ``supervisor`` (pid or ``-``), ``agent`` (pid and start time, ``-`` for either
  unknown, or ``-`` alone when no attempt is running by the ledger): the run's word, decided at
  read time with what lives then, as ``RunView.state`` decides it;
- ``episodes`` (complete, total), ``gates`` (green, red, total), ``drift``, ``cost`` (or ``-``)
  and ``tokens``: the rest of the line, as ``status --json`` counts them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from paella_tui.supervisor.run.state_events import GREEN, RED

if TYPE_CHECKING:
    from paella_tui.supervisor.agent.usage import Usage
    from paella_tui.supervisor.run.state import RunState

FORMAT = "1"
"""The facts' format (``tmux_line.FACTS_FORMAT`` reads it)."""


def kept_identity(st: os.stat_result) -> str:
    """The kept file as written: what a ``state.json`` written by anyone since cannot repeat."""
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def bar_facts(state: RunState, offset: int, kept: os.stat_result) -> dict[str, str] | None:
    """The line's facts of ``state`` (folded up to ``offset``), kept in the file ``kept``
    stats; None for a state kept without its contract (the ordinary way reads the contract)."""
    spec = state.spec
    if not spec.known:
        return None
    agent = state.agent
    running = "-"
    if agent is not None and state.last_exit is None:
        running = f"{_number(agent.pid)} {_number(agent.create_time)}"
    statuses = [g.status if (g := state.gates.get(name)) else "pending" for name in spec.gates]
    # Usage shows as `status --json` shows it: with an attempt on record.
    cost, tokens = _spent(state.usage if agent is not None else None)
    return {
        "facts": FORMAT,
        "kept": kept_identity(kept),
        "offset": str(offset),
        "phase": str(state.phase),
        "supervisor": _number(state.supervisor_pid),
        "agent": running,
        "episodes": f"{state.complete_episodes} {len(spec.episodes)}",
        "gates": (
            f"{sum(s in GREEN for s in statuses)} {sum(s in RED for s in statuses)} "
            f"{len(spec.gates)}"
        ),
        "drift": str(len(state.drift)),
        "cost": _number(cost),
        "tokens": str(tokens),
    }


def _number(value: float | None) -> str:
    # repr: a float read back with float() is the very float written.
    return "-" if value is None else repr(value)


def _spent(usage: Usage | None) -> tuple[float | None, int]:
    """(cost, tokens) as the line reads them from ``status --json``'s usage (a cost only when one
    was reported; what is negative counts as nothing)."""
    if usage is None:
        return None, 0
    counts = (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
    tokens = sum(int(n) for n in counts if n >= 0)
    cost = usage.cost_usd
    return (float(cost) if cost is not None and cost >= 0 else None), tokens
