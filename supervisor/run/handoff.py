"""The handoff (SPEC 10): one Markdown document with what the next attempt, or a person, needs.

It is written for an agent that has never seen the run, so it leads with what must not break:
the gates that were green at the last green checkpoint, and how to run each. Then the task, the
constraints, the episodes, the last good state, the gates now (regressions first, with the end of
each failing gate's output), the drift warnings, how the last attempt ended, what changed, what
remains, and the next step.

It must stay short enough to paste: every long part is cut to a budget and says what was cut and
where the whole of it is. If a document still comes out too large, it is rendered again with
tighter budgets. :mod:`paella_tui.supervisor.run.handoff_inputs` gathers the inputs from the run's
state and gate logs alone, so `paella handoff` works from disk after a crash.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from paella_tui.supervisor.base.files import write_atomic
from paella_tui.supervisor.run.events import RED, GateResult
from paella_tui.supervisor.run.handoff_inputs import EpisodeState as EpisodeState
from paella_tui.supervisor.run.handoff_inputs import HandoffInputs
from paella_tui.supervisor.run.handoff_inputs import (
    handoff_inputs_from_view as handoff_inputs_from_view,
)

HANDOFF_FILE = "handoff.md"
"""The handoff's file name in the run folder."""

MAX_BYTES = 11 * 1024
"""A document larger than this is rendered again with tighter budgets."""

_FAILED_SHOWN = 10


# --- budgets ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Limits:
    """How much of each long part the document keeps."""

    line_chars: int = 160
    text_chars: int = 400
    task_chars: int = 1500
    gate_lines: int = 25
    gate_chars: int = 3000
    """For all failing gates' output together."""
    output_lines: int = 20
    output_chars: int = 1500
    files: int = 60
    files_chars: int = 2400
    drift: int = 10

    def scaled(self, factor: float) -> _Limits:
        """Every budget times ``factor`` (at least 1)."""
        values = {f.name: max(1, int(getattr(self, f.name) * factor)) for f in fields(self)}
        return replace(self, **values)


_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _plain(line: str) -> str:
    """A line without escape sequences or control characters, tabs expanded."""
    return _CONTROL.sub("", _ANSI.sub("", line)).expandtabs(4).rstrip()


def _clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _code(text: str) -> str:
    """Inline code that survives backticks in ``text``."""
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fenced(lines: Sequence[str]) -> list[str]:
    """A fenced block holding ``lines``, with a fence longer than any backtick run in them."""
    longest = max((len(run) for line in lines for run in re.findall(r"`{3,}", line)), default=2)
    fence = "`" * max(3, longest + 1)
    return [fence, *lines, fence]


