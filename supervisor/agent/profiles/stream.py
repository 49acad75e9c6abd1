"""The shared decoder for agents that print one JSON record a line (SPEC 3, `profile`).

`StreamDecoder.feed` takes raw output bytes as they come, keeps a partial line until its newline
arrives, passes lines that are not JSON objects through as plain text, and hands each JSON record
to the agent's `Dialect`, which turns it into readable lines and counts it in `DecodedStats`.
Nothing the agent prints makes it raise.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paella_tui.supervisor.run.events import Usage

MAX_LINE_BYTES = 8 * 1024**2
"""A line longer than this is cut and shown as plain text (a JSON record is never this big)."""

MAX_NOTES = 60
"""Signals kept per attempt (the newest): error messages and lines that were not records."""

MAX_SHOWN = 300
"""Characters kept of one rendered line (a command, a path, an error)."""

Record = Mapping[str, Any]
"""One decoded JSON object."""


@dataclass(frozen=True)
class DisplayLine:
    """One line for the log view."""

    text: str
    structured: bool
    """True when rendered from a JSON record; False for output passed through as it was."""


@dataclass
class DecodedStats:
    """What the stream said about the attempt so far."""

    session_id: str | None = None
    """The agent's own session id (for `{session_id}` in the resume command)."""
    turns: int = 0
    input_tokens: int = 0
    """Fresh input tokens (not from the prompt cache)."""
    output_tokens: int = 0
    cost_usd: float | None = None
    """Summed over the records that gave one; None when no record did."""
    cached_input_tokens: int = 0
    """Input tokens read from or written to the prompt cache."""
    is_error: bool = False
    """The agent's own verdict on the attempt was an error (even if it exits 0)."""
    last_error: str | None = None
    """The last error message the stream carried."""
    records: int = 0
    """JSON records decoded."""
    notes: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_NOTES))
    """What the agent said about itself, in order: the stream's error messages (fatal or not)
    and the lines that were not records (stderr, banners). Endings are judged from these, not
    from the model's replies."""

    def usage(self) -> Usage:
        """Turns, tokens and cost so far, as the ledger and the header keep them."""
        return Usage(
            turns=self.turns,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost_usd,
            cached_input_tokens=self.cached_input_tokens,
        )

    def add_usage(self, input_tokens: object, output_tokens: object, cached: object = 0) -> None:
        """Add token counts (fresh input, output, cached input), ignoring what is not a number."""
        self.input_tokens += as_int(input_tokens)
        self.output_tokens += as_int(output_tokens)
        self.cached_input_tokens += as_int(cached)

    def add_cost(self, cost: object) -> None:
        """Add a cost in US dollars, when it is a number."""
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            self.cost_usd = (self.cost_usd or 0.0) + float(cost)

    def error(self, message: object, *, fatal: bool = True) -> str:
        """Record an error message; `fatal` marks the attempt as failed by the agent's account."""
        text = one_line(message) or "unknown error"
        self.last_error = text
        self.notes.append(text)
        if fatal:
            self.is_error = True
        return text


class Dialect:
    """How one agent's records read and count; a fresh instance per decoder (it may keep state)."""

    def render(self, record: Record) -> list[str]:
        """Readable lines for one record (none for bookkeeping records)."""
        return []

    def update(self, stats: DecodedStats, record: Record) -> None:
        """Count one record in the stats."""
        session = record.get("session_id")
        if isinstance(session, str) and session:
            stats.session_id = session

    def flush(self) -> list[str]:
        """Lines still held back (e.g. streamed text without its newline yet)."""
        return []


