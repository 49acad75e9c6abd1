"""Scripted agent: print the time, then kill itself with the signal named in argv[1]."""

import os
import resource
import signal
import sys
import time

sig = signal.Signals[sys.argv[1]]
# No core file: a SIGSEGV test must not write one into the working folder.
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if sig not in (signal.SIGKILL, signal.SIGSTOP):
    signal.signal(sig, signal.SIG_DFL)  # in case a fault handler was inherited
print(f"dying at {time.time()!r}", flush=True)
os.kill(os.getpid(), sig)
time.sleep(30)
