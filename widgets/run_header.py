"""The top two lines: the run and its state at a glance, the agent's pid, attempt, uptime, what
its stream reported spending, CPU and memory (with a sparkline), the retry countdown, and the
verdict when the run is done.

Line one says what is happening (a symbol and words, never colour alone) and what it cost so
far; line two says with what: the agent's resources while it runs, the countdown while a retry
waits, the gates that proved the run done, or why it stopped.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from paella_tui.supervisor.run.events import Usage, compact_count
from paella_tui.widgets.symbols import (
    FAIL,
    PASS,
    PENDING,
    RUNNING,
    STOPPED,
    WARNING,
    short_duration,
    size,
)
from paella_tui.widgets.theme_styles import on_theme_change, theme_style

CPU_POINTS = 32
"""CPU samples drawn by the sparkline (two per cell)."""

# state -> (symbol, words, style of the state badge)
_STATES: dict[str, tuple[str, str, str]] = {
    "starting": (PENDING, "starting", "bold"),
    "running": (RUNNING, "running", "bold $text-success"),
    "evaluating": (PENDING, "agent ended: judging the gates", "bold $text-warning"),
    "retry-wait": (PENDING, "waiting to retry", "bold $text-warning"),
    "recovering": (FAIL, "agent died: recovery needs you", "bold reverse $error"),
    "resuming": (PENDING, "resuming", "bold"),
    "done": (PASS, "done", "bold reverse $success"),
    "stopped": (STOPPED, "stopped, not done", "bold reverse"),
    "stopping": (PENDING, "stopping the agent…", "bold $text-warning"),
    "error": (FAIL, "supervisor error", "bold reverse $error"),
}


class RunHeader(Widget):
    """Run name and state, the agent's vital signs, and the verdict."""

    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        background: $panel;
        layout: vertical;
    }
    RunHeader #run-line {
        height: 1;
        width: 1fr;
    }
    RunHeader #agent-line {
        height: 1;
        layout: horizontal;
    }
    RunHeader #agent-stats {
        width: 27;
        height: 1;
        padding: 0 0 0 1;
    }
    RunHeader #agent-cpu {
        width: 16;
        height: 1;
        margin: 0 1;
    }
    RunHeader #run-note {
        width: 1fr;
        height: 1;
    }
    RunHeader.-idle #agent-stats, RunHeader.-idle #agent-cpu {
        display: none;
    }
    RunHeader.-done {
        background: $success 25%;
    }
    RunHeader.-alarm {
        background: $error 25%;
    }
    """

    # None of these repaints the header itself: _redraw updates the lines that read differently,
    # and a repaint of the header would write both lines again (every second, for the agent's
    # CPU and memory samples, whatever they read).
    run_name: reactive[str] = reactive("", repaint=False)
    """The run's name (the contract's ``[run] name``)."""
    run_id: reactive[str] = reactive("", repaint=False)
    """The run id."""
    state: reactive[str] = reactive("starting", repaint=False)
    """starting | running | evaluating | retry-wait | recovering | resuming | done | stopped | stopping | error."""
    attempt: reactive[int] = reactive(0, repaint=False)
    """The current (or last) attempt, from 1."""
    pid: reactive[int | None] = reactive(None, repaint=False)
    """The agent's pid while an attempt lives."""
    started: reactive[float | None] = reactive(None, repaint=False)
    """Wall-clock start of the agent process (for the uptime)."""
    now: reactive[float] = reactive(0.0, repaint=False)
    """The wall-clock time the uptime and countdown count from (frozen in snapshots)."""
    cpu_percent: reactive[float | None] = reactive(None, repaint=False)
    """CPU of the agent's whole process tree, percent of one core."""
    rss_bytes: reactive[int | None] = reactive(None, repaint=False)
    """Memory of the agent's whole process tree."""
    descendants: reactive[int | None] = reactive(None, repaint=False)
    """How many processes the agent's tree has below the agent."""
    cpu_history: reactive[tuple[float, ...]] = reactive((), repaint=False)
    """Recent CPU samples, oldest first, for the sparkline."""
    retry_at: reactive[float | None] = reactive(None, repaint=False)
    """Wall-clock time of the next attempt while a retry waits."""
    done_gates: reactive[tuple[str, ...] | None] = reactive(None, repaint=False)
    """The gates that proved the run done, once it is."""
    detail: reactive[str] = reactive("", repaint=False)
    """A short note for line two: how the agent ended, why the run stopped."""
    usage: reactive[Usage | None] = reactive(None, repaint=False)
    """Turns, tokens and cost the agent's stream reported over every attempt (None: no stream)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # Kept, not queried: a redraw may come while the header is being taken down.
        self._run_line_static = Static(id="run-line")
        self._stats_static = Static(id="agent-stats")
        self._cpu = Sparkline((), summary_function=max, id="agent-cpu")
        self._note_static = Static(id="run-note")
        self._shown: dict[Static, Text] = {}
        self._clock_shown: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        """Two lines: the run, then the agent."""
        yield self._run_line_static
        with Widget(id="agent-line"):
            yield self._stats_static
            yield self._cpu
            yield self._note_static

    def on_mount(self) -> None:
        """Draw once mounted, and again in the colours of a new theme."""
        on_theme_change(self, self._redraw)
        self._redraw()

    def on_resize(self) -> None:
        """Line one drops its least important parts when narrow."""
        self._redraw()

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        self._clock_shown = self._clock_words()
        alive = self.state in ("running", "stopping") and self.pid is not None
        self.set_class(not alive, "-idle")
        self.set_class(self.state == "done", "-done")
        self.set_class(self.state in ("recovering", "error"), "-alarm")
        # Only what changed is redrawn, and without a layout pass where the size is fixed: the
        # clock ticks every second for hours.
        self._show(self._run_line_static, self._run_line(), layout=False)
        self._show(self._stats_static, self._stats(), layout=False)
        self._show(self._note_static, self._note(), layout=False)
        # Zeros on the left: the chart fills from the right, and one sample is not a full bar.
        history = list(self.cpu_history)[-CPU_POINTS:]
        data = [0.0] * (CPU_POINTS - len(history)) + history
        if data != self._cpu.data:
            self._cpu.data = data

    def _show(self, static: Static, text: Text, *, layout: bool) -> None:
        if self._shown.get(static) != text:
            self._shown[static] = text
            static.update(text, layout=layout)

    def _clock_words(self) -> tuple[str, str]:
        """What the clock drives, as shown: the uptime and the retry countdown ("" when not)."""
        up = ""
        if self.started is not None and self.now and self.state in ("running", "stopping"):
            up = uptime(self.now - self.started)
        left = ""
        if self.state == "retry-wait" and self.retry_at is not None:
            left = short_duration(max(0.0, self.retry_at - self.now))
        return up, left

    def watch_now(self) -> None:
        """The clock moved (every second): redraw only if the uptime or countdown reads
        differently, which after the first minute is once a minute (issue 17, idle)."""
        words = self._clock_words()
        if words != self._clock_shown:
            self._redraw()

    # Every other reactive changes what the two lines say; one redraw serves them all.
    watch_run_name = watch_run_id = watch_state = watch_attempt = watch_pid = _redraw
    watch_started = watch_cpu_percent = watch_rss_bytes = _redraw
    watch_descendants = watch_cpu_history = watch_retry_at = watch_done_gates = _redraw
    watch_detail = watch_usage = _redraw

    def _run_line(self) -> Text:
        symbol, words, style = _STATES.get(self.state, (WARNING, self.state, "bold"))
        if self.state == "retry-wait" and self.retry_at is not None:
            words = f"retry in {short_duration(max(0.0, self.retry_at - self.now))}"
        head = Text.assemble(
            Text(f" {self.run_name} ", style="bold"),
            Text(f" {symbol} {words} ", style=theme_style(style)),
        )
        pieces = self._optional_pieces()
        width = self.size.width or 200
        # Shorten or drop the least important pieces until the line fits (they keep their order).
        steps = iter(_NARROWER)
        while pieces and head.cell_len + sum(p.cell_len for p in pieces.values()) > width:
            step = next(steps, None)
            if step is None:
                break
            key, shorter = step
            if key in pieces:
                text = shorter(self) if shorter else None
                if text:
                    pieces[key] = text
                else:
                    del pieces[key]
        line = Text.assemble(head, *pieces.values())
        line.no_wrap = True
        line.truncate(width, overflow="ellipsis")
        return line

    def _optional_pieces(self) -> dict[str, Text]:
        """Line one after the name and state, in display order, keyed for `_NARROWER`."""
        pieces: dict[str, Text] = {}
        if self.attempt:
            pieces["attempt"] = Text(f"  attempt {self.attempt}")
        if self.pid is not None and self.state in ("running", "stopping", "evaluating"):
            pieces["pid"] = Text(f"  pid {self.pid}")
        if self.started is not None and self.now and self.state in ("running", "stopping"):
            pieces["up"] = Text(f"  up {uptime(self.now - self.started)}")
        # What the run spent matters in every state (a stopped run spent it too).
        spent = usage_summary(self.usage)
        if spent:
            pieces["usage"] = Text(f"  {spent}")
        if self.run_id:
            pieces["run"] = Text(f"  run {self.run_id}", style="dim")
        return pieces

    def _stats(self) -> Text:
        cpu = f"{self.cpu_percent:.0f}%" if self.cpu_percent is not None else "-"
        count = None if self.descendants is None else self.descendants + 1
        procs = "" if count is None else f"  {count} proc{'s' if count != 1 else ''}"
        return Text(f"cpu {cpu}  mem {size(self.rss_bytes)}{procs}", no_wrap=True)

    def _note(self) -> Text:
        if self.state == "done":
            gates = ", ".join(self.done_gates or ()) or "every gate"
            text = Text(f" {PASS} done: every gate green on the final tree ({gates})", style="bold")
            text.append("   q quits", style="dim")
        elif self.state == "retry-wait":
            text = Text(f" {PENDING} {self.detail}", style=theme_style("$text-warning"))
            text.append("   R retries now", style="dim")
        elif self.state == "stopped":
            text = Text(f" {STOPPED} {self.detail or 'stopped'}", style="bold")
            text.append("   R resumes", style="dim")
        elif self.state == "evaluating":
            # The gates decide how the attempt ended: an exit 0 is not a failure, nor a success.
            text = Text(f" {PENDING} {self.detail}" if self.detail else "", style="bold")
        elif self.state in ("recovering", "error"):
            text = Text(f" {FAIL} {self.detail}" if self.detail else "", style="bold")
        else:
            text = Text(f" {self.detail}" if self.detail else "", style="dim")
        text.no_wrap = True
        text.overflow = "ellipsis"
        return text


def _short_usage(header: RunHeader) -> Text | None:
    spent = usage_summary(header.usage, turns=False)
    return Text(f"  {spent}") if spent else None


_NARROWER: tuple[tuple[str, Callable[[RunHeader], Text | None] | None], ...] = (
    ("run", None),
    ("usage", _short_usage),
    ("up", None),
    ("pid", None),
    ("usage", None),
    ("attempt", None),
)
"""How line one narrows, one step at a time: a piece and its shorter form (None drops it). The
run id goes first; what the run spent outlasts the uptime and the pid, in its short form."""


def usage_summary(usage: Usage | None, *, turns: bool = True) -> str:
    """``12 turns · 48.3k tok · $0.84``: what was reported, compactly ("" when nothing was)."""
    if usage is None:
        return ""
    parts = []
    if turns and usage.turns:
        parts.append(f"{usage.turns} turn{'s' if usage.turns != 1 else ''}")
    if usage.tokens:
        parts.append(f"{compact_count(usage.tokens)} tok")
    if usage.cost_usd is not None:
        parts.append(f"${usage.cost_usd:.2f}")
    return " · ".join(parts)


def uptime(seconds: float) -> str:
    """``42s``, ``14m``, ``2h05m``: seconds only in the first minute, so that an idle run redraws
    its header once a minute, not every second, for hours (the CPU sparkline shows liveness)."""
    whole = int(max(0.0, seconds))
    if whole < 60:
        return f"{whole}s"
    hours, minutes = divmod(whole // 60, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"
