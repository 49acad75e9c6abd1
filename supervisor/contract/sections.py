"""Reading one table of `paella.toml` into typed values: the tables and keys a contract knows,
and the `Checker` that collects a problem at the line of each key that is wrong.
"""

from __future__ import annotations

from pathlib import Path

from paella_tui.supervisor.base.durations import parse_duration, parse_size
from paella_tui.supervisor.contract.command_line import split_command
from paella_tui.supervisor.contract.problems import Problem, kind, quoted, suggestion
from paella_tui.supervisor.contract.toml_lines import TomlLines

TABLES = ("run", "retry", "watch", "gates", "steps", "gate", "episode", "constraint")
"""The top-level tables a contract may have, in the order they are named to a user."""
_ARRAY_TABLES = frozenset({"gate", "episode", "constraint"})
KEYS: dict[str, tuple[str, ...]] = {
    "run": (
        "name",
        "prompt",
        "prompt_file",
        "profile",
        "agent",
        "resume",
        "stall_after",
        "scope",
        "tty",
        "max_file_size",
    ),
    "retry": ("max_attempts", "backoff", "max_backoff", "max_wait", "transient"),
    "watch": ("settle", "ignore"),
    "gates": ("jobs",),
    "steps": ("keep", "link"),
    "gate": ("name", "cmd", "timeout", "retries", "paths"),
    "episode": ("name", "goal", "gates"),
    "constraint": ("text", "protect"),
}
"""The keys each table knows."""

_MISSING = object()


class Checker:
    """Collects problems while reading the parsed TOML into typed values."""

    def __init__(self, path: Path, locator: TomlLines, *, frozen: bool = False) -> None:
        """``frozen``: a run's frozen copy, read as it was accepted (see ``parse_contract``)."""
        self.path = path
        self.locator = locator
        self.frozen = frozen
        self.problems: list[Problem] = []

    def add(self, where: Section | None, key: str | None, message: str) -> None:
        """Record a problem at `key` of a section (or at the top level when `where` is None)."""
        if where is None:
            line = self.locator.line("", None, key)
            if line is None and key is not None:
                line = self.locator.headers.get((key, None))
            label = key or ""
        else:
            line = where.line(key)
            label = f"{where.label} → {key}" if key else where.label
        self.problems.append(Problem(self.path, line, label, message))


class Section:
    """One table of the contract being read, able to report problems at its keys."""

    def __init__(
        self, checker: Checker, data: dict[str, object], table: str, index: int | None
    ) -> None:
        self.checker = checker
        self.data = data
        self.table = table
        self.index = index
        self.label = f"[[{table}]] #{index + 1}" if index is not None else f"[{table}]"
        name = data.get("name")
        if index is not None and isinstance(name, str) and name.strip():
            self.label += f" {quoted(name)}"

    def line(self, key: str | None) -> int | None:
        """The source line of `key` in this table, else of its header."""
        locator = self.checker.locator
        # An inline `gate = [{...}]` has no header: fall back to the line of its key.
        return locator.line(self.table, self.index, key) or locator.line("", None, self.table)

    def problem(self, key: str | None, message: str) -> None:
        """Record a problem at `key` of this table (or at its header when key is None)."""
        self.checker.add(self, key, message)

    def unknown_keys(self) -> None:
        """Report each key this table does not know, with the nearest known one."""
        known = KEYS[self.table]
        for key in self.data:
            if key not in known:
                hint = suggestion(key, known, wrap="'{}'")
                self.problem(key, f"unknown key{hint}; known keys: {', '.join(known)}")

    def text(self, key: str, *, required: bool = False) -> str | None:
        """A non-empty string, or None when absent (a problem when required)."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.problem(None, f"{key} is missing")
            return None
        if not isinstance(value, str):
            self.problem(key, f"expected a string, got {kind(value)}")
            return None
        if not value.strip():
            self.problem(key, "cannot be empty")
            return None
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A boolean."""
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.problem(key, f"expected true or false, got {kind(value)}")
            return default
        return value

    def integer(self, key: str, default: int, minimum: int) -> int:
        """An integer no smaller than `minimum`."""
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"expected a whole number, got {kind(value)}")
            return default
        if value < minimum:
            self.problem(key, f"expected a whole number of at least {minimum}, got {value}")
            return default
        return value

    def duration(self, key: str, default: float, *, positive: bool = False) -> float:
        """Seconds, from a duration; with `positive`, zero is a problem too."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.problem(key, str(exc))
            return default
        if positive and seconds == 0:
            self.problem(key, "expected a duration longer than zero, got 0")
            return default
        return seconds

    def size(self, key: str, default: int) -> int:
        """Bytes, from a size greater than zero."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            size = parse_size(value)
        except ValueError as exc:
            self.problem(key, str(exc))
            return default
        if size == 0:
            self.problem(key, "expected a size larger than zero, got 0")
            return default
        return size

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A tuple from an array of non-empty strings."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            return default
        if not isinstance(value, list):
            self.problem(key, f"expected an array of strings, got {kind(value)}")
            return default
        good = True
        for i, item in enumerate(value, 1):
            if not isinstance(item, str):
                self.problem(key, f"expected an array of strings, but item {i} is {kind(item)}")
                good = False
            elif not item.strip():
                self.problem(key, f"item {i} is an empty string")
                good = False
        return tuple(value) if good else default

    def command(self, key: str, *, placeholders: bool) -> tuple[str, ...] | None:
        """An argv from a command string or array, or None when absent or wrong."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            return None
        try:
            return split_command(
                value, placeholders=placeholders, shell_refused=not self.checker.frozen
            )
        except ValueError as exc:
            self.problem(key, str(exc))
            return None


def table_sections(checker: Checker, data: dict[str, object], table: str) -> list[Section]:
    """The occurrences of a top-level table (one for `[t]`, any number for `[[t]]`)."""
    value = data.get(table, _MISSING)
    if value is _MISSING:
        return []
    if table in _ARRAY_TABLES:
        if not isinstance(value, list):
            checker.add(None, table, f"expected [[{table}]] tables, got {kind(value)}")
            return []
        sections = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                sections.append(Section(checker, item, table, i))
            else:
                message = f"expected [[{table}]] tables, but item {i + 1} is {kind(item)}"
                checker.add(None, table, message)
        return sections
    if not isinstance(value, dict):
        checker.add(None, table, f"expected a [{table}] table, got {kind(value)}")
        return []
    return [Section(checker, value, table, None)]
