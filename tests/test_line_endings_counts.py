"""Line counts of a change whose line endings flipped (CRLF ↔ LF).

Snapshots hold raw bytes, so an editor that writes LF into a CRLF checkout (``core.autocrlf``)
changes every line of the file. In a trial on a real project a one-line edit read "+5,645
−5,644" in the step, the recovery screen and the handoff. A rewrite-sized change is now counted
with a CR at the end of a line ignored, and flagged: every kind of file in one real diff.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import make_repo
from test_tui_screens import Host, diff_text, screen_text, settle

from paella_tui.diff_screen import DiffScreen
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.tree_diff import REWRITE_LINES, changes_between
from paella_tui.supervisor.store.workspace import Workspace

N = REWRITE_LINES + 10


def lines(n: int, eol: bytes, start: int = 0) -> bytes:
    return b"".join(b"line %d%s" % (i, eol) for i in range(start, start + n))


# name: (bytes before, bytes after, the change expected as (added, removed, line_endings))
CASES: dict[str, tuple[bytes, bytes, tuple[int | None, int | None, bool]]] = {
    "crlf-to-lf.txt": (lines(N, b"\r\n"), lines(N, b"\n"), (0, 0, True)),
    "lf-to-crlf.txt": (lines(N, b"\n"), lines(N, b"\r\n"), (0, 0, True)),
    "flip-and-edit.py": (lines(N, b"\r\n"), lines(N, b"\n") + b"one more\n", (1, 0, True)),
    "rewrite.txt": (lines(N, b"\n"), lines(N, b"\n", start=1000), (N, N, False)),
    "small-flip.txt": (lines(3, b"\r\n"), lines(3, b"\n"), (3, 3, False)),
    "edit.txt": (lines(N, b"\n"), lines(N, b"\n") + b"tail\n", (1, 0, False)),
    "star * name.txt": (lines(N, b"\r\n"), lines(N, b"\n"), (0, 0, True)),
    "binary.bin": (b"\0\1\2" * 50, b"\0\2\1" * 50, (None, None, False)),
}


def _tree(repo: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        (repo / name).write_bytes(data)
    return Snapshotter(Workspace.find(repo)).take_locked().tree


@pytest.mark.parametrize("autocrlf", ["false", "true"])
def test_each_kind_of_change_is_counted_apart_from_its_line_endings(
    tmp_path: Path, autocrlf: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    subprocess.run(["git", "config", "core.autocrlf", autocrlf], cwd=repo, check=True)
    before = _tree(repo, {name: old for name, (old, _new, _want) in CASES.items()})
    after = _tree(repo, {name: new for name, (_old, new, _want) in CASES.items()})
    got = {
        c.path: (c.added, c.removed, c.line_endings)
        for c in changes_between(Workspace.find(repo), before, after)
    }
    assert got == {name: want for name, (_old, _new, want) in CASES.items()}


async def test_the_diff_screen_names_the_line_endings_and_shows_the_other_changes(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    old, new, _want = CASES["flip-and-edit.py"]
    (repo / "flip.py").write_bytes(old)
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    record = take_checkpoint(run, Snapshotter(workspace), label="before")
    (repo / "flip.py").write_bytes(new)
    app = Host(lambda: DiffScreen(run, record))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        diff = diff_text(app)
    assert "flip.py +1 −0 line endings" in text
    assert diff.startswith("The line endings changed (CRLF ↔ LF)")
    assert "+one more" in diff
    assert "-line 0" not in diff, "the lines that changed only their ending are not shown"
