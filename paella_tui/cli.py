"""The ``paella`` command line: parses arguments (``cli_parser``) and hands each command to its
module, turning every known error into one line and an exit status. ``-C DIR`` works like git's:
paella changes to ``DIR`` before anything else.

Imports stay lazy: ``paella --help`` must answer in well under 300 ms, so neither Textual nor the
engine is imported until a command needs it.
"""

from __future__ import annotations

import os
import sys

# Not `typing.TYPE_CHECKING`: `paella status --tmux` runs every few seconds in a status bar, and
# `typing`, `collections.abc` and `pathlib` are ~12 ms of its start; mypy reads any
# `TYPE_CHECKING` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from pathlib import Path

EXIT_USAGE = 2

# command -> (module in paella_tui.commands, function)
_HANDLERS = {
    "init": ("contract_commands", "init"),
    "check": ("contract_commands", "check"),
    "run": ("engine_commands", "run"),
    "resume": ("engine_commands", "resume"),
    "demo": ("demo_command", "demo"),
    "status": ("status_commands", "status"),
    "log": ("status_commands", "log"),
    "gates": ("engine_commands", "gates"),
    "checkpoint": ("snapshot_commands", "checkpoint"),
    "checkpoints": ("snapshot_commands", "checkpoints"),
    "rollback": ("snapshot_commands", "rollback"),
    "diff": ("snapshot_commands", "diff"),
    "handoff": ("engine_commands", "handoff"),
    "prune": ("snapshot_commands", "prune"),
    "completion": ("completion_command", "completion"),
    "steps": ("step_commands", "steps"),
    "bisect": ("step_commands", "bisect"),
}


def _change_directory(folders: Sequence[str]) -> None:
    """``-C DIR``, in order, each relative to the last (an empty DIR is ignored, as git does)."""
    from paella_tui.supervisor.base.errors import UsageError

    for folder in folders:
        if not folder:
            continue
        try:
            os.chdir(os.path.expanduser(folder))
        except OSError as err:
            raise UsageError(
                f"cannot change to {folder!r} (-C): {err.strerror or err}",
                hint="give -C an existing folder.",
            ) from err


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _flush_mirror() -> None:
    # A checkpoint's record reaches the mirror from a background thread; let it land.
    runs = sys.modules.get("paella_tui.supervisor.run.runs")
    if runs is not None:
        runs.wait_for_mirror()


def _plain_checkpoint(words: list[str]) -> argparse.Namespace | None:
    """``checkpoint`` and ``checkpoint --label TEXT`` (or ``--label=TEXT``) read as the parser
    reads them, without building it (argparse and the help of every command: ~5-10 ms of a
    checkpoint's start); None for anything else, which the parser reads."""
    if words[:1] != ["checkpoint"]:
        return None
    label: str | None = ""
    if len(words) == 3 and words[1] == "--label" and not words[2].startswith("-"):
        label = words[2]
    elif len(words) == 2 and words[1].startswith("--label="):
        label = words[1].removeprefix("--label=")
    elif len(words) != 1:
        label = None
    if label is None:
        return None
    from types import SimpleNamespace

    # The same attributes argparse would set (tests/test_cli_fast_paths.py compares them).
    found: argparse.Namespace = SimpleNamespace(  # type: ignore[assignment]
        chdir=[], command="checkpoint", label=label
    )
    return found


def _plain_status(words: list[str]) -> argparse.Namespace | None:
    """``status`` and ``status --json`` read as the parser reads them, without building it
    (argparse and the help of every command: ~7 ms of a status's ~115); None for anything
    else, which the parser reads."""
    if words not in (["status"], ["status", "--json"]):
        return None
    from types import SimpleNamespace

    # The same attributes argparse would set (tests/test_cli_fast_paths.py compares them).
    found: argparse.Namespace = SimpleNamespace(  # type: ignore[assignment]
        chdir=[], command="status", json=len(words) == 2, watch=False, tmux=False
    )
    return found


def _cwd() -> Path:
    from pathlib import Path

    return Path.cwd()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``paella`` console script; returns the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] != ["checkpoint"]:
        return _main(argv, words)
    # A checkpoint's snapshot lists the work tree while the engine is imported: its two git
    # listings start now, and the snapshot takes their answer only if nothing they depend on
    # changed meanwhile (store/scan_listing.py); so do the questions the workspace and the
    # snapshotter ask git first (store/early_reads.py).
    from paella_tui.supervisor.store import early_reads, scan_listing

    scan_listing.start_early()
    early_reads.start(_cwd())
    try:
        return _main(argv, words)
    finally:
        scan_listing.discard_early()
        early_reads.discard()


def _main(argv: Sequence[str] | None, words: list[str]) -> int:
    if words == ["status", "--tmux"]:
        # A status bar asks every few seconds: the kept state answers, no engine loaded.
        from paella_tui.commands.tmux_line import fast_line

        line = fast_line(os.getcwd())
        if line is not None:
            print(line)
            return 0
    args = _plain_checkpoint(words) or _plain_status(words)
    if args is None:
        # The parser (argparse and every command's options) only past the fast paths.
        from paella_tui.cli_parser import build_parser

        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
    module_name, func_name = _HANDLERS[args.command]
    try:
        _change_directory(args.chdir)
        try:
            os.getcwd()
        except OSError:
            print(
                "paella: the current folder no longer exists (it was deleted or moved): "
                "cd into your project (or give -C DIR) and run it again",
                file=sys.stderr,
            )
            return 3
        # Imported here: `importlib` brings `warnings` (~0.3 ms), which the status bar's line
        # (answered above) does without.
        from importlib import import_module

        handler: Callable[[argparse.Namespace], int] = getattr(
            import_module(f"paella_tui.commands.{module_name}"), func_name
        )
        try:
            code = handler(args)
            # Flushed here, where a closed pipe is caught, not at interpreter exit.
            sys.stdout.flush()
            return code
        finally:
            _flush_mirror()
    except KeyboardInterrupt:
        print("\npaella: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`paella status | head -1`): end quietly, as a filter should.
        _silence_stdout()
        return 0
    except Exception as err:  # one place turns every known error into a message and a status
        from paella_tui.supervisor.base.errors import PaellaError
        from paella_tui.supervisor.contract.problems import ContractError

        if isinstance(err, ContractError):
            print(
                f"paella: the contract has {len(err.problems)} problem(s):\n{err}", file=sys.stderr
            )
            print(
                "  fix them in paella.toml and run `paella check` again; nothing was started.",
                file=sys.stderr,
            )
            return 2
        if isinstance(err, PaellaError):
            print(f"paella: {err}", file=sys.stderr)
            return err.exit_code
        if isinstance(err, OSError):
            # A state file or folder that is not what it should be (a folder where a file
            # belongs, no permission): a workspace problem, said in one line.
            where = f" {err.filename}" if err.filename else ""
            print(
                f"paella: cannot use{where}: {err.strerror or err}; fix or remove it and try again",
                file=sys.stderr,
            )
            return 3
        raise
