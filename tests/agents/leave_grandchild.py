"""Scripted agent: start a long-running child (optionally one that calls setsid), then exit 0.

The child ignores SIGHUP, like a dev server started with `nohup`: otherwise the end of the
agent's session (under a pty) would kill it before the supervisor had to. It keeps the agent's stdout (the pty) open, so end-of-output never comes while it
lives. Options: --setsid (the child leaves the session first), --linger S (stay S seconds
before exiting, long enough for the supervisor's periodic tree refresh to see the child).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

args = sys.argv[1:]
sleeper = [sys.executable, str(Path(__file__).with_name("sleeper.py"))]
read_fd, write_fd = os.pipe()
sleeper += ["--ignore-hup", "--ready-fd", str(write_fd)]
if "--setsid" in args:
    sleeper.append("--setsid")
child = subprocess.Popen(sleeper, pass_fds=[write_fd])
os.close(write_fd)
os.read(read_fd, 1)  # the child is set up (and has left the session if asked)
print(f"grandchild {child.pid}", flush=True)
if "--linger" in args:
    time.sleep(float(args[args.index("--linger") + 1]))
print(f"exiting at {time.time()!r}", flush=True)
os._exit(0)  # do not wait for the child, like an agent that forgets its dev server
