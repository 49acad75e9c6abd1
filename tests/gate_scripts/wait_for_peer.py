"""A gate that passes only if another gate runs at the same time: it creates the file argv[1]
and waits up to 5 s for the file argv[2], which the other gate creates."""

import sys
import time
from pathlib import Path

Path(sys.argv[1]).write_text("here\n")
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    if Path(sys.argv[2]).exists():
        sys.exit(0)
    time.sleep(0.02)
print("the other gate never ran alongside")
sys.exit(1)
