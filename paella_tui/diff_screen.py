"""The diff screen: what changed from a checkpoint to the work tree now, file by file.

The file list is on the left (path, lines added and removed), the selected file's diff on the
right, its ``+`` and ``-`` lines styled and still prefixed (colour is never the only signal).
Everything that runs git (the snapshot of now, the file list, each file's diff) runs in a thread
worker; a very big diff is cut with a note saying where the whole of it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from paella_tui.supervisor.base.errors import PaellaError
from paella_tui.supervisor.run.offline import tree_now
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run
from paella_tui.supervisor.store.checkpoints import SnapshotRecord
from paella_tui.supervisor.store.tree_diff import FileChange, changes_between
from paella_tui.widgets.keys_footer import KeysFooter

MAX_DIFF_LINES = 2000
"""A file's diff is cut after this many lines (the rest is one ``paella diff`` away)."""

MAX_DIFF_BYTES = 512 * 1024
"""... or after this many bytes, whichever comes first."""


def change_stats(changes: list[FileChange]) -> Content:
    """``3 files +12 −4`` (or ``no change``), the numbers styled and signed."""
    if not changes:
        return Content.styled("no change", "dim")
    added = sum(c.added or 0 for c in changes)
    removed = sum(c.removed or 0 for c in changes)
    return Content.assemble(
        f"{len(changes)} file{'s' if len(changes) != 1 else ''} ",
        (f"+{added:,}", "$text-success"),
        " ",
        (f"−{removed:,}", "$text-error"),
    )


def styled_diff(text: str, *, cut_note: str = "") -> Content:
    """A unified diff with added, removed, hunk and header lines styled (their prefixes kept)."""
    lines = text.splitlines()
    out: list[Content] = []
    used = 0
    for i, line in enumerate(lines):
        if i >= MAX_DIFF_LINES or used > MAX_DIFF_BYTES:
            note = f"… {len(lines) - i:,} more lines cut{cut_note}"
            out.append(Content.styled(note, "bold $text-warning"))
            break
        used += len(line) + 1
        line = line.expandtabs(4)
        if line.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file")):
            style = "bold"
        elif line.startswith("+"):
            style = "$text-success"
        elif line.startswith("-"):
            style = "$text-error"
        elif line.startswith("@@"):
            style = "$text-accent"
        elif line.startswith(("Binary files", "\\")):
            style = "italic"
        else:
            style = ""
        out.append(Content.styled(line or " ", style))
    return Content("\n").join(out)


def _shorten(path: str, width: int) -> str:
    """The end of a long path, which names the file (``…/ledger/ingest.py``)."""
    return path if len(path) <= width else "…" + path[-(width - 1) :]


