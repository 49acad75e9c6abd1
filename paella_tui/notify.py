"""Loud failure: a death, a drift or exhausted retries must reach a person who is not looking.

Every alert rings four ways at once, each one independent of colour: the terminal bell, a
Textual toast in the app, a desktop notification where the terminal supports one (OSC 777,
OSC 9 or kitty's OSC 99, wrapped for tmux's passthrough when ``$TMUX`` is set), and inside tmux
a ``tmux display-message`` on the pane's client (a subprocess the event loop never waits for).

``PAELLA_NOTIFY`` chooses the desktop protocol by hand: ``osc777``, ``osc9``, ``osc99`` or
``off``; without it the terminal is recognised from its environment, and an unknown terminal
gets no escape sequence at all (some print unknown ones as garbage).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from paella_tui.supervisor.run.events import (
    AgentExited,
    DriftDetected,
    Event,
    Notice,
    RecoveryNeeded,
)

if TYPE_CHECKING:
    from textual.app import App

Protocol = Literal["osc777", "osc9", "osc99"]

REPEAT_QUIET_S = 5.0
"""The same alert again within this many seconds rings no bell and sends no desktop notice."""

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Alert:
    """Something a person must hear about now."""

    title: str
    message: str
    severity: Literal["warning", "error"] = "error"


TOAST_CHARS = 90
"""A toast says at most this much of an alert; the rest is on the screen it points at."""


def short_message(text: str, limit: int = TOAST_CHARS) -> str:
    """``text`` on one line, cut at a word boundary near ``limit`` with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] if " " in flat[: limit // 2] else flat[:limit]
    return cut.rstrip(" ,;:") + "…"


def alert_for(event: Event) -> Alert | None:
    """The alert an engine event deserves, or None for the quiet ones."""
    if isinstance(event, AgentExited):
        died = event.signal is not None or event.exit_code not in (0, None)
        if died and not event.stopped_by_user:
            last = next((line for line in reversed(event.tail) if line.strip()), "")
            tail = f": {last.strip()[:120]}" if last else ""
            return Alert(
                "paella: the agent died", f"attempt {event.attempt}, {event.describe()}{tail}"
            )
    elif isinstance(event, DriftDetected):
        severity: Literal["warning", "error"] = (
            "error" if event.drift in ("regression", "claimed-done", "protected") else "warning"
        )
        return Alert(f"paella: drift ({event.drift})", event.message, severity)
    elif isinstance(event, RecoveryNeeded):
        if event.facts.ending == "transient":
            return Alert(
                "paella: retries exhausted",
                f"{event.facts.how_and_attempt}: the transient failures did not clear; recovery needs you",
            )
    elif isinstance(event, Notice) and event.level == "error":
        return Alert("paella: error", event.message)
    return None


def detect_protocol(env: Mapping[str, str]) -> Protocol | None:
    """The desktop-notification escape the terminal understands, from its environment."""
    forced = env.get("PAELLA_NOTIFY", "").strip().lower()
    if forced in ("osc777", "osc9", "osc99"):
        return forced  # type: ignore[return-value]
    if forced in ("off", "none", "0", "no"):
        return None
    program = env.get("TERM_PROGRAM", "").lower()
    term = env.get("TERM", "").lower()
    if "iterm" in program or "iterm" in env.get("LC_TERMINAL", "").lower():
        return "osc9"
    if env.get("WT_SESSION") or env.get("ConEmuPID"):
        return "osc9"
    if env.get("KITTY_WINDOW_ID") or "kitty" in term:
        return "osc99"
    if (
        program in ("wezterm", "ghostty")
        or env.get("WEZTERM_PANE")
        or env.get("GHOSTTY_RESOURCES_DIR")
        or env.get("VTE_VERSION")
        or term.startswith(("foot", "rxvt"))
    ):
        return "osc777"
    return None


def desktop_sequence(title: str, body: str, protocol: Protocol, *, tmux: bool) -> str:
    """The escape sequence that shows ``title``/``body`` as a desktop notification.

    Inside tmux the sequence is wrapped in tmux's DCS passthrough (every ESC doubled), which
    tmux forwards to the outer terminal when ``allow-passthrough`` is on and drops otherwise.
    """
    title = _UNSAFE.sub(" ", title)[:80]
    body = _UNSAFE.sub(" ", body)[:240]
    if protocol == "osc777":
        sequence = f"\x1b]777;notify;{title.replace(';', ',')};{body}\x07"
    elif protocol == "osc99":
        sequence = f"\x1b]99;;{title}: {body}\x1b\\"
    else:
        # Windows Terminal and ConEmu read "OSC 9 ; <digit> ;" as a command: never start so.
        sequence = f"\x1b]9;{title}: {body}\x07"
    if tmux:
        sequence = "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return sequence


class Alarm:
    """Rings an alert in every way the terminal allows; never blocks the event loop."""

    def __init__(self, app: App[Any], env: Mapping[str, str] | None = None) -> None:
        self._app = app
        self._env = dict(os.environ if env is None else env)
        self._protocol = detect_protocol(self._env)
        self._in_tmux = bool(self._env.get("TMUX"))
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.rung: list[Alert] = []
        """Every alert rung, oldest first (what a test or the help screen can read)."""

    def ring(self, alert: Alert) -> None:
        """Bell, toast, desktop notification and tmux message for ``alert``."""
        self.rung.append(alert)
        self._app.notify(
            # Short: the panels and the recovery screen hold the whole text, and a long toast
            # covers the very panels that say it (at 80x24, the agent's output).
            short_message(alert.message),
            title=alert.title,
            severity=alert.severity,
            # The panels keep showing it; the toast only has to catch the eye.
            timeout=10 if alert.severity == "error" else 6,
        )
        now = time.monotonic()
        key = f"{alert.title}\n{alert.message}"
        if now - self._last.get(key, -REPEAT_QUIET_S) < REPEAT_QUIET_S:
            return
        self._last[key] = now
        self._app.bell()
        if self._protocol is not None:
            self._write_raw(
                desktop_sequence(alert.title, alert.message, self._protocol, tmux=self._in_tmux)
            )
        if self._in_tmux:
            task = asyncio.get_running_loop().create_task(
                self._tmux_message(f"{alert.title}: {alert.message}")
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _write_raw(self, sequence: str) -> None:
        # Textual has no public call for raw output; its own bell() writes through the driver
        # the same way, which keeps the sequence from landing inside a frame being drawn.
        driver = getattr(self._app, "_driver", None)
        if driver is not None and not self._app.is_headless:
            with contextlib.suppress(Exception):
                driver.write(sequence)

    async def _tmux_message(self, text: str) -> None:
        """``tmux display-message`` on this pane's client for 8 s (older tmux: its default time)."""
        pane = self._env.get("TMUX_PANE")
        target = ["-t", pane] if pane else []
        text = _UNSAFE.sub(" ", text)[:200].replace("#", "##")
        for delay in (["-d", "8000"], []):
            try:
                proc = await asyncio.create_subprocess_exec(
                    "tmux",
                    "display-message",
                    *delay,
                    *target,
                    text,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=self._env,
                )
                if await proc.wait() == 0:
                    return
            except OSError:
                return
