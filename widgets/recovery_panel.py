"""The facts of a recovery (SPEC 9) as one block: how the attempt ended, the last green checkpoint,
the gates now with regressions marked, the change since that checkpoint, and the last output lines.

The facts come first and fit any height: the fixed lines are wrapped to the width, and the
output tail gets whatever rows are left, newest lines kept. Every state carries a symbol and a
word (✓ ✗ ◌ ⚠), so nothing depends on colour.
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from paella_tui.supervisor.run.events import GREEN, RED, GateResult, RecoveryFacts
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.widgets.theme_styles import themed_ansi

LABEL_WIDTH = 12
"""Columns taken by the fact labels ("Last good", "Gates now", ...)."""

RED_WORDS = {"fail": "fails", "timeout": "timed out", "error": "cannot run"}
"""How a red gate status reads in a sentence."""


def when(t: str) -> str:
    """``Nov 29 03:12 UTC`` from a ledger time (kept in UTC, as recorded, so it reads the same anywhere)."""
    try:
        return f"{datetime.fromisoformat(t):%b %d %H:%M} UTC"
    except ValueError:
        return t


def describe_base(base: SnapshotRecord) -> str:
    """``checkpoint 2 · episode 2: privacy · Nov 29 03:12 UTC``."""
    parts = [f"checkpoint {base.n}"]
    if base.label and base.label != f"checkpoint {base.n}":
        parts.append(base.label)
    parts.append(when(base.t))
    return " · ".join(parts)


def gate_phrase(result: GateResult, *, regressed: bool, base: SnapshotRecord | None) -> Content:
    """One gate's state as a symbol and words: ``✓ lint``, ``✗ export fails``,
    ``⚠ idempotency fails: REGRESSED (green at checkpoint 2)``."""
    word = RED_WORDS.get(result.status, result.status)
    if regressed:
        where = (
            f"green at checkpoint {base.n}"
            if base is not None and result.gate in base.gates_green
            else "green earlier in this run"
        )
        return Content.assemble(
            ("⚠ ", "bold $text-warning"),
            (f"{result.gate} {word}: ", "bold"),
            ("REGRESSED", "bold $text-error"),
            f" ({where})",
        )
    if result.status in GREEN:
        flaky = " (flaky)" if result.status == "flaky" else ""
        return Content.assemble(("✓ ", "$text-success"), result.gate, (flaky, "dim"))
    if result.status in RED:
        return Content.assemble(("✗ ", "$text-error"), result.gate, (f" {word}", "$text-error"))
    return Content.assemble(("◌ ", "dim"), result.gate, (f" {result.status}", "dim"))


FAILED_SHOWN = 3
"""Failing test ids named per red gate; the rest are counted (the gate log view has them all)."""


def failing_phrase(result: GateResult) -> Content:
    """``idempotency failing: tests/a.py::test_x, tests/b.py::test_y, … 4 more``."""
    shown = result.failed_tests[:FAILED_SHOWN]
    more = len(result.failed_tests) - len(shown)
    return Content.assemble(
        (f"{result.gate} failing: ", "$text-error"),
        ", ".join(shown),
        (f", … {more} more" if more else "", "dim"),
    )


class RecoveryPanel(Widget):
    """The facts block of the recovery screen: what happened, the last good state, what changed."""

    DEFAULT_CSS = """
    RecoveryPanel {
        height: 1fr;
        padding: 0 1;
    }
    """

    facts: reactive[RecoveryFacts | None] = reactive(None)
    """The facts to show; None shows a placeholder."""

    def __init__(
        self,
        facts: RecoveryFacts | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.set_reactive(RecoveryPanel.facts, facts)

    def render(self) -> Content:
        """The fact lines wrapped to the width, then as much of the output tail as fits."""
        facts = self.facts
        if facts is None:
            return Content.styled("No recovery facts yet.", "dim")
        width = max(self.content_size.width, LABEL_WIDTH + 10)
        lines: list[Content] = []
        for label, value in self.fact_rows(facts):
            lines.extend(_labelled(label, value, width))
        lines.extend(_tail_lines(facts.tail, width, self.content_size.height - len(lines)))
        return Content("\n").join(lines)

    @staticmethod
    def fact_rows(facts: RecoveryFacts) -> list[tuple[str, Content]]:
        """The labelled facts, before wrapping: ended, last good, gates now, changed."""
        rows: list[tuple[str, Content]] = [("Ended", Content(facts.how_and_attempt))]
        base = facts.base
        if base is None:
            rows.append(
                (
                    "Last good",
                    Content.styled("none yet: no checkpoint has had its episode green", "dim"),
                )
            )
        else:
            green = ", ".join(base.gates_green) or "no gate"
            rows.append(
                (
                    "Last good",
                    Content.assemble(
                        ("● ", "bold $text-success"),
                        describe_base(base),
                        (f" · green there: {green}", "dim"),
                    ),
                )
            )
        rows.extend(_gate_rows(facts))
        rows.append(("Changed", _change_text(facts)))
        return rows


_TAKES_IN = "this screen takes in the verdict when it comes"
_STILL_RUNNING = f"◌ the gates are still running on the final tree: {_TAKES_IN}"


def _gate_rows(facts: RecoveryFacts) -> list[tuple[str, Content]]:
    if not facts.gates_now:
        if facts.gates_final:
            return [("Gates now", Content.styled("none judged yet", "dim"))]
        # Nothing known yet, but the final tree is being judged: say so, not "none".
        return [("Gates now", Content.styled(f"none judged yet; {_STILL_RUNNING}", "dim"))]
    regressed = set(facts.regressions)
    rows: list[tuple[str, Content]] = []
    label = "Gates now"
    # Regressions lead, one a line: they are why the default is what it is.
    for result in facts.gates_now:
        if result.gate in regressed:
            rows.append((label, gate_phrase(result, regressed=True, base=facts.base)))
            label = ""
    others = [r for r in facts.gates_now if r.gate not in regressed]
    if others:
        # Red, then not judged, then green; each group keeps the contract's order.
        rank = {**dict.fromkeys(RED, 0), **dict.fromkeys(GREEN, 2)}
        others.sort(key=lambda r: rank.get(r.status, 1))
        phrases = [gate_phrase(r, regressed=False, base=facts.base) for r in others]
        rows.append((label, Content("  ").join(phrases)))
    for result in facts.gates_now:
        if result.status in RED and result.failed_tests:
            rows.append(("", failing_phrase(result)))
    if not facts.gates_final:
        rows.append(
            (
                "",
                Content.styled(
                    f"◌ still running on the final tree: these are the newest results known; "
                    f"{_TAKES_IN}",
                    "dim",
                ),
            )
        )
    return rows


def _change_text(facts: RecoveryFacts) -> Content:
    since = f"checkpoint {facts.base.n}" if facts.base else "the run started"
    files = facts.changed_files
    if not files:
        return Content.styled(f"nothing since {since}", "dim")
    more = f", … {len(files) - 3} more" if len(files) > 3 else ""
    return Content.assemble(
        f"{len(files)} file{'s' if len(files) != 1 else ''}, ",
        (f"+{facts.lines_added:,}", "$text-success"),
        " ",
        (f"−{facts.lines_removed:,}", "$text-error"),
        f" lines since {since}: ",
        (", ".join(files[:3]) + more, "dim"),
    )


def _labelled(label: str, value: Content, width: int) -> list[Content]:
    """``value`` wrapped beside its label, continuation lines indented under the value."""
    wrapped = value.wrap(width - LABEL_WIDTH) or [Content("")]
    return [
        Content.assemble((f"{label if i == 0 else '':<{LABEL_WIDTH}}", "bold"), part.rstrip())
        for i, part in enumerate(wrapped)
    ]


def _tail_lines(tail: tuple[str, ...], width: int, room: int) -> list[Content]:
    """A heading and the newest output lines that fit in ``room`` rows (one line each, cut)."""
    if room < 2:
        return []
    lines = [line for line in tail if line.strip()]
    if not lines:
        return [Content.assemble(("Last output", "bold"), ("  none recorded", "dim"))]
    shown = lines[-(room - 1) :]
    cut = f" (last {len(shown)} of {len(lines)} lines)" if len(shown) < len(lines) else ""
    out = [Content.assemble(("Last output", "bold"), (cut, "dim"))]
    for raw in shown:
        # The tail keeps the agent's SGR colours; Text.from_ansi reads them, and the cut keeps
        # one line a row so the facts above never scroll away.
        line = Content.from_rich_text(themed_ansi(Text.from_ansi(raw.expandtabs(4))))
        out.append(Content.assemble(("│ ", "dim"), line).truncate(width, ellipsis=True))
    return out
