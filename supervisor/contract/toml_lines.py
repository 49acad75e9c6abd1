"""Where a key of `paella.toml` is written: the source line of each table and key, found by
scanning the text (tomllib gives values, not lines), so every problem can name its line.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]#]*?)\s*(\]\]?)\s*(?:#.*)?$")
_SIMPLE_KEY = r"""(?:[A-Za-z0-9_-]+|"[^"\\\n]*"|'[^'\n]*')"""
_KEY = re.compile(rf"\s*({_SIMPLE_KEY}(?:\s*\.\s*{_SIMPLE_KEY})*)\s*=")
_KEY_PART = re.compile(rf"\s*({_SIMPLE_KEY})\s*")

_Where = tuple[str, int | None]
"""A table and, for an array of tables, the 0-based occurrence: ("gate", 1) is the 2nd gate."""


def _key_parts(text: str) -> list[str]:
    """The parts of a dotted key, unquoted."""
    parts = []
    for raw in text.split("."):
        match = _KEY_PART.fullmatch(raw)
        parts.append(match.group(1).strip("\"'") if match else raw.strip())
    return parts


class TomlLines:
    """Finds the source line of a key in a table occurrence by scanning the text.

    A small scanner, not a parser: it follows table headers, and skips strings, comments and
    multi-line arrays so that a `=` inside them is not taken for a key.
    """

    def __init__(self, text: str) -> None:
        self.headers: dict[_Where, int] = {}
        self.keys: dict[tuple[str, int | None, str], int] = {}
        self.duplicate: tuple[int, int] | None = None
        """(first line, second line) of the first key written twice in one table."""
        counts: dict[str, int] = {}
        where: _Where = ("", None)
        depth = 0
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), 1):
            rest = line
            if in_string is not None:
                end = line.find(in_string)
                if end < 0:
                    continue
                in_string, rest = None, line[end + 3 :]
            elif depth == 0:
                header = _HEADER.match(line)
                key = None if header else _KEY.match(line)
                if header:
                    parts = _key_parts(header.group(2))
                    table = parts[0]
                    if header.group(1) == "[[" and len(parts) == 1:
                        counts[table] = counts.get(table, 0) + 1
                    index = counts[table] - 1 if table in counts else None
                    where = (table, index)
                    if len(parts) == 1:
                        self.headers.setdefault(where, number)
                    else:
                        self._record(table, index, parts[1], number)
                    continue
                if key:
                    parts = _key_parts(key.group(1))
                    table, index = where
                    if table == "" and len(parts) > 1:
                        table, index = parts[0], None
                        parts = parts[1:]
                    self._record(table, index, parts[0], number)
                    rest = line[key.end() :]
            depth, in_string = self._scan(rest, depth)

    def _record(self, table: str, index: int | None, key: str, number: int) -> None:
        """Remember the first line of a key, and the first key written twice."""
        first = self.keys.setdefault((table, index, key), number)
        if first != number and self.duplicate is None:
            self.duplicate = (first, number)

    @staticmethod
    def _scan(text: str, depth: int) -> tuple[int, str | None]:
        """The bracket depth after `text`, and the open multi-line string delimiter if any."""
        i = 0
        while i < len(text):
            char = text[i]
            if char == "#":
                break
            if text.startswith(('"""', "'''"), i):
                delimiter = text[i : i + 3]
                end = text.find(delimiter, i + 3)
                if end < 0:
                    return depth, delimiter
                i = end + 3
                continue
            if char == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif char == "'":
                end = text.find("'", i + 1)
                i = len(text) if end < 0 else end
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth = max(0, depth - 1)
            i += 1
        return depth, None

    def line(self, table: str, index: int | None, key: str | None = None) -> int | None:
        """The line of `key` in that table occurrence, else of its header, else None."""
        if key is not None and (table, index, key) in self.keys:
            return self.keys[(table, index, key)]
        return self.headers.get((table, index))
