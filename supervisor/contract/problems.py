"""What is wrong with a contract: one located `Problem`, the `ContractError` listing them all, and
how a problem message shows a TOML value (quoted, its kind, the nearest known word).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the contract, located as precisely as the source allows."""

    path: Path
    line: int | None
    """1-based line, when known."""
    key: str
    """A readable key path such as `[[gate]] #2 "lint" → timeout`; empty for syntax errors."""
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ContractError(Exception):
    """The contract cannot be used; `problems` lists everything wrong with it."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def quoted(value: object) -> str:
    """A value as it would read in TOML: strings double-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def suggestion(word: str, choices: Iterable[str], *, wrap: str = '"{}"') -> str:
    """' (did you mean "x"?)' for the nearest choice, or ""."""
    import difflib  # only for a word that is wrong: every command that reads a contract loads this

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {wrap.format(close[0])}?)" if close else ""


def kind(value: object) -> str:
    """A short description of a TOML value's type, with the value when it is short."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return quoted(value)
