"""The contract loader: typed values from a good `paella.toml`, located problems from a bad one."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from paella_tui.supervisor.agent.profiles.commands import (
    DEFAULT_AGENT_COMMANDS,
    DEFAULT_RESUME_COMMANDS,
    PROFILE_NAMES,
)
from paella_tui.supervisor.base.durations import (
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)
from paella_tui.supervisor.contract.command_line import expand_placeholders
from paella_tui.supervisor.contract.loader import load_contract, parse_contract
from paella_tui.supervisor.contract.model import (
    CONTRACT_FILE,
    Contract,
    Gate,
    GatesConfig,
    RetryConfig,
    WatchConfig,
)
from paella_tui.supervisor.contract.problems import ContractError

# The SPEC 3 example, with the "privacy" gate its second episode names.
SPEC_EXAMPLE = """\
[run]
name = "ledger-service"             # optional; default: the workspace folder name
prompt = "Build the event ledger, episode by episode."   # or: prompt_file = "TASK.md"
profile = "claude"
agent = "claude -p {prompt}"        # string (split like a shell does) or array
resume = "claude --continue -p {handoff}"
stall_after = "15m"
scope = ["src/**", "tests/**"]
tty = true
max_file_size = "50MiB"

[retry]
max_attempts = 3
backoff = "30s"
max_backoff = "15m"
transient = ["rate limit", "429", "overloaded", "usage limit"]

[watch]
settle = "2s"
ignore = ["*.log"]

[gates]
jobs = 2

[[gate]]
name = "idempotency"
cmd = "pytest -q tests/test_idempotency.py"
timeout = "2m"
retries = 1
paths = ["src/**", "tests/**"]

[[gate]]
name = "privacy"
cmd = ["sh", "-c", "! grep -rq '@' logs/"]

[[episode]]
name = "idempotent ingest"
goal = "Replaying an event twice changes nothing."
gates = ["idempotency"]

[[episode]]
name = "privacy"
goal = "No raw e-mail address reaches a log or an export."
gates = ["privacy", "idempotency"]

[[constraint]]
text = "The public function ingest(event) keeps its signature."
protect = ["tests/**", "paella.toml"]

[[constraint]]
text = "Exports stay CSV."
protect = ["src/export/**", "tests/**"]
"""

MINIMAL = """\
[run]
prompt = "Do the task."
profile = "claude"

[[gate]]
name = "lint"
cmd = "ruff check"

[[episode]]
name = "clean"
gates = ["lint"]
"""


def write(tmp_path: Path, text: str) -> Path:
    """Write a contract file into a workspace folder and return its path."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    path = workspace / CONTRACT_FILE
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(tmp_path: Path, text: str) -> ContractError:
    """The ContractError loading `text` raises (failing the test if it loads)."""
    with pytest.raises(ContractError) as caught:
        load_contract(write(tmp_path, text))
    return caught.value


def parse(text: str) -> Contract:
    """Parse `text` as paella.toml."""
    return parse_contract(text, Path(CONTRACT_FILE), default_name="ws")


# --- a good contract ------------------------------------------------------------------------


