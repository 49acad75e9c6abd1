"""Shell completion scripts for bash, zsh and fish, generated from the ``paella`` argument parser.

Nothing here names a command: :func:`describe` reads the parser (its global options, its
subcommands, each one's options, choices and positionals), and each shell's writer turns that
description into a script. A subcommand added to the parser is completed with no change here.
An option whose metavar is ``DIR`` completes folders, ``FILE`` completes files.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

ValueKind = Literal["dir", "file", "choice", "text"]
SHELLS = ("bash", "zsh", "fish")


@dataclass(frozen=True)
class Option:
    """An option as completion sees it: its flags, whether it takes a value, and which."""

    flags: tuple[str, ...]
    help: str
    takes_value: bool
    kind: ValueKind
    choices: tuple[str, ...] = ()
    metavar: str = ""
    repeatable: bool = False
    exits: bool = False
    """--help and --version: nothing follows them."""


@dataclass(frozen=True)
class Positional:
    """A positional argument: its name, how many it takes, and its choices if any."""

    name: str
    help: str
    nargs: str
    """"1", "?", "+" or "*"."""
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command:
    """A subcommand with its summary, options and positionals."""

    name: str
    help: str
    options: tuple[Option, ...]
    positionals: tuple[Positional, ...]


@dataclass(frozen=True)
class CommandLine:
    """The whole command line: the program, its global options, its subcommands."""

    prog: str
    options: tuple[Option, ...]
    commands: tuple[Command, ...]


def _kind(action: argparse.Action) -> ValueKind:
    if action.choices is not None:
        return "choice"
    metavar = str(action.metavar or "").upper()
    if metavar == "DIR":
        return "dir"
    if metavar == "FILE":
        return "file"
    return "text"


def _options_and_positionals(
    parser: argparse.ArgumentParser,
) -> tuple[tuple[Option, ...], tuple[Positional, ...]]:
    options: list[Option] = []
    positionals: list[Positional] = []
    for action in parser._actions:  # argparse has no public way to list its actions
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        choices = tuple(str(c) for c in action.choices) if action.choices is not None else ()
        help_text = (action.help or "").replace("%(default)s", str(action.default))
        if action.option_strings:
            takes_value = action.nargs != 0
            options.append(
                Option(
                    flags=tuple(action.option_strings),
                    help=help_text,
                    takes_value=takes_value,
                    kind=_kind(action) if takes_value else "text",
                    choices=choices,
                    metavar=str(action.metavar or action.dest.upper()),
                    repeatable=isinstance(action, argparse._AppendAction),
                    exits=isinstance(action, argparse._HelpAction | argparse._VersionAction),
                )
            )
        else:
            nargs = "1" if action.nargs is None else str(action.nargs)
            name = str(action.metavar or action.dest)
            positionals.append(Positional(name=name, help=help_text, nargs=nargs, choices=choices))
    return tuple(options), tuple(positionals)


def describe(parser: argparse.ArgumentParser) -> CommandLine:
    """What ``parser`` accepts, in the terms completion needs."""
    options, _ = _options_and_positionals(parser)
    commands: list[Command] = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            sub_options, sub_positionals = _options_and_positionals(sub)
            commands.append(Command(name, summaries.get(name, ""), sub_options, sub_positionals))
    return CommandLine(prog=parser.prog, options=options, commands=tuple(commands))


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish)."""
    line = describe(parser)
    writers = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}
    return writers[shell](line)


# --- bash -------------------------------------------------------------------------------------


def _value_flags(options: Iterable[Option]) -> list[str]:
    return [flag for o in options if o.takes_value for flag in o.flags]


def _bash_values(options: Iterable[Option], indent: str) -> list[str]:
    """``case "$prev"`` branches completing the value of each option that takes one."""
    out = []
    for o in options:
        if not o.takes_value:
            continue
        pattern = "|".join(o.flags)
        if o.kind == "dir":
            body = '_paella_reply_files -d "$cur"'
        elif o.kind == "file":
            body = '_paella_reply_files -f "$cur"'
        elif o.kind == "choice":
            body = f'_paella_reply "{" ".join(o.choices)}" "$cur"'
        else:
            body = "COMPREPLY=()"
        out.append(f"{indent}{pattern}) {body}; return ;;")
    return out


