"""The machine a benchmark ran on, for the lines at the head of its report."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil


def nproc() -> int:
    """The cores this process may run on (what ``nproc`` prints)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, or ``?``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def cores_line() -> str:
    """``- nproc: 2 (<CPU model>), memory 23.5 GiB``, as a Markdown bullet line."""
    memory = psutil.virtual_memory().total / 1024**3
    return f"- nproc: {nproc()} ({cpu_model()}), memory {memory:.1f} GiB"


def python_line() -> str:
    """``- python: 3.11.7 (<interpreter>)``, as a Markdown bullet line."""
    return f"- python: {platform.python_version()} ({sys.executable})"


def git_version() -> str:
    """The version of the ``git`` on PATH (``2.39.5``)."""
    out = subprocess.run(["git", "version"], capture_output=True, text=True, check=False).stdout
    return out.strip().removeprefix("git version ")
