"""The gate log view: one gate's full output, its failing tests picked out, searchable, run by run.

Opened from the gate table (Enter, or ``l`` on the main screen). The title says which run of the
gate this is (``run 3 of 5``) and how it ended; the line under it names the failing tests the
runner's summary lists (pytest, unittest, cargo, go). ``[`` and ``]`` page to the gate's older
and newer runs (``gates/<gate>/<n>.log``), ``/`` searches (every match highlighted, ``n`` and
``N`` step through them), ``t`` jumps to the next failing test's summary line. The log is the
gate's own output: its colours are kept, and nothing in it is ever read as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Input, Static

from paella_tui.supervisor.judge.failures import failing_test
from paella_tui.widgets.keys_footer import KeysFooter

MAX_LOG_BYTES = 4 * 1024 * 1024
"""The view shows at most the last this many bytes of a log (a gate can write gigabytes)."""
MATCH_STYLE = "reverse"
FAILED_STYLE = "bold"


def gate_logs(run_dir: Path, gate: str) -> list[Path]:
    """The gate's numbered logs in the run, oldest first."""
    folder = run_dir / "gates" / gate
    try:
        logs = [p for p in folder.glob("*.log") if p.stem.isdigit()]
    except OSError:
        return []
    return sorted(logs, key=lambda p: int(p.stem))


