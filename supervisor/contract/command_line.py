"""Command lines in the contract: an argv split like a shell would (never run by one), and the
`{...}` placeholders the agent and resume commands may hold.
"""

from __future__ import annotations

import json
import shlex
import string
from collections.abc import Mapping, Sequence

from paella_tui.supervisor.contract.problems import kind, quoted, suggestion

PLACEHOLDERS = frozenset(
    {"prompt", "prompt_file", "handoff", "handoff_file", "attempt", "run_id", "session_id"}
)
"""The names that `{...}` may hold in the `agent` and `resume` arguments."""

_OPERATORS = ("&&", "||", ">>", "$(", ";", "|", "&", ">", "<", "`")
"""Shell syntax that means nothing without a shell (longest first)."""


def shell_syntax(value: str) -> str | None:
    """The first shell operator in ``value`` outside quotes and not escaped (``;``, ``&&``,
    ``|``, ``>``, ``$(``...), or None. Split without a shell, it would reach the program as an
    argument (``sleep 2; test -f x`` runs ``sleep`` with ``2``, ``test``, ``-f``, ``x``)."""
    quote: str | None = None
    escaped = False
    for i, char in enumerate(value):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        else:
            op = next((o for o in _OPERATORS if value.startswith(o, i)), None)
            if op is not None:
                return op
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
                f"unbalanced brace in {quoted(arg)}: write {{{{ or }}}} for a literal brace"
            )
            continue
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in PLACEHOLDERS:
                known = ", ".join(f"{{{p}}}" for p in sorted(PLACEHOLDERS))
                hint = suggestion(name, PLACEHOLDERS, wrap="{{{}}}") or f"; known: {known}"
                problems.append(f"unknown placeholder {{{name}}} in {quoted(arg)}{hint}")
            elif spec or conversion:
                problems.append(f"placeholder {{{name}}} takes no format or conversion")
    return problems


def expand_placeholders(argv: Sequence[str], values: Mapping[str, object]) -> tuple[str, ...]:
    """The argv with each `{name}` replaced by str(values[name]), each argument whole, no shell."""
    return tuple(arg.format_map(values) for arg in argv)


def split_command(
    value: object, *, placeholders: bool, shell_refused: bool = True
) -> tuple[str, ...]:
    """An argv from a command string (split like a shell, never run by one) or a string array.

    Raises ValueError saying what is wrong; with `placeholders`, unknown `{...}` names too;
    with ``shell_refused``, shell syntax in a string (see :func:`shell_syntax`).
    """
    if isinstance(value, str):
        try:
            argv = tuple(shlex.split(value))
        except ValueError as exc:
            raise ValueError(
                f"cannot split {quoted(value)} like a shell would: {str(exc).lower()}"
            ) from None
        if not argv:
            raise ValueError("the command is empty")
        op = shell_syntax(value) if shell_refused else None
        if op is not None:
            # Refused, not run: each word would reach the program as an argument, and the
            # gate would be red (or the agent wrong) for a reason nobody sees.
            raise ValueError(
                f"{quoted(op)} is shell syntax, and no command runs through a shell: "
                f"write [{', '.join(json.dumps(a) for a in ('sh', '-c', value))}]"
            )
    elif isinstance(value, list):
        if not value:
            raise ValueError("the command is empty")
        bad = [i for i, arg in enumerate(value, 1) if not isinstance(arg, str)]
        if bad:
            raise ValueError(
                f"expected an array of strings, but item {bad[0]} is {quoted(value[bad[0] - 1])}"
            )
        argv = tuple(value)
        if not argv[0].strip():
            raise ValueError("the program name (the first item) is empty")
    else:
        raise ValueError(f"expected a command string or an array of strings, got {kind(value)}")
    if placeholders:
        problems = placeholder_problems(argv)
        if problems:
            raise ValueError("; ".join(problems))
    return argv
