"""The bounded, display-ready tail of an agent's output.

`OutputTail` turns the raw bytes an agent writes (to a pseudo-terminal or a pipe) into
lines a UI can show and a handoff can quote: UTF-8 decoded incrementally (binary garbage
becomes U+FFFD, never an exception), `\\r` progress lines collapsed to their last state,
cursor movement and OSC sequences removed, SGR colour sequences kept (with a plain
variant), single lines capped at 64 KiB, and at most `max_lines` lines kept.

It is pure Python with no asyncio: the agent process feeds it from its reader callback and
a UI polls `version` every 50-250 ms, redrawing only when it changed.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Callable
from typing import Protocol

DEFAULT_MAX_LINES = 5000
DEFAULT_MAX_LINE_CHARS = 64 * 1024
DEFAULT_MAX_CHARS = 16 * 1024 * 1024

# A trailing escape sequence is held back (it may be completed by the next chunk) up to
# this many characters; a longer unterminated one is garbage and shown as text.
_MAX_HELD_ESCAPE = 8 * 1024

_SGR_RE = re.compile(r"\x1b\[[0-9;:]*m")
_BROKEN_SGR_RE = re.compile(r"\x1b(?:\[[0-9;:]*)?\Z")

# "Erase the whole line" and "cursor to column 1" are treated like `\r`: tools redraw
# progress lines with them instead of a carriage return. (`ESC[K`, erase to the end of
# the line, is only stripped: grep --color puts it after every match.)
_CR_LIKE_RE = re.compile(r"\x1b\[(?:2K|1?G)")

# Escape sequences a line-based view cannot render: OSC/DCS/APC/PM/SOS strings, CSI
# sequences other than SGR, other ESC sequences, and a lone ESC. One literal prefix, so
# the regex engine can skip to each ESC quickly.
_ESC_STRIP_RE = re.compile(
    r"\x1b(?:\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|[P_^X][^\x1b]*\x1b\\"
    r"|\[(?![0-9;:]*m)[0-?]*[ -/]*[@-~]"
    r"|[ -/]*[0-OQ-WYZ\\`-~]"
    r"|(?!\[[0-9;:]*m))"
)
# C0 and C1 controls other than \t \n \r and ESC.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_CONTROL_FREE_ASCII = b"\t\n\r\x1b" + bytes(range(0x20, 0x7F))

# A complete escape sequence starting at a given ESC (used to decide whether a trailing
# ESC must wait for the next chunk).
_COMPLETE_ESC_RE = re.compile(
    r"\x1b(?:\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|[P_^X][^\x1b]*\x1b\\"
    r"|\[[0-?]*[ -/]*[@-~]"
    r"|[ -/]*[0-OQ-WYZ\\`-~])"
)
_STRING_INTRODUCER_RE = re.compile(r"\x1b[\]P_^X]")


def strip_sgr(line: str) -> str:
    """Return `line` without SGR colour sequences."""
    return _SGR_RE.sub("", line)


def _has_controls(text: str) -> bool:
    # For ASCII text, deleting the allowed bytes in C is ~5x faster than a regex search.
    if text.isascii():
        return bool(text.encode("ascii").translate(None, _CONTROL_FREE_ASCII))
    return _CONTROL_RE.search(text) is not None


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class OutputSink(Protocol):
    """Where an agent's output goes to be shown: an `OutputTail`, or one that decodes first."""

    def feed(self, data: bytes) -> None:
        """Add raw output bytes."""

    def finish(self) -> None:
        """The output ended: flush what is held back."""

    def last_lines(self, n: int) -> list[str]:
        """The last `n` plain lines."""


