"""``paella completion SHELL``: print the completion script for bash, zsh or fish."""

from __future__ import annotations

import argparse
import sys

from paella_tui.shell_completion import script


def completion(args: argparse.Namespace) -> int:
    """Print the completion script for ``args.shell``, derived from paella's own parser."""
    from paella_tui.cli_parser import build_parser

    sys.stdout.write(script(build_parser(), args.shell))
    return 0
