"""Stand-in that replays a recorded corpus sample: its bytes in small pieces, then its exit code.

Environment: ``CORPUS_SAMPLE`` (the `.out` file), ``CORPUS_EXIT`` (the exit code).
"""

from __future__ import annotations

import os
import sys

raw = open(os.environ["CORPUS_SAMPLE"], "rb").read()
for start in range(0, len(raw), 37):
    sys.stdout.buffer.write(raw[start : start + 37])
    sys.stdout.buffer.flush()
sys.exit(int(os.environ.get("CORPUS_EXIT", "1")))
