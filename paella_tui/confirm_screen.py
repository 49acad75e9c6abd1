"""A small yes/no question over the main screen: quitting while the agent runs, a rollback."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Asks one question; dismisses with True for yes (``y``, enter) and False for no (``n``, esc)."""

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    ConfirmScreen > Vertical {
        width: 64;
        max-width: 100%;
        height: auto;
        border: thick $warning;
        background: $surface;
        padding: 1 2;
    }
    ConfirmScreen #question {
        width: 100%;
        margin-bottom: 1;
    }
    ConfirmScreen Horizontal {
        height: auto;
        align-horizontal: right;
    }
    ConfirmScreen Button {
        margin-left: 2;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self._question = question
        self._yes = yes
        self._no = no

    def compose(self) -> ComposeResult:
        """The question and two buttons (the keys work too)."""
        with Vertical():
            yield Static(self._question, id="question", markup=False)
            with Horizontal():
                yield Button(f"{self._no} (n)", id="no")
                yield Button(f"{self._yes} (y)", id="yes", variant="warning")

    def on_mount(self) -> None:
        """Yes has the focus, so enter confirms."""
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button answers."""
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """A key answers."""
        self.dismiss(yes)
