"""Path globs as the contract writes them (``src/**``, ``*.log``, ``tests/test_*.py``).

``*`` and ``?`` stay inside one path segment, ``**`` spans any number of segments, and a pattern
without a ``/`` matches a file's name at any depth (as in ``.gitignore``): so ``*.log`` catches
``build/x.log`` while ``src/*.py`` does not catch ``src/a/b.py``. A trailing ``/**`` also
matches the folder itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> re.Pattern[str]:
    pat = pattern.strip()
    anchored = "/" in pat.rstrip("/")
    pat = pat.lstrip("/")
    if pat.endswith("/"):
        pat += "**"
    out: list[str] = []
    i = 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("(?:/.*)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pat.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pat[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    body = "".join(out)
    prefix = "" if anchored else "(?:.*/)?"
    return re.compile(f"^{prefix}{body}$")


def glob_match(path: str, pattern: str) -> bool:
    """Whether the slash-separated relative ``path`` matches ``pattern``."""
    return _compile(pattern).match(path) is not None


def match_any(path: str, patterns: Iterable[str]) -> bool:
    """Whether ``path`` matches at least one of ``patterns``."""
    return any(glob_match(path, p) for p in patterns)
