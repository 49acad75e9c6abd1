"""The handoff's "Where it broke" section: for each regressed gate, the step that broke it, that
step's change trimmed to the files that matter, and the gate's failure there.

The files that matter are the breaking step's files that the gate's failure names (a path or a
file name in its output); when it names none, all of the step's files, smallest diff first, until
the budget is spent. Later steps that touched those files are counted, so the reader knows
whether the break is still alone in them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.judge.breaks import breaks_of, since_rollback
from paella_tui.supervisor.run.events import BreakPoint
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.store.steps import StepRecord, steps_of

DIFF_CHARS = 2500
"""How much of the breaking step's diff the handoff keeps, for all its files together."""


@dataclass(frozen=True)
class BreakReport:
    """One regressed gate's break, ready to render."""

    point: BreakPoint
    diff: str
    """The step's change, trimmed to the files that matter (unified diff)."""
    shown: tuple[str, ...]
    """The files ``diff`` holds."""
    later_steps: int
    """Steps taken after the breaking one."""
    later_touching: int
    """How many of those changed a file the breaking step changed."""
    before_break: int | None
    """The step to roll back to, just before the break (as the bisect found)."""
    base_minutes: float | None
    """Minutes from the last green checkpoint to the breaking step."""


def _mentioned(paths: Sequence[str], tail: Sequence[str]) -> list[str]:
    text = "\n".join(tail)
    return [p for p in paths if p in text or os.path.basename(p) in text]


def _minutes(start: str | None, end: str | None) -> float | None:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds() / 60


def break_reports(view: RunView, *, budget: int = DIFF_CHARS) -> tuple[BreakReport, ...]:
    """Reports for the gates that are regressed now and whose break a bisect found."""
    regressed = {name for name, r in view.gate_results().items() if r.get("regressed")}
    found = view.run_state.breaks.values()  # the same verdicts, folded: no read of the ledger
    if not any(p.verdict == "found" and p.gate in regressed for p in found):
        return ()  # the common case: the steps are read only to show a break
    records = since_rollback(view.records)
    steps = steps_of(records)
    by_n = {s.n: s for s in steps}
    before = next(
        (r.get("before_break") for r in reversed(records) if r.get("kind") == "bisect"), None
    )
    base = view.last_green_checkpoint
    reports = []
    for point in breaks_of(view.records).values():
        if point.verdict != "found" or point.gate not in regressed or point.step is None:
            continue
        step = by_n.get(point.step)
        if step is None:
            continue
        diff, shown = _trimmed_diff(view, step, point.tail, budget)
        files = {p for p, _a, _r in step.files}
        later = [s for s in steps if s.n > step.n]
        touching = [s for s in later if files & {p for p, _a, _r in s.files}]
        reports.append(
            BreakReport(
                point=point,
                diff=diff,
                shown=tuple(shown),
                later_steps=len(later),
                later_touching=len(touching),
                before_break=before if isinstance(before, int) else None,
                base_minutes=_minutes(base.t, step.t) if base is not None else None,
            )
        )
    return tuple(reports)


def _trimmed_diff(
    view: RunView, step: StepRecord, tail: Sequence[str], budget: int
) -> tuple[str, list[str]]:
    if step.parent_tree is None:
        return "", []
    paths = [p for p, _a, _r in step.files]
    named = _mentioned(paths, tail)
    order = named or sorted(
        paths, key=lambda p: next(((a or 0) + (r or 0) for q, a, r in step.files if q == p), 0)
    )
    git = view.run.workspace.git
    parts: list[str] = []
    shown: list[str] = []
    used = 0
    for path in order:
        try:
            text = git.run(
                ["diff", "--no-color", "--no-renames", step.parent_tree, step.tree, "--", path],
                env={"GIT_LITERAL_PATHSPECS": "1"},
            ).stdout.decode(errors="replace")
        except GitError:
            continue
        if used and used + len(text) > budget:
            break
        if len(text) > budget:
            text = text[:budget] + f"\n… cut (`paella diff step:{step.n}` shows it all)\n"
        parts.append(text)
        shown.append(path)
        used += len(text)
    return "".join(parts), shown


def handoff_section(reports: Sequence[BreakReport]) -> list[str]:
    """The Markdown of the "Where it broke" section (empty when nothing was found)."""
    if not reports:
        return []
    lines = ["## Where it broke", ""]
    for report in reports:
        p = report.point
        when = (
            f", {report.base_minutes:.0f} min after the last green checkpoint"
            if report.base_minutes is not None and report.base_minutes >= 0
            else ""
        )
        lines.append(f"- ⚠ `{p.gate}` {p.headline()}{when} (step {p.last_green_step} was green).")
        if report.later_steps:
            others = report.later_steps - report.later_touching
            lines.append(
                f"  Of the {report.later_steps} later step(s), {others} did not touch these files."
            )
        if report.diff:
            rest = len(p.files) - len(report.shown)
            trimmed = (
                f" (trimmed to the files that matter; {rest} more file(s))" if rest > 0 else ""
            )
            lines += ["", f"  The change{trimmed}:", "", "```diff", report.diff.rstrip(), "```"]
        if p.tail:
            lines += ["", f"  `{p.gate}` there, last lines:", "", "```"]
            lines += [line[:160] for line in p.tail[-12:]]
            lines.append("```")
        lines.append("")
        lines.append(f"  See it all: `paella diff step:{p.step}`.")
    before = next((r.before_break for r in reports if r.before_break is not None), None)
    if before is not None:
        lines.append(
            f"- Just before the break, every gate green at the last checkpoint passes: "
            f"`paella rollback step:{before}` goes back there."
        )
    return lines
