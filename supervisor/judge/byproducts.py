"""What the gates themselves write (bytecode, caches, coverage data): never the agent's work.

A gate that runs pytest writes ``__pycache__`` folders and ``.pytest_cache`` into the tree; in
a project without a ``.gitignore`` those files would look like the agent's changes (drift on a
protected folder, a tree that moved under a running gate, ``.pyc`` files in checkpoints). The
globs here are left out of snapshots, and so of checkpoints, diffs, drift and staleness, and
the watcher ignores them. They are the ones no project keeps as source; the ecosystem-specific
ones (``target/`` for cargo, ``node_modules/`` for npm) are written into ``[watch] ignore`` by
``paella init`` when it sees the ecosystem, since only then is the folder surely generated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.supervisor.base.globs import match_any
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.contract.model import Contract

BYPRODUCTS: tuple[str, ...] = (
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".tox/",
    ".nox/",
    ".coverage",
    ".coverage.*",
    "htmlcov/",
    "*.egg-info/",
    "**/node_modules/.cache/",
    ".nyc_output/",
)
"""Always left out: caches and coverage data of common test tools, never source."""

ECOSYSTEM_BYPRODUCTS: dict[str, tuple[str, ...]] = {
    "pytest": ("__pycache__/", "*.pyc", ".pytest_cache/", ".coverage", "htmlcov/"),
    "npm": ("node_modules/", "coverage/", ".nyc_output/"),
    "cargo": ("target/",),
    "go": ("coverage.out", "*.test"),
}
"""What ``paella init`` adds to ``[watch] ignore`` (and offers for ``.gitignore``) per ecosystem."""

# The gate commands ``contract_template.detect_gates`` writes, by ecosystem.
_GATE_ECOSYSTEM = {"tests": "pytest", "npm-test": "npm", "cargo-test": "cargo", "go-test": "go"}


def byproduct_globs(contract: Contract) -> tuple[str, ...]:
    """Every glob left out of snapshots and watching: the built-in ones, then ``[watch] ignore``."""
    return tuple(dict.fromkeys((*BYPRODUCTS, *contract.watch.ignore)))


def ecosystem_globs(gate_names: list[str]) -> tuple[str, ...]:
    """The byproduct globs of the ecosystems behind detected gates (by their names), in order."""
    found: list[str] = []
    for name in gate_names:
        found.extend(ECOSYSTEM_BYPRODUCTS.get(_GATE_ECOSYSTEM.get(name, ""), ()))
    return tuple(dict.fromkeys(found))


def untracked_byproducts(root: Path, globs: tuple[str, ...]) -> list[str]:
    """Untracked, not git-ignored files under ``root`` that are byproducts (for ``check``)."""
    files = Git(root).lines_z(["ls-files", "-z", "--others", "--exclude-standard"])
    return [path for path in files if match_any(path, globs)]


def gitignore_lines(paths: list[str], globs: tuple[str, ...]) -> list[str]:
    """The globs that cover ``paths``: the lines to add to ``.gitignore``, in ``globs`` order."""
    return [g for g in globs if any(match_any(p, (g,)) for p in paths)]


def snapshotter_for(workspace: Workspace, contract: Contract | None) -> Snapshotter:
    """A snapshotter with ``contract``'s size cap that leaves its byproducts out (defaults without one)."""
    if contract is None:
        return Snapshotter(workspace, exclude=BYPRODUCTS)
    return Snapshotter(
        workspace, max_file_size=contract.run.max_file_size, exclude=byproduct_globs(contract)
    )
