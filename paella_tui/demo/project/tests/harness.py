"""A tiny test runner, so the checks need nothing but Python: ``python tests/check_export.py``.

Each check module defines ``test_*`` functions that use plain ``assert`` and ends by calling
:func:`run`; pytest can run them as they are, too. Exit status 0 means every test passed.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

# Run as a script, a check sees only tests/ on sys.path: add the project root, for `ledger`.
# (os.path, not pathlib: every gate run starts here, and pathlib's import is 5 ms of its ~35.)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(namespace: dict[str, object]) -> int:
    """Run every ``test_*`` function in ``namespace``; print one line each; 1 if any failed."""
    tests: list[tuple[str, Callable[[], object]]] = [
        (name, value)
        for name, value in namespace.items()
        if name.startswith("test_") and callable(value)
    ]
    failed = 0
    for name, test in tests:
        try:
            test()
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)
        else:
            print(f"ok   {name}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0
