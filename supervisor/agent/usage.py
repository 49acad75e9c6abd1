"""What an agent reported spending (turns, tokens, cost), apart from the run loop's events.

``paella status`` reads it from the ledger; it lives here rather than in :mod:`events` so that
the status commands need not build the two dozen event dataclasses at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

# Re-exported: it was defined here first.
from paella_tui.supervisor.base.counts import compact_count as compact_count


@dataclass(frozen=True)
class Usage:
    """What the agent's own stream reported spending: turns, tokens and cost (SPEC 3 `profile`).

    Tokens mean one thing for every agent: ``input_tokens`` are the fresh input tokens,
    ``cached_input_tokens`` the input read from (or written to) the provider's prompt cache,
    ``output_tokens`` what the model wrote. Claude Code and opencode report the two inputs
    apart; Codex CLI counts cached ones inside its input (the profile splits them)."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """None when no record gave a cost (not every agent reports one)."""
    cached_input_tokens: int = 0
    """Input tokens served from (or written to) the prompt cache; 0 where none were reported."""

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            turns=self.turns + other.turns,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=sum(costs) if costs else None,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )

    @property
    def empty(self) -> bool:
        """True when nothing was reported."""
        return self == Usage()

    @property
    def all_input_tokens(self) -> int:
        """Every input token the model read: fresh and cached."""
        return self.input_tokens + self.cached_input_tokens

    @property
    def tokens(self) -> int:
        """Input (fresh and cached) and output tokens together."""
        return self.all_input_tokens + self.output_tokens

    def describe(self) -> str:
        """``12 turns, 48.3k tokens (41.0k in, 7.3k out), $0.84``; cached input apart:
        ``75.5k tokens (18 in + 74.9k cached, 600 out)``."""
        parts = [f"{self.turns} turn{'s' if self.turns != 1 else ''}"]
        if self.tokens:
            inputs = f"{compact_count(self.input_tokens)} in"
            if self.cached_input_tokens:
                inputs += f" + {compact_count(self.cached_input_tokens)} cached"
            parts.append(
                f"{compact_count(self.tokens)} tokens ({inputs}, "
                f"{compact_count(self.output_tokens)} out)"
            )
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:.2f}")
        return ", ".join(parts)

    @classmethod
    def from_record(cls, data: object) -> Usage:
        """A usage from its ledger form (anything unexpected counts as nothing)."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> int:
            value = data.get(key)
            return int(value) if isinstance(value, int | float) and value >= 0 else 0

        cost = data.get("cost_usd")
        return cls(
            turns=number("turns"),
            input_tokens=number("input_tokens"),
            output_tokens=number("output_tokens"),
            cost_usd=float(cost) if isinstance(cost, int | float) and cost >= 0 else None,
            cached_input_tokens=number("cached_input_tokens"),
        )
