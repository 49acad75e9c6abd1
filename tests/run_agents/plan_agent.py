"""Scripted agent for run-loop tests: follows the steps of a JSON plan, one attempt at a time.

Usage: ``plan_agent.py PLAN.json``. The plan maps an attempt number (``PAELLA_ATTEMPT``) to a list
of steps; ``"*"`` is used for an attempt without its own list. Each step is a JSON array whose
first item names it:

- ``["write", path, text]``, ``["append", path, text]``, ``["remove", path]``: edit the work tree
- ``["write_atomic", path, text]``: write a file outside the work tree, then rename it in (no
  snapshot can see the file half written)
- ``["print", text]``: one line on stdout
- ``["sleep", seconds]``: stay silent
- ``["wait_ledger", kind, count, timeout]``: silently wait until the run's ledger holds ``count``
  records of ``kind`` (``checkpoint``, ``drift``, ...); exit 90 if that never happens
- ``["wait_file", path, timeout]``: silently wait for a file (outside the repo: the test's go signal)
- ``["git", arg, ...]``: run git in the work tree (checked)
- ``["ignore", "SIGTERM"]``: ignore a signal from now on
- ``["spawn", name, "--setsid"?]``: start ``tests/agents/sleeper.py`` (ignoring SIGHUP, optionally
  in its own session), wait until it is set up, and append ``name pid`` to ``$PLAN_PIDS``
- ``["record", path]``: write a JSON report there: attempt, episode, the handoff file and its
  text, the files of the work tree as the attempt found them
- ``["copy_tree", dest]``: copy the work tree (without ``.git``) to ``dest``, symlinks kept
- ``["flood", lines, until_checkpoint]``: write deterministic lines (``tests/agents/flood.py``)
  until ``lines`` are out and, when asked, checkpoint 1 exists; the count goes to ``$PLAN_FLOOD``
- ``["exit", code]``, ``["kill", signal name]``: end the attempt

Every step is appended to ``$PLAN_TRACE`` (a file outside the repo) as it starts, so a failing
test can tell where an agent was.

The agent starts once per attempt (38 times a suite run): it imports at its top only what every
plan needs (``json``, ``os``, ``sys``, ``time``); ``subprocess``, ``shutil``, ``signal`` and
``pathlib`` come with the steps that use them (~11 ms of CPU a start).
"""

from __future__ import annotations

import json
import os
import sys
import time

TYPE_CHECKING = False  # mypy reads it as true; `typing` is ~2 ms of a start
if TYPE_CHECKING:
    from collections.abc import Callable

AGENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "agents")

# A wait polls every 20 ms: one git process per poll cost more than the wait.
_LEDGER: list[str] = []


def _ledger() -> str:
    if not _LEDGER:
        import subprocess

        common = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        run_id = os.environ["PAELLA_RUN_ID"]
        _LEDGER.append(os.path.join(common, "paella", "runs", run_id, "events.jsonl"))
    return _LEDGER[0]


# The ledger as last counted: (device, inode, size, mtime) -> kind -> records of that kind. A
# wait polls every 20 ms; the ledger changes a few times a second at most, and a file whose
# identity, size and time are unchanged holds the same records.
_COUNTED: dict[tuple[int, int, int, int], dict[str, int]] = {}


def _count(kind: str) -> int:
    try:
        st = os.stat(_ledger())
    except FileNotFoundError:
        return 0
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    known = _COUNTED.get(key)
    if known is None:
        _COUNTED.clear()
        known = _COUNTED[key] = {}
    if kind not in known:
        known[kind] = _count_in(kind)
    return known[kind]


def _count_in(kind: str) -> int:
    try:
        with open(_ledger()) as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return 0
    count = 0
    for line in lines:
        try:
            count += json.loads(line).get("kind") == kind
        except ValueError:
            continue
    return count


def _has(kind: str, count: int) -> bool:
    return _count(kind) >= count


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            _trace(f"gave up waiting for {what}")
            sys.exit(90)
        time.sleep(0.02)


def _trace(text: str) -> None:
    path = os.environ.get("PLAN_TRACE")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{os.environ.get('PAELLA_ATTEMPT')} {time.time():.3f} {text}\n")


