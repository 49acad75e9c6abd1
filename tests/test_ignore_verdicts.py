"""The burst's ignore verdicts equal ``git check-ignore`` (with the index) on random trees.

Real git on real files: nested ``.gitignore`` files with negations, folder-only rules, ``**``
and anchored rules; tracked files that match a rule (force-added); paths that are folders, that
are gone, or that lie under an ignored folder; asked in random batches of one burst, so that
what a folder decided in one batch is reused in the next.
"""

from __future__ import annotations

import shutil
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


def _deleted_files(root: Path, made: list[str], folders: list[str]) -> list[str]:
    """Remove ``folders`` (those that exist); the files of ``made`` that went with them."""
    gone: list[str] = []
    for folder in folders:
        if (root / folder).is_dir():
            shutil.rmtree(root / folder)
    for rel in made:
        if not (root / rel).exists():
            gone.append(rel)
    return gone


@settings(max_examples=100, deadline=None)
@given(
    files=paths_strategy,
    rules=st.dictionaries(
        st.sampled_from(["", "a", "b", "a/b", "build"]),
        st.lists(st.sampled_from(RULES), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    ),
    tracked=st.sets(st.integers(0, 30), max_size=6),
    deleted=st.lists(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join), max_size=4
    ),
    batches=st.integers(1, 4),
    data=st.data(),
)
def test_a_deleted_folder_stands_for_every_change_in_it(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[str],
    rules: dict[str, list[str]],
    tracked: set[int],
    deleted: list[str],
    batches: int,
    data: st.DataObject,
) -> None:
    """Deleted folders, reported by their stand-ins: no deletion git could see goes unreported.

    Relevant means what ``git check-ignore`` with the index said before the deletion: not
    ignored, or tracked. Every relevant deleted file must have its stand-in reported (the file
    itself, or a gone folder holding it); a stand-in is never anything else.
    """
    root = make_repo(tmp_path_factory.mktemp("gone") / "repo")
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
    before = set(made) - _git_check_ignore(root, made)
    # The watcher's events: every deleted file, and the deleted folders themselves.
    gone = _deleted_files(root, made, deleted)
    events = gone + [f for f in {f for p in gone for f in folders_of(p)} if not (root / f).exists()]
    order = data.draw(st.permutations(events))

    verdicts = IgnoreVerdicts(Git(root))
    stand_ins: dict[str, str] = {}
    reported: set[str] = set()
    size = max(1, len(order) // batches)
    for start in range(0, len(order), size):
        batch = {p: verdicts.stand_in(p) for p in order[start : start + size]}
        stand_ins.update(batch)
        asked = sorted(set(batch.values()))
        reported |= set(asked) - verdicts.ignored(asked)
    for path, stand_in in stand_ins.items():
        assert stand_in == path or (
            path.startswith(stand_in + "/") and not (root / stand_in).exists()
        )
    missed = {p for p in gone if p in before and stand_ins[p] not in reported}
    assert not missed


def test_a_deleted_ignored_folder_reports_nothing_but_its_tracked_files(tmp_path: Path) -> None:
    """``rm -rf build`` of 300 ignored files costs one question to the rules and one listing of
    the tracked files, whatever their number; a deleted folder git sees is reported as itself."""
    root = make_repo(tmp_path / "repo")
    (root / ".gitignore").write_text("build/\n")
    files = [f"build/d{i // 100}/f{i}.o" for i in range(300)] + ["src/a/x.c", "src/b/y.c"]
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    subprocess.run(["git", "add", "-f", "build/d2/f299.o"], cwd=root, check=True)
    shutil.rmtree(root / "build" / "d0")
    shutil.rmtree(root / "build" / "d1")
    shutil.rmtree(root / "src")
    verdicts = IgnoreVerdicts(Git(root))
    gone = [p for p in files if not p.startswith("build/d2/")]
    stand_ins = {verdicts.stand_in(p) for p in gone}
    assert stand_ins == {"build/d0", "build/d1", "src"}
    assert verdicts.ignored(stand_ins) == {"build/d0", "build/d1"}
    assert verdicts.git_calls == 2
    # The tracked file under the ignored folder counts when its folder goes.
    shutil.rmtree(root / "build")
    assert verdicts.stand_in("build/d2/f299.o") == "build/d2"  # known gone... outermost then
    fresh = IgnoreVerdicts(Git(root))
    assert fresh.stand_in("build/d2/f299.o") == "build"
    assert fresh.ignored(["build"]) == set()


def test_a_name_judged_as_a_plain_path_is_no_stand_in(tmp_path: Path) -> None:
    """An empty folder's own deletion is judged by its name (git cannot tell it was a folder):
    a later path under a folder of that name is judged by itself, not by that verdict."""
    root = make_repo(tmp_path / "repo")
    # Whitelisting: every file ignored but C files, in any folder.
    (root / ".gitignore").write_text("*\n!*/\n!*.c\n")
    (root / "src").mkdir()
    (root / "src").rmdir()
    verdicts = IgnoreVerdicts(Git(root))
    assert verdicts.ignored(["src"]) == {"src"}  # "src" as a file would be ignored
    assert verdicts.stand_in("src/a.c") == "src/a.c"
    assert verdicts.ignored(["src/a.c"]) == set()
    # Asked as a folder from the start, the gone folder is not ignored.
    fresh = IgnoreVerdicts(Git(root))
    assert fresh.stand_in("src/a.c") == "src"
    assert fresh.ignored(["src"]) == set()
