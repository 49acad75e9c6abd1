"""The help screen: every key, what the symbols mean, where the state lives, and what to run from
another pane."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from paella_tui.supervisor.run.runs import Run
from paella_tui.widgets.keys_footer import KeysFooter

MAIN_KEYS: tuple[tuple[str, str], ...] = (
    ("g", "run the gates now (also resumes a paused watcher)"),
    ("c", "checkpoint now: the gates run first, it records those green"),
    ("r", "roll back: pick a checkpoint (the agent stops, the state is saved)"),
    ("s", "stop the agent: SIGTERM to its group, SIGKILL after a grace period"),
    ("R", "resume the agent with a handoff (or skip a retry countdown)"),
    ("d", "the diff from the last green checkpoint to now, file by file"),
    ("h", "preview the handoff (w in the preview writes handoff.md)"),
    ("l", "a gate's log: failing tests, / search, [ ] older/newer runs"),
    ("Enter", "on a gate (Tab to the table): its log; on an episode or drift: all of it"),
    ("/", "search the agent's output"),
    ("f", "follow the output (keep the newest line in view), or stop"),
    ("q", "quit (asks while the agent runs; quitting stops it)"),
    ("?", "this help"),
)
"""The main screen's keys, as SPEC 12 names them (each line fits 80 columns)."""

RECOVERY_KEYS: tuple[tuple[str, str], ...] = (
    ("r", "roll back to the last green checkpoint, then resume"),
    ("c", "resume from the current state"),
    ("p", "pick a checkpoint (or salvage, to undo a rollback), then resume"),
    ("d", "view the diff from the last green checkpoint to now"),
    ("b", "roll back to just before the break (a step), then resume"),
    ("x", "view the change of the step where a regressed gate broke"),
    ("h", "write the handoff and stop (paella resume continues later)"),
    ("a", "accept: done (offered when every gate is green on the final tree)"),
    ("Enter", "take the default choice (the highlighted one)"),
)
"""The recovery screen's keys (SPEC 9)."""

SYMBOLS: tuple[tuple[str, str], ...] = (
    ("✓", "green: the gate passed on exactly this tree (flaky: on a retry)"),
    ("✗", "red: failed, timed out or could not run; or the agent died"),
    ("●", "running now (a gate re-running keeps its last verdict: pass ●)"),
    ("◌", "not judged yet: pending, or stale (the tree moved)"),
    ("◆", "the last green checkpoint: what r restores by default"),
    ("○", "a manual checkpoint (c): a snapshot, no episode completed"),
    ("↺", "a salvage snapshot: the state before a rollback"),
    ("⚠", "drift: a regression, a protected file changed, a stall…"),
)
"""What each symbol means; colour only repeats it."""

PANE_COMMANDS: tuple[tuple[str, str], ...] = (
    ("paella status --watch", "the run's state, read from disk"),
    ("paella log -f", "the ledger as it grows"),
    ("paella checkpoints", "checkpoints and salvage snapshots"),
    ("paella diff [N]", "the diff from checkpoint N to now"),
    ("paella handoff", "the handoff, printed"),
    ("paella rollback salvage:N", "undo a rollback"),
)
"""Commands to run from another tmux pane while the TUI runs."""


def help_content(state_dir: str = "<git dir>/paella") -> Content:
    """The help text: keys and symbols in aligned columns, then where state lives and what to run."""

    def heading(text: str) -> Content:
        return Content.styled(text, "bold $text-accent")

    def rows(items: tuple[tuple[str, str], ...]) -> list[Content]:
        return [Content.assemble((f"  {key:<6}", "bold"), text) for key, text in items]

    # Every line is short enough for an 80-column pane: nothing wraps under its key.

    lines: list[Content] = [
        heading("Main screen"),
        *rows(MAIN_KEYS),
        Content.styled("  The footer shows these too; ctrl+p finds every command by name.", "dim"),
        Content(""),
        heading("When the agent dies: the recovery screen"),
        Content("  The facts first: how it ended, the last green checkpoint, the gates now"),
        Content("  (regressions marked ⚠), what changed since. Then one key per choice:"),
        *rows(RECOVERY_KEYS),
        Content.styled("  A rollback first saves the current state as a salvage snapshot,", "dim"),
        Content.styled("  so it can be undone: paella rollback salvage:N", "dim"),
        Content(""),
        heading("Symbols (colour only repeats them)"),
        *rows(SYMBOLS),
        Content(""),
        heading("Where the state lives"),
        Content(f"  {state_dir}/runs/<run-id>/"),
        Content("  contract.toml   the contract, frozen when the run started"),
        Content("  events.jsonl    the ledger: everything that happened"),
        Content("  agent.log       the agent's whole output; gates/ each gate run's log"),
        Content("  handoff.md      the latest handoff"),
        Content.styled(
            "  Outside the work tree, so neither the agent nor a rollback reaches it.", "dim"
        ),
        Content.styled(
            "  Snapshots are git refs under refs/paella/, mirrored outside the repository.",
            "dim",
        ),
        Content(""),
        heading("From another pane"),
        *(
            Content.assemble(("  " + command.ljust(28), "bold"), text)
            for command, text in PANE_COMMANDS
        ),
    ]
    return Content("\n").join(lines)


class HelpScreen(Screen[None]):
    """Every key, what the symbols mean, where the state lives, the commands for another pane."""

    CSS_PATH = "styles/screens.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
        Binding("question_mark", "close", "Close", show=False),
    ]

    def __init__(self, run: Run | None = None) -> None:
        super().__init__()
        self.run = run
        """The run whose state folder to name (a generic path without one)."""

    def compose(self) -> ComposeResult:
        """A title, the help text (scrolling), the footer."""
        state_dir = str(self.run.workspace.state_dir) if self.run else "<git dir>/paella"
        yield Static(
            Content.assemble(("paella help", "bold"), ("  Escape closes", "dim")), id="help-title"
        )
        with VerticalScroll(id="help-scroll"):
            yield Static(help_content(state_dir), id="help-doc")
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Scroll keys go to the help text."""
        self.query_one("#help-scroll").focus()

    def action_close(self) -> None:
        """Back to the screen below."""
        self.dismiss(None)
