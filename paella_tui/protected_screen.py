"""The protected-files screen: the agent changed files the contract protects; a person decides.

Opened by the run loop's ``review`` when the gates are green but a protected file (a
constraint's ``protect`` globs, or ``paella.toml``) differs from its frozen content: the gates
judged the frozen content, so their green says nothing about the change. It shows which files
changed and the diff, then one key each:

- ``a`` accept: the change becomes the frozen content (recorded in the ledger, by you);
- ``v`` revert: the files go back to their frozen content byte for byte, after a salvage
  snapshot (``paella rollback salvage:N --yes`` undoes it);
- ``l``/Escape later: nothing changes; the run goes on to the recovery screen, not done.

It dismisses with the engine's :data:`ReviewChoice`.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from rich.syntax import Syntax
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from paella_tui.supervisor.judge.frozen import ProtectedChange, ReviewChoice
from paella_tui.widgets.keys_footer import KeysFooter

_WORDS = {"A": "added", "D": "deleted", "M": "changed", "T": "type changed"}


def change_lines(change: ProtectedChange) -> str:
    """One line per changed protected path: ``changed  tests/test_x.py``."""
    return "\n".join(f"  {_WORDS.get(status, status):<13}{path}" for status, path in change.changes)


class ProtectedScreen(Screen[ReviewChoice]):
    """Changed protected files, their diff, and accept / revert / later."""

    CSS_PATH = "styles/screens.tcss"
    DEFAULT_CSS = """
    ProtectedScreen #protected-title { text-style: bold; color: $warning; padding: 0 1; }
    ProtectedScreen #protected-why { padding: 0 1; }
    ProtectedScreen #protected-files { padding: 0 1; color: $text; }
    ProtectedScreen #protected-keys { padding: 0 1; text-style: bold; }
    ProtectedScreen #protected-diff { height: 1fr; border: round $panel; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "choose('accept')", "Accept the change"),
        Binding("v", "choose('revert')", "Revert to frozen"),
        Binding("l", "choose('later')", "Later"),
        Binding("escape", "choose('later')", "Later", show=False),
    ]

    @classmethod
    async def ask(cls, app: App[Any], change: ProtectedChange) -> ReviewChoice:
        """Show ``change`` on ``app`` and wait for the choice (``later`` when none is made)."""
        future: asyncio.Future[ReviewChoice] = asyncio.get_running_loop().create_future()

        def chosen(choice: ReviewChoice | None) -> None:
            if not future.done():
                future.set_result(choice or "later")

        app.push_screen(cls(change), chosen)
        return await future

    def __init__(self, change: ProtectedChange) -> None:
        super().__init__()
        self.change = change
        """What differs from the frozen content (the engine's facts)."""

    def compose(self) -> ComposeResult:
        """Title, why it matters, the files, the keys, the diff, the footer."""
        count = len(self.change.changes)
        noun = "file" if count == 1 else "files"
        yield Static(
            f"⚠ Not done: {count} protected {noun} changed", id="protected-title", markup=False
        )
        yield Static(
            "The gates are green on the files as they were frozen at run start, not on this "
            "change. Accept it (it becomes the frozen content) or revert it (back byte for "
            "byte; a salvage snapshot makes it undoable).",
            id="protected-why",
            markup=False,
        )
        yield Static(change_lines(self.change), id="protected-files", markup=False)
        yield Static("a accept   v revert   l later (stay not done)", id="protected-keys")
        with VerticalScroll(id="protected-diff"):
            yield Static(
                Syntax(self.change.diff or "(no textual diff)", "diff", word_wrap=True),
                id="protected-diff-text",
            )
        yield KeysFooter(compact=True, show_command_palette=False)

    def action_choose(self, choice: ReviewChoice) -> None:
        """Dismiss with ``choice``."""
        self.dismiss(choice)
