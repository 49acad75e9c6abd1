"""Path globs as the contract writes them, with ``.gitignore`` semantics for every key.

One implementation (pathspec's ``gitwildmatch``, as git itself reads ``.gitignore``) serves
``scope``, ``protect``, a gate's ``paths`` and ``[watch] ignore``, so the tool never disagrees
with itself: ``*`` and ``?`` stay inside one path segment, ``**`` spans segments, a pattern
without a ``/`` (other than a trailing one) matches a name at any depth, a leading ``/`` anchors
at the root, a trailing ``/`` names a folder, and a name covers everything inside it, so
``tests`` protects ``tests/test_x.py`` and ``scope = ["src"]`` covers ``src/a/b.py``. A pattern
ending in ``/**`` also matches the folder itself. ``!pattern`` takes paths back out, as in
``.gitignore`` (the last matching pattern wins).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec


def _expand(pattern: str) -> list[str]:
    """The lines ``pattern`` stands for: ``src/**`` also names ``src`` itself."""
    pat = pattern.strip()
    if not pat or pat.startswith("#"):
        return []
    lines = [pat]
    if pat.endswith("/**") and len(pat) > 3 and not pat.startswith("!"):
        folder = pat[:-3]
        lines.append(folder if folder.startswith("/") else "/" + folder)
    return lines


@lru_cache(maxsize=512)
def compile_globs(patterns: tuple[str, ...]) -> GitIgnoreSpec:
    """The compiled matcher for ``patterns`` (cached: contracts reuse a few sets)."""
    # Imported at the first match: the snapshot's modules import this one, and a checkpoint
    # never matches a glob in Python (git reads the same patterns as --exclude).
    from pathspec import GitIgnoreSpec

    lines = [line for pattern in patterns for line in _expand(pattern)]
    return GitIgnoreSpec.from_lines(lines)


def glob_match(path: str, pattern: str) -> bool:
    """Whether the slash-separated relative ``path`` matches ``pattern`` (a folder ends in ``/``)."""
    return compile_globs((pattern,)).match_file(path.lstrip("/"))


def match_any(path: str, patterns: Iterable[str]) -> bool:
    """Whether ``path`` is matched by ``patterns`` (read together, as one ``.gitignore``)."""
    key = tuple(patterns)
    if not key:
        return False
    return compile_globs(key).match_file(path.lstrip("/"))


def folder_match(folder: str, patterns: Iterable[str]) -> bool:
    """Whether the folder ``folder`` (or one above it) is matched, and so everything inside it."""
    parts = folder.strip("/").split("/")
    return any(match_any("/".join(parts[:i]) + "/", patterns) for i in range(1, len(parts) + 1))


def unmatched(patterns: Iterable[str], paths: Iterable[str]) -> list[str]:
    """The patterns (negations left out) that match none of ``paths``, in their order."""
    wanted = [p for p in dict.fromkeys(patterns) if p.strip() and not p.strip().startswith("!")]
    if not wanted:
        return []
    left = {p: compile_globs((p,)) for p in wanted}
    for path in paths:
        for pattern in [p for p, spec in left.items() if spec.match_file(path)]:
            del left[pattern]
        if not left:
            break
    return [p for p in wanted if p in left]
