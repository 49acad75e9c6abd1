"""Scripted agent: report whether stdin/stdout/stderr are terminals and what else it sees."""

import json
import os
import sys

report = {
    "stdin": os.isatty(0),
    "stdout": os.isatty(1),
    "stderr": os.isatty(2),
    "pgid_is_pid": os.getpgrp() == os.getpid(),
    "sid_is_pid": os.getsid(0) == os.getpid(),
}
try:
    size = os.get_terminal_size(1)
    report["size"] = [size.columns, size.lines]
except OSError:
    report["size"] = None
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    report["controlling_tty"] = True
except OSError:
    report["controlling_tty"] = False
report["stdin_read"] = "" if report["stdin"] else sys.stdin.read()
print(json.dumps(report), flush=True)
print("on stderr", file=sys.stderr, flush=True)
