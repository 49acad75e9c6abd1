"""Scripted agent: start N sleeping children (default 2), say "ready", then sleep."""

import os
import subprocess
import sys
import time
from pathlib import Path

count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
sleeper = [sys.executable, str(Path(__file__).with_name("sleeper.py"))]
children = []
for _ in range(count):
    read_fd, write_fd = os.pipe()
    children.append(subprocess.Popen([*sleeper, "--ready-fd", str(write_fd)], pass_fds=[write_fd]))
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)
print("ready " + " ".join(str(child.pid) for child in children), flush=True)
time.sleep(300)
