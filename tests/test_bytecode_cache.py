"""The suite's bytecode cache (tests/bytecode_cache.py): children inherit it, workspaces stay clean.

A Python process the suite starts writes its bytecode under ``<venv>/pycache``, never beside the
sources it imports: a test's workspace sees no ``__pycache__`` appear, exactly as when the
machine's PYTHONDONTWRITEBYTECODE was in force, while the modules are compiled once, not per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the cache is kept in a venv only")
def test_a_child_caches_in_the_venv_and_a_workspace_module_is_never_cached(tmp_path: Path) -> None:
    prefix = Path(sys.prefix) / "pycache"
    assert os.environ.get("PYTHONPYCACHEPREFIX") == str(prefix)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    module = tmp_path / "workspace_module.py"

    def value() -> str:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import workspace_module as m, sys; print(m.X, sys.pycache_prefix)",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return proc.stdout.strip()

    module.write_text("X = 1\n")
    os.utime(module, (1_700_000_000, 1_700_000_000))
    assert value() == f"1 {prefix}"
    # A scripted agent's rewrite within the same second, at the same size: its gate must run
    # the new code (a cached module is checked by mtime in seconds and size only).
    module.write_text("X = 2\n")
    os.utime(module, (1_700_000_000, 1_700_000_000))
    assert value() == f"2 {prefix}"
    assert not (tmp_path / "__pycache__").exists(), "the workspace stays as it was"
    assert not (prefix / str(tmp_path).lstrip(os.sep)).exists(), "and its modules uncached"
    # The suite's own modules are cached there.
    assert any((prefix / str(Path(__file__).parent).lstrip(os.sep)).glob("*.pyc"))
