"""Stand-in for opencode with `opencode run --format json`."""

from __future__ import annotations

from _emit import run

SID = "ses_6b2f0c1a9ffeOPENCODE"


def rec(kind: str, **part: object) -> dict[str, object]:
    return {"type": kind, "timestamp": 1767225600000, "sessionID": SID, "part": part}


run(
    {
        "success": (
            [
                rec("step_start", type="step-start"),
                rec("text", type="text", text="Let me look at the ledger."),
                rec(
                    "tool_use",
                    type="tool",
                    tool="read",
                    state={"status": "completed", "input": {"filePath": "src/a.py"}},
                ),
                rec(
                    "tool_use",
                    type="tool",
                    tool="edit",
                    state={"status": "completed", "input": {"filePath": "src/a.py"}},
                ),
                rec(
                    "tool_use",
                    type="tool",
                    tool="bash",
                    state={"status": "completed", "input": {"command": "pytest -q"}},
                ),
                rec(
                    "step_finish",
                    type="step-finish",
                    tokens={"input": 1000, "output": 50, "reasoning": 0},
                    cost=0.01,
                ),
                rec("text", type="text", text="Done."),
                rec(
                    "step_finish",
                    type="step-finish",
                    tokens={"input": 200, "output": 10},
                    cost=0.002,
                ),
            ],
            0,
        ),
        "too_many_requests": (
            [
                rec("step_start", type="step-start"),
                {
                    "type": "error",
                    "timestamp": 1767225600000,
                    "sessionID": SID,
                    "error": {
                        "name": "APIError",
                        "data": {"message": "Too Many Requests", "statusCode": 429},
                    },
                },
            ],
            0,
        ),
        "overloaded": (
            [
                {
                    "type": "error",
                    "timestamp": 1767225600000,
                    "sessionID": SID,
                    "error": {
                        "name": "UnknownError",
                        "data": {"message": "Provider is overloaded"},
                    },
                }
            ],
            1,
        ),
    }
)
