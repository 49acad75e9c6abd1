"""Commands whose engine is not built yet: they say so plainly and exit 2."""

from __future__ import annotations

import argparse
import sys

_WHERE = {
    "run": "the supervised run loop (engine issue)",
    "resume": "the supervised run loop (engine issue)",
    "gates": "the gate runner (engine issue)",
    "handoff": "the handoff writer (engine issue)",
    "demo": "the built-in demo scenario (demo issue)",
}


def _not_yet(name: str) -> int:
    print(
        f"paella {name}: not built yet in this version: it arrives with {_WHERE[name]}.\n"
        "  What works today: init, check, checkpoint, checkpoints, rollback, diff, status, log, prune.",
        file=sys.stderr,
    )
    return 2


def run(args: argparse.Namespace) -> int:
    """``paella run`` (not built yet)."""
    return _not_yet("run")


def resume(args: argparse.Namespace) -> int:
    """``paella resume`` (not built yet)."""
    return _not_yet("resume")


def demo(args: argparse.Namespace) -> int:
    """``paella demo`` (not built yet)."""
    return _not_yet("demo")


def gates(args: argparse.Namespace) -> int:
    """``paella gates`` (not built yet)."""
    return _not_yet("gates")


def handoff(args: argparse.Namespace) -> int:
    """``paella handoff`` (not built yet)."""
    return _not_yet("handoff")
