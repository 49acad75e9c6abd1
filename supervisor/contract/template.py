"""The commented `paella.toml` that `paella init` writes, with gates detected from the repository.

Values are serialised with tomli-w so they are always quoted correctly; the comments around them
explain each key (for a profile: what its permission flag allows, what its JSON stream gives
paella, and how it resumes). Prose comments fit in 88 characters; a command stays on one line
however long. The result always loads with `parse_contract` without problems.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Sequence
from pathlib import Path

import tomli_w

from paella_tui.supervisor.agent.profiles.commands import PROFILE_COMMANDS, PROFILE_NAMES
from paella_tui.supervisor.agent.profiles.registry import PROFILES as AGENT_PROFILES
from paella_tui.supervisor.contract.command_line import PLACEHOLDERS, split_command
from paella_tui.supervisor.contract.validation import check_gate_name

NPM_PLACEHOLDER_TEST = 'echo "Error: no test specified" && exit 1'
"""The `scripts.test` that `npm init` writes: not a test command."""

UNDETECTED_GATE = (
    "tests",
    """sh -c 'echo "edit paella.toml: no test command was detected" >&2; exit 1'""",
)
"""The gate written when none was detected or given: valid, but red until the user edits it."""

WIDTH = 88
"""The longest prose comment line (commands are never broken)."""

_PERMISSIONS = {
    "claude": (
        "--permission-mode acceptEdits lets Claude Code edit files without asking; other tools",
        "it would ask about are refused, since nobody is there to answer. bypassPermissions",
        "allows everything: use that only inside a sandbox.",
    ),
    "codex": (
        "--sandbox workspace-write lets Codex edit files and run commands inside this workspace",
        "only (no network by default). danger-full-access lifts that: only inside a sandbox.",
    ),
    "gemini": (
        "--approval-mode auto_edit approves file edits without asking; other tools it would ask",
        "about are refused. --approval-mode yolo approves everything: only inside a sandbox.",
    ),
    "aider": (
        "--yes-always answers yes to every question aider asks (adding files, running the",
        "commands it suggests). aider reads the task from {prompt_file}.",
    ),
    "opencode": (
        "--auto approves every permission request opencode would ask about (edits, shell",
        'commands); what your opencode.json sets to "deny" is still refused.',
    ),
}
"""What each profile's permission flag allows, as comment lines (each within WIDTH)."""

_PLACEHOLDER_WORD = re.compile(r"\{(?:" + "|".join(sorted(PLACEHOLDERS)) + r")\}")

_MAKE_TEST_TARGET = re.compile(r"^(?:[^\s:#=]+[ \t]+)*test(?:[ \t]+[^\s:#=]+)*[ \t]*:(?!=)", re.M)


PLACEHOLDER_PROMPT = "Describe the task here."
"""The task ``paella init`` writes, which ``paella check`` flags until it is replaced."""