def bash_script(line: CommandLine) -> str:
    """A bash completion script (``complete -F``) for the command line."""
    fn = f"_{line.prog}"
    global_flags = " ".join(f for o in line.options for f in o.flags)
    commands = " ".join(c.name for c in line.commands)
    skip = "|".join(_value_flags(line.options)) or "--"
    out = [
        f"# bash completion for {line.prog}, generated from its parser by `{line.prog} completion bash`.",
        f'# Load it with: eval "$({line.prog} completion bash)"',
        "",
        "_paella_reply() {",
        '    mapfile -t COMPREPLY < <(compgen -W "$1" -- "$2")',
        "}",
        "",
        "_paella_reply_files() {",
        "    compopt -o filenames 2>/dev/null",
        '    mapfile -t COMPREPLY < <(compgen "$1" -- "$2")',
        "}",
        "",
        f"{fn}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local cmd="" i=1',
        "    # The command is the first word that is neither a global option nor its value.",
        '    while [ "$i" -lt "$COMP_CWORD" ]; do',
        '        case "${COMP_WORDS[i]}" in',
        f"            {skip}) i=$((i + 2)); continue ;;",
        "            -*) ;;",
        '            *) cmd="${COMP_WORDS[i]}"; break ;;',
        "        esac",
        "        i=$((i + 1))",
        "    done",
        '    case "$cmd" in',
        '        "")',
        '            case "$prev" in',
        *_bash_values(line.options, "                "),
        "            esac",
        "            if [[ $cur == -* ]]; then",
        f'                _paella_reply "{global_flags}" "$cur"',
        "            else",
        f'                _paella_reply "{commands}" "$cur"',
        "            fi",
        "            ;;",
    ]
    for c in line.commands:
        flags = " ".join(f for o in c.options for f in o.flags)
        choices = " ".join(ch for p in c.positionals for ch in p.choices)
        out.append(f"        {c.name})")
        values = _bash_values(c.options, "                ")
        if values:
            out += ['            case "$prev" in', *values, "            esac"]
        out += [
            "            if [[ $cur == -* ]]; then",
            f'                _paella_reply "{flags}" "$cur"',
            "            else",
            f'                _paella_reply "{choices}" "$cur"',
            "            fi",
            "            ;;",
        ]
    out += [
        "    esac",
        "}",
        "",
        f"complete -F {fn} {line.prog}",
        "",
    ]
    return "\n".join(out)


# --- zsh --------------------------------------------------------------------------------------


def _zsh_text(text: str) -> str:
    """Text inside a single-quoted ``_arguments`` spec: brackets and colons escaped."""
    for char in ("\\", "[", "]", ":"):
        text = text.replace(char, "\\" + char)
    return text.replace("'", "'\\''")


def _zsh_quote(text: str) -> str:
    """Text inside single quotes, where only a quote needs care (a _describe description)."""
    return text.replace("'", "'\\''")


def _zsh_action(kind: ValueKind, choices: tuple[str, ...]) -> str:
    if kind == "dir":
        return "_files -/"
    if kind == "file":
        return "_files"
    if kind == "choice" or choices:
        return "(" + " ".join(choices) + ")"
    return " "


def _zsh_option(o: Option) -> list[str]:
    exclusive = "(- *)" if o.exits else (f"({' '.join(o.flags)})" if len(o.flags) > 1 else "")
    repeat = "*" if o.repeatable else ""
    value = f":{_zsh_text(o.metavar)}:{_zsh_action(o.kind, o.choices)}" if o.takes_value else ""
    return [f"'{exclusive}{repeat}{flag}[{_zsh_text(o.help)}]{value}'" for flag in o.flags]


def _zsh_positional(p: Positional) -> str:
    action = _zsh_action("choice" if p.choices else "text", p.choices)
    name = _zsh_text(p.name)
    if p.nargs in ("+", "*"):
        return f"'*:{name}:{action}'"
    optional = ":" if p.nargs == "?" else ""
    return f"':{optional}{name}:{action}'"


