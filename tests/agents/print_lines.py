"""Scripted agent: print a few numbered lines, then exit 0."""

import sys

count = int(sys.argv[1]) if len(sys.argv) > 1 else 5
for number in range(1, count + 1):
    print(f"line {number}")
