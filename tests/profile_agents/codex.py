"""Stand-in for Codex CLI with `codex exec --json`."""

from __future__ import annotations

from _emit import run

THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"

run(
    {
        "success": (
            [
                {"type": "thread.started", "thread_id": THREAD},
                {"type": "turn.started"},
                {
                    "type": "item.completed",
                    "item": {"id": "item_0", "type": "reasoning", "text": "thinking"},
                },
                {
                    "type": "item.started",
                    "item": {
                        "id": "item_1",
                        "type": "command_execution",
                        "command": "pytest -q",
                        "status": "in_progress",
                    },
                },
                {
                    "type": "item.completed",
                    "item": {
                        "id": "item_1",
                        "type": "command_execution",
                        "command": "pytest -q",
                        "exit_code": 1,
                        "status": "failed",
                    },
                },
                {
                    "type": "item.completed",
                    "item": {
                        "id": "item_2",
                        "type": "file_change",
                        "changes": [
                            {"path": "src/a.py", "kind": "update"},
                            {"path": "src/b.py", "kind": "add"},
                        ],
                        "status": "completed",
                    },
                },
                {
                    "type": "item.completed",
                    "item": {
                        "id": "item_3",
                        "type": "agent_message",
                        "text": "Fixed the ledger.\nTests pass now.",
                    },
                },
                {
                    "type": "turn.completed",
                    "usage": {
                        "input_tokens": 24763,
                        "cached_input_tokens": 24448,
                        "output_tokens": 122,
                    },
                },
                {"type": "turn.started"},
                {"type": "turn.completed", "usage": {"input_tokens": 100, "output_tokens": 8}},
            ],
            0,
        ),
        "usage_limit": (
            [
                {"type": "thread.started", "thread_id": THREAD},
                {"type": "turn.started"},
                {
                    "type": "error",
                    "message": "You've hit your usage limit. Try again in 2 hours 5 minutes.",
                },
                {
                    "type": "turn.failed",
                    "error": {
                        "message": "You've hit your usage limit. Try again in 2 hours 5 minutes."
                    },
                },
            ],
            1,
        ),
    }
)
