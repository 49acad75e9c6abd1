"""Failing test ids read from real runners' summary lines (pytest, unittest, cargo, go)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paella_tui.supervisor.judge.failures import (
    MAX_TESTS,
    failing_test,
    failing_tests,
    failing_tests_in_log,
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("FAILED tests/x.py::test_y - AssertionError", "tests/x.py::test_y"),
        (
            "FAILED toolz/tests/t.py::test_p[/tmp/a-/tmp/b] - x",
            "toolz/tests/t.py::test_p[/tmp/a-/tmp/b]",
        ),
        ("FAILED tests/x.py::test_q[a b] - item[key]", "tests/x.py::test_q[a b]"),
        ("FAILED tests/x.py::C::test_m", "tests/x.py::C::test_m"),
        ("ERROR tests/test_x.py - ImportError: no", "tests/test_x.py"),
        ("ERROR tests/x.py::test_f - fixture 'db' not found", "tests/x.py::test_f"),
        ("tests/x.py::test_y FAILED                    [ 50%]", "tests/x.py::test_y"),
        ("\x1b[31mFAILED\x1b[0m tests/x.py::test_c - e", "tests/x.py::test_c"),
        ("FAIL: test_y (pkg.mod.Case.test_y)", "test_y (pkg.mod.Case.test_y)"),
        ("ERROR: test_z (pkg.mod.Case.test_z)", "test_z (pkg.mod.Case.test_z)"),
        ("test parser::tests::bad ... FAILED", "parser::tests::bad"),
        ("--- FAIL: TestParse (0.00s)", "TestParse"),
        ("    --- FAIL: TestParse/empty (0.00s)", "TestParse/empty"),
        ("not ok 1 - ok[1]", "ok[1]"),
        ("    not ok 2 - nested [/x]", "nested [/x]"),
        ("not ok 3 - later # TODO not yet", None),
        ("not ok 4 - flaky # SKIP", None),
        ("ok 5 - fine", None),
        ("✖ parses dates (1.5ms)", "parses dates"),
        ("  ✕ renders [bold] (12 ms)", "renders [bold]"),
        ("✖ failing tests:", None),
        ("=== 1 failed, 3 passed in 0.1s ===", None),
        ("tests/x.py::test_y PASSED", None),
        ("FAILED", None),
        ("ERROR: usage: pytest [options]", None),
        ("", None),
    ],
)
def test_failing_test(line: str, expected: str | None) -> None:
    assert failing_test(line) == expected


def test_ids_are_distinct_in_order_and_capped() -> None:
    lines = [f"FAILED t.py::test_{i % (MAX_TESTS + 5)}" for i in range(200)]
    found = failing_tests(["FAILED t.py::test_1", *lines])
    assert found[0] == "t.py::test_1" and len(found) == MAX_TESTS == len(set(found))


def test_a_real_pytest_run(tmp_path: Path) -> None:
    """The ids come from pytest's own summary (-rfE is its default since 7.x: -rfE shown here)."""
    (tmp_path / "test_real.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('p', ['/tmp/a-/tmp/b', 'item[key]'])\n"
        "def test_paths(p):\n    assert p == 'x'\n"
        "def test_ok():\n    pass\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('[bold]')\n"
        "def test_err(broken):\n    pass\n"
    )
    log = tmp_path / "1.log"
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_real.py"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    found = failing_tests_in_log(log)
    assert set(found) == {
        "test_real.py::test_paths[/tmp/a-/tmp/b]",
        "test_real.py::test_paths[item[key]]",
        "test_real.py::test_err",
    }, log.read_text()
    assert failing_tests_in_log(tmp_path / "missing.log") == ()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_real_node_test_run(tmp_path: Path) -> None:
    """node --test in a pipe (as a gate runs it) writes TAP: its failing names are picked out."""
    (tmp_path / "a.test.js").write_text(
        'const t = require("node:test"); const a = require("node:assert");\n'
        't.test("adds [1]", () => a.equal(1 + 1, 3));\n'
        't.test("fine", () => a.equal(1, 1));\n'
    )
    log = tmp_path / "1.log"
    with log.open("w") as out:
        subprocess.run(
            ["node", "--test"], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    assert "adds [1]" in failing_tests_in_log(log), log.read_text()
    assert "fine" not in failing_tests_in_log(log)
