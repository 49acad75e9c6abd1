"""The import graph of a set of Python source folders, read with ``ast`` (nothing is imported).

Every ``import`` and ``from ... import`` counts, wherever it stands: at the top, inside a
function (a lazy import is still a dependency) and under ``TYPE_CHECKING`` (a cycle of types is
still a cycle a reader has to hold in their head).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_files(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Module name → file, for each ``prefix → folder`` (``paella_tui.widgets → widgets/``)."""
    found: dict[str, Path] = {}
    for prefix, folder in roots.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def imports_of(path: Path, name: str, known: Iterable[str]) -> set[str]:
    """The known modules the module ``name`` (at ``path``) imports."""
    modules = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update(_known(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                edges.add(sub if sub in modules else _known(base, modules))
    edges.discard("")
    edges.discard(name)
    return edges


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _known(name: str, modules: set[str]) -> str:
    """The module ``name`` names, or the empty string for one outside the graph."""
    return name if name in modules else ""


def import_graph(roots: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of the same roots it imports."""
    files = module_files(roots)
    return {name: imports_of(path, name, files) for name, path in files.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