def test_spec_example_loads_into_typed_values(tmp_path: Path) -> None:
    contract = load_contract(write(tmp_path, SPEC_EXAMPLE))

    run = contract.run
    assert run.name == "ledger-service"
    assert run.prompt == "Build the event ledger, episode by episode."
    assert run.prompt_file is None
    assert run.profile == "claude"
    assert run.agent == ("claude", "-p", "{prompt}")
    assert run.resume == ("claude", "--continue", "-p", "{handoff}")
    assert run.stall_after == 900.0
    assert run.scope == ("src/**", "tests/**")
    assert run.tty is True
    assert run.max_file_size == 50 * 1024 * 1024

    assert contract.retry == RetryConfig(
        3, 30.0, 900.0, ("rate limit", "429", "overloaded", "usage limit")
    )
    assert contract.watch == WatchConfig(settle=2.0, ignore=("*.log",))
    assert contract.gates_config == GatesConfig(jobs=2)

    idempotency, privacy = contract.gates
    assert idempotency == Gate(
        name="idempotency",
        argv=("pytest", "-q", "tests/test_idempotency.py"),
        cmd="pytest -q tests/test_idempotency.py",
        timeout=120.0,
        retries=1,
        paths=("src/**", "tests/**"),
    )
    assert privacy.argv == ("sh", "-c", "! grep -rq '@' logs/")
    assert privacy.cmd == "sh -c '! grep -rq '\"'\"'@'\"'\"' logs/'"
    assert (privacy.timeout, privacy.retries, privacy.paths) == (600.0, 0, ())

    assert [e.name for e in contract.episodes] == ["idempotent ingest", "privacy"]
    assert contract.episodes[0].goal == "Replaying an event twice changes nothing."
    assert contract.episode_gates(1) == ("idempotency",)
    assert contract.episode_gates(2) == ("idempotency", "privacy")
    assert contract.gate("privacy") is privacy
    assert contract.protected_globs() == ("tests/**", "paella.toml", "src/export/**")

    assert contract.text == SPEC_EXAMPLE
    assert len(contract.sha256) == 64
    assert contract.path.name == CONTRACT_FILE


def test_defaults_fill_what_a_minimal_contract_leaves_out(tmp_path: Path) -> None:
    contract = load_contract(write(tmp_path, MINIMAL))

    assert contract.run.name == "workspace"
    assert contract.run.agent == DEFAULT_AGENT_COMMANDS["claude"]
    assert contract.run.resume == DEFAULT_RESUME_COMMANDS["claude"]
    assert contract.run.stall_after == 15 * 60
    assert (contract.run.scope, contract.run.tty) == ((), True)
    assert contract.run.max_file_size == 50 * 1024**2
    assert contract.retry == RetryConfig()
    assert contract.watch == WatchConfig(settle=2.0, ignore=())
    assert contract.gates_config.jobs == (os.cpu_count() or 1)
    assert contract.gates[0].timeout == 600.0
    assert contract.episodes[0].goal == ""
    assert contract.constraints == ()


def test_default_name_can_be_given(tmp_path: Path) -> None:
    assert load_contract(write(tmp_path, MINIMAL), default_name="other").run.name == "other"


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_each_profile_gives_its_start_and_resume_commands(profile: str) -> None:
    contract = parse(MINIMAL.replace('"claude"', f'"{profile}"'))
    assert contract.run.agent == DEFAULT_AGENT_COMMANDS[profile]
    assert contract.run.resume == DEFAULT_RESUME_COMMANDS[profile]


def test_an_own_agent_command_does_not_take_the_profiles_resume() -> None:
    text = MINIMAL.replace(
        'profile = "claude"', 'profile = "claude"\nagent = ["my-claude", "{prompt}"]'
    )
    run = parse(text).run
    assert run.agent == ("my-claude", "{prompt}")
    assert run.resume is None


def test_agent_without_profile_and_prompt_file() -> None:
    text = MINIMAL.replace('prompt = "Do the task."', 'prompt_file = "TASK.md"').replace(
        'profile = "claude"', "agent = \"bot --task '{prompt_file}' --say 'a b'\""
    )
    run = parse(text).run
    assert (run.prompt, run.prompt_file, run.profile) == (None, "TASK.md", None)
    assert run.agent == ("bot", "--task", "{prompt_file}", "--say", "a b")


def test_episode_gates_are_cumulative_and_bounded() -> None:
    contract = parse(SPEC_EXAMPLE)
    assert contract.episode_gates(0) == ()
    with pytest.raises(IndexError):
        contract.episode_gates(3)
    with pytest.raises(KeyError):
        contract.gate("nope")


