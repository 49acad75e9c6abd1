"""Scripted agent: ignore SIGTERM, start a child that ignores it too, then sleep forever."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

signal.signal(signal.SIGTERM, signal.SIG_IGN)
read_fd, write_fd = os.pipe()
sleeper = [sys.executable, str(Path(__file__).with_name("sleeper.py"))]
child = subprocess.Popen(
    [*sleeper, "--ignore-term", "--ready-fd", str(write_fd)], pass_fds=[write_fd]
)
os.close(write_fd)
os.read(read_fd, 1)
print(f"ready, child {child.pid}", flush=True)
time.sleep(300)