def _spawn(name: str, setsid: bool) -> None:
    import subprocess

    read_fd, write_fd = os.pipe()
    sleeper = os.path.join(AGENTS, "sleeper.py")
    argv = [sys.executable, sleeper, "--ignore-hup", "--ready-fd", str(write_fd)]
    if setsid:
        argv.append("--setsid")
    child = subprocess.Popen(argv, pass_fds=[write_fd])
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)
    with open(os.environ["PLAN_PIDS"], "a") as handle:
        handle.write(f"{name} {child.pid}\n")


def _flood(lines: int, until_checkpoint: bool) -> None:
    sys.path.insert(0, AGENTS)
    from flood import flood_blocks

    written = 0
    started = time.time()
    seen_at = None
    # A generous cap: an unresponsive supervisor must fail the test, not fill the disk.
    for block in flood_blocks(3 * lines):
        view = memoryview(block)
        while view:
            view = view[os.write(1, view) :]
        written += block.count(b"\n")
        if until_checkpoint and seen_at is None and _count("checkpoint") >= 1:
            seen_at = written
        if written >= lines and (seen_at is not None or not until_checkpoint):
            break
    report = {"lines": written, "checkpoint_seen_at_line": seen_at, "started": started}
    report["ended"] = time.time()
    _write_text(os.environ["PLAN_FLOOD"], json.dumps(report))


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _write(path: str, text: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    _write_text(path, text)


def _write_atomic(path: str, text: str) -> None:
    # The temporary file lives outside the work tree, where no snapshot looks.
    name = os.path.basename(os.path.normpath(path))
    tmp = os.path.join(os.path.dirname(os.environ["PLAN_TRACE"]), f"{name}.tmp")
    _write_text(tmp, text)
    os.replace(tmp, path)


def _append(path: str, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


def _wait_ledger(kind: str, count: int, timeout: float) -> None:
    _wait(lambda: _has(kind, count), timeout, f"{count} {kind} record(s)")


def _wait_file(path: str, timeout: float) -> None:
    _wait(lambda: os.path.exists(path), timeout, path)


def _record(path: str) -> None:
    from pathlib import Path

    handoff = os.environ.get("PAELLA_HANDOFF_FILE")
    report = {
        "attempt": os.environ.get("PAELLA_ATTEMPT", "1"),
        "episode": os.environ.get("PAELLA_EPISODE"),
        "run_id": os.environ.get("PAELLA_RUN_ID"),
        "handoff_file": handoff,
        "handoff": Path(handoff).read_text() if handoff else None,
        "files": sorted(
            str(p) for p in Path(".").rglob("*") if p.is_file() and ".git" not in p.parts
        ),
    }
    Path(path).write_text(json.dumps(report))


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.exit(code)


def _kill(name: str) -> None:
    import signal

    os.kill(os.getpid(), signal.Signals[name])
    time.sleep(30)


def _git(*args: str) -> None:
    import subprocess

    subprocess.run(["git", *args], check=True, capture_output=True)


def _ignore(name: str) -> None:
    import signal

    signal.signal(signal.Signals[name], signal.SIG_IGN)


def _copy_tree(dest: str) -> None:
    import shutil

    shutil.copytree(".", dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))


# step name -> what it does with the rest of the step's items (see the module docstring).
STEPS: dict[str, Callable[..., object]] = {
    "write": _write,
    "write_atomic": _write_atomic,
    "append": _append,
    "remove": os.unlink,
    "print": lambda text: print(text, flush=True),
    "sleep": time.sleep,
    "wait_ledger": _wait_ledger,
    "wait_file": _wait_file,
    "git": _git,
    "ignore": _ignore,
    "spawn": lambda name, *flags: _spawn(name, "--setsid" in flags),
    "record": _record,
    "copy_tree": _copy_tree,
    "flood": _flood,
    "exit": _exit,
    "kill": _kill,
}


def main() -> None:
    with open(sys.argv[1]) as handle:
        plan = json.load(handle)
    attempt = os.environ.get("PAELLA_ATTEMPT", "1")
    steps = plan.get(attempt, plan.get("*", []))
    for step in steps:
        op, args = step[0], step[1:]
        _trace(json.dumps(step)[:200])
        if op not in STEPS:
            raise SystemExit(f"unknown step {op!r}")
        STEPS[op](*args)


if __name__ == "__main__":
    main()