def test_values_are_frozen() -> None:
    contract = parse(SPEC_EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        contract.gates[0].timeout = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        contract.run.agent = ("x",)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        contract.episodes = ()  # type: ignore[misc]
    assert isinstance(contract.run.scope, tuple)
    assert isinstance(contract.episodes[0].gates, tuple)


def test_gate_definition_key_follows_what_decides_the_result() -> None:
    gate = parse(SPEC_EXAMPLE).gates[0]
    key = gate.definition_key()
    assert key == parse(SPEC_EXAMPLE).gates[0].definition_key()
    assert len(key) == 64 and int(key, 16) >= 0
    assert dataclasses.replace(gate, paths=("x/**",), name="other").definition_key() == key
    assert dataclasses.replace(gate, timeout=121.0).definition_key() != key
    assert dataclasses.replace(gate, retries=0).definition_key() != key
    assert dataclasses.replace(gate, argv=(*gate.argv, "-x")).definition_key() != key


# --- problems, each located -----------------------------------------------------------------

BAD_CASES = [
    # (what is wrong, the text, what the report must contain)
    (
        "bad duration",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff check"\ntimeout = "2 minutes"'),
        'paella.toml:8: [[gate]] #1 "lint" → timeout: expected a duration such as 90, "90s", '
        '"2m" or "1h30m", got "2 minutes"',
    ),
    (
        "unknown gate key",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff check"\ntimout = "2m"'),
        "paella.toml:8: [[gate]] #1 \"lint\" → timout: unknown key (did you mean 'timeout'?)",
    ),
    (
        "unknown run key",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\nstal_after = "1m"'),
        "paella.toml:4: [run] → stal_after: unknown key (did you mean 'stall_after'?)",
    ),
    (
        "unknown table",
        MINIMAL + '\n[retri]\nbackoff = "1m"\n',
        "paella.toml:13: retri: unknown key (did you mean [retry]?)",
    ),
    (
        "run key above every header",
        'stall_after = "1m"\n' + MINIMAL,
        "paella.toml:1: stall_after: unknown key (did you mean to put it under [run]?)",
    ),
    (
        "tty not a boolean",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\ntty = "yes"'),
        'paella.toml:4: [run] → tty: expected true or false, got "yes"',
    ),
    (
        "negative retries",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff check"\nretries = -1'),
        'paella.toml:8: [[gate]] #1 "lint" → retries: '
        "expected a whole number of at least 0, got -1",
    ),
    (
        "zero jobs",
        MINIMAL + "\n[gates]\njobs = 0\n",
        "paella.toml:14: [gates] → jobs: expected a whole number of at least 1, got 0",
    ),
    (
        "zero attempts",
        MINIMAL + "\n[retry]\nmax_attempts = 0\n",
        "paella.toml:14: [retry] → max_attempts: expected a whole number of at least 1, got 0",
    ),
    (
        "boolean as a number",
        MINIMAL + "\n[retry]\nmax_attempts = true\n",
        "paella.toml:14: [retry] → max_attempts: expected a whole number, got true",
    ),
    (
        "a string where a table belongs",
        'retry = "often"\n' + MINIMAL,
        'paella.toml:1: retry: expected a [retry] table, got "often"',
    ),
    (
        "a single table where an array of tables belongs",
        MINIMAL.replace("[[episode]]", "[episode]"),
        "paella.toml:9: episode: expected [[episode]] tables, got a table",
    ),
    (
        "non-string in a list",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\nscope = ["src/**", 3]'),
        "paella.toml:4: [run] → scope: expected an array of strings, but item 2 is 3",
    ),
    (
        "bad size",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\nmax_file_size = "lots"'),
        "paella.toml:4: [run] → max_file_size: expected a size such as",
    ),
    (
        "duplicate gate",
        MINIMAL.replace("[[episode]]", '[[gate]]\nname = "lint"\ncmd = "ruff"\n\n[[episode]]'),
        'paella.toml:10: [[gate]] #2 "lint" → name: '
        '"lint" is already the name of [[gate]] #1 "lint"',
    ),
    (
        "duplicate episode",
        MINIMAL + '\n[[episode]]\nname = "clean"\ngates = ["lint"]\n',
        'paella.toml:14: [[episode]] #2 "clean" → name: "clean" is already the name of',
    ),
    (
        "episode naming an unknown gate",
        MINIMAL.replace('gates = ["lint"]', 'gates = ["lnt"]'),
        'paella.toml:11: [[episode]] #1 "clean" → gates: '
        'no gate is named "lnt" (did you mean "lint"?)',
    ),
    (
        "empty gate command",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = ""'),
        'paella.toml:7: [[gate]] #1 "lint" → cmd: the command is empty',
    ),
    (
        "whitespace gate command",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "   "'),
        'paella.toml:7: [[gate]] #1 "lint" → cmd: the command is empty',
    ),
    (
        "empty gate command array",
        MINIMAL.replace('cmd = "ruff check"', "cmd = []"),
        'paella.toml:7: [[gate]] #1 "lint" → cmd: the command is empty',
    ),
    (
        "unbalanced quote in a gate command",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff \'check"'),
        """paella.toml:7: [[gate]] #1 "lint" → cmd: cannot split "ruff 'check" like a shell""",
    ),
    (
        "missing gate command",
        MINIMAL.replace('cmd = "ruff check"\n', ""),
        'paella.toml:5: [[gate]] #1 "lint": cmd is missing',
    ),
    (
        "empty agent",
        MINIMAL.replace('profile = "claude"', 'agent = ""'),
        "paella.toml:3: [run] → agent: the command is empty",
    ),
    (
        "empty resume",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\nresume = []'),
        "paella.toml:4: [run] → resume: the command is empty",
    ),
    (
        "unknown placeholder",
        MINIMAL.replace('profile = "claude"', 'agent = "bot -p {promt}"'),
        "paella.toml:3: [run] → agent: "
        'unknown placeholder {promt} in "{promt}" (did you mean {prompt}?)',
    ),
    (
        "unbalanced brace",
        MINIMAL.replace('profile = "claude"', 'agent = "bot -p {prompt"'),
        "paella.toml:3: [run] → agent: "
        'unbalanced brace in "{prompt": write {{ or }} for a literal brace',
    ),
    (
        "format spec on a placeholder",
        MINIMAL.replace('profile = "claude"', 'agent = "bot {prompt!r}"'),
        "paella.toml:3: [run] → agent: placeholder {prompt} takes no format or conversion",
    ),
    (
        "both prompt and prompt_file",
        MINIMAL.replace('profile = "claude"', 'profile = "claude"\nprompt_file = "T.md"'),
        "paella.toml:4: [run] → prompt_file: set prompt or prompt_file, not both",
    ),
    (
        "neither prompt nor prompt_file",
        MINIMAL.replace('prompt = "Do the task."\n', ""),
        "paella.toml:1: [run]: set prompt (the task) or prompt_file (a file holding the task)",
    ),
    (
        "unknown profile",
        MINIMAL.replace('"claude"', '"claud"'),
        'paella.toml:3: [run] → profile: unknown profile "claud" (did you mean "claude"?); '
        "known: claude, codex, gemini, aider, opencode",
    ),
    (
        "neither agent nor profile",
        MINIMAL.replace('profile = "claude"\n', ""),
        "paella.toml:1: [run]: set agent (the command that starts the agent) or profile",
    ),
    (
        "no run table",
        MINIMAL.replace('[run]\nprompt = "Do the task."\nprofile = "claude"\n', ""),
        "paella.toml: run: [run] is missing",
    ),
    (
        "gate name with a slash",
        MINIMAL.replace('name = "lint"', 'name = "lint/fast"').replace('["lint"]', '["lint/fast"]'),
        'paella.toml:6: [[gate]] #1 "lint/fast" → name: a gate name cannot contain a slash',
    ),
    (
        "empty gate name",
        MINIMAL.replace('name = "lint"', 'name = " "'),
        "paella.toml:6: [[gate]] #1 → name: cannot be empty",
    ),
    (
        "unprintable gate name",
        MINIMAL.replace('name = "lint"', 'name = "li\\tnt"'),
        'paella.toml:6: [[gate]] #1 "li\\tnt" → name: a gate name must be printable',
    ),
    (
        "zero timeout",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff check"\ntimeout = 0'),
        'paella.toml:8: [[gate]] #1 "lint" → timeout: expected a duration longer than zero',
    ),
    (
        "episode with no gates",
        MINIMAL.replace('gates = ["lint"]', "gates = []"),
        'paella.toml:11: [[episode]] #1 "clean" → gates: name at least one gate',
    ),
    (
        "max_backoff shorter than backoff",
        MINIMAL + '\n[retry]\nbackoff = "10m"\nmax_backoff = "1m"\n',
        "paella.toml:15: [retry] → max_backoff: max_backoff (60s) is shorter than backoff (600s)",
    ),
    (
        "syntax error",
        MINIMAL.replace("[[episode]]", "[[episode]"),
        "paella.toml:9: not valid TOML:",
    ),
    (
        "a key written twice",
        MINIMAL.replace('cmd = "ruff check"', 'cmd = "ruff check"\ncmd = "ruff"'),
        "paella.toml:8: not valid TOML: a key is written twice (first on line 7)",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES]
)
def test_each_problem_names_file_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    error = problems_of(tmp_path, text)
    assert expected in str(error)
    # The path is the one the loader was given.
    assert str(error).startswith(str(tmp_path / "workspace" / CONTRACT_FILE))


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    text = """\
[run]
prompt = "x"
profile = "claud"
tty = "yes"

[[gate]]
name = "lint"
cmd = ""
timeout = "soon"

[[episode]]
name = "e"
gates = ["lnt"]
"""
    error = problems_of(tmp_path, text)
    lines = str(error).splitlines()
    assert len(error.problems) == len(lines) == 5
    assert [p.line for p in error.problems] == [3, 4, 8, 9, 13]
    assert [p.key for p in error.problems] == [
        "[run] → profile",
        "[run] → tty",
        '[[gate]] #1 "lint" → cmd',
        '[[gate]] #1 "lint" → timeout',
        '[[episode]] #1 "e" → gates',
    ]


