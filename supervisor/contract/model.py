"""The contract, `paella.toml`: load it, validate every key, and hand back frozen, typed values.

Validation collects every problem in one pass (a user fixes them all at once); each names the
file, the line where the source shows it, and the key. Only a TOML syntax error stops early.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import string
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from paella_tui.supervisor.base.durations import parse_duration, parse_size
from paella_tui.supervisor.base.files import read_regular_file

CONTRACT_FILE = "paella.toml"
"""The contract's file name, at the workspace root."""

PLACEHOLDERS = frozenset(
    {"prompt", "prompt_file", "handoff", "handoff_file", "attempt", "run_id", "session_id"}
)
"""The names that `{...}` may hold in the `agent` and `resume` arguments."""

PROFILES = ("claude", "codex", "gemini", "aider", "opencode")
"""The agents paella-tui knows how to start headless and resume."""

PROFILE_COMMANDS: dict[str, tuple[str, str]] = {
    "claude": (
        "claude -p {prompt} --permission-mode acceptEdits --output-format stream-json --verbose",
        "claude -r {session_id} -p {handoff} --permission-mode acceptEdits"
        " --output-format stream-json --verbose",
    ),
    "codex": (
        "codex exec --json --sandbox workspace-write {prompt}",
        # `exec resume` takes no --sandbox of its own (openai/codex#40149): the config key does.
        "codex exec --json -c 'sandbox_mode=\"workspace-write\"' resume {session_id} {handoff}",
    ),
    "gemini": (
        "gemini -p {prompt} --approval-mode auto_edit -o stream-json",
        "gemini -r {session_id} -p {handoff} --approval-mode auto_edit -o stream-json",
    ),
    "aider": (
        "aider --message-file {prompt_file} --yes-always --no-stream --no-pretty",
        "aider --message-file {handoff_file} --yes-always --no-stream --no-pretty"
        " --restore-chat-history",
    ),
    "opencode": (
        "opencode run --auto --format json {prompt}",
        "opencode run --auto --format json -s {session_id} {handoff}",
    ),
}
"""Each profile's (start, resume) command line, as a user would write it in `paella.toml`."""

DEFAULT_AGENT_COMMANDS: dict[str, tuple[str, ...]] = {
    name: tuple(shlex.split(start)) for name, (start, _) in PROFILE_COMMANDS.items()
}
"""Each profile's headless start argv."""

DEFAULT_RESUME_COMMANDS: dict[str, tuple[str, ...]] = {
    name: tuple(shlex.split(resume)) for name, (_, resume) in PROFILE_COMMANDS.items()
}
"""Each profile's resume argv."""

DEFAULT_STALL_AFTER = 15 * 60.0
DEFAULT_MAX_FILE_SIZE = 50 * 1024**2
DEFAULT_GATE_TIMEOUT = 10 * 60.0

