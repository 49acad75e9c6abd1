"""Rewrite the sample table of tests/corpus/README.md from the sidecars: `python tests/corpus/readme_table.py`."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent
MARK = "| sample | ending | CLI | source | trimmed |"


def main() -> None:
    """Replace everything after the table header with one row per sample."""
    rows = []
    for path in sorted(ROOT.glob("*/*.toml")):
        meta = tomllib.loads(path.read_text())
        cells = [
            f"`{path.parent.name}/{path.stem}`",
            meta["expect"]["ending"],
            meta["cli"],
            meta["source"],
            meta["trimmed"],
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    readme = ROOT / "README.md"
    head = readme.read_text().split(MARK)[0]
    readme.write_text(head + MARK + "\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