def test_problem_reads_with_the_path_it_was_given() -> None:
    with pytest.raises(ContractError) as caught:
        parse(MINIMAL.replace('cmd = "ruff check"', 'cmd = "a"\nretries = "2"'))
    assert (
        str(caught.value)
        == 'paella.toml:8: [[gate]] #1 "lint" → retries: expected a whole number, got "2"'
    )


def test_missing_file_says_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(tmp_path / CONTRACT_FILE)
    assert "no paella.toml here: run `paella init` to write one" in str(caught.value)


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / CONTRACT_FILE
    path.write_bytes(b'[run]\nprompt = "caf\xe9"\n')
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert f"{path}:2: not valid UTF-8" in str(caught.value)


def test_line_locator_is_not_fooled_by_strings_comments_and_arrays(tmp_path: Path) -> None:
    text = """\
[run]  # the task
prompt = '''
timeout = "not a key"
[[gate]]
'''
"profile" = "claude"
scope = [
  "a = b",   # a comment with timeout = 1
  "[[gate]]",
]

# [[gate]]
[[gate]]
name = "x = y"
cmd = "echo 'timeout = 3' # not a comment"

[[ gate ]]
name = "two"
cmd = "true"
  timeout   =   "never"
"""
    error = problems_of(tmp_path, text)
    assert [(p.line, p.key) for p in error.problems] == [(20, '[[gate]] #2 "two" → timeout')]


