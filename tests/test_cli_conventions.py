"""The command line of a well-kept tool: ``--help`` of every subcommand has a description,
examples and help for each argument; ``-C DIR`` works like git's; ``paella completion SHELL``
prints scripts that the shells parse and that complete what the parser accepts.

Every subcommand is read from the parser itself, so a command added later is held to the same
rules without touching this file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_paella, run_paella_in_process

from paella_tui.cli_parser import build_parser
from paella_tui.shell_completion import SHELLS, describe, script


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


COMMANDS = sorted(subcommands())


@pytest.fixture
def paella() -> object:
    """Help, ``-C`` and completion scripts are what a command prints and does, not how its
    process starts or ends: ``cli.main`` in this process (``run_paella_in_process``, the same
    parser, output and exit status, 0.2 s of CPU less a command). The bad ``-C`` cases, which
    assert that the process prints no traceback, run the real command."""
    return run_paella_in_process


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


# --- --help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_help_has_a_description_examples_and_argument_help(
    command: str, tmp_path: Path, paella
) -> None:
    parser = subcommands()[command]
    text = ok(paella(tmp_path, command, "--help")).stdout

    assert parser.description and len(parser.description) > 40, command
    # The description is the paragraph after the usage line, in the printed help.
    after_usage = text.split("\n\n", 2)[1]
    assert after_usage.split()[:4] == parser.description.split()[:4], text
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert examples and all("paella " in line for line in examples if line), text
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or str(action.metavar or action.dest)
        assert action.help and len(action.help) > 10, f"{command} {name} has no help"


def test_the_target_argument_says_what_it_takes(tmp_path: Path, paella) -> None:
    for command in ("rollback", "diff"):
        text = ok(paella(tmp_path, command, "--help")).stdout
        assert "N|salvage:N|step:N" in text and "a checkpoint number" in text, text
        assert "salvage:N for a salvage snapshot" in text
        assert "step:N" in text.split("positional arguments:")[1]


def test_top_level_help_names_minus_c_and_examples(tmp_path: Path, paella) -> None:
    text = ok(paella(tmp_path, "--help")).stdout
    assert "-C DIR" in text and "run as if paella was started in DIR" in text
    assert "examples:" in text and "paella COMMAND --help" in text


# --- -C DIR ------------------------------------------------------------------------------------


def test_minus_c_runs_the_command_in_that_folder(repo: Path, tmp_path: Path, paella) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    without = paella(elsewhere, "status", "--json")
    assert without.returncode == 3 and "not a git repository" in without.stderr

    ok(paella(elsewhere, "-C", str(repo), "checkpoint", "--label", "via -C"))

    data = json.loads(ok(paella(elsewhere, "-C", str(repo), "checkpoints", "--json")).stdout)
    assert [c["label"] for c in data["checkpoints"]] == ["via -C"]
    assert not list(elsewhere.iterdir()), "nothing is written where paella was started"


def test_minus_c_repeats_each_relative_to_the_last_and_skips_empty(
    repo: Path, tmp_path: Path, paella
) -> None:
    (repo / "src" / "deep").mkdir(parents=True)
    ok(
        paella(
            tmp_path, "-C", "repo", "-C", "", "-C", "src", "-C", "deep", "init", "--agent", "true"
        )
    )
    # init writes at the top of the work tree found from repo/src/deep.
    assert (repo / "paella.toml").exists()
    assert not (tmp_path / "paella.toml").exists()


@pytest.mark.parametrize(
    "target, why",
    [("does-not-exist", "No such file or directory"), ("a-file", "Not a directory")],
)
def test_minus_c_to_a_bad_folder_is_one_clear_line(tmp_path: Path, target: str, why: str) -> None:
    (tmp_path / "a-file").write_text("x\n")
    result = run_paella(tmp_path, "-C", target, "status")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    first, hint = result.stderr.strip().splitlines()
    assert first == f"paella: cannot change to {target!r} (-C): {why}"
    assert "-C" in hint


# --- completion ----------------------------------------------------------------------------------


def completion_script(tmp_path: Path, paella, shell: str) -> Path:
    path = tmp_path / f"paella.{shell}"
    path.write_text(ok(paella(tmp_path, "completion", shell)).stdout)
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_the_completion_scripts_parse(shell: str, tmp_path: Path, paella) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here (.ci/run installs it)")
    path = completion_script(tmp_path, paella, shell)
    result = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def bash_complete(script_path: Path, *words: str, cwd: Path) -> list[str]:
    """What bash's completion of ``words`` (the last one being typed) offers."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = (
        f"source {script_path}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=()\n"
        '_paella; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, check=True, cwd=cwd
    )
    return sorted(line for line in result.stdout.splitlines() if line)


