"""Helper process: optionally leave the session, signal readiness, then sleep a long time.

Options: --setsid (call os.setsid() first), --ignore-term (ignore SIGTERM),
--ignore-hup (ignore SIGHUP, like `nohup`),
--ready-fd N (write one byte to fd N once set up), --print (say so on stdout).
"""

import os
import signal
import sys
import time

args = sys.argv[1:]
if "--setsid" in args:
    os.setsid()
if "--ignore-hup" in args:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
if "--ignore-term" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "--print" in args:
    print(f"sleeper {os.getpid()} sid={os.getsid(0)} pgid={os.getpgrp()}", flush=True)
if "--ready-fd" in args:
    ready_fd = int(args[args.index("--ready-fd") + 1])
    os.write(ready_fd, b"x")
    os.close(ready_fd)
time.sleep(300)
