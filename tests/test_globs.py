"""Contract globs: ``*`` within a segment, ``**`` across segments, bare names at any depth."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paella_tui.supervisor.base.globs import folder_match, glob_match, match_any, unmatched


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


# --- .gitignore semantics, one implementation for every key ------------------------------------


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        # A bare name covers its folder, at any depth (scope = ["src"], protect = ["tests"]).
        ("src/a/b.py", "src", True),
        ("lib/src/a.py", "src", True),
        ("srcx/a.py", "src", False),
        ("tests/test_x.py", "tests", True),
        # A leading slash anchors; a slash inside anchors too.
        ("lib/src/a.py", "/src", False),
        ("lib/src/a.py", "src/a.py", False),
        # A trailing slash names a folder: its files match, a file of that name does not.
        ("a/__pycache__/x.pyc", "__pycache__/", True),
        ("__pycache__", "__pycache__/", False),
        ("a/__pycache__/", "__pycache__/", True),
        ("x/node_modules/.cache/y", "**/node_modules/.cache/", True),
        ("x/node_modules/y", "**/node_modules/.cache/", False),
    ],
)
def test_gitignore_semantics(path: str, pattern: str, expected: bool) -> None:
    assert glob_match(path, pattern) is expected


def test_a_negation_takes_paths_back_the_last_match_wins() -> None:
    patterns = ["tests", "!tests/fixtures/"]
    assert match_any("tests/test_a.py", patterns)
    assert not match_any("tests/fixtures/data.json", patterns)
    assert match_any("tests/fixtures/data.json", [*patterns, "*.json"])


def test_folder_match_covers_everything_under_a_matched_folder() -> None:
    assert folder_match("a/__pycache__", ["__pycache__/"])
    assert folder_match("build/deep/er", ["build"])
    assert not folder_match("src", ["__pycache__/", "*.pyc"])


@pytest.mark.parametrize(
    ("patterns", "paths", "expected"),
    [
        (["src", "lib/**"], ["src/a.py", "README"], ["lib/**"]),
        (["*.py", "docs/"], ["x/y.py", "docs/index.md"], []),
        (["!keep", "nothing"], ["a"], ["nothing"]),
        ([], ["a"], []),
    ],
)
def test_unmatched_names_patterns_that_match_no_file(
    patterns: list[str], paths: list[str], expected: list[str]
) -> None:
    assert unmatched(patterns, paths) == expected


@given(
    st.lists(
        st.sampled_from(["a", "b", "src", "tests", "x.py", "__pycache__"]), min_size=1, max_size=4
    )
)
def test_a_bare_name_covers_every_path_under_it(parts: list[str]) -> None:
    path = "/".join(parts)
    for i, name in enumerate(parts[:-1]):
        assert match_any(path, [name]), (path, name, i)