class DiffScreen(Screen[None]):
    """The diff from a checkpoint (default: the last green one) to the work tree now."""

    CSS_PATH = "styles/screens.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
    ]

    @dataclass
    class Listed(Message):
        """The files that differ between the record's tree and now."""

        record: SnapshotRecord
        now: str
        changes: list[FileChange]

    @dataclass
    class FileDiff(Message):
        """One file's styled diff, ready to show."""

        path: str
        diff: Content

    @dataclass
    class Failed(Message):
        """The diff could not be made; ``reason`` says why, in words."""

        reason: str

    def __init__(
        self,
        run: Run,
        record: SnapshotRecord | None = None,
        *,
        until: str | None = None,
        until_name: str = "now",
    ) -> None:
        super().__init__()
        self.run = run
        self.record = record
        self.until = until
        """The tree to compare with instead of the work tree now (a step's own change)."""
        self.until_name = until_name
        self._changes: list[FileChange] = []
        self._trees: tuple[str, str] | None = None
        self._target_name = ""

    def compose(self) -> ComposeResult:
        """A title line, the file list and the selected file's diff side by side, the footer."""
        yield Static(Content.styled("Diff: working it out…", "dim"), id="diff-title")
        with Horizontal(id="diff-body"):
            yield OptionList(id="diff-files")
            with VerticalScroll(id="diff-pane"):
                yield Static("", id="diff-text")
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Start the snapshot and the file list in a thread."""
        self.query_one("#diff-files", OptionList).border_title = "Files"
        self.query_one("#diff-pane").border_title = "Diff"
        self._list_changes()

    @work(
        thread=True,
        group="diff-list",
        description="snapshot the work tree and list the files changed since the checkpoint",
        exit_on_error=False,
        exclusive=True,
    )
    def _list_changes(self) -> None:
        record = self.record
        if record is None:
            view = RunView.load(self.run)
            record = view.last_green_checkpoint or (
                view.checkpoints[-1] if view.checkpoints else None
            )
        if record is None:
            self.post_message(
                self.Failed(
                    "No checkpoint to diff against yet. Take one with c on the main screen "
                    "or `paella checkpoint`."
                )
            )
            return
        try:
            now = self.until or tree_now(self.run)
            changes = changes_between(self.run.workspace, record.tree, now)
        except PaellaError as err:
            self.post_message(self.Failed(f"Could not compare with now: {err.message}"))
            return
        self.post_message(self.Listed(record, now, changes))

    @on(Listed)
    def _show_list(self, message: Listed) -> None:
        record = message.record
        self._trees = (record.tree, message.now)
        self._target_name = record.name
        self._changes = message.changes
        what = f"checkpoint {record.n}" if record.kind == "checkpoints" else record.name
        label = f" ({record.label})" if record.label else ""
        self.query_one("#diff-title", Static).update(
            Content.assemble(
                ("Diff ", "bold"),
                f"from {what}{label} to {self.until_name}: ",
                change_stats(message.changes),
            )
        )
        files = self.query_one("#diff-files", OptionList)
        files.clear_options()
        if not message.changes:
            self.query_one("#diff-text", Static).update(
                Content.styled(f"No change since {what}: the work tree is the same.", "dim")
            )
            return
        files.add_options(
            Option(self._file_prompt(change), id=str(i)) for i, change in enumerate(message.changes)
        )
        files.highlighted = 0
        files.focus()

    @staticmethod
    def _file_prompt(change: FileChange) -> Content:
        path = _shorten(change.path, 40)
        if change.added is None:
            return Content.assemble(path, (" binary", "dim"))
        return Content.assemble(
            path,
            " ",
            (f"+{change.added}", "$text-success"),
            " ",
            (f"−{change.removed}", "$text-error"),
            (" line endings", "dim") if change.line_endings else "",
        )

    @on(OptionList.OptionHighlighted, "#diff-files")
    def _file_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_id is None or self._trees is None:
            return
        change = self._changes[int(event.option_id)]
        self.query_one("#diff-pane").border_title = escape(_shorten(change.path, 60))
        self.query_one("#diff-text", Static).update(Content.styled("…", "dim"))
        self._file_diff(change, *self._trees, self._target_name)

    @work(
        thread=True,
        group="diff-file",
        description="git diff of one file between the checkpoint and now",
        exit_on_error=False,
        exclusive=True,
    )
    def _file_diff(self, change: FileChange, old: str, new: str, target: str) -> None:
        path = change.path
        try:
            # :(literal) so that a path holding * or ? names only itself.
            args = ["diff", "--no-color", "--no-renames", "--no-ext-diff", old, new]
            if change.line_endings:
                args.append("--ignore-cr-at-eol")
            proc = self.run.workspace.git.run([*args, "--", f":(literal){path}"])
        except PaellaError as err:
            self.post_message(self.FileDiff(path, Content.styled(f"✗ {err.message}", "bold")))
            return
        text = proc.stdout.decode("utf-8", errors="replace")
        note = f"; the whole diff: paella diff {target}"
        diff = styled_diff(text, cut_note=note)
        if change.line_endings:
            said = "The line endings changed (CRLF ↔ LF); shown: the other changes, if any."
            diff = Content("\n").join([Content.styled(said, "bold $text-warning"), diff])
        self.post_message(self.FileDiff(path, diff))

    @on(FileDiff)
    def _show_file(self, message: FileDiff) -> None:
        self.query_one("#diff-text", Static).update(message.diff)
        self.query_one("#diff-pane", VerticalScroll).scroll_home(animate=False)

    @on(Failed)
    def _show_failure(self, message: Failed) -> None:
        self.query_one("#diff-title", Static).update(
            Content.assemble(("✗ ", "bold $text-error"), message.reason)
        )
        self.query_one("#diff-text", Static).update("")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """An unexpected failure in a worker shows as a failure, not a crash."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.post_message(
                self.Failed(f"{event.worker.description} failed: {event.worker.error}")
            )

    def action_close(self) -> None:
        """Back to the screen below."""
        self.dismiss(None)
