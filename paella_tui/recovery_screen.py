"""The recovery screen (SPEC 9): the agent's attempt ended without the run being done.

The facts come first (how it ended, the last green checkpoint, the gates now with regressions
marked, what changed since, the last output), then one key per choice. The default choice is
highlighted and explained in one line, and Enter takes it. The screen dismisses with the
engine's :class:`Decision`; picking a checkpoint and viewing the diff open their own screens and
come back here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from paella_tui.diff_screen import DiffScreen
from paella_tui.picker_screen import PickerScreen
from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.run.decisions import Decision
from paella_tui.supervisor.run.events import (
    RED,
    BreakPoint,
    EvaluationFinished,
    RecoveryFacts,
)
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store import steps
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.keys_footer import KeysFooter
from paella_tui.widgets.recovery_panel import RecoveryPanel


def recovery_title(facts: RecoveryFacts) -> str:
    """The plain headline: ``✗ The agent died: exit 1 (attempt 2)``, ``■ You stopped the agent``."""
    how = facts.how
    which = f" (attempt {facts.attempt})" if facts.attempt is not None else ""
    if facts.ending == "stopped":
        return "■ You stopped the agent"
    if facts.ending == "claimed-done":
        return "⚠ The agent said it was done, but gates are red"
    if facts.ending == "transient":
        return f"✗ The agent died: {how}{which}, and the retries are used up"
    return f"✗ The agent died: {how}{which}"


def _names(gates: tuple[str, ...]) -> str:
    noun = "gate" if len(gates) == 1 else "gates"
    return f"{noun} {', '.join(gates)}"


def break_lines(facts: RecoveryFacts) -> Content:
    """``⚠ idempotency broke at 02:31 in step 17: core.py, +3 −1`` for each regressed gate,
    with the keys that show the step's change and roll back to just before it."""
    parts: list[Content] = []
    for point in facts.breaks:
        if point.verdict == "found":
            parts.append(
                Content.assemble(
                    ("⚠ ", "bold $text-warning"),
                    (f"{point.gate} ", "bold"),
                    point.headline(),
                    ("  x: its diff", "dim"),
                )
            )
        else:
            parts.append(Content.assemble(("◌ ", "dim"), (point.headline(), "dim")))
    return Content("\n").join(parts)


def default_reason(facts: RecoveryFacts) -> str:
    """The default choice and why, in one line."""
    base = facts.base
    if facts.default == "rollback" and base is not None:
        return (
            f"Default: roll back — {_names(facts.regressions)} regressed after checkpoint "
            f"{base.n}, so the last good state is safer to resume from"
        )
    if base is None:
        if facts.regressions:
            return (
                f"Default: resume from here — {_names(facts.regressions)} regressed, but there "
                "is no green checkpoint to roll back to"
            )
        return "Default: resume from here — there is no green checkpoint to roll back to yet"
    return (
        f"Default: resume from here — nothing regressed since checkpoint {base.n}, so the work "
        "since then is worth keeping"
    )


