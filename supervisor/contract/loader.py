"""Reading `paella.toml`: from the file (bounded, UTF-8) and its TOML syntax to a `Contract`.

Validation collects every problem in one pass (a user fixes them all at once); each names the
file, the line where the source shows it, and the key. Only a TOML syntax error stops early.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from paella_tui.supervisor.base.files import read_regular_file
from paella_tui.supervisor.contract.model import CONTRACT_FILE, MAX_CONTRACT_BYTES, Contract
from paella_tui.supervisor.contract.problems import ContractError, Problem
from paella_tui.supervisor.contract.toml_lines import TomlLines
from paella_tui.supervisor.contract.validation import contract_from_toml

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$|\s*\(at end of document\)$")


def _syntax_problem(path: Path, error: tomllib.TOMLDecodeError, locator: TomlLines) -> Problem:
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


def parse_contract(text: str, path: Path, *, default_name: str, frozen: bool = False) -> Contract:
    """A Contract from the text of `paella.toml`; raises ContractError listing every problem.

    ``frozen``: the text is a run's frozen copy, accepted when the run started. A rule added
    since that only guards a person writing a new contract (shell syntax in a command string)
    is not applied to it: an old run stays readable, resumable and listable by a newer paella.
    """
    locator = TomlLines(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError([_syntax_problem(path, exc, locator)]) from None
    except RecursionError:
        # tomllib recurses per nesting level: thousands of nested arrays exhaust the stack.
        message = "not usable TOML: values are nested too deeply"
        raise ContractError([Problem(path, None, "", message)]) from None
    return contract_from_toml(
        data, text=text, path=path, lines=locator, default_name=default_name, frozen=frozen
    )


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
