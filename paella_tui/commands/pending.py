"""Commands whose part is not built yet: they say so plainly and exit 2."""

from __future__ import annotations

import argparse
import sys


def demo(args: argparse.Namespace) -> int:
    """``paella demo``: not built yet (it arrives with the demo scenario)."""
    print(
        "paella demo: not built yet in this version: it arrives with the built-in demo scenario.\n"
        "  Meanwhile: `paella init` in your repository, then `paella check` and `paella run --headless`.",
        file=sys.stderr,
    )
    return 2
