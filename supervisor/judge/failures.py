"""The failing tests a gate's output names: pytest, unittest, cargo, go, TAP (node), jest.

A red gate is read by a person (the gate log view, the recovery screen) and by the resumed agent
(the handoff); both need the names of the tests that failed, not 200 lines of traceback. The
runners' own summary lines are parsed: pytest's ``FAILED tests/x.py::test_y[a-b] - msg`` and
``ERROR ...`` (short test summary, any ``-r`` mode) and its verbose ``tests/x.py::test_y FAILED``,
unittest's ``FAIL: test_y (mod.Case.test_y)``, cargo's ``test a::b ... FAILED``, go's
``--- FAIL: TestY``, TAP's ``not ok 3 - name`` (``node --test`` in a pipe) and the ``✖``/``✕``
lines of node's spec reporter and jest. Parametrized ids keep their brackets exactly (``test_p[/tmp/a-/tmp/b]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

MAX_TESTS = 50
"""At most this many ids are kept per gate run (the first ones, in the order the log names them)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PATTERNS = (
    # pytest short test summary: "FAILED id - reason" or "ERROR id - reason" (id may hold spaces
    # inside its brackets, so the id ends at " - " or at the end of the line).
    re.compile(r"^(?:FAILED|ERROR) (?P<id>\S.*?)(?: - .*)?$"),
    # pytest -v: "tests/x.py::test_y FAILED  [ 50%]"
    re.compile(r"^(?P<id>\S+::\S.*?) (?:FAILED|ERROR)(?:\s+\[\s*\d+%\])?$"),
    # unittest: "FAIL: test_y (pkg.mod.Case.test_y)" / "ERROR: test_y (pkg.mod.Case)"
    re.compile(r"^(?:FAIL|ERROR): (?P<id>\S+ \([^)]*\))$"),
    # cargo test: "test a::b ... FAILED"
    re.compile(r"^test (?P<id>\S+) \.\.\. FAILED$"),
    # go test: "--- FAIL: TestY (0.01s)", subtests indented
    re.compile(r"^\s*--- FAIL: (?P<id>\S+)"),
    # TAP (node --test without a terminal, tap, prove): "not ok 3 - name", not a TODO or SKIP
    re.compile(r"^\s*not ok \d+ (?:- )?(?P<id>(?:(?!\s#\s*(?:TODO|SKIP)).)+?)\s*$", re.I),
    # node --test's spec reporter "✖ name (1.2ms)"; jest's "✕ name (3 ms)"
    re.compile(r"^\s*[✖✕] (?P<id>.+?) \(\d+(?:\.\d+)? ?m?s\)$"),
)


def failing_test(line: str) -> str | None:
    """The test id a summary ``line`` names as failing, or None."""
    clean = _ANSI.sub("", line).rstrip("\r\n").rstrip()
    if not clean or len(clean) > 2000:
        return None
    for pattern in _PATTERNS:
        match = pattern.match(clean)
        if match is not None:
            found = match.group("id").strip()
            # "ERROR collecting" headers and pytest's own "ERROR: usage" are not test ids.
            if found and not found.startswith(("collecting", "usage")):
                return found
    return None


def failing_tests(lines: Iterable[str]) -> tuple[str, ...]:
    """The distinct failing test ids in ``lines``, in order, at most :data:`MAX_TESTS`."""
    found: dict[str, None] = {}
    for line in lines:
        test = failing_test(line)
        if test is not None:
            found[test] = None
            if len(found) >= MAX_TESTS:
                break
    return tuple(found)


def failing_tests_in_log(path: Path) -> tuple[str, ...]:
    """The failing test ids a gate log names (empty if it cannot be read)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return failing_tests(handle)
    except OSError:
        return ()
