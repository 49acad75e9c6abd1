"""Stand-in that replays recorded corpus samples: their bytes in small pieces, then an exit code.

Environment (comma-separated lists give one entry per attempt, by ``PAELLA_ATTEMPT``, the last
repeating): ``CORPUS_SAMPLE`` (the `.out` files), ``CORPUS_EXIT`` (the exit codes);
``CORPUS_WRITE`` (a file written before the output on the attempt ``CORPUS_WRITE_ON``: the work
a gate checks); ``CORPUS_ARGV_FILE`` (gets each attempt's argv, one JSON array a line).
"""

from __future__ import annotations

import json
import os
import sys


def _pick(name: str, default: str) -> str:
    values = os.environ.get(name, default).split(",")
    attempt = int(os.environ.get("PAELLA_ATTEMPT", "1") or 1)
    return values[min(attempt, len(values)) - 1]


argv_file = os.environ.get("CORPUS_ARGV_FILE")
if argv_file:
    with open(argv_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(sys.argv[1:]) + "\n")
if os.environ.get("CORPUS_WRITE") and _pick("CORPUS_WRITE_ON", "0") == os.environ.get(
    "PAELLA_ATTEMPT"
):
    with open(os.environ["CORPUS_WRITE"], "w", encoding="utf-8") as f:
        f.write("done\n")
with open(_pick("CORPUS_SAMPLE", ""), "rb") as f:
    raw = f.read()
for start in range(0, len(raw), 37):
    sys.stdout.buffer.write(raw[start : start + 37])
    sys.stdout.buffer.flush()
sys.exit(int(_pick("CORPUS_EXIT", "1")))