def test_quoted_keys_and_inline_tables_are_located(tmp_path: Path) -> None:
    text = MINIMAL + '\n[watch]\n"settle" = "soon"\n'
    assert "paella.toml:14: [watch] → settle:" in str(problems_of(tmp_path, text))
    inline = 'gate = [{ name = "lint", cmd = "" }]\n' + MINIMAL.replace(
        '[[gate]]\nname = "lint"\ncmd = "ruff check"\n', ""
    )
    assert 'paella.toml:1: [[gate]] #1 "lint" → cmd: the command is empty' in str(
        problems_of(tmp_path, inline)
    )


# --- placeholders ---------------------------------------------------------------------------


def test_doubled_braces_are_literal_and_known_placeholders_pass() -> None:
    text = MINIMAL.replace(
        'profile = "claude"',
        'agent = ["bot", "{{promt}}", "--json={{\\"a\\": 1}}", '
        '"{attempt}/{run_id}", "{session_id}"]',
    )
    agent = parse(text).run.agent
    values = {"attempt": 2, "run_id": "r1", "session_id": "s", "promt": "unused"}
    assert expand_placeholders(agent, values) == ("bot", "{promt}", '--json={"a": 1}', "2/r1", "s")


def test_gate_commands_take_braces_literally() -> None:
    text = MINIMAL.replace('cmd = "ruff check"', "cmd = \"find . -name '{promt}'\"")
    assert parse(text).gates[0].argv == ("find", ".", "-name", "{promt}")