def read_log(path: Path) -> tuple[list[str], bool]:
    """The log's lines (its last :data:`MAX_LOG_BYTES`) and whether its start was cut."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            cut = size > MAX_LOG_BYTES
            handle.seek(max(0, size - MAX_LOG_BYTES))
            data = handle.read()
    except OSError as err:
        return [f"cannot read {path}: {err.strerror or err}"], False
    lines = data.decode("utf-8", errors="replace").splitlines()
    if cut and lines:
        lines.pop(0)  # starts mid-line
    return lines, cut


class GateLogScreen(Screen[None]):
    """One gate's output, run by run, with its failing tests and a search."""

    CSS_PATH = Path(__file__).parent / "styles" / "screens.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "find", key_display="/"),
        Binding("n", "next_match", "next", show=False),
        Binding("N", "previous_match", "prev", show=False),
        Binding("t", "next_failure", "failing test"),
        Binding("left_square_bracket", "older", "older run", key_display="["),
        Binding("right_square_bracket", "newer", "newer run", key_display="]"),
        Binding("escape", "close", "close"),
        Binding("q", "close", "close", show=False),
    ]

    def __init__(self, run_dir: Path, gate: str, *, status: str = "", message: str = "") -> None:
        super().__init__()
        self._run_dir = run_dir
        self._gate = gate
        self._status = status
        self._message = message
        self._logs = gate_logs(run_dir, gate)
        self._index = len(self._logs) - 1
        self._lines: list[str] = []
        self._cut = False
        self._failures: list[int] = []
        """Line numbers of the failing tests' summary lines."""
        self._query = ""
        self._matches: list[int] = []
        self._match = -1

    def compose(self) -> ComposeResult:
        """The title, the failing tests, the log (scrolling both ways), the search, the footer."""
        yield Static(id="gate-log-title")
        yield Static(id="gate-log-failures")
        with VerticalScroll(id="gate-log-scroll"):
            yield Static(id="gate-log-text")
        yield Input(placeholder="search the log (Enter finds, Escape closes)", id="gate-log-find")
        yield KeysFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Show the newest run."""
        self.query_one("#gate-log-find", Input).display = False
        self._load()
        self.query_one("#gate-log-scroll").focus()

    # --- showing ---------------------------------------------------------------------------

    def _load(self) -> None:
        if self._logs:
            self._lines, self._cut = read_log(self._logs[self._index])
        else:
            self._lines, self._cut = [], False
        self._failures = [i for i, line in enumerate(self._lines) if failing_test(line)]
        self._find(self._query)
        self._retitle()
        self._render_log()
        # A red gate's story is at its end: the summary and the last traceback.
        self.query_one("#gate-log-scroll", VerticalScroll).scroll_end(animate=False)

    def _retitle(self) -> None:
        title = self.query_one("#gate-log-title", Static)
        if not self._logs:
            why = f": {self._message}" if self._message else ""
            title.update(
                Content.assemble(
                    (f"gate {self._gate}", "bold"), f" · no log recorded yet{why}", ("", "dim")
                )
            )
        else:
            path = self._logs[self._index]
            newest = self._index == len(self._logs) - 1
            status = f" · {self._status}" if newest and self._status else ""
            cut = " · start cut" if self._cut else ""
            title.update(
                Content.assemble(
                    (f"gate {self._gate}", "bold"),
                    f" · run {self._index + 1} of {len(self._logs)}{status}",
                    (f" · {len(self._lines)} lines{cut} · {path.name}", "dim"),
                    (f" · {self._match + 1}/{len(self._matches)} «{self._query}»", "")
                    if self._query
                    else "",
                )
            )
        names = [str(failing_test(self._lines[i])) for i in self._failures]
        failures = self.query_one("#gate-log-failures", Static)
        failures.display = bool(names)
        if names:
            shown = ", ".join(names[:6]) + (f", … {len(names) - 6} more" if len(names) > 6 else "")
            failures.update(
                Content.assemble((f"failing ({len(names)}): ", "bold $text-error"), shown)
            )

    def _render_log(self) -> None:
        text = Text(no_wrap=True, end="")
        failing = set(self._failures)
        matched = set(self._matches)
        needle = self._query.lower()
        for number, raw in enumerate(self._lines):
            # Text.from_ansi keeps the gate's colours; it never reads markup.
            line = Text.from_ansi(raw.expandtabs(4), no_wrap=True, end="")
            if number in failing:
                line.stylize(FAILED_STYLE)
            if needle and number in matched:
                lower = line.plain.lower()
                start = lower.find(needle)
                while start >= 0:
                    line.stylize(MATCH_STYLE, start, start + len(needle))
                    start = lower.find(needle, start + len(needle))
            if number:
                text.append("\n")
            text.append_text(line)
        if not self._lines:
            text = Text("(empty)" if self._logs else "(no run of this gate yet)", style="dim")
        self.query_one("#gate-log-text", Static).update(text)

    def _scroll_to_line(self, number: int) -> None:
        scroll = self.query_one("#gate-log-scroll", VerticalScroll)
        scroll.scroll_to(y=max(0, number - scroll.size.height // 3), animate=False)

    # --- search ----------------------------------------------------------------------------

    def _find(self, query: str) -> None:
        self._query = query
        needle = query.lower()
        self._matches = (
            [i for i, line in enumerate(self._lines) if needle in line.lower()] if needle else []
        )
        self._match = 0 if self._matches else -1

    def action_search(self) -> None:
        """``/``: open the search line."""
        find = self.query_one("#gate-log-find", Input)
        find.display = True
        find.value = self._query
        find.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the search line: highlight every match, go to the first."""
        event.stop()
        self._find(event.value)
        event.input.display = False
        self.query_one("#gate-log-scroll").focus()
        self._render_log()
        self._retitle()
        if self._matches:
            self._scroll_to_line(self._matches[0])
        elif self._query:
            self.notify(f"not found: {self._query}", severity="warning", timeout=3)

    def _step(self, by: int) -> None:
        if not self._matches:
            return
        self._match = (self._match + by) % len(self._matches)
        self._retitle()
        self._scroll_to_line(self._matches[self._match])

    def action_next_match(self) -> None:
        """``n``: the next match."""
        self._step(1)

    def action_previous_match(self) -> None:
        """``N``: the previous match."""
        self._step(-1)

    def action_next_failure(self) -> None:
        """``t``: the next failing test's summary line (from the top after the last)."""
        if not self._failures:
            self.notify("this run names no failing test", timeout=3)
            return
        scroll = self.query_one("#gate-log-scroll", VerticalScroll)
        here = int(scroll.scroll_y) + scroll.size.height // 3
        later = [i for i in self._failures if i > here]
        self._scroll_to_line(later[0] if later else self._failures[0])

    # --- runs --------------------------------------------------------------------------------

    def action_older(self) -> None:
        """``[``: the gate's run before this one."""
        if self._index > 0:
            self._index -= 1
            self._load()

    def action_newer(self) -> None:
        """``]``: the gate's run after this one."""
        if self._index < len(self._logs) - 1:
            self._index += 1
            self._load()

    def action_close(self) -> None:
        """Escape: close the search line if open, else the view."""
        find = self.query_one("#gate-log-find", Input)
        if find.display:
            find.display = False
            self.query_one("#gate-log-scroll").focus()
            return
        self.dismiss()
