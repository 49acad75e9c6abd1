"""JSON schemas of what ``paella status --json``, ``checkpoints --json``, ``gates --json``,
``steps --json`` and ``bisect GATE --json`` print.

The files beside this module are the contract for scripts: every output carries
``schema_version``, bumped when a key is removed or changes meaning. A key is added only with
the schema updated (the tests validate real outputs against these files, which reject keys they
do not name).
"""

from __future__ import annotations

import json
from typing import Any, Literal

SCHEMA_VERSION = 1
"""The ``schema_version`` every JSON output carries."""

SchemaName = Literal["status", "checkpoints", "gates", "steps", "bisect"]
SCHEMA_NAMES: tuple[SchemaName, ...] = ("status", "checkpoints", "gates", "steps", "bisect")


def load_schema(name: SchemaName) -> dict[str, Any]:
    """The JSON schema of ``paella NAME --json``, read from the installed package."""
    # Here, not at the top: importlib.resources (and tempfile) cost every command that only
    # needs SCHEMA_VERSION.
    from importlib.resources import files

    text = files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
