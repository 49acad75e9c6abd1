"""The engine stays headless: importing ``paella_tui.supervisor`` (all of it) never imports Textual or the UI modules."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import paella_tui.supervisor


def test_supervisor_never_imports_textual() -> None:
    modules = [
        m.name
        for m in pkgutil.walk_packages(
            paella_tui.supervisor.__path__, prefix="paella_tui.supervisor."
        )
    ]
    assert len(modules) > 40
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "ui = ('textual', 'widgets', 'supervisor')\n"
        "def ours(m): return m == 'paella_tui' or m.startswith('paella_tui.supervisor')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ui\n"
        "             or (m.split('.')[0] == 'paella_tui' and not ours(m)))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"supervisor imported UI modules: {out.stdout}"


def test_help_does_not_import_textual_or_gitpython() -> None:
    code = (
        "import sys\n"
        "from paella_tui.cli_parser import build_parser\n"
        "build_parser().format_help()\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'git', 'psutil') or m.startswith('paella_tui.supervisor'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
