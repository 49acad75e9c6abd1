"""The burst's ignore verdicts equal ``git check-ignore`` (with the index) on random trees.

Real git on real files: nested ``.gitignore`` files with negations, folder-only rules, ``**``
and anchored rules; tracked files that match a rule (force-added); paths that are folders, that
are gone, or that lie under an ignored folder; asked in random batches of one burst, so that
what a folder decided in one batch is reused in the next.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import make_repo
from hypothesis import given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.store.gitcli import Git, encode_paths_z
from paella_tui.supervisor.watch.ignore_verdicts import IgnoreVerdicts, folders_of

# No glob characters here: ``git check-ignore`` matches each path it is given as a pathspec glob
# against the index, so ``x*/build`` counts as tracked when ``x*/a/build`` is. Names with glob
# characters have their own test below, against what a snapshot leaves out.
NAMES = ["a", "b", "build", "x.log", "keep", "c d", "ü"]
RULES = [
    "*.log",
    "!x.log",
    "build/",
    "build",
    "/a",
    "b/",
    "a/b",
    "**/keep",
    "!keep",
    "*",
    "!*/",
    "c d/",
    "!build/",
    "b/**",
    "ü",
    "#comment",
]

paths_strategy = st.lists(
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join),
    min_size=1,
    max_size=25,
    unique=True,
)


def _tree(root: Path, files: list[str]) -> list[str]:
    """Write ``files`` (a path that is also a folder elsewhere is left out); the files made."""
    made: list[str] = []
    for rel in sorted(files, key=lambda p: p.count("/"), reverse=True):
        target = root / rel
        if target.exists() or any((root / f).is_file() for f in folders_of(rel)):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rel + "\n")
        made.append(rel)
    return made


def _git_check_ignore(root: Path, paths: list[str]) -> set[str]:
    proc = subprocess.run(
        ["git", "check-ignore", "-z", "--stdin"],
        cwd=root,
        input=encode_paths_z(paths),
        capture_output=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return {p.decode(errors="surrogateescape") for p in proc.stdout.split(b"\0") if p}


@settings(max_examples=120, deadline=None)
@given(
    files=paths_strategy,
    rules=st.dictionaries(
        st.sampled_from(["", "a", "b", "a/b", "build"]),
        st.lists(st.sampled_from(RULES), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    ),
    tracked=st.sets(st.integers(0, 30), max_size=6),
    gone=st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)),
    batches=st.integers(1, 4),
    data=st.data(),
)
@pytest.mark.slow
def test_verdicts_equal_git_check_ignore(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[str],
    rules: dict[str, list[str]],
    tracked: set[int],
    gone: list[str],
    batches: int,
    data: st.DataObject,
) -> None:
    root = make_repo(tmp_path_factory.mktemp("ign") / "repo")
    made = _tree(root, files)
    for folder, lines in rules.items():
        where = root / folder
        if any((root / f).is_file() for f in [*folders_of(folder), folder] if f):
            continue
        where.mkdir(parents=True, exist_ok=True)
        (where / ".gitignore").write_text("\n".join(lines) + "\n")
    force = [made[i] for i in sorted(tracked) if i < len(made)]
    if force:
        subprocess.run(["git", "add", "-f", "--", *force], cwd=root, check=True)
    folders = {f for p in made for f in folders_of(p)}
    asked = sorted(set(made) | folders | set(gone) | {f"{p}/new" for p in folders})
    expected = _git_check_ignore(root, asked)

    verdicts = IgnoreVerdicts(Git(root))
    order = data.draw(st.permutations(asked))
    got: set[str] = set()
    size = max(1, len(order) // batches)
    for start in range(0, len(order), size):
        got |= verdicts.ignored(order[start : start + size])
    assert got == expected
    # Asked again, nothing new is asked of git, and the answer is the same.
    calls = verdicts.git_calls
    assert verdicts.ignored(asked) == expected
    assert verdicts.git_calls == calls


def test_an_ignored_folder_decides_its_files_without_asking_again(tmp_path: Path) -> None:
    """The files of a new ignored folder, reported over many batches, cost no more git."""
    root = make_repo(tmp_path / "repo")
    (root / ".gitignore").write_text("vendor/\n")
    (root / "vendor" / "pkg").mkdir(parents=True)
    verdicts = IgnoreVerdicts(Git(root))
    assert verdicts.ignored(["vendor/pkg/a.c"]) == {"vendor/pkg/a.c"}
    calls = verdicts.git_calls
    for batch in range(5):
        names = [f"vendor/pkg/f{batch}_{i}.c" for i in range(100)]
        assert verdicts.ignored(names) == set(names)
    assert verdicts.git_calls == calls


def test_a_tracked_file_under_an_ignored_folder_is_not_ignored(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    (root / ".gitignore").write_text("gen/\n")
    (root / "gen").mkdir()
    (root / "gen" / "kept.c").write_text("x\n")
    subprocess.run(["git", "add", "-f", "gen/kept.c"], cwd=root, check=True)
    (root / "gen" / "new.c").write_text("x\n")
    verdicts = IgnoreVerdicts(Git(root))
    assert verdicts.ignored(["gen/kept.c", "gen/new.c", "gen"]) == {"gen/new.c"}


def test_a_name_with_glob_characters_is_only_itself(tmp_path: Path) -> None:
    """``x*/build`` is ignored though ``x*/a/build`` is tracked: the verdict a snapshot follows
    (``ls-files --others --ignored``), where ``check-ignore`` would take the name as a glob."""
    root = make_repo(tmp_path / "repo")
    (root / ".gitignore").write_text("build\n")
    for rel in ("x*/a/build", "x*/build", "x?/build"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    subprocess.run(["git", "add", "-f", "x*/a/build"], cwd=root, check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--others", "--ignored", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    left_out = {p.decode() for p in listed.split(b"\0") if p}
    assert left_out == {"x*/build", "x?/build"}
    verdicts = IgnoreVerdicts(Git(root))
    assert verdicts.ignored(["x*/a/build", "x*/build", "x?/build"]) == left_out
