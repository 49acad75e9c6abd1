"""No import cycles among paella_tui's modules, and the layers hold: widgets never import the App
or its screens, the engine never imports the UI (read from the source with ``ast``, every import
counted: top level, inside functions, under ``TYPE_CHECKING``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_graph import cycles, import_graph, module_files

ROOT = Path(__file__).resolve().parent.parent
ROOTS = {
    "paella_tui": ROOT / "paella_tui",
    "paella_tui.supervisor": ROOT / "supervisor",
    "paella_tui.widgets": ROOT / "widgets",
}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOTS)


def test_the_graph_holds_every_module(graph: dict[str, set[str]]) -> None:
    # The symlinks paella_tui/supervisor and paella_tui/widgets name the same files once.
    assert len(graph) == len(module_files(ROOTS)) > 120
    assert "paella_tui.supervisor.run.run_loop" in graph
    assert "paella_tui.app" in graph["paella_tui.commands.engine_commands"], "a lazy import counts"


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_widgets_never_import_the_app_or_its_screens(graph: dict[str, set[str]]) -> None:
    allowed = ("paella_tui.widgets", "paella_tui.supervisor")
    bad = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("paella_tui.widgets.")
        for target in targets
        if not target.startswith(allowed)
    }
    assert bad == set()


def test_the_engine_never_imports_widgets_or_the_ui(graph: dict[str, set[str]]) -> None:
    bad = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("paella_tui.supervisor")
        for target in targets
        if not target.startswith("paella_tui.supervisor")
    }
    assert bad == set()


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph({"pkg": tmp_path / "pkg"})


@pytest.mark.parametrize(
    ("b_imports_a", "why"),
    [
        ("from pkg.a import thing\n", "top level"),
        ("def f():\n    from pkg import a\n", "inside a function"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import Thing\n",
            "under TYPE_CHECKING",
        ),
        ("from . import a\n", "relative"),
        ("from .a import thing\n", "relative, a name in the module"),
        ("import pkg.a\n", "plain import"),
    ],
)
def test_a_cycle_is_found_however_it_is_imported(
    tmp_path: Path, b_imports_a: str, why: str
) -> None:
    graph = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.sub import b\nthing = 1\n",
            "sub/__init__.py": "",
            "sub/b.py": b_imports_a.replace("from . import a", "from .. import a").replace(
                "from .a import", "from ..a import"
            ),
            "c.py": "import os\nfrom pkg import a\n",
        },
    )
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]], why


def test_a_longer_cycle_is_one_component_and_an_acyclic_graph_has_none(tmp_path: Path) -> None:
    ring = {"__init__.py": "", **{f"m{i}.py": f"import pkg.m{(i + 1) % 4}\n" for i in range(4)}}
    assert cycles(_package(tmp_path, ring)) == [["pkg.m0", "pkg.m1", "pkg.m2", "pkg.m3"]]
    chain = {"m0.py": "import pkg.m1\n", "m1.py": "import pkg.m2\n", "m2.py": "import pkg.m3\n"}
    (tmp_path / "pkg" / "m3.py").write_text("import json\n")
    assert cycles(_package(tmp_path, chain)) == []
