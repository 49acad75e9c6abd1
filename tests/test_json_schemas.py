"""The JSON outputs of ``status``, ``checkpoints`` and ``gates`` against the schemas shipped in
``paella_tui/schemas/``: real outputs of a real run (the demo, played headless in a temporary
folder: the play test_demo reads too, ``played_demo``), of a workspace with red gates and of one
with no run yet."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
from conftest import run_paella_in_process
from played_demo import GROUP, played_demo

from paella_tui.schemas import SCHEMA_NAMES, SCHEMA_VERSION, load_schema
from paella_tui.supervisor.run.events import DriftKind, GateStatus
from paella_tui.supervisor.run.run_view import RUN_STATES

# One worker for the module and test_demo's headless story: the demo is played once for both.
pytestmark = pytest.mark.xdist_group(GROUP)

RED_CONTRACT = """\
[run]
prompt = "Do the task."
agent = "true"

[[gate]]
name = "ok"
cmd = "true"

[[gate]]
name = "broken"
cmd = ["sh", "-c", "echo no; exit 3"]

[[gate]]
name = "missing"
cmd = "no-such-command-paella-test"

[[episode]]
name = "one"
gates = ["ok", "broken", "missing"]
"""


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The readers through ``cli.main`` in the test process (``run_paella_in_process``): what is
    checked is the JSON they print. The demo run itself stays the real command."""
    return run_paella_in_process


def validate(name: str, data: Any) -> None:
    """Validate ``data`` against the shipped schema of ``paella NAME --json``."""
    schema = load_schema(name)  # type: ignore[arg-type]
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(data)


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A workspace holding a finished demo run: checkpoints, a salvage, a regression, drift."""
    with played_demo(tmp_path_factory) as demo:
        assert demo.proc.returncode == 0, demo.proc.stdout + demo.proc.stderr
        yield demo.root


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_the_schemas_are_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_outputs_of_a_real_run_follow_their_schemas(demo_dir: Path, paella) -> None:
    status = json_of(paella(demo_dir, "status", "--json"))
    checkpoints = json_of(paella(demo_dir, "checkpoints", "--json"))
    gates = json_of(paella(demo_dir, "gates", "--json"))

    validate("status", status)
    validate("checkpoints", checkpoints)
    validate("gates", gates)
    for data in (status, checkpoints, gates):
        assert data["schema_version"] == SCHEMA_VERSION
    # The run really has what the schemas describe, so every branch of them was exercised.
    assert status["state"] == "done" and status["done"] is True
    assert len(checkpoints["checkpoints"]) >= 4 and len(checkpoints["salvage"]) >= 1
    assert any(isinstance(c["episode"], int) for c in checkpoints["checkpoints"])
    assert status["drift"], "the demo's regression is drift"
    assert [g["status"] for g in gates["gates"]] == ["pass"] * len(gates["gates"])


def test_red_gates_and_a_manual_run_follow_their_schemas(repo: Path, paella) -> None:
    (repo / "paella.toml").write_text(RED_CONTRACT)
    # `paella gates` opens no run of its own: a manual checkpoint opens the one it records in.
    assert paella(repo, "checkpoint").returncode == 0

    gates = json_of(paella(repo, "gates", "--json"))
    validate("gates", gates)
    by_name = {g["name"]: g for g in gates["gates"]}
    assert by_name["ok"]["status"] == "pass"
    assert by_name["broken"]["status"] == "fail" and by_name["broken"]["exit_code"] == 3
    assert by_name["missing"]["status"] == "error" and by_name["missing"]["message"]

    status = json_of(paella(repo, "status", "--json"))
    validate("status", status)
    assert {g["name"]: g["status"] for g in status["gates"]}["broken"] == "fail"
    validate("checkpoints", json_of(paella(repo, "checkpoints", "--json")))


def test_a_workspace_with_no_run_follows_the_schemas(repo: Path, paella) -> None:
    status = json_of(paella(repo, "status", "--json"))
    checkpoints = json_of(paella(repo, "checkpoints", "--json"))

    assert status is None
    validate("status", status)
    assert checkpoints == {"schema_version": SCHEMA_VERSION, "checkpoints": [], "salvage": []}
    validate("checkpoints", checkpoints)


def test_the_schemas_reject_an_undocumented_key_and_a_wrong_version(demo_dir: Path, paella) -> None:
    """A key added to an output without the schema fails the test above (not silently passes)."""
    checkpoints = json_of(paella(demo_dir, "checkpoints", "--json"))
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        validate("checkpoints", {**checkpoints, "new_key": 1})
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        first = {**checkpoints["checkpoints"][0], "extra": True}
        validate("checkpoints", {**checkpoints, "checkpoints": [first]})
    with pytest.raises(jsonschema.ValidationError):
        validate("checkpoints", {**checkpoints, "schema_version": SCHEMA_VERSION + 1})
    status = json_of(paella(demo_dir, "status", "--json"))
    with pytest.raises(jsonschema.ValidationError):
        validate("status", {**status, "state": "sleeping"})


def test_the_schemas_enums_are_the_engines_vocabulary() -> None:
    """The words the engine can write are exactly the words the schemas allow."""
    status = load_schema("status")["$defs"]["run"]["properties"]
    gates = load_schema("gates")["properties"]["gates"]["items"]["properties"]
    assert status["state"]["enum"] == list(RUN_STATES)
    assert status["gates"]["items"]["properties"]["status"]["enum"] == list(get_args(GateStatus))
    assert gates["status"]["enum"] == list(get_args(GateStatus))
    assert status["drift"]["items"]["properties"]["kind"]["enum"] == list(get_args(DriftKind))


def test_the_snapshot_records_are_defined_once() -> None:
    """status and checkpoints describe a checkpoint and a salvage snapshot identically."""
    status, checkpoints = load_schema("status"), load_schema("checkpoints")
    for name in ("checkpoint", "salvage", "skipped_file"):
        assert status["$defs"][name] == checkpoints["$defs"][name], name
