"""Claude Code: `--output-format stream-json --verbose` (one JSON record a line).

Records: `system` (init, with `session_id`), `assistant` (`message.content[]`: `text`,
`tool_use{name,input}`), `user` (`tool_result`), `result` (`is_error`, `total_cost_usd`,
`usage{input_tokens,cache_read_input_tokens,cache_creation_input_tokens,output_tokens}`,
`num_turns`, `session_id`, on failures `api_error_status` and `errors[]`), `rate_limit_event`
(`rate_limit_info{status,resetsAt,rateLimitType}`). A usage limit ends with `is_error: true`
and `api_error_status: 429`, with exit 1 (2.1.x) or exit 0 (a false success, older versions);
its words are "You've hit your session limit · resets 9:20pm (Europe/Moscow)" (2026) or
"Claude AI usage limit reached|EPOCH" (2025).
"""

from __future__ import annotations

from collections.abc import Sequence

from paella_tui.supervisor.agent.profiles.stream import (
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
TRANSIENT = ("rate_limit_error", "overloaded_error", "limit reached", "hit your limit")

_SUBTYPES = {
    "error_max_turns": "the turn limit (--max-turns) was reached",
    "error_max_budget_usd": "the budget limit (--max-budget-usd) was reached",
    "error_during_execution": "error during execution",
}


def _result_error(record: Record) -> str:
    """Why a `result` failed, readable: its text, else its `errors[]`, else its subtype."""
    text = one_line(record.get("result"))
    if text:
        return text
    errors = [one_line(e) for e in as_list(record.get("errors")) if one_line(e)]
    subtype = str(record.get("subtype") or "error")
    reason = _SUBTYPES.get(subtype, subtype)
    if errors:
        return f"{reason}: {errors[0]}" if subtype in _SUBTYPES else errors[0]
    turns = as_int(record.get("num_turns"))
    if subtype == "error_max_turns" and turns:
        return f"{reason} after {turns} turns"
    return reason


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
                return [f"✗ error: {_result_error(record)}"]
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
            stats.add_usage(
                usage.get("input_tokens"),
                usage.get("output_tokens"),
                as_int(usage.get("cache_read_input_tokens"))
                + as_int(usage.get("cache_creation_input_tokens")),
            )
            stats.add_cost(record.get("total_cost_usd"))
            is_error = record.get("is_error") is True
            if is_error:
                status = record.get("api_error_status")
                if isinstance(status, int) and not isinstance(status, bool):
                    stats.notes.append(f"api_error_status: {status}")
                stats.error(_result_error(record))
            stats.is_error = is_error
        elif kind == "error":
            stats.error(error_message(record.get("error")))
        elif kind == "rate_limit_event":
            info = as_dict(record.get("rate_limit_info"))
            resets = info.get("resetsAt")
            if info.get("status") == "rejected":
                # In the words the reset parser reads: "five_hour limit reached|1767225600".
                limit = str(info.get("rateLimitType") or "usage")
                stats.notes.append(
                    f"{limit} limit reached|{as_int(resets)}"
                    if resets
                    else f"{limit} limit reached"
                )


def false_success(tail: Sequence[str], exit_code: int | None, decoded: DecodedStats) -> str | None:
    """Exit 0 after a `result` with `is_error: true` (a usage limit does this)."""
    return exit_zero_error(exit_code, decoded, "Claude Code")


CHECKED_VERSIONS = ("2.0.0", "2.1.219")
"""The versions this profile was checked against (tests/corpus and the stand-ins)."""
