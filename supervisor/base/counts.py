"""Counts for people: ``940``, ``48.3k``, ``1.25M`` (no imports: the status bar's line uses it)."""

from __future__ import annotations


def compact_count(n: int) -> str:
    """``940``, ``48.3k``, ``1.25M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"
