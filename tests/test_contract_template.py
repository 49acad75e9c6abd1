"""`paella init`: gates detected per ecosystem, and a commented contract that loads cleanly."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from paella_tui.supervisor.agent.profiles.commands import (
    DEFAULT_AGENT_COMMANDS,
    DEFAULT_RESUME_COMMANDS,
    PROFILE_NAMES,
)
from paella_tui.supervisor.agent.profiles.registry import PROFILES as AGENT_PROFILES
from paella_tui.supervisor.contract.loader import load_contract, parse_contract
from paella_tui.supervisor.contract.model import CONTRACT_FILE, Contract
from paella_tui.supervisor.contract.template import (
    NPM_PLACEHOLDER_TEST,
    UNDETECTED_GATE,
    WIDTH,
    detect_gates,
    parse_gate_option,
    render_contract,
)


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """A folder holding `files` (path -> text)."""
    root = tmp_path / "project"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    root.mkdir(exist_ok=True)
    return root


def load_rendered(root: Path, text: str) -> Contract:
    """Write the rendered contract into `root` and load it the way `paella check` would."""
    path = root / CONTRACT_FILE
    path.write_text(text, encoding="utf-8")
    return load_contract(path)


def comment_prose(text: str) -> str:
    """The comments of `text` as one line of words, so a phrase matches across line breaks."""
    return " ".join(
        line.removeprefix("#").strip() for line in text.splitlines() if line.startswith("#")
    )


def long_lines(text: str) -> list[str]:
    """The prose comment lines of `text` longer than the file's limit (a command, in a key or
    shown indented in a comment, stays on one line however long)."""
    return [
        line
        for line in text.splitlines()
        if len(line) > WIDTH
        and line.startswith("# ")
        and not line.startswith("#   ")
        and not re.match(r"# \w+ = ", line)  # a commented-out key
    ]


def command_shown_after(text: str, ending: str) -> tuple[str, ...]:
    """The command a comment shows, indented, on the line(s) after the comment line ending with
    `ending`, split the way a shell would."""
    lines = text.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("#") and line.endswith(ending)]
    shown: list[str] = []
    for line in lines[at + 1 :]:
        if not line.startswith("#   "):
            break
        shown.append(line.removeprefix("#").strip().removesuffix("\\"))
    return tuple(shlex.split(" ".join(shown)))


# --- detection ------------------------------------------------------------------------------

PYTEST = [("tests", "pytest -q")]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n"}, PYTEST),
        ({"pyproject.toml": '[project]\noptional-dependencies = {test = ["pytest"]}\n'}, PYTEST),
        ({"pytest.ini": "[pytest]\n"}, PYTEST),
        ({"setup.cfg": "[metadata]\nname = x\n[tool:pytest]\ntestpaths = t\n"}, PYTEST),
        ({"tox.ini": "[tox]\n[pytest]\naddopts = -q\n"}, PYTEST),
        ({"conftest.py": ""}, PYTEST),
        ({"tests/unit/test_thing.py": "def test_x(): pass\n"}, PYTEST),
        (
            {"package.json": json.dumps({"scripts": {"test": "vitest run"}})},
            [("npm-test", "npm test")],
        ),
        ({"Cargo.toml": '[package]\nname = "x"\n'}, [("cargo-test", "cargo test")]),
        ({"go.mod": "module example.com/x\n"}, [("go-test", "go test ./...")]),
        ({"Makefile": "all:\n\tcc x.c\n\ntest: all\n\t./x\n"}, [("make-test", "make test")]),
        ({"GNUmakefile": "unit test lint:\n\ttrue\n"}, [("make-test", "make test")]),
        ({"makefile": "test:\n\ttrue\n"}, [("make-test", "make test")]),
    ],
    ids=[
        "pyproject-tool-pytest",
        "pyproject-dependency",
        "pytest.ini",
        "setup.cfg",
        "tox.ini",
        "conftest",
        "tests-folder",
        "npm",
        "cargo",
        "go",
        "make",
        "gnumake-several-targets",
        "lowercase-makefile",
    ],
)
def test_detects_each_ecosystem(
    tmp_path: Path, files: dict[str, str], expected: list[tuple[str, str]]
) -> None:
    assert detect_gates(repo(tmp_path, files)) == expected


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"pyproject.toml": '[project]\nname = "x"\n'},
        {"setup.cfg": "[metadata]\nname = x\n"},
        {"tests/helpers.py": ""},
        {"package.json": json.dumps({"scripts": {"test": NPM_PLACEHOLDER_TEST}})},
        {"package.json": json.dumps({"scripts": {"build": "tsc"}})},
        {"package.json": "{ not json"},
        {"Makefile": "TEST := 1\ntest := yes\n.PHONY: test\nbuild:\n\ttrue\n"},
        {"Makefile": "# test: not a target\nall:\n\ttrue\n"},
    ],
    ids=[
        "empty",
        "pyproject-without-pytest",
        "setup.cfg-without-pytest",
        "tests-without-test-files",
        "npm-placeholder",
        "npm-no-test-script",
        "bad-package-json",
        "make-variables-only",
        "make-comment",
    ],
)
def test_detects_nothing_without_a_real_test_command(tmp_path: Path, files: dict[str, str]) -> None:
    assert detect_gates(repo(tmp_path, files)) == []


def test_detects_several_in_a_fixed_order(tmp_path: Path) -> None:
    root = repo(
        tmp_path,
        {
            "Makefile": "test:\n\tpytest\n",
            "go.mod": "module x\n",
            "package.json": '{"scripts": {"test": "jest"}}',
            "conftest.py": "",
        },
    )
    assert [name for name, _ in detect_gates(root)] == ["tests", "npm-test", "go-test", "make-test"]


# --- rendering ------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_each_profile_renders_a_contract_that_loads(tmp_path: Path, profile: str) -> None:
    root = repo(tmp_path, {"conftest.py": ""})
    text = render_contract(root, agent=profile)
    contract = load_rendered(root, text)

    assert contract.run.profile == profile
    assert contract.run.agent == DEFAULT_AGENT_COMMANDS[profile]
    assert contract.run.resume == DEFAULT_RESUME_COMMANDS[profile]
    assert contract.run.prompt == "Describe the task here."
    assert contract.run.name == "project"
    assert [(g.name, g.cmd) for g in contract.gates] == [("tests", "pytest -q")]
    assert [(e.name, e.gates) for e in contract.episodes] == [("done", ("tests",))]
    assert contract.protected_globs() == ("paella.toml",)


STREAM_AGENTS = ("claude", "codex", "gemini", "opencode")
STREAM_FLAGS = {
    "claude": ("--output-format", "stream-json", "--verbose"),
    "codex": ("--json",),
    "gemini": ("-o", "stream-json"),
    "opencode": ("--format", "json"),
}
PERMISSIONS = {
    "claude": ("--permission-mode acceptEdits", "lets Claude Code edit files without asking"),
    "codex": ("--sandbox workspace-write", "lets Codex edit files and run commands inside this"),
    "gemini": ("--approval-mode auto_edit", "approves file edits without asking"),
    "aider": ("--yes-always", "answers yes to every question aider asks"),
    "opencode": ("--auto", "approves every permission request opencode would ask about"),
}
NEWEST_SESSION_NOTE = "paella resumes the newest session in this folder instead:"


def is_run_of(needle: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """Whether `needle` occurs as consecutive items of `words`."""
    n = len(needle)
    return any(words[i : i + n] == needle for i in range(len(words) - n + 1))


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_init_agent_writes_the_profile_commands_within_the_line_limit(
    tmp_path: Path, name: str
) -> None:
    text = render_contract(tmp_path, agent=name)
    run = parse_contract(text, tmp_path / CONTRACT_FILE, default_name="project").run
    profile = AGENT_PROFILES[name]

    assert run.profile == name
    assert (run.agent, run.resume) == (profile.start, profile.resume)
    assert run.resume is not None
    streams = name in STREAM_AGENTS
    assert profile.stream_on(run.agent) is streams
    assert profile.stream_on(run.resume) is streams
    assert long_lines(text) == []


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_init_agent_says_what_the_permission_flag_allows(tmp_path: Path, name: str) -> None:
    text = render_contract(tmp_path, agent=name)
    flag, allows = PERMISSIONS[name]

    assert is_run_of(tuple(flag.split()), AGENT_PROFILES[name].start)
    assert f"\n# {flag} " in text, "the comment starts with the flag it explains"
    assert f"{flag} {allows}" in comment_prose(text)


@pytest.mark.parametrize("name", STREAM_AGENTS)
def test_init_agent_names_the_stream_flags_and_what_they_give(tmp_path: Path, name: str) -> None:
    text = render_contract(tmp_path, agent=name)
    prose = comment_prose(text)
    flags = STREAM_FLAGS[name]
    profile = AGENT_PROFILES[name]

    assert f"With {shlex.join(flags)} the agent writes a JSON stream that paella decodes" in prose
    for told in [
        "the log view shows the messages, tool calls, edits and errors",
        "the session id, turns, tokens and cost are read from it",
        "agent.log keeps the raw bytes",
        "Without the stream the log is raw text and no session id is captured for resume",
    ]:
        assert told in prose, told
    # The named flags are the ones that matter: without them the command has no stream.
    for command in (profile.start, profile.resume):
        assert is_run_of(flags, command)
        at = next(i for i in range(len(command)) if command[i : i + len(flags)] == flags)
        assert not profile.stream_on(command[:at] + command[at + len(flags) :])


def test_aider_is_said_to_have_no_stream(tmp_path: Path) -> None:
    prose = comment_prose(render_contract(tmp_path, agent="aider"))
    assert "aider has no JSON stream: the log view shows its output as plain text" in prose


@pytest.mark.parametrize("name", STREAM_AGENTS)
def test_init_agent_shows_the_resume_used_until_a_session_id_is_seen(
    tmp_path: Path, name: str
) -> None:
    text = render_contract(tmp_path, agent=name)
    profile = AGENT_PROFILES[name]
    newest = profile.resume_without_session(profile.resume)

    assert "{session_id}" in profile.resume
    assert "{session_id} is the id the agent's JSON stream reported" in comment_prose(text)
    assert newest is not None
    assert command_shown_after(text, NEWEST_SESSION_NOTE) == newest
    assert not any("{session_id}" in word for word in newest)


def test_the_claude_fallback_is_shown_in_full_on_one_line(tmp_path: Path) -> None:
    text = render_contract(tmp_path, agent="claude")
    assert (
        f"# {NEWEST_SESSION_NOTE}\n"
        "#   claude -c -p {handoff} --permission-mode acceptEdits"
        " --output-format stream-json --verbose\n"
        'resume = "claude -r {session_id} -p {handoff}'
    ) in text


def test_aider_resume_restores_the_chat_history_and_names_no_session(tmp_path: Path) -> None:
    text = render_contract(tmp_path, agent="aider")
    prose = comment_prose(text)
    resume = AGENT_PROFILES["aider"].resume

    assert "aider has no session id: its resume restores the chat history" in prose
    assert "--restore-chat-history" in resume
    assert not any("{session_id}" in word for word in resume)
    assert AGENT_PROFILES["aider"].resume_without_session(resume) is None
    assert NEWEST_SESSION_NOTE not in prose


@pytest.mark.parametrize("commented", [False, True], ids=["agent", "commented-resume"])
def test_a_long_command_stays_on_one_line_and_reads_back_the_same(
    tmp_path: Path, commented: bool
) -> None:
    command = (
        "my-agent --task {prompt} --note 'two  spaces kept' --path 'C:\\work\\repo' "
        '--json \'{{"quote": "\\"x\\""}}\' --model some-very-long-model-name-2025 --verbose '
        "--session-dir /home/someone/a/rather/deep/folder/for/sessions"
    )
    text = render_contract(tmp_path, agent=command)
    if commented:
        # Uncomment the resume key the way a user would.
        text = text.replace("\n# resume = ", "\nresume = ")
    run = parse_contract(text, tmp_path / CONTRACT_FILE, default_name="x").run

    assert len(command) > WIDTH
    assert run.agent == tuple(shlex.split(command))
    assert run.resume == (run.agent if commented else None)
    assert long_lines(text) == []


def test_default_agent_is_the_claude_profile(tmp_path: Path) -> None:
    root = repo(tmp_path, {})
    assert render_contract(root) == render_contract(root, agent="claude")
    assert load_rendered(root, render_contract(root)).run.profile == "claude"


def test_a_command_agent_renders_without_a_profile(tmp_path: Path) -> None:
    root = repo(tmp_path, {"go.mod": "module x\n"})
    command = "my-agent --task {prompt} --note 'two words' --json '{{}}'"
    contract = load_rendered(root, render_contract(root, agent=command))

    assert contract.run.profile is None
    assert contract.run.agent == tuple(shlex.split(command))
    assert contract.run.resume is None
    assert [g.name for g in contract.gates] == ["go-test"]


def test_an_unusable_agent_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown placeholder"):
        render_contract(repo(tmp_path, {}), agent="bot {promt}")
    with pytest.raises(ValueError, match="empty"):
        render_contract(repo(tmp_path, {}), agent="  ")


def test_without_gates_the_contract_is_valid_but_red(tmp_path: Path) -> None:
    root = repo(tmp_path, {})
    text = render_contract(root)
    contract = load_rendered(root, text)

    (gate,) = contract.gates
    assert (gate.name, gate.cmd) == UNDETECTED_GATE
    assert "# No test command was detected, so this gate always fails" in text
    result = subprocess.run(gate.argv, cwd=root, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "edit paella.toml: no test command was detected" in result.stderr


def test_given_gates_replace_detection_and_keep_their_quoting(tmp_path: Path) -> None:
    root = repo(tmp_path, {"conftest.py": "", "Cargo.toml": ""})
    gates = [
        ("unit", "pytest -q tests/unit"),
        ("no-secrets", """sh -c '! grep -rn "API_KEY=" src | grep -v test'"""),
        ("quotes", r'''python -c "print('a\\b \"c\"')"'''),
    ]
    contract = load_rendered(root, render_contract(root, gates=gates))

    assert [(g.name, g.cmd) for g in contract.gates] == gates
    assert contract.gates[1].argv == ("sh", "-c", '! grep -rn "API_KEY=" src | grep -v test')
    assert contract.episode_gates(1) == ("unit", "no-secrets", "quotes")


def test_several_detected_gates_all_go_in_the_episode(tmp_path: Path) -> None:
    root = repo(tmp_path, {"Cargo.toml": "", "Makefile": "test:\n\tcargo test\n"})
    contract = load_rendered(root, render_contract(root))
    assert contract.episode_gates(1) == ("cargo-test", "make-test")


def test_bad_given_gates_are_refused(tmp_path: Path) -> None:
    root = repo(tmp_path, {})
    with pytest.raises(ValueError, match='two gates are named "a"'):
        render_contract(root, gates=[("a", "true"), ("a", "false")])
    with pytest.raises(ValueError, match="slash"):
        render_contract(root, gates=[("a/b", "true")])
    with pytest.raises(ValueError, match="cannot split"):
        render_contract(root, gates=[("a", "echo 'x")])


def test_rendered_contract_explains_itself(tmp_path: Path) -> None:
    root = repo(tmp_path, {"conftest.py": ""})
    text = render_contract(root, agent="codex")
    comments = "\n".join(line for line in text.splitlines() if line.startswith("#"))

    for needed in [
        "prompt_file",
        "{prompt} {prompt_file} {handoff} {handoff_file} {attempt}",
        "{session_id}",
        "Write {{ and }} for literal braces",
        'never run\n# through one: for pipes, && or redirections write sh -c "..."',
        "--sandbox workspace-write",
        "Detected from the files in this repository.",
        "# stall_after =",
        "# scope =",
        "# max_file_size =",
        "# retries =",
        "# paths =",
        "Episode k is complete when the gates of",
        "files it must not change",
    ]:
        assert needed in comments, needed
    for header in [
        "[run]",
        "[retry]",
        "[watch]",
        "[gates]",
        "[[gate]]",
        "[[episode]]",
        "[[constraint]]",
    ]:
        assert f"\n{header}\n" in text


def test_commented_out_settings_are_valid_when_uncommented(tmp_path: Path) -> None:
    root = repo(tmp_path, {"conftest.py": ""})
    text = render_contract(root, agent="bot {prompt}")
    uncommented = "\n".join(
        line.removeprefix("# ")
        for line in text.splitlines()
        if not line.startswith("# ") or ("=" in line and not line.startswith("# prompt_file"))
    )
    contract = load_rendered(root, uncommented)
    assert contract.run.scope == ("src/**", "tests/**")
    assert contract.run.resume == ("bot", "{prompt}")
    assert contract.watch.ignore == ("*.log",)
    assert contract.gates_config.jobs == 2


# --- --gate NAME=CMD ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tests=pytest -q", ("tests", "pytest -q")),
        (" lint = ruff check --fix=false ", ("lint", "ruff check --fix=false")),
        ("env=env A=1 sh -c 'echo $A'", ("env", "env A=1 sh -c 'echo $A'")),
    ],
)
def test_parse_gate_option(text: str, expected: tuple[str, str]) -> None:
    assert parse_gate_option(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pytest -q", "--gate expects NAME=CMD"),
        ("=pytest", "--gate expects NAME=CMD"),
        ("tests=", "--gate expects NAME=CMD"),
        ("tests=   ", "--gate expects NAME=CMD"),
        ("a/b=true", "cannot contain a slash"),
        ("..=true", "cannot be"),
        ("t=echo 'unclosed", "cannot split"),
    ],
)
def test_parse_gate_option_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_gate_option(text)
