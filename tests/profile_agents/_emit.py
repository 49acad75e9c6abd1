"""Shared by the scripted stand-ins: record argv, write the scenario's lines in odd pieces, exit.

Environment: ``PROFILE_SCENARIO`` names the scenario; ``PROFILE_ARGV_FILE``, when set, receives
the argv (JSON) the stand-in was started with.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence

Scenario = tuple[Sequence[object], int]
"""Lines (a dict is written as one JSON line, a str as it is) and the exit code."""


def run(scenarios: Mapping[str, Scenario]) -> None:
    argv_file = os.environ.get("PROFILE_ARGV_FILE")
    if argv_file:
        with open(argv_file, "w", encoding="utf-8") as f:
            json.dump(sys.argv[1:], f)
    lines, code = scenarios[os.environ.get("PROFILE_SCENARIO", "success")]
    data = "".join(
        (json.dumps(line) if isinstance(line, dict) else str(line)) + "\n" for line in lines
    ).encode()
    out = sys.stdout.buffer
    # Pieces of 37 bytes: lines (and UTF-8 characters) arrive split across reads.
    for start in range(0, len(data), 37):
        out.write(data[start : start + 37])
        out.flush()
    sys.exit(code)
