"""Shared by the scripted stand-ins: record argv, write the scenario's lines in odd pieces, exit.

Environment:
- ``PROFILE_SCENARIO`` names the scenario; a comma-separated list gives one per attempt
  (chosen by ``PAELLA_ATTEMPT``, the last one repeating).
- ``PROFILE_ARGV_FILE``, when set, gets the argv the stand-in was started with, one JSON array
  a line (appended, so a run's attempts all show).
- ``PROFILE_WRITE``, when set, is a file the ``success`` scenario writes (the work a gate
  checks) before it prints anything.
- ``PROFILE_RESET_EPOCH`` replaces ``{reset_epoch}`` in the lines (a reset time in the future).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence

Scenario = tuple[Sequence[object], int]
"""Lines (a dict is written as one JSON line, a str as it is) and the exit code."""


def _scenario() -> str:
    names = os.environ.get("PROFILE_SCENARIO", "success").split(",")
    attempt = int(os.environ.get("PAELLA_ATTEMPT", "1") or 1)
    return names[min(attempt, len(names)) - 1]


def run(scenarios: Mapping[str, Scenario]) -> None:
    argv_file = os.environ.get("PROFILE_ARGV_FILE")
    if argv_file:
        with open(argv_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(sys.argv[1:]) + "\n")
    name = _scenario()
    lines, code = scenarios[name]
    work = os.environ.get("PROFILE_WRITE")
    if work and name == "success":
        with open(work, "w", encoding="utf-8") as f:
            f.write("done\n")
    data = "".join(
        (json.dumps(line) if isinstance(line, dict) else str(line)) + "\n" for line in lines
    )
    data = data.replace("{reset_epoch}", os.environ.get("PROFILE_RESET_EPOCH", "1767225600"))
    raw = data.encode()
    out = sys.stdout.buffer
    # Pieces of 37 bytes: lines (and UTF-8 characters) arrive split across reads.
    for start in range(0, len(raw), 37):
        out.write(raw[start : start + 37])
        out.flush()
    sys.exit(code)
