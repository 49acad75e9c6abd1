"""An agent's JSON stream made readable for the log view (SPEC 3 `profile`, issue 6).

`DecodedTail` stands where the agent's `OutputTail` would: it takes the raw output bytes (the
agent process writes those, byte-exact, to `agent.log` first), runs them through the profile's
`StreamDecoder`, and feeds the display tail what the agent says and does, one line each, with
tool calls, errors and results set apart by colour (SGR, which the log view renders and the
plain lines drop). The decoder's `stats` hold the session id, turns, tokens and cost.
"""

from __future__ import annotations

from collections.abc import Iterable

from paella_tui.supervisor.agent.output_tail import OutputTail
from paella_tui.supervisor.agent.profiles.stream import DecodedStats, DisplayLine, StreamDecoder

_STYLES = {
    "✗": "\x1b[31m",  # an error the stream reported
    "✓": "\x1b[32m",  # the agent's own result
    "$": "\x1b[36m",  # a command it ran
    "●": "\x1b[36m",  # a tool it used
    "✎": "\x1b[33m",  # a file it changed
}
_RESET = "\x1b[0m"


class DecodedTail:
    """Decodes an attempt's stream into the shared display tail."""

    def __init__(self, display: OutputTail, decoder: StreamDecoder) -> None:
        self.display = display
        self.decoder = decoder

    @property
    def stats(self) -> DecodedStats:
        """What the stream said so far: session id, turns, tokens, cost, errors."""
        return self.decoder.stats

    def feed(self, data: bytes) -> None:
        """Decode raw output bytes; complete lines go to the display."""
        self._show(self.decoder.feed(data))

    def finish(self) -> None:
        """The output ended: show the last partial line and what the decoder held back."""
        self._show(self.decoder.finish())
        self.display.finish()

    def last_lines(self, n: int) -> list[str]:
        """The last `n` plain lines shown (readable, not raw JSON)."""
        return self.display.last_lines(n)

    def _show(self, lines: Iterable[DisplayLine]) -> None:
        text = "".join(f"{_styled(line)}\n" for line in lines)
        if text:
            self.display.feed(text.encode("utf-8", errors="replace"))


def _styled(line: DisplayLine) -> str:
    if not line.structured or not line.text:
        return line.text
    style = _STYLES.get(line.text[0])
    return f"{style}{line.text}{_RESET}" if style else line.text
