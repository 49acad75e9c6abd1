"""Claude Code: `--output-format stream-json --verbose` (one JSON record a line).

Records: `system` (init, with `session_id`), `assistant` (`message.content[]`: `text`,
`tool_use{name,input}`), `user` (`tool_result`), `result` (`is_error`, `total_cost_usd`,
`usage{input_tokens,output_tokens}`, `num_turns`, `session_id`). A usage limit can end with
exit 0 and a `result` whose `is_error` is true: a false success.
"""

from __future__ import annotations

from collections.abc import Sequence

from paella_tui.supervisor.profiles.stream import (
    DecodedStats,
    Dialect,
    Record,
    as_dict,
    as_int,
    as_list,
    describe_tool,
    error_message,
    exit_zero_error,
    one_line,
    text_lines,
)

STREAM_FLAGS = (("--output-format", "stream-json", "--verbose"), ("--output-format", "stream-json"))
"""Any of these runs of arguments in the command turns the JSON stream on; the first is how the
commands write it (Claude Code refuses stream-json in print mode without --verbose)."""
NEWEST_SESSION = (
    (("-r", "{session_id}"), ("-c",)),
    (("--resume", "{session_id}"), ("--continue",)),
)
"""(by id, newest in this folder): how a resume by session id reads without one."""
TRANSIENT = ("rate_limit_error", "overloaded_error", "API Error: 529", "limit reached")


class ClaudeDialect(Dialect):
    """Renders and counts Claude Code's stream-json records."""

    def render(self, record: Record) -> list[str]:
        kind = record.get("type")
        if kind == "assistant":
            lines: list[str] = []
            for block in as_list(as_dict(record.get("message")).get("content")):
                block = as_dict(block)
                if block.get("type") == "text":
                    lines.extend(text_lines(block.get("text")))
                elif block.get("type") == "tool_use":
                    lines.append(describe_tool(block.get("name"), block.get("input")))
            return lines
        if kind == "user":
            return [
                f"✗ tool error: {one_line(block.get('content'))}"
                for block in map(as_dict, as_list(as_dict(record.get("message")).get("content")))
                if block.get("type") == "tool_result" and block.get("is_error") is True
            ]
        if kind == "result":
            if record.get("is_error") is True:
                return [f"✗ error: {one_line(record.get('result')) or record.get('subtype', '')}"]
            turns = as_int(record.get("num_turns"))
            return [f"✓ finished after {turns} turn{'s' if turns != 1 else ''}"]
        if kind == "error":
            return [f"✗ error: {one_line(error_message(record.get('error')))}"]
        return []

    def update(self, stats: DecodedStats, record: Record) -> None:
        super().update(stats, record)
        kind = record.get("type")
        if kind == "result":
            stats.turns += as_int(record.get("num_turns"))
            usage = as_dict(record.get("usage"))
            stats.add_usage(usage.get("input_tokens"), usage.get("output_tokens"))
            stats.add_cost(record.get("total_cost_usd"))
            stats.is_error = record.get("is_error") is True
            if stats.is_error:
                stats.error(record.get("result") or record.get("subtype"))
        elif kind == "error":
            stats.error(error_message(record.get("error")))


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 after a `result` with `is_error: true` (a usage limit does this)."""
    return exit_zero_error(exit_code, decoded, "Claude Code")
