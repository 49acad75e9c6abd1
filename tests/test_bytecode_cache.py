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
def test_a_child_caches_its_bytecode_in_the_venv_and_none_beside_the_sources(
    tmp_path: Path,
) -> None:
    prefix = Path(sys.prefix) / "pycache"
    assert os.environ.get("PYTHONPYCACHEPREFIX") == str(prefix)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    (tmp_path / "workspace_module.py").write_text("VALUE = 42\n")
    proc = subprocess.run(
        [sys.executable, "-c", "import workspace_module, sys; print(sys.pycache_prefix)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == str(prefix)
    assert not (tmp_path / "__pycache__").exists(), "the workspace stays as it was"
    cached = prefix / str(tmp_path).lstrip(os.sep)
    assert [p.name.split(".")[0] for p in cached.iterdir()] == ["workspace_module"]
