"""Durations and sizes as people write them in `paella.toml` ("90s", "1h30m", "50MiB"), and back.

Parsing is strict: anything that is not clearly a duration or a size raises a `ValueError`
whose message shows what was expected and what was given, ready to show to a user.
"""

from __future__ import annotations

import json
import math
import re

_DURATION_EXAMPLES = 'a duration such as 90, "90s", "2m" or "1h30m"'
_SIZE_EXAMPLES = 'a size such as 1048576, "800KiB", "50MiB" or "1.5GB"'

_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|[dhms])")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)")


def _shown(value: object) -> str:
    """The value as the user wrote it: strings in double quotes, TOML-style booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _number(value: object) -> float | None:
    """A finite real number, or None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_duration(value: object) -> float:
    """Seconds from a number of seconds or a string like "90", "90s", "2m", "1h30m", "500ms"."""
    number = _number(value)
    if number is None and isinstance(value, str):
        number = _parse_duration_text(value.strip().lower())
    if number is None:
        raise ValueError(f"expected {_DURATION_EXAMPLES}, got {_shown(value)}")
    if number < 0:
        raise ValueError(f"expected a duration that is not negative, got {_shown(value)}")
    return number


def _parse_duration_text(text: str) -> float | None:
    """Seconds from a non-empty string of number+unit parts in decreasing unit order, or None."""
    if _NUMBER.fullmatch(text):
        return float(text)
    total = 0.0
    position = 0
    previous_unit = math.inf
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            return None
        unit = _DURATION_UNITS[match.group(2)]
        # "30m1h" or "1m1m" is more likely a typo than a deliberate sum.
        if unit >= previous_unit:
            return None
        previous_unit = unit
        total += float(match.group(1)) * unit
        position = match.end()
    return total if position else None


def parse_size(value: object) -> int:
    """Bytes from an integer or a string like "1024", "10k", "800KiB", "50MB", "1.5GiB"."""
    size: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip().lower())
        if match is not None and match.group(2) in _SIZE_UNITS:
            size = round(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    if size is None:
        raise ValueError(f"expected {_SIZE_EXAMPLES}, got {_shown(value)}")
    if size < 0:
        raise ValueError(f"expected a size that is not negative, got {_shown(value)}")
    return size


def format_duration(seconds: float) -> str:
    """A compact duration: "500ms", "45s", "2m", "2m05s", "1h30m", "26h"."""
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if 0 < seconds < 1:
        return f"{sign}{round(seconds * 1000)}ms"
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        text = f"{hours}h"
        if minutes or secs:
            text += f"{minutes:02d}m"
        if secs:
            text += f"{secs:02d}s"
    elif minutes:
        text = f"{minutes}m" + (f"{secs:02d}s" if secs else "")
    else:
        text = f"{secs}s"
    return sign + text


def format_size(n: int) -> str:
    """A size in binary units: "512 B", "800.0 KiB", "50.0 MiB", "1.5 GiB"."""
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
