"""The marks and short words every paella widget uses, so a state reads the same everywhere.

Colour is never the only signal (SPEC 12): each state has a symbol (✓ ✗ ● ◌ ⚠ ■) and a word,
and the colour only repeats what they say.
"""

from __future__ import annotations

PASS = "✓"
FAIL = "✗"
RUNNING = "●"
PENDING = "◌"
WARNING = "⚠"
STOPPED = "■"

GATE_MARKS: dict[str, str] = {
    "pass": PASS,
    "flaky": PASS,
    "fail": FAIL,
    "timeout": FAIL,
    "error": FAIL,
    "running": RUNNING,
    "pending": PENDING,
    "stale": PENDING,
}
"""The symbol of each gate status."""

GATE_STYLES: dict[str, str] = {
    "pass": "$text-success",
    "flaky": "$text-warning",
    "fail": "$text-error",
    "timeout": "$text-error",
    "error": "$text-error",
    "running": "$text-primary",
    "pending": "dim",
    "stale": "dim italic",
}
"""The style of each gate status (repeating its symbol, never replacing it), in the theme's
variables (resolved by :func:`paella_tui.widgets.theme_styles.theme_style`)."""

REGRESSION_STYLE = "bold reverse"
"""How a regression stands out: bold and reversed, so it shows without colour too."""


def short_duration(seconds: float | None) -> str:
    """A compact duration for a narrow column: ``0.3s``, ``12s``, ``2m05s``, ``1h02m``, ``26h``."""
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 24:
        return f"{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def age(seconds: float | None) -> str:
    """How long ago, coarsely: ``now``, ``12s ago``, ``3m ago``, ``2h ago``, ``3d ago``."""
    if seconds is None:
        return ""
    seconds = max(0.0, seconds)
    if seconds < 2:
        return "now"
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"


def size(n: int | None) -> str:
    """A memory size in binary units, short: ``512B``, ``80K``, ``118M``, ``1.5G``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M"):
        if value < 1024:
            return f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.1f}G"