def test_each_argument_is_substituted_whole() -> None:
    argv = ("bot", "-p", "{prompt}")
    assert expand_placeholders(argv, {"prompt": "two words; rm -rf /"}) == (
        "bot",
        "-p",
        "two words; rm -rf /",
    )


# --- durations and sizes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        (0, 0.0),
        ("90", 90.0),
        ("90s", 90.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2m05s", 125.0),
        (" 10S ", 10.0),
        ("1d", 86400.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2 minutes", '"2 minutes"'),
        ("", '""'),
        ("m", '"m"'),
        ("30m1h", '"30m1h"'),
        ("1m1m", '"1m1m"'),
        ("-5s", '"-5s"'),
        (True, "true"),
        (None, "None"),
        ([1], "[1]"),
        (float("inf"), "inf"),
    ],
)
def test_parse_duration_rejects(value: object, shown: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert (
        str(caught.value) == f'expected a duration such as 90, "90s", "2m" or "1h30m", got {shown}'
    )


def test_negative_duration_is_rejected() -> None:
    with pytest.raises(ValueError, match="not negative, got -5"):
        parse_duration(-5)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("10k", 10_000),
        ("800KiB", 800 * 1024),
        ("50MB", 50_000_000),
        ("50MiB", 50 * 1024**2),
        ("50 mib", 50 * 1024**2),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("2TB", 2 * 1000**4),
        ("7B", 7),
    ],
)
def test_parse_size(value: object, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["50 bananas", "MiB", "", "1.5.2MB", True, 1.5, None, -1])
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.25, "250ms"),
        (45, "45s"),
        (120, "2m"),
        (125, "2m05s"),
        (5400, "1h30m"),
        (3600, "1h"),
        (3605, "1h00m05s"),
        (93600, "26h"),
    ],
)
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (512, "512 B"),
        (800 * 1024, "800.0 KiB"),
        (50 * 1024**2, "50.0 MiB"),
        (3 * 1024**3 // 2, "1.5 GiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


# --- shell syntax in a command string -------------------------------------------------------

SHELL_WRITTEN = [
    ("sleep 2; test -f src/ok.py", ";"),
    ("pytest -q && ruff check .", "&&"),
    ("pytest -q || true", "||"),
    ("pytest -q | tee out.txt", "|"),
    ("pytest -q > out.txt", ">"),
    ("pytest -q 2>&1", ">"),
    ("ruff check $(git ls-files)", "$("),
    ("ruff check `git ls-files`", "`"),
    ("serve & pytest", "&"),
    ("python run.py < input.txt", "<"),
]
NOT_SHELL = [
    'python -c "import a; a.run()"',
    "sh -c 'pytest -q && ruff check .'",
    "find . -name '*.tmp' -exec rm {} \\;",
    'grep -q "a|b" notes.txt',
    "echo 'a > b'",
    "pytest -k 'not slow'",
]


@pytest.mark.parametrize(("cmd", "op"), SHELL_WRITTEN)
@pytest.mark.parametrize("where", ["gate", "agent"])
def test_shell_syntax_in_a_command_string_is_refused_with_the_array_that_works(
    tmp_path: Path, cmd: str, op: str, where: str
) -> None:
    """Split without a shell, `sleep 2; test -f x` runs sleep with four arguments: the gate is
    red for a reason nobody sees. The contract is refused, naming the operator and the exact
    array that runs it through sh, and that array loads and splits back to the command."""
    if where == "gate":
        text = MINIMAL.replace('cmd = "ruff check"', f"cmd = {json.dumps(cmd)}")
    else:
        text = MINIMAL.replace('profile = "claude"', f"agent = {json.dumps(cmd + ' {prompt}')}")
    error = problems_of(tmp_path, text)
    (line,) = [p for p in str(error).splitlines() if "shell syntax" in p]
    assert f'"{op}" is shell syntax' in line and "no command runs through a shell" in line
    fix = line.split("write ", 1)[1]
    assert json.loads(fix)[:2] == ["sh", "-c"]
    fixed = text.replace(json.dumps(cmd if where == "gate" else cmd + " {prompt}"), fix)
    contract = load_contract(write(tmp_path, fixed))
    argv = contract.gates[0].argv if where == "gate" else contract.run.agent
    assert argv is not None and list(argv)[:2] == ["sh", "-c"]


@pytest.mark.parametrize("cmd", NOT_SHELL)
def test_operators_quoted_or_escaped_are_arguments_and_load(tmp_path: Path, cmd: str) -> None:
    text = MINIMAL.replace('cmd = "ruff check"', f"cmd = {json.dumps(cmd)}")
    contract = load_contract(write(tmp_path, text))
    assert contract.gates[0].argv == tuple(shlex.split(cmd))


def test_a_run_frozen_before_the_shell_rule_stays_readable_and_a_new_run_starts(
    repo: Path, git: Any
) -> None:
    """A contract an older paella accepted (a gate `sleep 0; true`, split without a shell) is
    a run's frozen copy: a newer paella still reads that run (status, checkpoints), and a
    fixed paella.toml starts a new run, instead of refusing everything over a file nobody can
    fix."""
    from conftest import run_paella_in_process

    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    old = MINIMAL.replace('cmd = "ruff check"', 'cmd = "sleep 0; true"')
    old = old.replace('profile = "claude"', 'agent = ["true"]\ntty = false')
    frozen = parse_contract(old, repo / CONTRACT_FILE, default_name="ws", frozen=True)
    assert frozen.gates[0].argv == ("sleep", "0;", "true")
    run = RunStore(Workspace.find(repo)).create(frozen, manual=False)
    run.ledger.append("run-stopped", reason="an older paella stopped it")
    (repo / CONTRACT_FILE).write_text(old.replace('"sleep 0; true"', '["sh", "-c", "true"]'))
    git(repo, "add", CONTRACT_FILE)
    git(repo, "commit", "-q", "-m", "contract")

    status = run_paella_in_process(repo, "status")
    assert status.returncode == 0 and run.run_id in status.stdout, status.stderr
    assert "shell syntax" not in status.stderr
    started = run_paella_in_process(repo, "run", "--headless")
    assert "shell syntax" not in started.stderr, started.stderr
    assert started.returncode == 0, started.stdout + started.stderr
    assert RunStore(Workspace.find(repo)).current().run_id != run.run_id
