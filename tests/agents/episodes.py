"""Scripted agent for the TUI tests: a different script of steps for each attempt.

Usage: ``episodes.py --1 "STEP; STEP; ..." --2 "..." [--default "..."]``; attempt N (from
``$PAELLA_ATTEMPT``) runs the script given as ``--N``, else ``--default``, else exits 0.

Steps:
  write PATH [TEXT]       write a file (TEXT, default "ok")
  rm PATH                 delete a file
  print TEXT              print a line
  sleep SECONDS           sleep
  wait-ledger KIND [N]    wait (up to 30 s) until the run's ledger has N records of KIND (default 1)
  handoff                 require $PAELLA_HANDOFF_FILE (exit 98 without it) and print its first line
  forever                 sleep until signalled
  exit CODE               exit with CODE
"""

import json
import os
import sys
import time


def ledger_count(kind: str) -> int:
    state = os.environ.get("PAELLA_STATE_DIR") or os.path.join(".git", "paella")
    path = os.path.join(state, "runs", os.environ["PAELLA_RUN_ID"], "events.jsonl")
    count = 0
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    count += json.loads(line).get("kind") == kind
                except ValueError:
                    continue
    except FileNotFoundError:
        return 0
    return count


def main() -> int:
    args = sys.argv[1:]
    scripts = dict(zip(args[::2], args[1::2], strict=False))
    attempt = os.environ.get("PAELLA_ATTEMPT", "1")
    script = scripts.get(f"--{attempt}", scripts.get("--default", ""))
    print(f"scripted agent: attempt {attempt}", flush=True)
    for step in filter(None, (s.strip() for s in script.split(";"))):
        word, _, rest = step.partition(" ")
        if word == "write":
            path, _, text = rest.partition(" ")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write((text or "ok") + "\n")
            print(f"wrote {path}", flush=True)
        elif word == "rm":
            os.remove(rest)
            print(f"removed {rest}", flush=True)
        elif word == "print":
            print(rest, flush=True)
        elif word == "sleep":
            time.sleep(float(rest))
        elif word == "wait-ledger":
            kind, _, wanted = rest.partition(" ")
            deadline = time.monotonic() + 30
            while ledger_count(kind) < int(wanted or 1):
                if time.monotonic() > deadline:
                    print(f"gave up waiting for {rest}", flush=True)
                    return 99
                time.sleep(0.05)
            print(f"saw {rest}", flush=True)
        elif word == "handoff":
            path = os.environ.get("PAELLA_HANDOFF_FILE")
            if not path or not os.path.exists(path):
                print("no handoff file", flush=True)
                return 98
            with open(path, encoding="utf-8") as handle:
                print(f"handoff: {handle.readline().strip()}", flush=True)
        elif word == "forever":
            while True:
                time.sleep(3600)
        elif word == "exit":
            return int(rest)
        else:
            print(f"unknown step {step!r}", flush=True)
            return 97
    return 0


if __name__ == "__main__":
    sys.exit(main())
