"""A rollback in progress, then its result: what was restored and the salvage ref that undoes it.

Rolling back can take a second on a big repository. The App mounts this while the engine rolls
back, sets ``status`` as it goes, and sets ``salvage_ref`` once the salvage snapshot exists, so
the person sees how to undo the rollback before anything else happens.
"""

from __future__ import annotations

from typing import Literal

from textual.content import Content
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget

SPINNER = "◐◓◑◒"
"""Frames shown while the rollback works (a symbol, not colour, says it is still going)."""


def salvage_name(ref: str) -> str:
    """``salvage:3`` from ``refs/paella/<run>/salvage/3`` (how ``paella rollback`` names it)."""
    head, _, n = ref.rpartition("/")
    return f"salvage:{n}" if head.endswith("/salvage") and n.isdigit() else ref


class RollbackProgress(Widget):
    """One or two lines: a rollback working, done (with its undo command) or failed."""

    DEFAULT_CSS = """
    RollbackProgress {
        height: auto;
        padding: 0 1;
        border-left: thick $warning;
        background: $warning-muted;
    }
    RollbackProgress.-done {
        border-left: thick $success;
        background: $success-muted;
    }
    RollbackProgress.-failed {
        border-left: thick $error;
        background: $error-muted;
    }
    """

    status: reactive[str] = reactive("Rolling back…", layout=True)
    """What is happening, in words (``Rolling back to checkpoint 2…``, then what was restored)."""

    salvage_ref: reactive[str | None] = reactive(None, layout=True)
    """The salvage snapshot's ref once it exists: the state before the rollback, kept."""

    state: reactive[Literal["working", "done", "failed"]] = reactive("working", layout=True)
    """``working`` until the engine reports the rollback finished (``done``) or not (``failed``)."""

    _frame: reactive[int] = reactive(0)

    def __init__(
        self,
        status: str = "Rolling back…",
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.set_reactive(RollbackProgress.status, status)
        self._spinner: Timer | None = None

    def on_mount(self) -> None:
        """Animate the symbol while the rollback works."""
        self._spinner = self.set_interval(0.15, self._tick, pause=self.state != "working")

    def _tick(self) -> None:
        self._frame = (self._frame + 1) % len(SPINNER)

    def watch_state(self, state: str) -> None:
        """Stop the spinner once the rollback ended, and mark the outcome for the styles."""
        self.set_class(state == "done", "-done")
        self.set_class(state == "failed", "-failed")
        if self._spinner is not None:
            if state == "working":
                self._spinner.resume()
            else:
                self._spinner.pause()

    def render(self) -> Content:
        """The status line, then where the state before it is kept and how to get it back."""
        symbol = {"working": SPINNER[self._frame], "done": "✓", "failed": "✗"}[self.state]
        parts: list[Content] = [Content.assemble((f"{symbol} ", "bold"), self.status)]
        ref = self.salvage_ref
        if ref is not None:
            name = salvage_name(ref)
            parts.append(
                Content.assemble("  The state before: ", (name, "bold"), (f" · {ref}", "dim"))
            )
            parts.append(
                Content.assemble("  Undo with: ", (f"paella rollback {name} --yes", "bold"))
            )
        elif self.state == "working":
            parts.append(
                Content.styled("  The current state is saved first, so this can be undone.", "dim")
            )
        return Content("\n").join(parts)