class OutputTail:
    """A bounded tail of terminal output: decoded, cleaned, split into lines."""

    def __init__(
        self,
        max_lines: int = DEFAULT_MAX_LINES,
        *,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        if max_lines < 1 or max_line_chars < 1 or max_chars < 1:
            raise ValueError("OutputTail limits must be positive")
        self._max_lines = max_lines
        self._max_line_chars = max_line_chars
        # A whole-tail budget too, so 5000 lines of 64 KiB each cannot take 320 MB.
        self._max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._chars = 0
        self._partial = ""
        self._partial_cut_bytes = 0
        self._cr_pending = False
        self._held = ""
        self._total_bytes = 0
        self._total_lines = 0
        self._version = 0
        self.on_change: Callable[[], None] | None = None
        """Called (cheaply, often) after each change, so a view redraws without polling."""

    @property
    def max_lines(self) -> int:
        """The most complete lines kept."""
        return self._max_lines

    @property
    def version(self) -> int:
        """Increases whenever the visible content changed; poll it to redraw only on change."""
        return self._version

    @property
    def total_bytes(self) -> int:
        """Bytes fed so far."""
        return self._total_bytes

    @property
    def total_lines(self) -> int:
        """Complete lines seen so far (including the ones no longer kept)."""
        return self._total_lines

    @property
    def partial(self) -> str:
        """The current, unterminated line (with SGR), with a cut marker if it was cut."""
        return self._with_cut_marker(self._partial, self._partial_cut_bytes)

    def feed(self, data: bytes) -> None:
        """Add raw output bytes."""
        if not data:
            return
        self._total_bytes += len(data)
        self._process(self._decoder.decode(data), final=False)
        self._version += 1
        if self.on_change is not None:
            self.on_change()

    def finish(self) -> None:
        """Flush an incomplete UTF-8 sequence or escape at the end of the stream."""
        text = self._decoder.decode(b"", True)
        self._decoder.reset()
        if text or self._held:
            self._process(text, final=True)
            self._version += 1
            if self.on_change is not None:
                self.on_change()

    def lines(self, n: int | None = None) -> list[str]:
        """The last `n` lines (all kept lines if None) with SGR colours, partial line last."""
        return self._select(n, plain=False)

    def plain_lines(self, n: int | None = None) -> list[str]:
        """Like `lines` but with SGR colour sequences removed."""
        return self._select(n, plain=True)

    def last_lines(self, n: int) -> list[str]:
        """The last `n` plain lines, for a death report or a handoff."""
        return self._select(n, plain=True)

    def _select(self, n: int | None, *, plain: bool) -> list[str]:
        partial = self.partial
        kept = len(self._lines)
        if n is None:
            wanted = kept
        else:
            if n <= 0:
                return []
            wanted = min(kept, n - 1 if partial else n)
        selected = [self._lines[i] for i in range(kept - wanted, kept)]
        if partial:
            selected.append(partial)
        if plain:
            return [strip_sgr(line) for line in selected]
        return selected

    def _process(self, text: str, *, final: bool) -> None:
        if self._held:
            text = self._held + text
            self._held = ""
        if "\x1b" in text and not final:
            text, self._held = _split_incomplete_escape(text)
        if not text:
            return
        if "\x1b" in text:
            text = _ESC_STRIP_RE.sub("", _CR_LIKE_RE.sub("\r", text))
        if _has_controls(text):
            text = _CONTROL_RE.sub("", text)
        has_cr = "\r" in text
        if has_cr:
            text = text.replace("\r\n", "\n")
        pieces = text.split("\n")
        self._apply(pieces[0])
        if len(pieces) == 1:
            return
        self._complete_partial()
        middle = pieces[1:-1]
        if middle:
            self._total_lines += len(middle)
            if len(middle) > self._max_lines:
                middle = middle[-self._max_lines :]
            if has_cr:
                middle = [_collapse_cr(line) if "\r" in line else line for line in middle]
            if max(map(len, middle)) > self._max_line_chars:
                middle = [self._cut(line) for line in middle]
            self._push(middle)
        self._apply(pieces[-1])

    def _apply(self, segment: str) -> None:
        """Write `segment` (no newline) into the partial line; `\r` returns to column 0."""
        if not segment:
            return
        if "\r" not in segment:
            if self._cr_pending:
                self._reset_partial()
            self._append_partial(segment)
            return
        parts = segment.split("\r")
        last = _last_nonempty(parts)
        if last < 0:
            self._cr_pending = True
            return
        if last > 0 or self._cr_pending:
            self._reset_partial()
        self._append_partial(parts[last])
        self._cr_pending = last < len(parts) - 1

    def _reset_partial(self) -> None:
        self._partial = ""
        self._partial_cut_bytes = 0
        self._cr_pending = False

    def _append_partial(self, text: str) -> None:
        if not text:
            return
        # Once cut, a line takes nothing more (dropping a broken SGR may have freed room).
        room = 0 if self._partial_cut_bytes else self._max_line_chars - len(self._partial)
        if room >= len(text):
            self._partial += text
        else:
            if room > 0:
                kept = self._partial + text[:room]
                self._partial = _drop_broken_sgr(kept)
                # The dropped escape is ASCII: its length in characters is its length in bytes.
                self._partial_cut_bytes += len(kept) - len(self._partial)
                text = text[room:]
            self._partial_cut_bytes += _utf8_len(text)

    def _complete_partial(self) -> None:
        line = self._with_cut_marker(self._partial, self._partial_cut_bytes)
        self._reset_partial()
        self._total_lines += 1
        self._push([line])

    def _push(self, lines: list[str]) -> None:
        self._lines.extend(lines)
        # `_chars` over-counts lines the deque dropped by itself; recount only when it
        # claims the budget is exceeded, which for ordinary lines is rare.
        self._chars += sum(map(len, lines))
        if self._chars > self._max_chars:
            self._chars = sum(map(len, self._lines))
            while self._chars > self._max_chars and len(self._lines) > 1:
                self._chars -= len(self._lines.popleft())

    def _cut(self, line: str) -> str:
        if len(line) <= self._max_line_chars:
            return line
        kept = _drop_broken_sgr(line[: self._max_line_chars])
        return self._with_cut_marker(kept, _utf8_len(line[len(kept) :]))

    @staticmethod
    def _with_cut_marker(line: str, cut_bytes: int) -> str:
        if not cut_bytes:
            return line
        return f"{line} …[cut {cut_bytes} bytes]"


def _drop_broken_sgr(line: str) -> str:
    """Remove an SGR sequence that a cut left unfinished at the end of `line`."""
    match = _BROKEN_SGR_RE.search(line, max(0, len(line) - 64))
    return line[: match.start()] if match else line


def _last_nonempty(parts: list[str]) -> int:
    for index in range(len(parts) - 1, -1, -1):
        if parts[index]:
            return index
    return -1


def _collapse_cr(line: str) -> str:
    """The visible state of a complete line that contains carriage returns."""
    parts = line.split("\r")
    last = _last_nonempty(parts)
    return parts[last] if last >= 0 else ""


def _split_incomplete_escape(text: str) -> tuple[str, str]:
    """Split `text` into what can be processed now and a trailing unfinished escape."""
    start = len(text)
    window = max(0, len(text) - _MAX_HELD_ESCAPE)
    last_esc = text.rfind("\x1b", window)
    if last_esc >= 0 and not _COMPLETE_ESC_RE.match(text, last_esc):
        start = last_esc
    # An OSC/DCS string may contain the ESC of its own terminator: look for its start.
    for match in _STRING_INTRODUCER_RE.finditer(text, window):
        if not _COMPLETE_ESC_RE.match(text, match.start()):
            start = min(start, match.start())
            break
    return text[:start], text[start:]