class StreamDecoder:
    """Line-buffered JSON-lines decoder; feed it output bytes, get lines to show."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.stats = DecodedStats()
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[DisplayLine]:
        """The lines completed by `data`; a partial last line waits for the next call."""
        self._buffer += data
        out: list[DisplayLine] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            out.extend(self._line(line))
        if len(self._buffer) > MAX_LINE_BYTES:
            line = bytes(self._buffer)
            self._buffer.clear()
            out.append(DisplayLine(_text(line), structured=False))
        return out

    def finish(self) -> list[DisplayLine]:
        """The last line without a newline, and whatever the dialect held back."""
        out: list[DisplayLine] = []
        if self._buffer:
            line = bytes(self._buffer)
            self._buffer.clear()
            out.extend(self._line(line))
        out.extend(DisplayLine(t, structured=True) for t in self._safe(self.dialect.flush))
        return out

    def _line(self, raw: bytes) -> list[DisplayLine]:
        text = _text(raw)
        stripped = text.strip()
        record: object = None
        if stripped.startswith("{"):
            try:
                record = json.loads(stripped)
            except (ValueError, RecursionError):
                record = None
        if not isinstance(record, dict):
            if stripped:
                self.stats.notes.append(text)
            return [DisplayLine(text, structured=False)]
        self.stats.records += 1
        with contextlib.suppress(Exception):  # an unexpected shape must not stop the run
            self.dialect.update(self.stats, record)
        return [DisplayLine(t, structured=True) for t in self._safe(self.dialect.render, record)]

    @staticmethod
    def _safe(method: Any, *args: object) -> list[str]:
        try:
            lines = method(*args)
        except Exception:  # an unexpected shape must not stop the run
            return []
        return [line for line in lines if isinstance(line, str)]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


# --- helpers for the dialects ---------------------------------------------------------------


def as_int(value: object) -> int:
    """An int from a JSON number, 0 otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def as_dict(value: object) -> Mapping[str, Any]:
    """The value if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    """The value if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def one_line(value: object) -> str:
    """A short single line from a message: its first non-empty line, cut to MAX_SHOWN."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = (
            json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
        )
    for line in value.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= MAX_SHOWN else line[: MAX_SHOWN - 1] + "…"
    return ""


def text_lines(value: object) -> list[str]:
    """The lines of a text message, without leading and trailing blank lines."""
    if not isinstance(value, str):
        return []
    return value.strip("\n").splitlines() if value.strip() else []


def error_message(value: object) -> str:
    """The message of an error given as a string or as an object (`message`, `data.message`)."""
    if isinstance(value, str):
        return value
    error = as_dict(value)
    for candidate in (error.get("message"), as_dict(error.get("data")).get("message")):
        if isinstance(candidate, str) and candidate:
            return candidate
    name = error.get("name") or error.get("type")
    return str(name) if name else one_line(value)


_READ = {"read", "read_file", "read_many_files", "view", "cat", "notebookread"}
_EDIT = {"edit", "multiedit", "replace", "patch", "apply_patch", "notebookedit", "str_replace"}
_WRITE = {"write", "write_file", "create", "create_file"}
_SHELL = {"bash", "shell", "run_shell_command", "exec_command", "local_shell"}
_PATH_KEYS = (
    "file_path",
    "filePath",
    "absolute_path",
    "path",
    "notebook_path",
    "file",
    "paths",
    "dir_path",
    "dirPath",
    "directory",
)
_COMMAND_KEYS = ("command", "cmd")
_SUMMARY_KEYS = ("pattern", "query", "url", "description", "prompt", "request", "q")


def _first(args: Record, keys: Sequence[str]) -> str:
    for key in keys:
        value = args.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return one_line(value)
    return ""


def describe_tool(name: object, args: object) -> str:
    """A tool call in a line: ``● Read src/a.py``, ``✎ Edit src/a.py``, ``$ pytest -q``."""
    tool = str(name or "tool")
    given = as_dict(args)
    key = tool.casefold().rsplit("__", 1)[-1]
    path = _first(given, _PATH_KEYS)
    if key in _SHELL or (not path and _first(given, _COMMAND_KEYS)):
        return f"$ {_first(given, _COMMAND_KEYS)}".rstrip()
    if key in _READ:
        return f"● Read {path}".rstrip()
    if key in _EDIT:
        return f"✎ Edit {path}".rstrip()
    if key in _WRITE:
        return f"✎ Write {path}".rstrip()
    detail = path or _first(given, _SUMMARY_KEYS)
    return f"● {tool} {detail}".rstrip()


def exit_zero_error(exit_code: int | None, stats: DecodedStats, agent: str) -> str | None:
    """The false-success reason when an agent exits 0 although its stream reported a failure."""
    if exit_code != 0 or not stats.is_error:
        return None
    return f"exit 0, but {agent} reported an error: {stats.last_error or 'no message'}"
