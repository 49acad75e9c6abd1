"""A gate that passes but leaves two `sleep`s running (one in its group, one that left it), as a
test that forgot its server would; their pids go to the file named by argv[1]."""

import subprocess
import sys
from pathlib import Path

in_group = subprocess.Popen(["sleep", "60"])
escaped = subprocess.Popen(["sleep", "60"], start_new_session=True)
Path(sys.argv[1]).write_text(f"{in_group.pid}\n{escaped.pid}\n")
print("all good")
