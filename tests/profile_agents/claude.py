"""Stand-in for Claude Code with `--output-format stream-json --verbose`."""

from __future__ import annotations

from _emit import run

SID = "4f1c2b7e-claude-session"
INIT = {"type": "system", "subtype": "init", "session_id": SID, "model": "claude-sonnet"}


def assistant(*content: dict[str, object]) -> dict[str, object]:
    return {"type": "assistant", "message": {"content": list(content)}, "session_id": SID}


def result(
    is_error: bool, text: str, turns: int, cost: float, tin: int, tout: int
) -> dict[str, object]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": is_error,
        "result": text,
        "num_turns": turns,
        "total_cost_usd": cost,
        "usage": {"input_tokens": tin, "output_tokens": tout},
        "session_id": SID,
    }


run(
    {
        "success": (
            [
                INIT,
                assistant({"type": "text", "text": "I'll read the ledger first — ok."}),
                assistant({"type": "tool_use", "name": "Read", "input": {"file_path": "src/a.py"}}),
                {
                    "type": "user",
                    "message": {"content": [{"type": "tool_result", "content": "def f(): ..."}]},
                },
                assistant(
                    {"type": "tool_use", "name": "Edit", "input": {"file_path": "src/a.py"}},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "pytest -q"}},
                ),
                "not json: a plain line",
                "{broken json",
                assistant({"type": "text", "text": "All tests pass."}),
                result(False, "All tests pass.", 4, 0.0421, 1200, 340),
            ],
            0,
        ),
        # It fails before its stream starts: no record, so no session id.
        "no_session": (['API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}'], 1),
        "usage_limit": (
            [
                INIT,
                assistant({"type": "text", "text": "Claude AI usage limit reached|{reset_epoch}"}),
                result(True, "Claude AI usage limit reached|{reset_epoch}", 1, 0.0, 10, 0),
            ],
            0,
        ),
        "rate_limit": (
            [
                INIT,
                result(
                    True,
                    'API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}',
                    1,
                    0.0,
                    0,
                    0,
                ),
            ],
            1,
        ),
        "overloaded": (
            [
                INIT,
                result(
                    True,
                    'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
                    1,
                    0.0,
                    0,
                    0,
                ),
            ],
            1,
        ),
    }
)
