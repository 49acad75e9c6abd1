"""Gemini CLI: `-o stream-json` (one JSON event a line), and its named exit codes.

Events: `init` (`session_id`), `message` (`role`, `content`; the model's text may come in
`delta` pieces), `tool_use` (`tool_name`, `parameters`), `tool_result` (`status`, `error`),
`error` (`severity`, `message`), `result` (`status`, `stats{input_tokens,cached,input,
output_tokens}`). A quota Gemini calls terminal (`TerminalQuotaError`) is printed on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

from paella_tui.supervisor.agent.profiles.stream import (
    DecodedStats,
    Dialect,
    Record,
    as_dict,
    as_int,
    describe_tool,
    error_message,
    exit_zero_error,
    one_line,
    text_lines,
)

STREAM_FLAGS = (("-o", "stream-json"), ("--output-format", "stream-json"))
"""Any of these runs of arguments in the command turns the JSON stream on."""
NEWEST_SESSION = (
    (("-r", "{session_id}"), ("-r", "latest")),
    (("--resume", "{session_id}"), ("--resume", "latest")),
)
"""(by id, newest in this project): how a resume by session id reads without one."""
TRANSIENT = ("RESOURCE_EXHAUSTED", "quota exceeded", "exhausted your", "UNAVAILABLE")
EXIT_CODES = {
    41: "authentication failed",
    42: "invalid input",
    44: "sandbox error",
    52: "configuration error",
    53: "turn limit reached",
    130: "cancelled",
}
"""Gemini CLI's fatal exit codes."""


class GeminiDialect(Dialect):
    """Renders and counts Gemini CLI's stream-json events; joins the model's streamed text."""

    def __init__(self) -> None:
        self._pending = ""
        self._in_reply = False

    def render(self, record: Record) -> list[str]:
        kind = record.get("type")
        if kind == "message":
            if record.get("role") != "assistant":
                return self.flush()
            content = record.get("content")
            text = content if isinstance(content, str) else ""
            if record.get("delta") is True:
                self._pending += text
                *done, self._pending = self._pending.split("\n")
                return done
            return [*self.flush(), *text_lines(text)]
        lines = self.flush()
        if kind == "tool_use":
            lines.append(describe_tool(record.get("tool_name"), record.get("parameters")))
        elif kind == "tool_result" and record.get("status") == "error":
            lines.append(f"✗ tool error: {one_line(error_message(record.get('error')))}")
        elif kind == "error":
            lines.append(
                f"✗ {record.get('severity') or 'error'}: {one_line(record.get('message'))}"
            )
        elif kind == "result" and record.get("status") not in (None, "success"):
            lines.append(f"✗ error: {one_line(error_message(record.get('error')))}")
        return lines

    def flush(self) -> list[str]:
        pending, self._pending = self._pending, ""
        return [pending] if pending.strip() else []

    def update(self, stats: DecodedStats, record: Record) -> None:
        super().update(stats, record)
        kind = record.get("type")
        reply = kind == "message" and record.get("role") == "assistant"
        if reply and not self._in_reply:
            stats.turns += 1
        self._in_reply = reply or (self._in_reply and kind == "message")
        if kind == "error":
            stats.error(record.get("message"), fatal=record.get("severity") == "error")
        elif kind == "result":
            usage = as_dict(record.get("stats"))
            # `input_tokens` is the whole prompt, cached part included; newer versions also
            # give `cached` and `input` (the fresh part).
            prompt = as_int(usage.get("input_tokens"))
            cached = (
                min(as_int(usage.get("cached")), prompt) if prompt else as_int(usage.get("cached"))
            )
            fresh = (
                as_int(usage["input"]) if isinstance(usage.get("input"), int) else prompt - cached
            )
            stats.add_usage(fresh, usage.get("output_tokens"), cached)
            if record.get("status") not in (None, "success"):
                stats.error(error_message(record.get("error")) or "the result was an error")
            else:
                # The result is the verdict: an `error` event before it was a warning it got past.
                stats.is_error = False


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 after a `result` whose status is an error."""
    return exit_zero_error(exit_code, decoded, "Gemini CLI")


CHECKED_VERSIONS = ("0.6.0", "0.50.0")
"""The versions this profile was checked against (tests/corpus and the stand-ins)."""