def zsh_script(line: CommandLine) -> str:
    """A zsh completion function (``#compdef``), usable from fpath or sourced."""
    fn = f"_{line.prog}"
    specs = [s for o in line.options for s in _zsh_option(o)]
    out = [
        f"#compdef {line.prog}",
        f"# zsh completion for {line.prog}, generated from its parser by `{line.prog} completion zsh`.",
        f"# Put it in a folder of $fpath as _{line.prog}, or source it after compinit.",
        "",
        f"{fn}() {{",
        '    local curcontext="$curcontext" state line',
        "    typeset -A opt_args",
        "    _arguments -C \\",
        *(f"        {s} \\" for s in specs),
        "        '1:command:->command' \\",
        "        '*::argument:->argument'",
        "    case $state in",
        "        command)",
        "            local -a commands",
        "            commands=(",
        *(f"                '{_zsh_text(c.name)}:{_zsh_quote(c.help)}'" for c in line.commands),
        "            )",
        f"            _describe -t commands '{line.prog} command' commands",
        "            ;;",
        "        argument)",
        "            case $line[1] in",
    ]
    for c in line.commands:
        args = [s for o in c.options for s in _zsh_option(o)]
        args += [_zsh_positional(p) for p in c.positionals]
        out.append(f"                {c.name})")
        out.append("                    _arguments \\")
        out += [f"                        {a} \\" for a in args[:-1]]
        out.append(f"                        {args[-1]}" if args else "                        ''")
        out.append("                    ;;")
    out += [
        "            esac",
        "            ;;",
        "    esac",
        "}",
        "",
        "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
        f'    {fn} "$@"',
        "else",
        f"    compdef {fn} {line.prog}",
        "fi",
        "",
    ]
    return "\n".join(out)


# --- fish -------------------------------------------------------------------------------------


def _fish_text(text: str) -> str:
    """A single-quoted fish string."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(prog: str, condition: str, o: Option) -> str:
    parts = [f"complete -c {prog} -n {_fish_text(condition)}"]
    for flag in o.flags:
        if flag.startswith("--"):
            parts.append(f"-l {flag[2:]}")
        else:
            parts.append(f"-s {flag[1:]}")
    if o.takes_value:
        if o.kind == "dir":
            parts.append("-x -a '(__fish_complete_directories)'")
        elif o.kind == "file":
            parts.append("-r -F")
        elif o.kind == "choice":
            parts.append(f"-x -a {_fish_text(' '.join(o.choices))}")
        else:
            parts.append("-x")
    parts.append(f"-d {_fish_text(o.help)}")
    return " ".join(parts)


def fish_script(line: CommandLine) -> str:
    """A fish completion script (``complete -c``) for the command line."""
    prog = line.prog
    skip = " ".join(_value_flags(line.options))
    out = [
        f"# fish completion for {prog}, generated from its parser by `{prog} completion fish`.",
        f"# Save it as ~/.config/fish/completions/{prog}.fish",
        "",
        f"function __{prog}_command --description 'the subcommand on the command line, if any'",
        "    set -l tokens (commandline -opc)",
        "    set -e tokens[1]",
        "    set -l skip 0",
        "    for token in $tokens",
        "        if test $skip = 1",
        "            set skip 0",
        "            continue",
        "        end",
        "        switch $token",
        f"            case {skip or '--'}",
        "                set skip 1",
        "            case '-*'",
        "            case '*'",
        "                echo $token",
        "                return 0",
        "        end",
        "    end",
        "    return 1",
        "end",
        "",
        f"function __{prog}_using --description 'whether the subcommand is one of the arguments'",
        f"    set -l command (__{prog}_command); or return 1",
        "    contains -- $command $argv",
        "end",
        "",
        f"complete -c {prog} -f",
    ]
    top = f"not __{prog}_command"
    out += [_fish_option(prog, top, o) for o in line.options]
    out += [
        f"complete -c {prog} -n {_fish_text(top)} -a {_fish_text(c.name)} -d {_fish_text(c.help)}"
        for c in line.commands
    ]
    for c in line.commands:
        using = f"__{prog}_using {c.name}"
        out += [_fish_option(prog, using, o) for o in c.options]
        for p in c.positionals:
            if p.choices:
                out.append(
                    f"complete -c {prog} -n {_fish_text(using)} -a {_fish_text(' '.join(p.choices))}"
                    f" -d {_fish_text(p.help)}"
                )
    out.append("")
    return "\n".join(out)
