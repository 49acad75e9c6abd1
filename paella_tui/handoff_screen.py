"""The handoff preview: the document the next attempt (or a person) would read, as it stands now.

It is built from the run's ledger and gate logs plus the files changed since the last green
checkpoint (SPEC 10), in a thread worker since that needs a snapshot of the work tree. ``w``
writes it to the run's ``handoff.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Markdown, Static
from textual.worker import Worker, WorkerState

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.run.handoff import (
    handoff_inputs_from_view,
    render_handoff,
    write_handoff,
)
from paella_tui.supervisor.run.offline import tree_now
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.tree_diff import changes_between
from paella_tui.widgets.keys_footer import KeysFooter


def build_handoff(run: Run) -> str:
    """The run's handoff as it stands now (blocking: reads the ledger and snapshots the work tree)."""
    view = RunView.load(run)
    now = tree_now(run)
    base = view.last_green_checkpoint
    started = view.of_kind("run-tree")
    since = base.tree if base else (str(started[0]["tree"]) if started else now)
    changes = [
        # A binary file has no line counts: -1 makes the handoff say "binary".
        (c.path, -1 if c.added is None else c.added, -1 if c.removed is None else c.removed)
        for c in changes_between(run.workspace, since, now)
    ]
    return render_handoff(handoff_inputs_from_view(view, changes=changes))


class HandoffScreen(Screen[None]):
    """A preview of the handoff document; ``w`` writes it to ``handoff.md``."""

    CSS_PATH = "styles/screens.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("w", "write", "Write handoff.md"),
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
    ]

    @dataclass
    class Built(Message):
        """The document, rendered."""

        text: str

    @dataclass
    class Written(Message):
        """The document was written to ``path``."""

        path: Path

    @dataclass
    class Failed(Message):
        """Building or writing failed; ``reason`` says why, in words."""

        reason: str

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run
        self.text: str | None = None
        """The rendered document, once built."""

    def compose(self) -> ComposeResult:
        """A title line, the document (scrolling), the footer."""
        yield Static(
            Content.styled("Handoff: building it from the run…", "dim"), id="handoff-title"
        )
        with VerticalScroll(id="handoff-scroll"):
            yield Markdown(id="handoff-doc")
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Build the document in a thread."""
        self.query_one("#handoff-scroll").focus()
        self._build()

    @work(
        thread=True,
        group="handoff",
        description="build the handoff from the ledger and the work tree",
        exit_on_error=False,
        exclusive=True,
    )
    def _build(self) -> None:
        try:
            self.post_message(self.Built(build_handoff(self.run)))
        except PaellaError as err:
            self.post_message(self.Failed(str(err)))

    @on(Built)
    async def _show(self, message: Built) -> None:
        self.text = message.text
        size = len(message.text.encode())
        self.query_one("#handoff-title", Static).update(
            Content.assemble(
                ("Handoff preview", "bold"),
                (f"  {size / 1024:.1f} KB · w writes it to the run's handoff.md", "dim"),
            )
        )
        await self.query_one("#handoff-doc", Markdown).update(message.text)

    def action_write(self) -> None:
        """Write the document to the run's ``handoff.md`` and say where."""
        if self.text is None:
            self.notify("The handoff is still being built.", severity="warning")
            return
        self._write(self.text)

    @work(
        thread=True,
        group="handoff-write",
        description="write handoff.md",
        exit_on_error=False,
        exclusive=True,
    )
    def _write(self, text: str) -> None:
        try:
            self.post_message(self.Written(write_handoff(self.run.dir, text)))
        except OSError as err:
            self.post_message(self.Failed(f"Could not write handoff.md: {err}"))

    @on(Written)
    def _written(self, message: Written) -> None:
        self.notify(f"Handoff written to {message.path}", title="✓ handoff.md")

    @on(Failed)
    def _show_failure(self, message: Failed) -> None:
        self.query_one("#handoff-title", Static).update(
            Content.assemble(("✗ ", "bold $text-error"), message.reason)
        )
        self.notify(message.reason, severity="error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """An unexpected failure in a worker shows as a failure, not a crash."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(
                self.Failed(f"{event.worker.description} failed: {event.worker.error}")
            )

    def action_close(self) -> None:
        """Back to the screen below."""
        self.dismiss(None)
