"""The ``paella`` command line: parses arguments and hands each command to its module.

Imports stay lazy: ``paella --help`` must answer in well under 300 ms, so neither Textual nor
GitPython nor the engine is imported until a command needs it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from paella_tui import __version__

ON_DEATH = ("ask", "rollback", "continue", "stop")

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
}

_DESCRIPTION = """\
Supervise a long coding-agent run: hold it to the gates of paella.toml, checkpoint every green
episode in git (never touching your branch or index), and recover in one key when it dies.

Exit status: 0 success (run/resume: the contract is done), 1 the run ended not done,
2 usage or contract error, 3 workspace error, 130 interrupted."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command of SPEC 11."""
    parser = argparse.ArgumentParser(
        prog="paella",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"paella-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = sub.add_parser("init", help="write a commented paella.toml for this repository")
    p.add_argument(
        "--agent",
        metavar="CMD",
        help="agent profile (claude, codex, gemini, aider, opencode) or command",
    )
    p.add_argument(
        "--gate", metavar="NAME=CMD", action="append", default=[], help="a gate (repeatable)"
    )

    sub.add_parser(
        "check", help="validate paella.toml and the workspace; print what a run would do"
    )

    for name, text in (
        ("run", "start a supervised run (the TUI, or event lines with --headless)"),
        ("resume", "continue the newest run after a death, a stop or a crash"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "--headless", action="store_true", help="plain timestamped event lines, no TUI"
        )
        p.add_argument(
            "--on-death",
            choices=ON_DEATH,
            default=None,
            help="what to do when the agent dies (headless default: stop)",
        )
        if name == "resume":
            p.add_argument(
                "--now",
                action="store_true",
                help="resume even though the agent's limit has not reset yet",
            )

    p = sub.add_parser(
        "demo", help="the whole flow on a built-in scenario (no API key, no network)"
    )
    p.add_argument("--headless", action="store_true", help="tell the story as plain lines, no TUI")
    p.add_argument(
        "--dir", metavar="DIR", help="build the demo repository here instead of a temp folder"
    )
    p.add_argument("--fast", action="store_true", help="shorten every pause")

    p = sub.add_parser("status", help="the newest run's state, read from disk")
    p.add_argument("--json", action="store_true", help="one JSON object (SPEC 11 schema)")
    p.add_argument("--watch", action="store_true", help="redraw every 2 seconds until Ctrl-C")
    p.add_argument("--tmux", action="store_true", help="one short line for a tmux status bar")

    p = sub.add_parser("log", help="the ledger, human-readable")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events")

    p = sub.add_parser("gates", help="evaluate every gate once on the current tree (no agent)")
    p.add_argument("--json", action="store_true", help="one JSON object with every gate's result")

    p = sub.add_parser("checkpoint", help="take a manual checkpoint now")
    p.add_argument("--label", metavar="TEXT", default="")

    p = sub.add_parser(
        "checkpoints", help="list checkpoints and salvage snapshots of the newest run"
    )
    p.add_argument("--json", action="store_true", help='{"checkpoints": [...], "salvage": [...]}')

    p = sub.add_parser(
        "rollback", help="restore checkpoint N (default: the last green one), salvaging first"
    )
    p.add_argument("target", nargs="?", metavar="N|salvage:N")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    p = sub.add_parser(
        "diff", help="the diff from checkpoint N (default: last green) to the work tree"
    )
    p.add_argument("target", nargs="?", metavar="N|salvage:N")
    p.add_argument("--stat", action="store_true", help="files and lines changed only")

    p = sub.add_parser("handoff", help="write the handoff; print it without -o")
    p.add_argument("-o", "--output", metavar="FILE")

    p = sub.add_parser("prune", help="delete those runs' refs and state")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``paella`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module_name, func_name = _HANDLERS[args.command]
    try:
        handler: Callable[[argparse.Namespace], int] = getattr(
            import_module(f"paella_tui.commands.{module_name}"), func_name
        )
        return handler(args)
    except KeyboardInterrupt:
        print("\npaella: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one place turns every known error into a message and a status
        from paella_tui.supervisor.contract import ContractError
        from paella_tui.supervisor.errors import PaellaError

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
        raise