def _read(path: Path) -> str:
    """A text file's content, or "" when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _uses_pytest(root: Path) -> bool:
    """Whether the repository's tests look like pytest's."""
    if (root / "pytest.ini").is_file() or (root / "conftest.py").is_file():
        return True
    if "pytest" in _read(root / "pyproject.toml"):
        return True
    if "[tool:pytest]" in _read(root / "setup.cfg") or "[pytest]" in _read(root / "tox.ini"):
        return True
    tests = root / "tests"
    return tests.is_dir() and any(tests.rglob("test_*.py"))


def _npm_test(root: Path) -> bool:
    """Whether package.json has a real `scripts.test`."""
    try:
        package = json.loads(_read(root / "package.json") or "null")
    except json.JSONDecodeError:
        return False
    scripts = package.get("scripts") if isinstance(package, dict) else None
    test = scripts.get("test") if isinstance(scripts, dict) else None
    return isinstance(test, str) and bool(test.strip()) and test.strip() != NPM_PLACEHOLDER_TEST


def _make_test(root: Path) -> bool:
    """Whether a Makefile has a `test:` target."""
    return any(
        _MAKE_TEST_TARGET.search(_read(root / name))
        for name in ("GNUmakefile", "makefile", "Makefile")
    )


def detect_gates(root: Path) -> list[tuple[str, str]]:
    """(name, command) of the test commands this repository shows signs of, in a fixed order."""
    found: list[tuple[str, str]] = []
    if _uses_pytest(root):
        found.append(("tests", "pytest -q"))
    if _npm_test(root):
        found.append(("npm-test", "npm test"))
    if (root / "Cargo.toml").is_file():
        found.append(("cargo-test", "cargo test"))
    if (root / "go.mod").is_file():
        found.append(("go-test", "go test ./..."))
    if _make_test(root):
        found.append(("make-test", "make test"))
    return found


def parse_gate_option(text: str) -> tuple[str, str]:
    """(name, command) from a `--gate NAME=CMD` option; ValueError saying what is wrong."""
    name, equals, cmd = text.partition("=")
    name, cmd = name.strip(), cmd.strip()
    if not equals or not name or not cmd:
        raise ValueError(
            f"--gate expects NAME=CMD, such as --gate 'tests=pytest -q', got {json.dumps(text)}"
        )
    why = check_gate_name(name)
    if why:
        raise ValueError(f"--gate {json.dumps(text)}: {why}")
    try:
        split_command(cmd, placeholders=False)
    except ValueError as exc:
        raise ValueError(f"--gate {json.dumps(text)}: {exc}") from None
    return name, cmd


def _comment(*lines: str) -> str:
    """Comment lines, each starting with "# "."""
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _wrap(text: str, *, keep: Sequence[str] = ()) -> list[str]:
    """`text` as comment lines within WIDTH, never breaking inside one of the `keep` phrases."""
    # textwrap breaks only at ASCII whitespace, so a no-break space holds a phrase together.
    for phrase in keep:
        text = text.replace(phrase, phrase.replace(" ", "\xa0"))
    lines = textwrap.wrap(text, width=WIDTH - 2, break_long_words=False, break_on_hyphens=False)
    return [line.replace("\xa0", " ") for line in lines]


def shell_join(argv: Sequence[str]) -> str:
    """A command template as a user writes it: shell-quoted, its placeholders left bare."""
    return " ".join(_shell_words(argv))


def _shell_words(argv: Sequence[str]) -> list[str]:
    """`argv` quoted the way a shell would need, except that a bare placeholder stays bare:
    `{handoff}` splits to itself, and it reads like the commands in the keys around it."""
    return [word if _PLACEHOLDER_WORD.fullmatch(word) else shlex.quote(word) for word in argv]


def _command_line(argv: Sequence[str]) -> str:
    """A command to show in a comment, indented, on one line (it is copied, not read)."""
    return "  " + shell_join(argv)


def _key(key: str, value: object, *, commented: bool = False) -> str:
    """One `key = value` line serialised by tomli-w (a short array of strings kept on one line).

    A long command stays on one line: a TOML line continuation would read back the same, but
    it is one more thing to get wrong when editing the file by hand.
    """
    width = WIDTH - len("# ") if commented else WIDTH
    text = tomli_w.dumps({key: value})
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = ", ".join(tomli_w.dumps({"_": item}).removeprefix("_ = ").strip() for item in value)
        line = f"{key} = [{items}]\n"
        if len(line) - 1 <= width:
            text = line
    if commented:
        text = "".join(f"# {line}\n" for line in text.splitlines())
    return text


def _stream_note(profile: str) -> list[str]:
    """Comment lines: which flags turn the profile's JSON stream on, and what paella does
    with it."""
    stream = AGENT_PROFILES[profile].stream_flags
    if not stream:
        return _wrap(
            f"{profile} has no JSON stream: the log view shows its output as plain text, and no"
            " session id, turns, tokens or cost are read from it."
        )
    flags = " ".join(stream[0])
    return _wrap(
        f"With {flags} the agent writes a JSON stream that paella decodes: the log view"
        " shows the messages, tool calls, edits and errors, and the session id, turns, tokens"
        " and cost are read from it (agent.log keeps the raw bytes). Without the stream the"
        " log is raw text and no session id is captured for resume.",
        keep=(flags,),
    )


def _resume_note(profile: str, resume: Sequence[str]) -> list[str]:
    """Comment lines: how the profile's resume finds the session to continue, and the exact
    command paella uses instead while no session id has been seen."""
    lead = "The command that continues after a death, given the handoff."
    if not any("{session_id}" in word for word in resume):
        return _wrap(
            f"{lead} {profile} has no session id: its resume restores the chat history it"
            " keeps in this folder, and reads the handoff from {handoff_file}."
        )
    newest = AGENT_PROFILES[profile].resume_without_session(resume)
    if newest is None:
        return _wrap(
            f"{lead} {{session_id}} is the id the agent's JSON stream reported; until one is"
            " seen, paella starts the agent again with the handoff instead."
        )
    return [
        *_wrap(
            f"{lead} {{session_id}} is the id the agent's JSON stream reported; until one is"
            " seen (the agent died before saying it), paella resumes the newest session in"
            " this folder instead:"
        ),
        _command_line(newest),
    ]


def _run_table(root: Path, agent: str | None) -> str:
    """The `[run]` table."""
    parts = [
        "[run]\n",
        _comment("The task, given to the agent as {prompt}. Edit it, or replace it with"),
        _comment('prompt_file = "TASK.md" (a file holding the task); set one of the two.'),
        _key("prompt", PLACEHOLDER_PROMPT),
        _comment("The run's name; default: the workspace folder name."),
        _key("name", root.resolve().name, commented=True),
    ]
    profile = agent if agent in PROFILE_NAMES else None
    if profile is not None:
        start, resume = PROFILE_COMMANDS[profile]
        parts += [
            _comment(f"The agent: one of {', '.join(PROFILE_NAMES)}."),
            _key("profile", profile),
            _comment(
                "The command that starts the agent headless. Placeholders, each replacing a",
                "whole argument: {prompt} {prompt_file} {handoff} {handoff_file} {attempt}",
                "{run_id} {session_id}. Write {{ and }} for literal braces.",
                "",
                *_PERMISSIONS[profile],
                "",
                *_stream_note(profile),
            ),
            _key("agent", start),
            _comment(*_resume_note(profile, split_command(resume, placeholders=True))),
            _key("resume", resume),
        ]
    else:
        command = agent if agent is not None else ""
        split_command(command, placeholders=True)
        parts += [
            _comment(
                "The command that starts the agent headless; or instead set profile, one of",
                f"{', '.join(PROFILE_NAMES)}. Placeholders, each replacing a whole",
                "argument: {prompt} {prompt_file} {handoff} {handoff_file} {attempt} {run_id}",
                "{session_id}. Write {{ and }} for literal braces.",
            ),
            _key("agent", command),
            _comment(
                "The command that continues after a death; default: the agent command with",
                "{prompt} given the handoff text.",
            ),
            _key("resume", command, commented=True),
        ]
    parts += [
        _comment("A stall (drift) is this long with no output and no file change."),
        _key("stall_after", "15m", commented=True),
        _comment("Changes outside these globs are drift; default: anywhere."),
        _key("scope", ["src/**", "tests/**"], commented=True),
        _comment("Run the agent under a pseudo-terminal (true) or with plain pipes (false)."),
        _key("tty", True, commented=True),
        _comment("Files larger than this are left out of checkpoints, and named."),
        _key("max_file_size", "50MiB", commented=True),
    ]
    return "".join(parts)


def _settings_tables(ignore: Sequence[str] = ()) -> str:
    """The `[retry]`, `[watch]` and `[gates]` tables, at their defaults."""
    return "".join(
        [
            "[retry]\n",
            _comment("The governed retry after a transient failure (a rate limit, an overload)."),
            _comment("Attempts per run, not counting resumes a person chose."),
            _key("max_attempts", 3),
            _comment("The first wait; it doubles each time, up to max_backoff."),
            _key("backoff", "30s"),
            _key("max_backoff", "15m"),
            _comment("The longest wait for a reset the agent printed; a later one stops the run"),
            _comment("and says when to `paella resume`."),
            _key("max_wait", "6h"),
            _comment("Words in the agent's errors that mark a failure transient (a number: an"),
            _comment("HTTP status, so `429` never matches `line 429`)."),
            _key("transient", ["rate limit", "429", "overloaded", "usage limit"]),
            "\n[watch]\n",
            _comment("Quiet time after the last file change before the gates re-run."),
            _key("settle", "2s"),
            _comment(
                "Globs (.gitignore syntax) that are not the agent's work: never drift, never in",
                "checkpoints or diffs. Besides .gitignore and the built-in byproducts (__pycache__,",
                "*.pyc, .pytest_cache, .coverage, node_modules/.cache, ...).",
            ),
            _key("ignore", list(ignore)) if ignore else _key("ignore", ["*.log"], commented=True),
            "\n[gates]\n",
            _comment("How many gates run in parallel; default: the CPU count."),
            _key("jobs", 2, commented=True),
        ]
    )


def _gate_tables(gates: Sequence[tuple[str, str]], *, detected: bool) -> str:
    """One `[[gate]]` table per gate."""
    parts = [
        _comment(
            "Gates: the commands that judge the work. A gate is green on a tree when it exits 0",
            "within its timeout. Commands are split like a shell splits them but never run",
            """through one: for pipes, && or redirections write sh -c "...".""",
        ),
    ]
    if not gates:
        parts.append(
            _comment(
                "No test command was detected, so this gate always fails: the contract is valid",
                "but never done until you replace cmd with the command that runs your tests.",
            )
        )
        gates = [UNDETECTED_GATE]
    elif detected:
        parts.append(_comment("Detected from the files in this repository."))
    for i, (name, cmd) in enumerate(gates):
        parts += [
            "[[gate]]\n",
            _key("name", name),
            _key("cmd", cmd),
        ]
        if i == 0:
            parts += [
                _comment("On timeout the gate's whole process group is killed: red. Default 10m."),
                _key("timeout", "10m"),
                _comment("Re-run a failure up to this many times; a later pass is marked flaky."),
                _key("retries", 0, commented=True),
                _comment("Only changes under these globs make the result stale; default: any."),
                _key("paths", ["src/**", "tests/**"], commented=True),
            ]
        else:
            parts.append(_key("timeout", "10m"))
        parts.append("\n")
    return "".join(parts)


def render_contract(
    root: Path,
    *,
    agent: str | None = None,
    gates: Sequence[tuple[str, str]] = (),
    ignore: Sequence[str] = (),
) -> str:
    """The text of a commented `paella.toml` for the repository at `root`.

    `agent` is a profile name or a command (default: the claude profile); `gates` are
    (name, command) pairs, detected from `root` when none are given. ValueError if a gate name
    repeats or a command cannot be used.
    """
    detected = not gates
    gate_list = list(gates) if gates else detect_gates(root)
    names = [name for name, _ in gate_list]
    for name, cmd in gate_list:
        why = check_gate_name(name)
        if why:
            raise ValueError(why)
        if names.count(name) > 1:
            raise ValueError(f"two gates are named {json.dumps(name)}")
        split_command(cmd, placeholders=False)
    gate_names = names or [UNDETECTED_GATE[0]]
    return "".join(
        [
            _comment(
                "paella.toml: the contract paella-tui holds a coding agent to.",
                "",
                "The agent works on the task in [run]. Gates are commands that judge its work;",
                "episodes are the steps of the task. Episode k is complete when the gates of",
                "episodes 1..k all pass, and each completed episode is checkpointed in git.",
                "A run keeps a frozen copy of this file. `paella check` validates it.",
                "",
                'Durations: 90, "90s", "2m", "1h30m". Sizes: "800KiB", "50MiB".',
                "Commented-out keys show optional settings and their defaults.",
            ),
            "\n",
            _run_table(root, "claude" if agent is None else agent),
            "\n",
            _settings_tables(ignore),
            "\n",
            _gate_tables(gate_list, detected=detected),
            _comment(
                "Episodes, in order. Each names the gates it adds; all earlier ones must",
                "still pass. Split the task into several episodes to checkpoint each step.",
            ),
            "[[episode]]\n",
            _key("name", "done"),
            _key("goal", "The task is done and every gate passes."),
            _key("gates", gate_names),
            "\n",
            _comment(
                "Constraints: rules the agent must keep (put in its prompt and the handoff), and",
                "files it must not change: changing a protected file is drift.",
            ),
            "[[constraint]]\n",
            _key("text", "Do not edit paella.toml: it is the contract the work is judged by."),
            _key("protect", ["paella.toml"]),
        ]
    )