_TABLES = ("run", "retry", "watch", "gates", "steps", "gate", "episode", "constraint")
_ARRAY_TABLES = frozenset({"gate", "episode", "constraint"})
_KEYS: dict[str, tuple[str, ...]] = {
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


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """A named check command; green on a tree when it exits 0 within its timeout."""

    name: str
    """Unique within the contract; also a folder name for its logs."""
    argv: tuple[str, ...]
    """The command, split like a shell would; run without one."""
    cmd: str
    """The command as written (an array is shown shell-quoted)."""
    timeout: float
    """Seconds before the gate's process group is killed and the gate is red."""
    retries: int
    """How many times a failure is re-run; a pass after a failure is flaky."""
    paths: tuple[str, ...]
    """Globs: only changes under these make the gate's result stale; empty means any change."""

    def definition_key(self) -> str:
        """A stable sha256 of what decides the gate's result (argv, timeout, retries)."""
        payload = json.dumps(
            {"argv": list(self.argv), "timeout": self.timeout, "retries": self.retries},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Episode:
    """A named step; complete when every gate of it and of the episodes before it is green."""

    name: str
    """Unique within the contract."""
    goal: str
    """What the step achieves, in words (shown and put in the handoff)."""
    gates: tuple[str, ...]
    """Names of the gates this episode adds."""


@dataclass(frozen=True)
class Constraint:
    """A rule the agent must keep, with files it must not change."""

    text: str
    """The rule, in words (put in the prompt and the handoff)."""
    protect: tuple[str, ...]
    """Globs of files the agent must not change: a change is drift."""


@dataclass(frozen=True)
class RunConfig:
    """The `[run]` table: the task, the agent command and how it is watched."""

    name: str
    """The run's display name; default: the workspace folder name."""
    prompt: str | None
    """The task text, when given inline."""
    prompt_file: str | None
    """A file holding the task, relative to the workspace, when given that way."""
    profile: str | None
    """The agent profile (one of PROFILES), if any."""
    agent: tuple[str, ...]
    """The agent's start argv, with placeholders still in it."""
    resume: tuple[str, ...] | None
    """The resume argv; None means: the agent argv with {prompt} given the handoff text."""
    stall_after: float
    """Seconds with no output and no file change before a stall is drift."""
    scope: tuple[str, ...]
    """Globs; a change outside them is drift. Empty means anywhere."""
    tty: bool
    """Run the agent under a pseudo-terminal (True) or with pipes."""
    max_file_size: int
    """Bytes; larger files are left out of snapshots, and named."""


@dataclass(frozen=True)
class RetryConfig:
    """The `[retry]` table: the governed retry after a transient failure."""

    max_attempts: int = 3
    """Attempts per run, not counting resumes a person chose."""
    backoff: float = 30.0
    """Seconds of the first wait; it doubles each time."""
    max_backoff: float = 900.0
    """The longest blind wait, in seconds."""
    transient: tuple[str, ...] = ("rate limit", "429", "overloaded", "usage limit")
    """Case-insensitive patterns (whole words; digits: an HTTP status) marking a failure transient."""
    max_wait: float = 6 * 3600.0
    """The longest wait for a reset the agent printed; a later one stops the run and says when
    to resume."""


@dataclass(frozen=True)
class WatchConfig:
    """The `[watch]` table: when file changes trigger the gates."""

    settle: float = 2.0
    """Seconds of quiet after the last change before gates re-run."""
    ignore: tuple[str, ...] = ()
    """Globs ignored in addition to .gitignore and the state folder."""


def _cpu_count() -> int:
    """The CPU count, or 1 when unknown."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class GatesConfig:
    """The `[gates]` table: how gates are run together."""

    jobs: int = field(default_factory=_cpu_count)
    """How many gates run in parallel."""


DEFAULT_STEPS_KEEP = 7 * 24 * 3600.0
"""Seven days: how long steps outlive the end of their run by default."""


@dataclass(frozen=True)
class StepsConfig:
    """The `[steps]` table: every settled change kept as a step, and how a bisect sees it."""

    keep: float = DEFAULT_STEPS_KEEP
    """Seconds the steps of an ended run are kept before they are pruned (checkpoints never are)."""
    link: tuple[str, ...] = ()
    """Ignored paths of the work tree (a virtualenv, node_modules) linked into a bisect's
    scratch tree, so gates find what they need there."""


@dataclass(frozen=True)
class Contract:
    """A validated `paella.toml`, with the text and hash it was read from."""

    path: Path
    """Where it was read from."""
    text: str
    """The source text (a run freezes this copy)."""
    sha256: str
    """sha256 hex of the UTF-8 text."""
    run: RunConfig
    retry: RetryConfig
    watch: WatchConfig
    gates_config: GatesConfig
    gates: tuple[Gate, ...]
    """In file order."""
    episodes: tuple[Episode, ...]
    """In file order; episode k (1-based) is complete when episodes 1..k's gates are green."""
    constraints: tuple[Constraint, ...]
    steps: StepsConfig = field(default_factory=StepsConfig)
    """The `[steps]` table."""

    def gate(self, name: str) -> Gate:
        """The gate called `name` (KeyError if there is none)."""
        for gate in self.gates:
            if gate.name == name:
                return gate
        raise KeyError(name)

    def episode_gates(self, k: int) -> tuple[str, ...]:
        """The gate names episode k (1-based) needs green: those of episodes 1..k, in order."""
        if not 0 <= k <= len(self.episodes):
            raise IndexError(f"episode {k} is not in 1..{len(self.episodes)}")
        names = (name for episode in self.episodes[:k] for name in episode.gates)
        return tuple(dict.fromkeys(names))

    def protected_globs(self) -> tuple[str, ...]:
        """Every constraint's protected globs, in order, without duplicates."""
        return tuple(dict.fromkeys(g for c in self.constraints for g in c.protect))


# --- problems -------------------------------------------------------------------------------


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


# --- helpers shared with `paella init` -----------------------------------------------------


def _quoted(value: object) -> str:
    """A value as it would read in TOML: strings double-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _suggest(word: str, choices: Iterable[str], *, wrap: str = '"{}"') -> str:
    """' (did you mean "x"?)' for the nearest choice, or ""."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {wrap.format(close[0])}?)" if close else ""


def check_gate_name(name: str) -> str | None:
    """Why `name` cannot name a gate (it becomes a folder name), or None if it can."""
    if not name.strip():
        return "a gate name cannot be empty"
    if "/" in name or "\\" in name:
        return f"a gate name cannot contain a slash (it names a folder), got {_quoted(name)}"
    if name in (".", ".."):
        return f"a gate name cannot be {_quoted(name)} (it names a folder)"
    if not name.isprintable():
        return f"a gate name must be printable, got {_quoted(name)}"
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_GATE_NAME_BYTES:
        return (
            f"a gate name names a folder, so it must fit in {MAX_GATE_NAME_BYTES} bytes "
            f"(this one has {len(name.encode('utf-8', errors='surrogatepass'))})"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"a gate name must be valid text, got {_quoted(name)}"
    return None


MAX_GATE_NAME_BYTES = 100
"""Well under the 255 bytes a file name may have, so the gate's log folder can always be made."""
MAX_PROMPT_BYTES = 1 << 20
"""A task is text a person wrote; a bigger prompt_file is a mistake (or /dev/zero)."""


def prompt_file_problem(prompt_file: str, root: Path) -> str | None:
    """Why ``[run] prompt_file`` cannot be read as the task (missing, a folder, a device, too big)."""
    path = root / prompt_file
    try:
        data = read_regular_file(path, MAX_PROMPT_BYTES)
    except FileNotFoundError:
        return f"prompt_file {prompt_file!r} does not exist (in {root})"
    except OSError as exc:
        return f"prompt_file {prompt_file!r} cannot be read: {exc.strerror or exc}"
    except ValueError as exc:
        return f"prompt_file {prompt_file!r} cannot be the task: {exc}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return f"prompt_file {prompt_file!r} is not UTF-8 text"
    return None


def placeholder_problems(argv: Sequence[str]) -> list[str]:
    """What is wrong with the `{...}` placeholders in each argument (`{{`, `}}` are braces)."""
    problems: list[str] = []
    formatter = string.Formatter()
    for arg in argv:
        try:
            parsed = list(formatter.parse(arg))
        except ValueError:
            problems.append(
                f"unbalanced brace in {_quoted(arg)}: write {{{{ or }}}} for a literal brace"
            )
            continue
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in PLACEHOLDERS:
                known = ", ".join(f"{{{p}}}" for p in sorted(PLACEHOLDERS))
                hint = _suggest(name, PLACEHOLDERS, wrap="{{{}}}") or f"; known: {known}"
                problems.append(f"unknown placeholder {{{name}}} in {_quoted(arg)}{hint}")
            elif spec or conversion:
                problems.append(f"placeholder {{{name}}} takes no format or conversion")
    return problems


def expand_placeholders(argv: Sequence[str], values: Mapping[str, object]) -> tuple[str, ...]:
    """The argv with each `{name}` replaced by str(values[name]), each argument whole, no shell."""
    return tuple(arg.format_map(values) for arg in argv)


def split_command(value: object, *, placeholders: bool) -> tuple[str, ...]:
    """An argv from a command string (split like a shell, never run by one) or a string array.

    Raises ValueError saying what is wrong; with `placeholders`, unknown `{...}` names too.
    """
    if isinstance(value, str):
        try:
            argv = tuple(shlex.split(value))
        except ValueError as exc:
            raise ValueError(
                f"cannot split {_quoted(value)} like a shell would: {str(exc).lower()}"
            ) from None
        if not argv:
            raise ValueError("the command is empty")
    elif isinstance(value, list):
        if not value:
            raise ValueError("the command is empty")
        bad = [i for i, arg in enumerate(value, 1) if not isinstance(arg, str)]
        if bad:
            raise ValueError(
                f"expected an array of strings, but item {bad[0]} is {_quoted(value[bad[0] - 1])}"
            )
        argv = tuple(value)
        if not argv[0].strip():
            raise ValueError("the program name (the first item) is empty")
    else:
        raise ValueError(f"expected a command string or an array of strings, got {_kind(value)}")
    if placeholders:
        problems = placeholder_problems(argv)
        if problems:
            raise ValueError("; ".join(problems))
    return argv


def _kind(value: object) -> str:
    """A short description of a TOML value's type, with the value when it is short."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return _quoted(value)


# --- the line locator ------------------------------------------------------------------------

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


class _Locator:
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


# --- validation -----------------------------------------------------------------------------

_MISSING = object()


class _Checker:
    """Collects problems while reading the parsed TOML into typed values."""

    def __init__(self, path: Path, locator: _Locator) -> None:
        self.path = path
        self.locator = locator
        self.problems: list[Problem] = []

    def add(self, where: _Section | None, key: str | None, message: str) -> None:
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


class _Section:
    """One table of the contract being read, able to report problems at its keys."""

    def __init__(
        self, checker: _Checker, data: dict[str, object], table: str, index: int | None
    ) -> None:
        self.checker = checker
        self.data = data
        self.table = table
        self.index = index
        self.label = f"[[{table}]] #{index + 1}" if index is not None else f"[{table}]"
        name = data.get("name")
        if index is not None and isinstance(name, str) and name.strip():
            self.label += f" {_quoted(name)}"

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
        known = _KEYS[self.table]
        for key in self.data:
            if key not in known:
                hint = _suggest(key, known, wrap="'{}'")
                self.problem(key, f"unknown key{hint}; known keys: {', '.join(known)}")

    def text(self, key: str, *, required: bool = False) -> str | None:
        """A non-empty string, or None when absent (a problem when required)."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.problem(None, f"{key} is missing")
            return None
        if not isinstance(value, str):
            self.problem(key, f"expected a string, got {_kind(value)}")
            return None
        if not value.strip():
            self.problem(key, "cannot be empty")
            return None
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A boolean."""
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.problem(key, f"expected true or false, got {_kind(value)}")
            return default
        return value

    def integer(self, key: str, default: int, minimum: int) -> int:
        """An integer no smaller than `minimum`."""
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"expected a whole number, got {_kind(value)}")
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
            self.problem(key, f"expected an array of strings, got {_kind(value)}")
            return default
        good = True
        for i, item in enumerate(value, 1):
            if not isinstance(item, str):
                self.problem(key, f"expected an array of strings, but item {i} is {_kind(item)}")
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
            return split_command(value, placeholders=placeholders)
        except ValueError as exc:
            self.problem(key, str(exc))
            return None


def _sections(checker: _Checker, data: dict[str, object], table: str) -> list[_Section]:
    """The occurrences of a top-level table (one for `[t]`, any number for `[[t]]`)."""
    value = data.get(table, _MISSING)
    if value is _MISSING:
        return []
    if table in _ARRAY_TABLES:
        if not isinstance(value, list):
            checker.add(None, table, f"expected [[{table}]] tables, got {_kind(value)}")
            return []
        sections = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                sections.append(_Section(checker, item, table, i))
            else:
                message = f"expected [[{table}]] tables, but item {i + 1} is {_kind(item)}"
                checker.add(None, table, message)
        return sections
    if not isinstance(value, dict):
        checker.add(None, table, f"expected a [{table}] table, got {_kind(value)}")
        return []
    return [_Section(checker, value, table, None)]


def _top_level(checker: _Checker, data: dict[str, object]) -> None:
    """Report unknown top-level keys, pointing stray `[run]` keys to their table."""
    for key in data:
        if key in _TABLES:
            continue
        homes = [t for t in ("run", "retry", "watch", "gates", "steps") if key in _KEYS[t]]
        if homes:
            hint = f" (did you mean to put it under [{homes[0]}]?)"
        else:
            hint = _suggest(key, _TABLES, wrap="[{}]")
        checker.add(None, key, f"unknown key{hint}; known tables: {', '.join(_TABLES)}")


def _read_run(checker: _Checker, data: dict[str, object], default_name: str) -> RunConfig | None:
    """The `[run]` table."""
    sections = _sections(checker, data, "run")
    if not sections:
        if "run" not in data:
            checker.add(None, "run", "[run] is missing: it holds the task and the agent command")
        return None
    run = sections[0]
    run.unknown_keys()
    name = run.text("name") or default_name
    prompt = run.text("prompt")
    prompt_file = run.text("prompt_file")
    if "prompt" in run.data and "prompt_file" in run.data:
        run.problem("prompt_file", "set prompt or prompt_file, not both")
    elif "prompt" not in run.data and "prompt_file" not in run.data:
        run.problem(None, "set prompt (the task) or prompt_file (a file holding the task)")
    profile = run.text("profile")
    if profile is not None and profile not in PROFILES:
        hint = _suggest(profile, PROFILES)
        run.problem(
            "profile", f"unknown profile {_quoted(profile)}{hint}; known: {', '.join(PROFILES)}"
        )
        profile = None
    agent = run.command("agent", placeholders=True)
    resume = run.command("resume", placeholders=True)
    if "agent" not in run.data:
        if profile is not None:
            agent = DEFAULT_AGENT_COMMANDS[profile]
            # The profile's resume belongs with the profile's own start command only.
            if "resume" not in run.data:
                resume = DEFAULT_RESUME_COMMANDS[profile]
        elif "profile" not in run.data:
            run.problem(
                None,
                f"set agent (the command that starts the agent) or profile ({', '.join(PROFILES)})",
            )
    stall_after = run.duration("stall_after", DEFAULT_STALL_AFTER, positive=True)
    scope = run.strings("scope")
    tty = run.flag("tty", True)
    max_file_size = run.size("max_file_size", DEFAULT_MAX_FILE_SIZE)
    if agent is None:
        return None
    return RunConfig(
        name=name,
        prompt=prompt,
        prompt_file=prompt_file,
        profile=profile,
        agent=agent,
        resume=resume,
        stall_after=stall_after,
        scope=scope,
        tty=tty,
        max_file_size=max_file_size,
    )


def _read_retry(checker: _Checker, data: dict[str, object]) -> RetryConfig:
    """The `[retry]` table."""
    defaults = RetryConfig()
    sections = _sections(checker, data, "retry")
    if not sections:
        return defaults
    retry = sections[0]
    retry.unknown_keys()
    backoff = retry.duration("backoff", defaults.backoff)
    max_backoff = retry.duration("max_backoff", defaults.max_backoff)
    if max_backoff < backoff:
        retry.problem(
            "max_backoff" if "max_backoff" in retry.data else "backoff",
            f"max_backoff ({max_backoff:g}s) is shorter than backoff ({backoff:g}s)",
        )
    return RetryConfig(
        max_attempts=retry.integer("max_attempts", defaults.max_attempts, minimum=1),
        backoff=backoff,
        max_backoff=max_backoff,
        transient=retry.strings("transient", defaults.transient),
        max_wait=retry.duration("max_wait", defaults.max_wait),
    )


def _read_watch(checker: _Checker, data: dict[str, object]) -> WatchConfig:
    """The `[watch]` table."""
    defaults = WatchConfig()
    sections = _sections(checker, data, "watch")
    if not sections:
        return defaults
    watch = sections[0]
    watch.unknown_keys()
    return WatchConfig(
        settle=watch.duration("settle", defaults.settle),
        ignore=watch.strings("ignore"),
    )


def _read_gates_config(checker: _Checker, data: dict[str, object]) -> GatesConfig:
    """The `[gates]` table."""
    defaults = GatesConfig()
    sections = _sections(checker, data, "gates")
    if not sections:
        return defaults
    gates = sections[0]
    gates.unknown_keys()
    return GatesConfig(jobs=gates.integer("jobs", defaults.jobs, minimum=1))


def _read_steps(checker: _Checker, data: dict[str, object]) -> StepsConfig:
    """The `[steps]` table: `keep` a duration, `link` relative paths inside the workspace."""
    defaults = StepsConfig()
    sections = _sections(checker, data, "steps")
    if not sections:
        return defaults
    steps = sections[0]
    steps.unknown_keys()
    links = steps.strings("link")
    good: list[str] = []
    for link in links:
        parts = PurePosixPath(link).parts
        if link.startswith("/") or ".." in parts or not parts or parts[0] == ".git":
            steps.problem(
                "link",
                f"{link!r} must be a path inside the workspace, relative to its root "
                '(like ".venv" or "frontend/node_modules")',
            )
        else:
            good.append(link.rstrip("/"))
    return StepsConfig(keep=steps.duration("keep", defaults.keep), link=tuple(good))


def _read_gates(checker: _Checker, data: dict[str, object]) -> list[Gate]:
    """The `[[gate]]` tables."""
    gates: list[Gate] = []
    first_seen: dict[str, str] = {}
    for section in _sections(checker, data, "gate"):
        section.unknown_keys()
        name = section.text("name", required=True)
        if name is not None:
            why = check_gate_name(name)
            if why:
                section.problem("name", why)
                name = None
            elif name in first_seen:
                section.problem(
                    "name", f"{_quoted(name)} is already the name of {first_seen[name]}"
                )
                name = None
            else:
                first_seen[name] = section.label
        argv = section.command("cmd", placeholders=False)
        if argv is None and "cmd" not in section.data:
            section.problem(None, "cmd is missing: the command that checks the work")
        raw = section.data.get("cmd")
        timeout = section.duration("timeout", DEFAULT_GATE_TIMEOUT, positive=True)
        retries = section.integer("retries", 0, minimum=0)
        paths = section.strings("paths")
        if name is not None and argv is not None:
            cmd = raw if isinstance(raw, str) else shlex.join(argv)
            gates.append(Gate(name, argv, cmd, timeout, retries, paths))
    return gates


def _read_episodes(
    checker: _Checker, data: dict[str, object], gate_names: set[str]
) -> list[Episode]:
    """The `[[episode]]` tables; `gate_names` are every gate named in the file."""
    episodes: list[Episode] = []
    first_seen: dict[str, str] = {}
    for section in _sections(checker, data, "episode"):
        section.unknown_keys()
        name = section.text("name", required=True)
        if name is not None and name in first_seen:
            section.problem("name", f"{_quoted(name)} is already the name of {first_seen[name]}")
            name = None
        elif name is not None:
            first_seen[name] = section.label
        goal = section.text("goal") or ""
        gates = section.strings("gates")
        if "gates" not in section.data:
            section.problem(None, "gates is missing: the gates that show this episode is done")
        elif section.data["gates"] == []:
            section.problem("gates", "name at least one gate")
        for gate in gates:
            if gate not in gate_names:
                hint = _suggest(gate, gate_names)
                section.problem("gates", f"no gate is named {_quoted(gate)}{hint}")
        duplicates = sorted({g for g in gates if gates.count(g) > 1})
        for gate in duplicates:
            section.problem("gates", f"{_quoted(gate)} is listed twice")
        if name is not None:
            episodes.append(Episode(name, goal, gates))
    return episodes


def _read_constraints(checker: _Checker, data: dict[str, object]) -> list[Constraint]:
    """The `[[constraint]]` tables."""
    constraints: list[Constraint] = []
    for section in _sections(checker, data, "constraint"):
        section.unknown_keys()
        text = section.text("text", required=True)
        protect = section.strings("protect")
        if text is not None:
            constraints.append(Constraint(text, protect))
    return constraints


def _gate_names(data: dict[str, object]) -> set[str]:
    """Every string gate name in the file, valid or not (so episodes are not blamed twice)."""
    gates = data.get("gate")
    if not isinstance(gates, list):
        return set()
    return {g["name"] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)}


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$|\s*\(at end of document\)$")


def _syntax_problem(path: Path, error: tomllib.TOMLDecodeError, locator: _Locator) -> Problem:
    """A Problem from tomllib's error, with the line it names (or the duplicate key's line)."""
    message = str(error)
    match = _TOML_POSITION.search(message)
    line: int | None = None
    if match:
        reason = message[: match.start()]
        if reason.startswith("Cannot overwrite") and locator.duplicate:
            first, line = locator.duplicate
            message = f"a key is written twice (first on line {first})"
        elif match.group(1):
            line = int(match.group(1))
            message = f"{reason} (column {match.group(2)})"
        else:
            message = f"{reason} (at the end of the file)"
    return Problem(path, line, "", f"not valid TOML: {message}")


def parse_contract(text: str, path: Path, *, default_name: str) -> Contract:
    """A Contract from the text of `paella.toml`; raises ContractError listing every problem."""
    locator = _Locator(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError([_syntax_problem(path, exc, locator)]) from None
    except RecursionError:
        # tomllib recurses per nesting level: thousands of nested arrays exhaust the stack.
        message = "not usable TOML: values are nested too deeply"
        raise ContractError([Problem(path, None, "", message)]) from None
    checker = _Checker(path, locator)
    _top_level(checker, data)
    run = _read_run(checker, data, default_name)
    retry = _read_retry(checker, data)
    watch = _read_watch(checker, data)
    gates_config = _read_gates_config(checker, data)
    steps = _read_steps(checker, data)
    gates = _read_gates(checker, data)
    episodes = _read_episodes(checker, data, _gate_names(data))
    constraints = _read_constraints(checker, data)
    if checker.problems or run is None:
        # Stable: problems on one line keep the order they were found in.
        ordered = sorted(checker.problems, key=lambda p: p.line if p.line is not None else 1 << 30)
        raise ContractError(ordered)
    return Contract(
        path=path,
        text=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        run=run,
        retry=retry,
        watch=watch,
        gates_config=gates_config,
        gates=tuple(gates),
        episodes=tuple(episodes),
        constraints=tuple(constraints),
        steps=steps,
    )


MAX_CONTRACT_BYTES = 1 << 20
"""A contract is a page of TOML; anything bigger is not one (and is not read whole)."""


def load_contract(path: Path, *, default_name: str | None = None) -> Contract:
    """Read and validate the contract at `path`; the run name defaults to its folder's name."""
    if default_name is None:
        default_name = path.resolve().parent.name
    try:
        data = read_regular_file(path, MAX_CONTRACT_BYTES)
    except FileNotFoundError:
        message = f"no {CONTRACT_FILE} here: run `paella init` to write one"
        raise ContractError([Problem(path, None, "", message)]) from None
    except OSError as exc:
        raise ContractError([Problem(path, None, "", f"cannot read it: {exc.strerror}")]) from None
    except ValueError as exc:
        raise ContractError([Problem(path, None, "", str(exc))]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ContractError([Problem(path, line, "", "not valid UTF-8")]) from None
    return parse_contract(text, path, default_name=default_name)
