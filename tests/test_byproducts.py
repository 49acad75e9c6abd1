"""The gates' own byproducts are not the agent's work: not in snapshots, not drift, not stale.

A real repository without ``.gitignore``, a real pytest run that writes ``__pycache__`` and
``.pytest_cache`` (bytecode on, whatever the test environment says), then snapshots, drift and
the watcher's filter are asked what changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from paella_tui.supervisor.base.globs import folder_match, match_any
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.judge.byproducts import (
    BYPRODUCTS,
    byproduct_globs,
    ecosystem_globs,
    gitignore_lines,
    snapshotter_for,
    untracked_byproducts,
)
from paella_tui.supervisor.store.workspace import Workspace


def project(repo: Path, ignore: list[str] | None = None) -> None:
    """A tiny package with a pytest test, committed, and its contract (no .gitignore)."""
    (repo / "pkg").mkdir()
    (repo / "pkg" / "__init__.py").write_text("def one():\n    return 1\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_one.py").write_text(
        "from pkg import one\n\ndef test_one():\n    assert one() == 1\n"
    )
    contract = {
        "run": {"prompt": "x", "agent": ["true"]},
        "watch": {"ignore": ignore or []},
        "gate": [{"name": "tests", "cmd": "pytest -q"}],
        "episode": [{"name": "e", "gates": ["tests"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "project"], cwd=repo, check=True)


def run_pytest(repo: Path) -> None:
    """A real pytest run, writing bytecode and its cache as it does on a user's machine."""
    # Bytecode where a user's pytest writes it: beside the sources (the suite's cache is not).
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    # The project has no plugins of its own: the ones installed beside this suite (xdist,
    # hypothesis, asyncio, textual-snapshot) are ours, not the user's, and loading them cost
    # ~0.65 s of CPU a run. pytest's own byproducts (its cache, the bytecode of the modules it
    # imports and rewrites) are written all the same.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q"], cwd=repo, env=env, check=True, capture_output=True
    )


def tree_paths(repo: Path, tree: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", tree],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def test_a_gate_run_leaves_the_snapshot_unchanged(repo: Path) -> None:
    project(repo)
    contract = load_contract(repo / "paella.toml")
    snapshotter = snapshotter_for(Workspace.find(repo), contract)
    before = snapshotter.take_locked().tree
    run_pytest(repo)
    written = [
        p.relative_to(repo).as_posix()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.parts
    ]
    assert any("__pycache__" in p for p in written) and any(".pytest_cache" in p for p in written)
    after = snapshotter.take_locked().tree
    assert after == before, [p for p in tree_paths(repo, after) if "cache" in p]
    # The agent's own change still counts, in a folder full of bytecode too.
    (repo / "pkg" / "__init__.py").write_text("def one():\n    return 2\n")
    changed = snapshotter.take_locked().tree
    assert changed != before
    assert not [p for p in tree_paths(repo, changed) if p.endswith(".pyc")]


def test_watch_ignore_applies_and_a_snapshot_taken_before_drops_them(repo: Path) -> None:
    project(repo, ignore=["*.log", "build"])
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("x")
    (repo / "run.log").write_text("x")
    ws = Workspace.find(repo)
    # A snapshot that knew no byproducts holds them...
    from paella_tui.supervisor.store.snapshot import Snapshotter

    plain = Snapshotter(ws)
    with plain.locked():
        held = tree_paths(repo, plain.take().tree)
    assert "run.log" in held and "build/out.bin" in held
    # ...and the next one, with the contract's ignore set, drops them from the private index.
    contract = load_contract(repo / "paella.toml")
    tree = snapshotter_for(ws, contract).take_locked().tree
    kept = tree_paths(repo, tree)
    assert "run.log" not in kept and "build/out.bin" not in kept and "pkg/__init__.py" in kept


def test_a_tracked_byproduct_stays_the_users(repo: Path) -> None:
    project(repo)
    (repo / "vendored.pyc").write_bytes(b"\0")
    subprocess.run(["git", "add", "vendored.pyc"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "a tracked pyc"], cwd=repo, check=True)
    contract = load_contract(repo / "paella.toml")
    tree = snapshotter_for(Workspace.find(repo), contract).take_locked().tree
    assert "vendored.pyc" in tree_paths(repo, tree)


@pytest.mark.parametrize(
    ("path", "byproduct"),
    [
        ("pkg/__pycache__/m.cpython-311.pyc", True),
        ("deep/a/b/__pycache__/x.pyc", True),
        (".pytest_cache/v/cache/lastfailed", True),
        (".coverage", True),
        (".coverage.host.123", True),
        ("htmlcov/index.html", True),
        ("web/node_modules/.cache/babel/x.json", True),
        (".mypy_cache/3.11/x.json", True),
        ("src/coverage.py", False),
        ("src/cache.py", False),
        ("tests/test_pycache.py", False),
        ("node_modules/left-pad/index.js", False),
    ],
)
def test_the_builtin_set(path: str, byproduct: bool) -> None:
    assert match_any(path, BYPRODUCTS) is byproduct


def test_the_watcher_reading_a_byproduct_folder() -> None:
    assert folder_match("pkg/__pycache__", BYPRODUCTS)
    assert not folder_match("pkg", BYPRODUCTS)


def test_check_lists_untracked_byproducts_and_their_gitignore_lines(repo: Path) -> None:
    project(repo)
    run_pytest(repo)
    contract = load_contract(repo / "paella.toml")
    found = untracked_byproducts(repo, byproduct_globs(contract))
    assert found and all("cache" in p or p.endswith(".pyc") for p in found)
    lines = gitignore_lines(found, byproduct_globs(contract))
    # .pytest_cache holds its own .gitignore ("*"): git ignores it already, so no line for it.
    assert "__pycache__/" in lines and ".pytest_cache/" not in lines
    (repo / ".gitignore").write_text("\n".join(lines) + "\n")
    assert untracked_byproducts(repo, byproduct_globs(contract)) == []


def test_init_adds_the_ecosystems_byproducts() -> None:
    assert "target/" in ecosystem_globs(["cargo-test"])
    assert "node_modules/" in ecosystem_globs(["tests", "npm-test"])
    assert ecosystem_globs(["make-test"]) == ()
