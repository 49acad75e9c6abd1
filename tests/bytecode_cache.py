"""Bytecode cached for the suite's own Python processes, even where PYTHONDONTWRITEBYTECODE is set.

Where the environment says not to write bytecode (this machine does), every Python process the
suite starts compiled every module it imported from source: each xdist worker compiled and
assertion-rewrote all test modules at collection (5.6 s CPU against 1.7 s cached), and every
``paella`` subprocess compiled the product modules it loads (about 0.15 s for the TUI's). Inside
a virtual environment, the suite writes its bytecode under ``<venv>/pycache`` instead
(``PYTHONPYCACHEPREFIX``), which the workers and every subprocess inherit: the source tree and
the tests' throw-away workspaces stay free of ``__pycache__`` and their modules uncached, exactly
as before, so no scenario changes. Outside a virtual environment the machine's setting is left alone.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import sys
import tempfile
from pathlib import Path

PREFIX_VARIABLE = "PYTHONPYCACHEPREFIX"


def cache_bytecode() -> Path | None:
    """Redirect bytecode to ``<venv>/pycache`` for this process and its children; the folder."""
    if os.environ.get(PREFIX_VARIABLE) or sys.prefix == sys.base_prefix:
        return None  # already set (a worker, a subprocess, a developer's choice), or no venv
    prefix = Path(sys.prefix) / "pycache"
    # The throw-away workspaces (under the temporary folder, where gates and scripted agents run
    # Python) get no bytecode at all, as before: Python checks a cached module by its source's
    # mtime in whole seconds and its size, so an agent that rewrites a module within a second at
    # the same size (`a + b` -> `a - b`) would have its gate run the old code. Where their
    # cache would go, a plain file stands: Python cannot make the folder, and skips the write.
    # When this checkout itself lives in the temporary folder (CI works in a copy there), only
    # pytest's own folder of workspaces is blocked, and the scratch trees and demo folders made
    # beside it with mkdtemp are cached like any module.
    temp = Path(tempfile.gettempdir())
    inside = temp in Path(__file__).resolve().parents
    workspaces = temp / f"pytest-of-{getpass.getuser()}" if inside else temp
    blocked = prefix / str(workspaces).lstrip(os.sep)
    shutil.rmtree(blocked, ignore_errors=True)  # earlier sessions' workspaces' bytecode
    with contextlib.suppress(OSError):
        for folder in reversed(blocked.parents):  # a block an earlier session set higher up
            if folder.is_file() and prefix in folder.parents:
                folder.unlink()
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.touch()
    os.environ[PREFIX_VARIABLE] = str(prefix)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False
    return prefix