def test_bash_completes_every_command_option_and_choice(tmp_path: Path, paella) -> None:
    path = completion_script(tmp_path, paella, "bash")
    line = describe(build_parser())

    assert bash_complete(path, "paella", "", cwd=tmp_path) == sorted(COMMANDS)
    assert bash_complete(path, "paella", "chec", cwd=tmp_path) == [
        "check",
        "checkpoint",
        "checkpoints",
    ]
    for command in line.commands:
        longs = sorted(f for o in command.options for f in o.flags if f.startswith("--"))
        assert bash_complete(path, "paella", command.name, "--", cwd=tmp_path) == longs
        # After -C DIR the command is still found.
        assert bash_complete(path, "paella", "-C", ".", command.name, "--", cwd=tmp_path) == longs
    assert bash_complete(path, "paella", "run", "--on-death", "", cwd=tmp_path) == sorted(
        ["ask", "rollback", "continue", "stop"]
    )
    assert bash_complete(path, "paella", "completion", "", cwd=tmp_path) == sorted(SHELLS)
    (tmp_path / "folder-a").mkdir()
    (tmp_path / "file-a").write_text("")
    assert bash_complete(path, "paella", "-C", "f", cwd=tmp_path) == ["folder-a"]
    assert bash_complete(path, "paella", "demo", "--dir", "f", cwd=tmp_path) == ["folder-a"]
    assert bash_complete(path, "paella", "handoff", "-o", "f", cwd=tmp_path) == [
        "file-a",
        "folder-a",
    ]


def test_fish_completes_commands_and_choices(tmp_path: Path, paella) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed here (.ci/run installs it)")
    path = completion_script(tmp_path, paella, "fish")

    def complete(line: str) -> list[str]:
        program = f"source {path}; complete -C {json.dumps(line)}"
        out = subprocess.run(
            ["fish", "--no-config", "-c", program], capture_output=True, text=True, check=True
        ).stdout
        return sorted(row.split("\t")[0] for row in out.splitlines())

    assert complete("paella ") == sorted(COMMANDS)
    assert complete("paella -C /tmp chec") == ["check", "checkpoint", "checkpoints"]
    assert complete("paella run --on-death ") == sorted(["ask", "rollback", "continue", "stop"])
    assert complete("paella completion ") == sorted(SHELLS)
    assert "--stat" in complete("paella diff --")
    assert "--stat" not in complete("paella rollback --")


def test_zsh_registers_the_completion_after_compinit(tmp_path: Path, paella) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here (.ci/run installs it)")
    path = completion_script(tmp_path, paella, "zsh")
    program = (
        "autoload -U compinit; compinit -u -D\n"
        f"source {path}\n"
        "print -r -- $_comps[paella]; whence -w _paella\n"
    )
    result = subprocess.run(
        ["zsh", "-f", "-c", program], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stdout.splitlines() == ["_paella", "_paella: function"]
    assert result.stderr == ""


def test_a_command_added_to_the_parser_is_completed_without_more_work(tmp_path: Path) -> None:
    """Completion reads the parser: a new subcommand and its options appear in every script."""
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    new = action.add_parser("replay", help="find the first checkpoint where a gate went red")
    new.add_argument("--gate", metavar="NAME", help="the gate to bisect on")
    new.add_argument("--mode", choices=("fast", "exact"), help="how to search")

    scripts = {shell: script(parser, shell) for shell in SHELLS}
    path = tmp_path / "paella.bash"
    path.write_text(scripts["bash"])

    assert "replay" in bash_complete(path, "paella", "", cwd=tmp_path)
    assert bash_complete(path, "paella", "replay", "--", cwd=tmp_path) == sorted(
        ["--gate", "--help", "--mode"]
    )
    assert bash_complete(path, "paella", "replay", "--mode", "", cwd=tmp_path) == ["exact", "fast"]
    assert "'replay:find the first checkpoint where a gate went red'" in scripts["zsh"]
    assert "'--mode[how to search]:MODE:(fast exact)'" in scripts["zsh"]
    assert "-a 'replay' -d 'find the first checkpoint where a gate went red'" in scripts["fish"]
    assert "__paella_using replay' -l mode -x -a 'fast exact'" in scripts["fish"]


def test_completion_needs_no_workspace_and_rejects_an_unknown_shell(tmp_path: Path, paella) -> None:
    for shell in SHELLS:
        assert ok(paella(tmp_path, "completion", shell)).stdout.strip()
    bad = paella(tmp_path, "completion", "tcsh")
    assert bad.returncode == 2
    assert "invalid choice: 'tcsh'" in bad.stderr and "Traceback" not in bad.stderr


def test_the_module_entry_point_and_the_console_script_agree(tmp_path: Path) -> None:
    script_path = Path(sys.executable).with_name("paella")
    a = subprocess.run([str(script_path), "completion", "bash"], capture_output=True, text=True)
    b = subprocess.run(
        [sys.executable, "-m", "paella_tui", "completion", "bash"], capture_output=True, text=True
    )
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
