"""opencode: `opencode run --format json` (one JSON event a line, `sessionID` on each).

Events: `text` (`part.text`), `tool_use` (`part.tool`, `part.state.input`), `step_finish`
(`part.tokens{input,output,reasoning,cache{read,write}}`, `part.cost`), `error`
(`error.data.message` or `error.message`). Some failures reach stderr only: "Session not found"
after `run -s` with an unknown id (exit 0), a provider's limit in `ERROR` log lines.
"""

from __future__ import annotations

from collections.abc import Sequence

from paella_tui.supervisor.agent.failure_words import find_permanent, find_transient
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

STREAM_FLAGS = (("--format", "json"),)
"""Any of these runs of arguments in the command turns the JSON stream on."""
NEWEST_SESSION = (
    (("-s", "{session_id}"), ("-c",)),
    (("--session", "{session_id}"), ("--continue",)),
)
"""(by id, newest): how a resume by session id reads without one."""
TRANSIENT = ("Too Many Requests", "Rate Limited", "Provider is overloaded")


class OpencodeDialect(Dialect):
    """Renders and counts opencode's `--format json` events."""

    def render(self, record: Record) -> list[str]:
        kind = record.get("type")
        part = as_dict(record.get("part"))
        if kind == "text":
            return text_lines(part.get("text", record.get("text")))
        if kind == "tool_use":
            state = as_dict(part.get("state"))
            lines = [describe_tool(part.get("tool"), state.get("input"))]
            if state.get("status") == "error":
                lines.append(f"✗ tool error: {one_line(state.get('error'))}")
            return lines
        if kind == "error":
            return [f"✗ error: {one_line(error_message(record.get('error')))}"]
        return []

    def update(self, stats: DecodedStats, record: Record) -> None:
        session = record.get("sessionID")
        if isinstance(session, str) and session:
            stats.session_id = session
        kind = record.get("type")
        if kind == "step_finish":
            part = as_dict(record.get("part"))
            stats.turns += 1
            tokens = as_dict(part.get("tokens"))
            cache = as_dict(tokens.get("cache"))
            stats.add_usage(
                tokens.get("input"),
                as_int(tokens.get("output")) + as_int(tokens.get("reasoning")),
                as_int(cache.get("read")) + as_int(cache.get("write")),
            )
            stats.add_cost(part.get("cost"))
        elif kind == "error":
            stats.error(error_message(record.get("error")))


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 after an `error` event, or after an `ERROR` log line that names a limit or a
    failure no wait fixes (opencode retries a limit by itself and may only log it)."""
    reason = exit_zero_error(exit_code, decoded, "opencode")
    if reason is not None or exit_code != 0:
        return reason
    logged = [line for line in decoded.notes if line.lstrip().startswith("ERROR")]
    for line in reversed(logged):
        if find_permanent((line,)) or find_transient((line,), TRANSIENT):
            return f"exit 0, but opencode logged an error: {one_line(line)}"
    return None


CHECKED_VERSIONS = ("0.6.0", "1.18.0")
"""The versions this profile was checked against (tests/corpus and the stand-ins)."""
