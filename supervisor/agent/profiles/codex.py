"""Codex CLI: `codex exec --json` (one JSON event a line).

Events: `thread.started` (`thread_id`: the session id), `turn.started`, `turn.completed`
(`usage{input_tokens,cached_input_tokens,output_tokens}`: the input includes the cached part),
`turn.failed` (`error.message`), `item.started` / `item.completed` with `item.type`
`agent_message{text}`, `command_execution{command}`, `file_change{changes}`, and `error`.
Every fatal error exits 1, so an exit 0 after a failed turn is the only false success.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from paella_tui.supervisor.agent.profiles.stream import (
    DecodedStats,
    Dialect,
    Record,
    as_dict,
    as_int,
    as_list,
    error_message,
    exit_zero_error,
    one_line,
    text_lines,
)

STREAM_FLAGS = (("--json",), ("--experimental-json",))
"""Any of these runs of arguments in the command turns the JSON stream on."""
NEWEST_SESSION = ((("resume", "{session_id}"), ("resume", "--last")),)
"""(by id, newest): how a resume by session id reads without one."""
TRANSIENT = ("Too Many Requests", "usage_limit_reached", "hit your usage limit")
"""Words only: "exceeded retry limit" alone says nothing (its `last status` decides: 429 is a
limit, 401 an expired login)."""

_RECONNECTING = re.compile(r"^\s*Reconnecting(?:\.\.\.|…)\s*\d+/\d+", re.IGNORECASE)
"""Codex retrying its stream by itself: news, not an error (the turn goes on)."""
_CHANGE_VERBS = {"add": "Add", "delete": "Delete", "update": "Edit"}


class CodexDialect(Dialect):
    """Renders and counts Codex CLI's `--json` events."""

    def __init__(self) -> None:
        self._last_error: str | None = None

    def render(self, record: Record) -> list[str]:
        lines = self._render(record)
        if record.get("type") == "turn.failed" and lines == [self._last_error]:
            return []  # Codex reports a fatal error twice: as `error`, then as `turn.failed`
        if record.get("type") in ("error", "turn.failed"):
            self._last_error = lines[0] if lines else None
        return lines

    def _render(self, record: Record) -> list[str]:
        kind = record.get("type")
        item = as_dict(record.get("item"))
        item_type = item.get("type")
        if kind == "item.started" and item_type == "command_execution":
            return [f"$ {one_line(item.get('command'))}"]
        if kind == "item.completed":
            if item_type == "agent_message":
                return text_lines(item.get("text"))
            if item_type == "file_change":
                return [
                    f"✎ {_CHANGE_VERBS.get(str(change.get('kind')), 'Edit')} {change.get('path', '')}"
                    for change in map(as_dict, as_list(item.get("changes")))
                ]
            if item_type == "command_execution":
                code = item.get("exit_code")
                if isinstance(code, int) and code != 0:
                    return [f"✗ exit {code}: {one_line(item.get('command'))}"]
            if item_type == "error":
                return [f"✗ error: {one_line(item.get('message'))}"]
        if kind == "turn.failed":
            return [f"✗ error: {one_line(error_message(record.get('error')))}"]
        if kind == "error":
            message = one_line(record.get("message"))
            if _RECONNECTING.match(message):
                return [f"↻ {message}"]
            return [f"✗ error: {message}"]
        return []

    def update(self, stats: DecodedStats, record: Record) -> None:
        kind = record.get("type")
        if kind == "thread.started":
            thread = record.get("thread_id")
            if isinstance(thread, str) and thread:
                stats.session_id = thread
        elif kind == "turn.completed":
            stats.turns += 1
            usage = as_dict(record.get("usage"))
            # Codex counts cached input inside `input_tokens`: fresh is the rest.
            cached = min(
                as_int(usage.get("cached_input_tokens")), as_int(usage.get("input_tokens"))
            )
            stats.add_usage(
                as_int(usage.get("input_tokens")) - cached, usage.get("output_tokens"), cached
            )
        elif kind == "turn.failed":
            stats.turns += 1
            stats.error(error_message(record.get("error")))
        elif kind == "error":
            # Not always fatal (a reconnect is reported this way); the exit code decides.
            stats.error(record.get("message"), fatal=False)


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 after `turn.failed` (Codex exits 1 on every fatal error; this is a safeguard)."""
    return exit_zero_error(exit_code, decoded, "Codex CLI")


CHECKED_VERSIONS = ("0.46.0", "0.149.0")
"""The versions this profile was checked against (tests/corpus and the stand-ins)."""
