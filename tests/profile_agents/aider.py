"""Stand-in for aider (plain text, `--no-stream --no-pretty`); exits 0 even after an API failure."""

from __future__ import annotations

from _emit import run

HEAD = [
    "Aider v0.86.1",
    "Main model: anthropic/claude-sonnet with diff edit format",
    "Git repo: .git",
]

run(
    {
        "success": ([*HEAD, "Applied edit to src/a.py", "Commit 1a2b3c4 fix: ledger"], 0),
        "rate_limited": (
            [
                *HEAD,
                "litellm.RateLimitError: AnthropicException - rate limit exceeded",
                "The API provider has rate limited you. Try again later or check your quotas.",
                "Retrying in 0.2 seconds...",
            ],
            0,
        ),
        "overloaded": (
            [
                *HEAD,
                "litellm.InternalServerError: AnthropicException - Overloaded",
                "The API provider's servers are down or overloaded.",
            ],
            0,
        ),
    }
)