class RecoveryScreen(Screen[Decision]):
    """The facts of a failed attempt, then one key per choice; dismisses with the Decision."""

    CSS_PATH = "styles/screens.tcss"
    AUTO_FOCUS = "#recovery-choices"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rollback", "Roll back"),
        Binding("c", "resume_here", "Resume here"),
        Binding("p", "pick", "Pick"),
        Binding("d", "diff", "Diff"),
        Binding("h", "handoff_stop", "Handoff+stop"),
        Binding("b", "before_break", "Before break", show=False),
        Binding("x", "break_diff", "Step diff", show=False),
        Binding("a", "accept", "Accept done"),
        Binding("enter", "take_default", "Default", show=False),
    ]

    def __init__(self, facts: RecoveryFacts, *, run: Run) -> None:
        super().__init__()
        self.facts = facts
        """What happened: the engine's facts for this recovery."""
        self.run = run
        """The run (the picker and the diff read their checkpoints and its workspace)."""

    def compose(self) -> ComposeResult:
        """Title, facts, the default explained, the choices, a line for refusals, the footer."""
        facts = self.facts
        # A death reads as an error; a stop, or a claim of done, as a warning.
        warning = facts.ending in ("stopped", "claimed-done")
        yield Static(
            recovery_title(facts),
            id="recovery-title",
            classes="-warning" if warning else "-died",
            markup=False,
        )
        yield RecoveryPanel(facts, id="recovery-facts")
        breaks = Static(break_lines(facts), id="recovery-breaks")
        breaks.display = bool(facts.breaks)
        yield breaks
        yield Static(Content.assemble(("⏎ ", "bold"), default_reason(facts)), id="recovery-default")
        yield OptionList(*self._options(), id="recovery-choices")
        notice = Static("", id="recovery-notice")
        notice.display = False  # shown only when a key is refused
        yield notice
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Highlight the default choice, so Enter on the list takes it too."""
        self._highlight_default()

    def _highlight_default(self, *, focus: bool = False) -> None:
        # After a recompose the screen may be closing (the app quit meanwhile): no list, no-op.
        for choices in self.query("#recovery-choices").results(OptionList):
            choices.highlighted = choices.get_option_index(self.facts.default)
            if focus:
                choices.focus()

    async def final_gates(self, verdict: EvaluationFinished, regressed: Iterable[str]) -> None:
        """The gates finished on the final tree after the screen opened: show their verdict
        (a verdict on another tree is ignored).

        ``regressed`` is the run state's (the one rule); the default follows from it, as the
        engine would have said had it waited: a person reading the screen a minute later must
        not read "still running".
        """
        if self.facts.gates_final or verdict.tree != self.facts.tree:
            return
        results = verdict.results
        now_regressed = set(regressed)
        regressions = tuple(r.gate for r in results if r.status in RED and r.gate in now_regressed)
        default: Literal["rollback", "continue"] = (
            "rollback" if regressions and self.facts.base is not None else "continue"
        )
        self.facts = dataclasses.replace(
            self.facts,
            gates_now=results,
            regressions=regressions,
            default=default,
            gates_final=True,
        )
        if self.is_mounted:  # else compose reads the new facts when it mounts
            await self.recompose()
            self.refresh_bindings()
            self._highlight_default(focus=True)

    async def bisected(self, point: BreakPoint, before_break: SnapshotRecord | None) -> None:
        """A bisect found where a regressed gate broke after the screen opened: say it."""
        if point.gate not in self.facts.regressions:
            return
        breaks = (*(b for b in self.facts.breaks if b.gate != point.gate), point)
        self.facts = dataclasses.replace(
            self.facts, breaks=breaks, before_break=before_break or self.facts.before_break
        )
        if self.is_mounted:
            await self.recompose()
            self._highlight_default(focus=True)

    def _options(self) -> list[Option]:
        base = self.facts.base
        default = self.facts.default

        def prompt(key: str, text: str, choice: str, note: str = "") -> Content:
            mark = ("  ◀ default", "bold $text-accent") if choice == default else ""
            return Content.assemble((f" {key} ", "bold reverse"), f" {text}", (note, "dim"), mark)

        if base is not None:
            rollback = Option(
                prompt(
                    "r", f"Roll back to checkpoint {base.n} and resume", "rollback", " (undoable)"
                ),
                id="rollback",
            )
        else:
            rollback = Option(
                Content.assemble(
                    (" r ", "bold"), " Roll back: not possible, there is no green checkpoint yet"
                ),
                id="rollback",
                disabled=True,
            )
        since = f"checkpoint {base.n}" if base is not None else "the newest checkpoint"
        before = self.facts.before_break
        finer = (
            [
                Option(
                    prompt(
                        "b",
                        f"Roll back to just before the break ({before.name}) and resume",
                        "before-break",
                        " (undoable)",
                    ),
                    id="before-break",
                )
            ]
            if before is not None
            else []
        )
        accept = (
            [
                Option(
                    prompt("a", "Accept: every gate is green on the final tree, call it done", ""),
                    id="accept",
                )
            ]
            if self.all_green
            else []
        )
        return [
            *accept,
            rollback,
            *finer,
            Option(prompt("c", "Resume from the current state", "continue"), id="continue"),
            Option(
                prompt("p", "Pick a checkpoint to roll back to, then resume", "pick"), id="pick"
            ),
            Option(prompt("d", f"View the diff since {since}", "diff"), id="diff"),
            Option(
                prompt("h", "Write the handoff and stop", "stop", " (paella resume continues)"),
                id="stop",
            ),
        ]

    @on(OptionList.OptionSelected, "#recovery-choices")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        action = {
            "rollback": self.action_rollback,
            "continue": self.action_resume_here,
            "pick": self.action_pick,
            "diff": self.action_diff,
            "stop": self.action_handoff_stop,
            "before-break": self.action_before_break,
            "accept": self.action_accept,
        }.get(event.option_id or "")
        if action is not None:
            action()

    def action_take_default(self) -> None:
        """Take the default choice (Enter)."""
        if self.facts.default == "rollback":
            self.action_rollback()
        else:
            self.action_resume_here()

    def action_rollback(self) -> None:
        """Roll back to the last green checkpoint, then resume; refused, visibly, without one."""
        if self.facts.base is None:
            self.app.bell()
            notice = self.query_one("#recovery-notice", Static)
            notice.display = True
            notice.update(
                Content.assemble(
                    ("✗ Cannot roll back: ", "bold $text-error"),
                    "there is no green checkpoint yet. p picks another snapshot; "
                    "c resumes from the current state.",
                )
            )
            return
        self.dismiss(Decision("rollback", self.facts.base))

    def action_before_break(self) -> None:
        """Roll back to the last step before the break where the base's gates pass, then resume."""
        before = self.facts.before_break
        if before is None:
            self.app.bell()
            return
        self.dismiss(Decision("rollback", before))

    def action_break_diff(self) -> None:
        """View the change the breaking step made (the first break found), then come back."""
        found = [b for b in self.facts.breaks if b.verdict == "found" and b.step is not None]
        if not found:
            self.app.bell()
            return
        point = min(found, key=lambda b: b.step or 0)
        try:
            step = steps.find(self.run, f"step:{point.step}")
        except PaellaError:
            self.app.bell()
            return
        if step.parent_tree is None:
            return
        parent = SnapshotRecord(
            kind="steps",
            n=step.n - 1,
            ref="",
            commit="",
            tree=step.parent_tree,
            head=None,
            branch=None,
            t=step.t,
            label="the step before",
        )
        self.app.push_screen(
            DiffScreen(self.run, parent, until=step.tree, until_name=f"step {step.n}")
        )

    def action_resume_here(self) -> None:
        """Resume from the current state."""
        self.dismiss(Decision("continue"))

    def action_pick(self) -> None:
        """Pick a checkpoint (or salvage snapshot); a pick rolls back to it, Escape comes back."""

        def picked(record: SnapshotRecord | None) -> None:
            if record is not None:
                self.dismiss(Decision("rollback", record))

        self.app.push_screen(PickerScreen(self.run), picked)

    def action_diff(self) -> None:
        """View the diff from the last green checkpoint to now, then come back."""
        self.app.push_screen(DiffScreen(self.run, self.facts.base))

    @property
    def all_green(self) -> bool:
        """Every gate is green on the final tree (its verdict is in): accepting is possible."""
        gates = self.facts.gates_now
        return bool(gates) and self.facts.gates_final and all(g.green for g in gates)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``a`` only when every gate is green on the final tree."""
        if action == "accept":
            return self.all_green
        return True

    def action_accept(self) -> None:
        """The run is done: every gate is green on the final tree (the engine checks again)."""
        if self.all_green:
            self.dismiss(Decision("accept"))

    def action_handoff_stop(self) -> None:
        """Stop here; the engine has written the handoff, and ``paella resume`` continues later."""
        self.dismiss(Decision("stop"))
