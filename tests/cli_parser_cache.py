"""One ``paella`` argument parser for the whole test process, not one per in-process command.

``cli.main`` builds the parser (every command, its options and help: ~2 ms) each time it parses a
command line, which a ``paella`` process does once. The tests run thousands of commands through
``cli.main`` in their own process (``run_paella_in_process``; test_ledger_integrity's readers
alone, 280), so they share the first parser built. Parsing never changes an ``ArgumentParser``
(appended options are copied before they grow; the usage width is read as help is formatted), and
no command changes what it parsed in place, so every command line still gets the answer a fresh
parser gives.
"""

from __future__ import annotations

import argparse


def install() -> None:
    """Share one parser between the commands this process runs (idempotent)."""
    from paella_tui import cli_parser

    if getattr(cli_parser.build_parser, "_shared", False):
        return
    build = cli_parser.build_parser
    built: list[argparse.ArgumentParser] = []

    def shared_parser() -> argparse.ArgumentParser:
        if not built:
            built.append(build())
        return built[0]

    shared_parser._shared = True  # type: ignore[attr-defined]
    cli_parser.build_parser = shared_parser
