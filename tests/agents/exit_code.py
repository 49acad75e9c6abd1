"""Scripted agent: say goodbye, then exit with the status given as the first argument."""

import sys

code = int(sys.argv[1])
print(f"exiting with {code}", flush=True)
sys.exit(code)
