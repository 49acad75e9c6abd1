"""Log every git process paella starts, with the paella frames that asked for it (not product code).

Switched on by ``PAELLA_GIT_CALLS=<file>``: each ``subprocess.Popen`` whose program is git (or
setpriv/sh starting git) appends one JSON line to the file: the process id, the git
subcommand and its arguments (after paella's ``-c``/``--config-env`` options), and the stack
of paella frames (``supervisor/``, ``paella_tui/``, ``widgets/``) that started it, innermost
last. Loaded three ways: ``pytest -p benchmarks.git_calls`` (the suite's workers),
``install()`` from a benchmark, or a ``sitecustomize`` that imports it (CLI processes the
suite starts: see ``--sitecustomize``). ``summarize`` groups a log by operation.

    PAELLA_GIT_CALLS=/tmp/calls.jsonl python -m pytest -p benchmarks.git_calls tests/test_x.py
    python -m benchmarks.git_calls /tmp/calls.jsonl [--by command|caller|stack] [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path

ENV = "PAELLA_GIT_CALLS"
_PRODUCT = ("/supervisor/", "/paella_tui/", "/widgets/")
_lock = threading.Lock()
_installed = False


def git_command(argv: Sequence[str]) -> list[str] | None:
    """The git subcommand and its arguments in ``argv`` (through setpriv and sh), or None."""
    # Imported on the first git start seen: a sitecustomize loads this module into every Python.
    from paella_tui.supervisor.store.git_programs import subcommand_at

    items = [str(a) for a in argv]
    for i, item in enumerate(items):
        if os.path.basename(item) == "git":
            rest = items[i + 1 :]
            j = subcommand_at(rest)
            # The mirror's commands are told apart by their --git-dir.
            mirror = any(a.startswith("--git-dir") for a in rest[:j])
            return (["[mirror]"] if mirror else []) + rest[j:]
    return None


def _stack() -> list[str]:
    frames = traceback.extract_stack()[:-3]
    out = []
    for frame in frames:
        if any(part in frame.filename for part in _PRODUCT):
            name = frame.filename.rsplit("/", 2)
            out.append(f"{name[-2]}/{name[-1]}:{frame.lineno}:{frame.name}")
    return out


def install(path: str | None = None) -> None:
    """Patch ``subprocess.Popen`` so that every git start is logged to ``path`` (or $ENV)."""
    global _installed
    target = path or os.environ.get(ENV)
    if not target or _installed:
        return
    _installed = True
    original = subprocess.Popen.__init__

    def logged(self: subprocess.Popen[bytes], args: object, *a: object, **kw: object) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)  # type: ignore[call-overload]
        command = git_command([os.fsdecode(x) for x in argv])
        if command is not None:
            record = {
                "pid": os.getpid(),
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                "cmd": command[:8],
                "stack": _stack(),
            }
            with _lock, open(target, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
        original(self, args, *a, **kw)  # type: ignore[arg-type]

    subprocess.Popen.__init__ = logged  # type: ignore[method-assign]


def pytest_configure(config: object) -> None:
    """As a pytest plugin (``-p benchmarks.git_calls``): log in this process (each worker)."""
    install()


install()


def _name(cmd: list[str]) -> str:
    words = [w for w in cmd if not w.startswith(":(")][:4]
    return " ".join(words)[:70]


def summarize(records: Iterable[dict[str, object]], by: str, top: int) -> str:
    """A table of git processes counted by command, by innermost caller, or by whole stack."""
    counts: collections.Counter[str] = collections.Counter()
    for record in records:
        cmd = _name(record["cmd"])  # type: ignore[arg-type]
        stack: list[str] = record["stack"]  # type: ignore[assignment]
        if by == "command":
            key = cmd
        elif by == "caller":
            key = f"{cmd}  <- {stack[-1] if stack else '?'}"
        else:
            key = f"{cmd}  <- {' > '.join(s.split(':')[0] + ':' + s.split(':')[2] for s in stack[-6:])}"
        counts[key] += 1
    lines = [f"| {n} | `{key}` |" for key, n in counts.most_common(top)]
    total = sum(counts.values())
    return "\n".join(["| n | what |", "|---:|---|", *lines, f"| {total} | all |"])


def main(argv: Sequence[str] | None = None) -> int:
    """Print a log's git processes grouped as asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--by", choices=("command", "caller", "stack"), default="command")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--sitecustomize", type=Path, help="write a sitecustomize.py in DIR")
    args = parser.parse_args(argv)
    if args.sitecustomize:
        args.sitecustomize.mkdir(parents=True, exist_ok=True)
        (args.sitecustomize / "sitecustomize.py").write_text("import benchmarks.git_calls\n")
        return 0
    with args.log.open(encoding="utf-8") as lines:
        print(summarize((json.loads(line) for line in lines), args.by, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
