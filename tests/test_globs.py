"""Contract globs: ``*`` within a segment, ``**`` across segments, bare names at any depth."""

from __future__ import annotations

import pytest

from paella_tui.supervisor.globs import glob_match, match_any


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("src/a.py", "src/**", True),
        ("src/a/b/c.py", "src/**", True),
        ("src", "src/**", True),
        ("srcx/a.py", "src/**", False),
        ("tests/test_x.py", "tests/**", True),
        ("x.log", "*.log", True),
        ("build/deep/x.log", "*.log", True),
        ("x.log.txt", "*.log", False),
        ("src/a.py", "src/*.py", True),
        ("src/a/b.py", "src/*.py", False),
        ("paella.toml", "paella.toml", True),
        ("sub/paella.toml", "/paella.toml", False),
        ("a/b/c/d.txt", "a/**/d.txt", True),
        ("a/d.txt", "a/**/d.txt", True),
        ("node_modules/x/y.js", "node_modules/", True),
        ("file1", "file[0-9]", True),
        ("filex", "file[!0-9]", True),
        ("dir with space/ü.txt", "dir with space/*.txt", True),
    ],
)
def test_glob_match(path: str, pattern: str, expected: bool) -> None:
    assert glob_match(path, pattern) is expected


def test_match_any() -> None:
    assert match_any("src/x.py", ["docs/**", "src/**"])
    assert not match_any("other/x.py", ["docs/**", "src/**"])
    assert not match_any("x", [])
