"""A gate that hangs: it starts a `sleep` in its group and one that leaves the group and the
session, writes their pids (one per line) to the file named by argv[1], then sleeps."""

import subprocess
import sys
import time
from pathlib import Path

in_group = subprocess.Popen(["sleep", "60"])
escaped = subprocess.Popen(["sleep", "60"], start_new_session=True)
tmp = Path(sys.argv[1] + ".tmp")
tmp.write_text(f"{in_group.pid}\n{escaped.pid}\n")
tmp.rename(sys.argv[1])
print("started children", flush=True)
time.sleep(60)
