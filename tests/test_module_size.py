"""Modules that fit in a head (issue 14): no product module is over 500 lines.

Product modules are the Python files of ``supervisor/``, ``widgets/`` and ``paella_tui/``, except
the demo's sample project (``paella_tui/demo/project``, ``paella_tui/demo/edits``: data the scripted
agent edits, not paella's code). ``paella_tui/supervisor`` and ``paella_tui/widgets`` are symlinks
to the root folders, so each module is counted once, where it lives. The complexity half of the
rule (no function over cyclomatic complexity 15) is ruff's ``C901`` in ``pyproject.toml``.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("supervisor", "widgets", "paella_tui")
EXCLUDED = ("paella_tui/demo/project", "paella_tui/demo/edits")
MAX_LINES = 500


def module_sizes(root: Path) -> dict[str, int]:
    """Each product module under ``root`` (a path relative to it) and its number of lines."""
    sizes: dict[str, int] = {}
    for package in PRODUCT:
        # os.walk does not follow symlinked folders: the engine and widgets count once.
        for folder, dirs, files in os.walk(root / package):
            rel_folder = Path(folder).relative_to(root).as_posix()
            dirs[:] = sorted(d for d in dirs if f"{rel_folder}/{d}" not in EXCLUDED)
            for name in sorted(files):
                if name.endswith(".py"):
                    text = (Path(folder) / name).read_text(encoding="utf-8")
                    sizes[f"{rel_folder}/{name}"] = len(text.splitlines())
    return sizes


def oversized(sizes: dict[str, int]) -> list[str]:
    """``path: N lines`` for each module over the limit, biggest first."""
    over = sorted(((n, path) for path, n in sizes.items() if n > MAX_LINES), reverse=True)
    return [f"{path}: {n} lines" for n, path in over]


def test_no_product_module_is_over_500_lines() -> None:
    sizes = module_sizes(ROOT)
    # The walk sees every part (a walk that found nothing would pass for the wrong reason).
    assert {path.split("/")[0] for path in sizes} == set(PRODUCT)
    assert "supervisor/contract/model.py" in sizes
    assert "paella_tui/cli.py" in sizes
    assert not any(path.startswith(EXCLUDED) for path in sizes)
    assert not any(
        path.startswith(("paella_tui/supervisor/", "paella_tui/widgets/")) for path in sizes
    )
    offenders = oversized(sizes)
    assert offenders == [], (
        f"{len(offenders)} product module(s) over {MAX_LINES} lines; split each along its seams "
        "(issue 14):\n  " + "\n  ".join(offenders)
    )


def test_the_count_names_each_offender_and_skips_the_demo_project(tmp_path: Path) -> None:
    def write(rel: str, lines: int) -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines, encoding="utf-8")

    write("supervisor/run/long.py", MAX_LINES + 1)
    write("supervisor/run/at_limit.py", MAX_LINES)
    write("widgets/longer.py", MAX_LINES + 40)
    write("paella_tui/demo/project/huge.py", 5 * MAX_LINES)
    write("paella_tui/demo/edits/huge.py", 5 * MAX_LINES)
    write("paella_tui/demo/scenario.py", 10)
    (tmp_path / "paella_tui" / "supervisor").symlink_to(tmp_path / "supervisor")

    sizes = module_sizes(tmp_path)

    assert sizes == {
        "supervisor/run/long.py": MAX_LINES + 1,
        "supervisor/run/at_limit.py": MAX_LINES,
        "widgets/longer.py": MAX_LINES + 40,
        "paella_tui/demo/scenario.py": 10,
    }
    assert oversized(sizes) == [
        f"widgets/longer.py: {MAX_LINES + 40} lines",
        f"supervisor/run/long.py: {MAX_LINES + 1} lines",
    ]