def _last_lines(lines: Sequence[str], *, count: int, chars: int, width: int) -> list[str]:
    """The last lines that fit both ``count`` and ``chars`` (always one, if there is one)."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        shown = _clip(_plain(line), width) if len(line) > width else _plain(line)
        if kept and (len(kept) >= count or used + len(shown) + 1 > chars):
            break
        kept.append(shown)
        used += len(shown) + 1
    kept.reverse()
    while kept and not kept[0].strip():
        kept.pop(0)
    return kept


def _when(t: object) -> str:
    """``2026-11-29 03:12 UTC`` from a ledger time."""
    try:
        return f"{datetime.fromisoformat(str(t)):%Y-%m-%d %H:%M} UTC"
    except ValueError:
        return str(t)


def _clock(t: object) -> str:
    """``03:40:12 UTC`` from a ledger time."""
    try:
        return f"{datetime.fromisoformat(str(t)):%H:%M:%S} UTC"
    except ValueError:
        return str(t)


def _names(names: Sequence[str]) -> str:
    return ", ".join(_code(n) for n in names) if names else "none"


# --- rendering -------------------------------------------------------------------------------


def render_handoff(inputs: HandoffInputs) -> str:
    """The handoff document, in Markdown, cut to stay short enough to paste."""
    limits = _Limits()
    text = _render(inputs, limits)
    for factor in (0.5, 0.25):
        if len(text.encode()) <= MAX_BYTES:
            break
        text = _render(inputs, limits.scaled(factor))
    return text


def _render(inputs: HandoffInputs, limits: _Limits) -> str:
    contract = inputs.contract
    title = f"# Handoff: {contract.run.name}, run {inputs.run_id}"
    after = f" after attempt {inputs.attempt}" if inputs.attempt else ""
    read_first = (
        f"**Read this first.** You are continuing an interrupted run{after}: the work so far "
        "is in the work tree. Done means every gate below passes on the work tree (paella "
        "re-runs them itself), not that you say so."
    )
    rolled = inputs.rolled_back
    if rolled is not None:
        target = str(rolled.get("target") or rolled.get("target_ref") or "a checkpoint")
        salvage = rolled.get("salvage")
        changed = rolled.get("changed_files")
        count = changed if isinstance(changed, int) else 0
        read_first = (
            f"**Read this first.** You are continuing an interrupted run{after}, and the work "
            f"tree was **rolled back to {target}** since: the edits of that attempt are not in "
            "the work tree. "
            + (f"The rollback changed {count} file(s). " if count else "")
            + (
                f"The discarded work is kept in `salvage:{salvage}` (see it with "
                f"`paella diff salvage:{salvage}` or `git diff {rolled.get('target_ref', '')} "
                f"{rolled.get('salvage_ref', '')}`; `paella rollback salvage:{salvage} --yes` "
                "brings it back). "
                if salvage is not None
                else ""
            )
            + "Start from the tree as it is. Done means every gate below passes on the work "
            "tree (paella re-runs them itself), not that you say so."
        )
    parts = [
        [title, "", read_first],
        _keep_green(inputs),
        _task(inputs, limits),
        _constraints(inputs, limits),
        _episodes(inputs, limits),
        _base(inputs),
        _gates_now(inputs, limits),
        list(inputs.where_it_broke),
        _drift(inputs, limits),
        _last_attempt(inputs, limits),
        _changes(inputs, limits),
        _remaining(inputs, limits),
        ["## Next step", "", _next_step(inputs, limits)],
    ]
    return "\n\n".join("\n".join(part) for part in parts if part) + "\n"


def _result_map(inputs: HandoffInputs) -> dict[str, GateResult]:
    return {r.gate: r for r in inputs.gates_now}


def _state_word(result: GateResult | None, regressed: bool) -> str:
    if result is None or result.status in ("pending", "running"):
        return "◌ not judged yet" if result is None else f"◌ {result.status}"
    if result.green:
        return "✓ passes now" + (" (flaky)" if result.status == "flaky" else "")
    if result.status == "stale":
        return "◌ stale (the tree changed while it ran)"
    word = {"fail": "fails", "timeout": "times out", "error": "cannot run"}.get(
        result.status, result.status
    )
    return f"✗ {word} now" + (", REGRESSED" if regressed else "")


def _keep_green(inputs: HandoffInputs) -> list[str]:
    contract, results = inputs.contract, _result_map(inputs)
    lines = ["## Gates that must stay green", ""]
    known = {g.name for g in contract.gates}
    base = inputs.base
    keep = [g for g in (base.gates_green if base else ()) if g in known]
    if base is not None and keep:
        lines.append(
            f"These passed at the last green checkpoint ({base.n}). Keep them passing; "
            "run each to check:"
        )
        lines.append("")
        for name in keep:
            state = _state_word(results.get(name), name in inputs.regressed)
            lines.append(f"- {_code(name)}: {_code(contract.gate(name).cmd)}: {state}")
    else:
        lines.append("No gate has passed at a green checkpoint of this run yet.")
    rest = [g for g in contract.gates if g.name not in keep]
    if rest:
        lines += ["", "To finish, these must pass too:" if keep else "To finish, these must pass:"]
        lines.append("")
        for gate in rest:
            state = _state_word(results.get(gate.name), gate.name in inputs.regressed)
            lines.append(f"- {_code(gate.name)}: {_code(gate.cmd)}: {state}")
    return lines


def _task(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    run = inputs.contract.run
    lines = ["## Task", ""]
    if run.prompt_file:
        lines.append(
            f"The task is in {_code(run.prompt_file)} at the workspace root: read it first."
        )
    elif run.prompt:
        prompt = run.prompt.strip()
        if len(prompt) <= limits.task_chars:
            lines.append(prompt)
        else:
            lines.append(prompt[: limits.task_chars].rstrip() + "…")
            lines += [
                "",
                f"… {len(prompt) - limits.task_chars:,} characters cut; the whole task is "
                f"`[run] prompt` in {inputs.contract.path}.",
            ]
    return lines


def _constraints(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = ["## Constraints", ""]
    constraints = inputs.contract.constraints
    if not constraints:
        lines.append("None beyond the gates.")
    for constraint in constraints:
        lines.append(f"- {_clip(constraint.text, limits.text_chars)}")
        if constraint.protect:
            protected = ", ".join(_code(p) for p in constraint.protect)
            lines.append(f"  Do not change: {protected} (a change there is drift).")
    scope = inputs.contract.run.scope
    if scope:
        lines.append(f"- Change only files under {', '.join(_code(s) for s in scope)}.")
    return lines


def _episodes(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = [
        "## Episodes",
        "",
        "Episode k is complete when the gates of episodes 1 to k all pass on the same tree.",
        "",
    ]
    for ep in inputs.episodes:
        mark = "✓" if ep.complete else "✗"
        if ep.complete:
            state = f"checkpoint {ep.checkpoint}" if ep.checkpoint else "complete"
        elif ep.checkpoint:
            state = f"was complete at checkpoint {ep.checkpoint}, not now"
        else:
            state = "not yet"
        goal = f": {_clip(ep.goal, limits.text_chars)}" if ep.goal else ""
        lines.append(f"- {mark} {ep.n}. {ep.name}{goal} (gates: {_names(ep.gates)}; {state})")
    return lines


def _base(inputs: HandoffInputs) -> list[str]:
    base = inputs.base
    lines = ["## Last green checkpoint", ""]
    if base is None:
        lines.append("None yet: no episode has been completed on a checkpoint in this run.")
        return lines
    episode = ""
    if isinstance(base.episode, int) and 1 <= base.episode <= len(inputs.episodes):
        episode = f", completes episode {base.episode} ({inputs.episodes[base.episode - 1].name})"
    lines.append(
        f"Checkpoint {base.n}: {_code(base.ref)}, taken {_when(base.t)}{episode}; "
        f"gates green there: {_names(base.gates_green)}."
    )
    lines.append(f"See the changes since then: `paella diff {base.n}`.")
    return lines


def _gates_now(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = ["## Gates now", ""]
    base_green = set(inputs.base.gates_green) if inputs.base else set()

    def order(r: GateResult) -> int:
        if r.gate in inputs.regressed:
            return 0
        if r.status in RED:
            return 1
        return 3 if r.green else 2

    results = sorted(inputs.gates_now, key=order)
    for r in results:
        if r.gate in inputs.regressed:
            where = (
                f"at checkpoint {inputs.base.n}"
                if inputs.base and r.gate in base_green
                else "on an earlier tree of this run"
            )
            mark = f"⚠ ✗ {_code(r.gate)} {r.status}: REGRESSED, it passed {where}"
        elif r.status in RED:
            mark = f"✗ {_code(r.gate)} {r.status}"
        elif r.green:
            mark = f"✓ {_code(r.gate)} {r.status}"
        else:
            mark = f"◌ {_code(r.gate)} {r.status}"
        detail = []
        if r.status in RED and r.exit_code is not None:
            detail.append(f"exit {r.exit_code}")
        if r.message:
            detail.append(_clip(r.message, limits.line_chars))
        lines.append(f"- {mark}" + (f" ({'; '.join(detail)})" if detail else ""))
        if r.status in RED and r.failed_tests:
            shown = r.failed_tests[:_FAILED_SHOWN]
            more = len(r.failed_tests) - len(shown)
            names = ", ".join(_code(t) for t in shown) + (f", and {more} more" if more else "")
            lines.append(f"  - failing: {names}")
    failing = [r for r in results if r.status in RED]
    budget = limits.gate_chars // max(len(failing), 1)
    for r in failing:
        total = inputs.gate_log_lines.get(r.gate, len(r.tail))
        kept = _last_lines(r.tail, count=limits.gate_lines, chars=budget, width=limits.line_chars)
        lines += ["", f"### {_code(r.gate)} output, last lines", ""]
        if not kept:
            where = f" (log: {r.log_path})" if r.log_path else ""
            lines.append(f"No output was recorded{where}.")
            continue
        lines += _fenced(kept)
        cut = total - len(kept)
        if cut > 0:
            where = f", full log: {r.log_path}" if r.log_path else ""
            lines.append(f"… {cut:,} lines cut{where}")
    return lines


def _drift(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = ["## Drift warnings", ""]
    if not inputs.drift:
        lines.append("None.")
        return lines
    # Repeats of one warning are folded into one line with a count, newest time shown.
    folded: dict[tuple[str, str], tuple[Mapping[str, Any], int]] = {}
    for d in inputs.drift:
        key = (str(d.get("kind", "")), str(d.get("message", "")))
        _, count = folded.pop(key, (d, 0))
        folded[key] = (d, count + 1)
    items = list(folded.values())
    shown = items[-limits.drift :]
    for d, count in shown:
        times = f" (×{count})" if count > 1 else ""
        message = _clip(str(d.get("message", "")), limits.line_chars)
        lines.append(f"- {_clock(d.get('t'))} ⚠ {d.get('kind', '?')}: {message}{times}")
    hidden = items[: len(items) - len(shown)]
    if hidden:
        kinds = Counter[str]()
        for d, count in hidden:
            kinds[str(d.get("kind", "?"))] += count
        by_kind = ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())
        total = sum(kinds.values())
        lines.append(f"… {total:,} earlier warnings cut ({by_kind}); all of them: `paella log`.")
    return lines


def _last_attempt(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = ["## How the last attempt ended", ""]
    lines.append(f"{inputs.ending}." if inputs.ending else "No attempt has ended yet.")
    if inputs.usage is not None and not inputs.usage.empty:
        lines.append(f"The agent reported, over every attempt: {inputs.usage.describe()}.")
    if inputs.session_id:
        lines.append(f"Its session: {inputs.session_id}.")
    kept = _last_lines(
        inputs.last_output,
        count=limits.output_lines,
        chars=limits.output_chars,
        width=limits.line_chars,
    )
    if kept:
        lines += ["", "Its last output lines:", "", *_fenced(kept)]
        cut = len(inputs.last_output) - len(kept)
        if cut > 0:
            lines.append(f"… {cut:,} earlier lines cut")
    if inputs.agent_log:
        lines.append(f"All of the agent's output: {inputs.agent_log}")
    return lines


def _changes(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    base = inputs.base
    since = f"checkpoint {base.n}" if base else "the run started"
    lines = [f"## Files changed since {since}", ""]
    changes = inputs.changes
    if not changes:
        lines.append("None.")
        return lines
    added = sum(max(a, 0) for _, a, _ in changes)
    removed = sum(max(r, 0) for _, _, r in changes)
    see = f" See them with `paella diff {base.n}`." if base else ""
    lines.append(f"{len(changes):,} files, +{added:,} −{removed:,} lines.{see}")
    lines.append("")
    used = 0
    shown = 0
    for path, a, r in changes:
        counts = "binary" if a < 0 or r < 0 else f"+{a} −{r}"
        line = f"- {_code(_clip(path, limits.line_chars))} {counts}"
        if shown and (shown >= limits.files or used + len(line) > limits.files_chars):
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    rest = changes[shown:]
    if rest:
        rest_added = sum(max(a, 0) for _, a, _ in rest)
        rest_removed = sum(max(r, 0) for _, _, r in rest)
        lines.append(f"… {len(rest):,} more files cut (+{rest_added:,} −{rest_removed:,} lines).")
    return lines


def _remaining(inputs: HandoffInputs, limits: _Limits) -> list[str]:
    lines = ["## What remains", ""]
    todo = [ep for ep in inputs.episodes if not ep.complete]
    if not todo:
        lines.append("Every episode is complete on the current tree.")
        return lines
    results = _result_map(inputs)
    for ep in todo:
        needed = inputs.contract.episode_gates(ep.n)
        red = [g for g in needed if not (results.get(g) and results[g].green)]
        again = f" (again: it was complete at checkpoint {ep.checkpoint})" if ep.checkpoint else ""
        goal = f": {_clip(ep.goal, limits.text_chars)}" if ep.goal else ""
        lines.append(f"{ep.n}. {ep.name}{again}{goal} (needs passing: {_names(red)})")
    return lines


def _next_step(inputs: HandoffInputs, limits: _Limits) -> str:
    fresh = next((ep for ep in inputs.episodes if not ep.complete and not ep.checkpoint), None)
    then = ""
    if fresh is not None:
        goal = f": {_clip(fresh.goal, limits.text_chars).rstrip('.')}" if fresh.goal else ""
        then = f"episode {fresh.n} ({fresh.name}){goal}"
    if inputs.regressed:
        fix = f"Make {_names(inputs.regressed)} pass again without turning another gate red"
        return f"{fix}, then continue with {then}." if then else f"{fix}, then finish."
    if fresh is not None:
        return f"Continue with {then}, keeping every gate that passes now passing."
    red = [r.gate for r in inputs.gates_now if not r.green]
    if red:
        return f"Make {_names(red)} pass, keeping every other gate passing, then finish."
    return "Every episode is complete: check that every gate passes, then finish."


# --- from the ledger ---------------------------------------------------------------------------


def write_handoff(run_dir: Path, text: str) -> Path:
    """Write ``<run dir>/handoff.md`` atomically (mode 0600) and return its path."""
    path = run_dir / HANDOFF_FILE
    write_atomic(path, text)
    return path
