"""Stand-in for Gemini CLI with `-o stream-json`."""

from __future__ import annotations

from _emit import run

SID = "c2a1e5d0-gemini-session"
INIT = {
    "type": "init",
    "timestamp": "2026-01-15T21:00:00Z",
    "session_id": SID,
    "model": "gemini-2.5-pro",
}

run(
    {
        "success": (
            [
                INIT,
                {"type": "message", "role": "user", "content": "Build the ledger"},
                {"type": "message", "role": "assistant", "content": "Reading the", "delta": True},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": " code.\nThen I",
                    "delta": True,
                },
                {"type": "message", "role": "assistant", "content": " edit it.", "delta": True},
                {
                    "type": "tool_use",
                    "tool_name": "read_file",
                    "tool_id": "t1",
                    "parameters": {"absolute_path": "src/a.py"},
                },
                {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "..."},
                {
                    "type": "tool_use",
                    "tool_name": "replace",
                    "tool_id": "t2",
                    "parameters": {"file_path": "src/a.py"},
                },
                {
                    "type": "tool_use",
                    "tool_name": "run_shell_command",
                    "tool_id": "t3",
                    "parameters": {"command": "pytest -q"},
                },
                {
                    "type": "tool_result",
                    "tool_id": "t3",
                    "status": "error",
                    "error": {"type": "shell", "message": "exit code 1"},
                },
                {"type": "message", "role": "assistant", "content": "Done.", "delta": True},
                {
                    "type": "result",
                    "status": "success",
                    "stats": {
                        "total_tokens": 900,
                        "input_tokens": 800,
                        "output_tokens": 100,
                        "duration_ms": 1200,
                        "tool_calls": 3,
                    },
                },
            ],
            0,
        ),
        "quota": (
            [
                INIT,
                {
                    "type": "error",
                    "severity": "error",
                    "message": "[API Error: 429 RESOURCE_EXHAUSTED: Quota exceeded for metric generate_content_requests. Please retry in 38s.]",
                },
                {
                    "type": "result",
                    "status": "error",
                    "error": {"type": "ApiError", "message": "RESOURCE_EXHAUSTED"},
                    "stats": {"input_tokens": 5, "output_tokens": 0},
                },
            ],
            1,
        ),
        "turn_limit": (
            [INIT, {"type": "error", "severity": "error", "message": "Reached max session turns"}],
            53,
        ),
    }
)
