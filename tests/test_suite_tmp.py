"""The suite's temporary folder (suite_tmp.py): the one named, else TMPDIR as set, else memory
with room, else the default; and the workers and their children really work there."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from suite_tmp import CHOICE_VARIABLE, chosen_temp_root, free_bytes


def test_a_named_folder_wins_over_tmpdir_and_memory(tmp_path: Path) -> None:
    env = {CHOICE_VARIABLE: str(tmp_path / "named"), "TMPDIR": "/elsewhere"}
    assert chosen_temp_root(env, memory=tmp_path, room=0) == tmp_path / "named"


def test_tmpdir_set_by_whoever_started_pytest_stands(tmp_path: Path) -> None:
    assert chosen_temp_root({"TMPDIR": "/elsewhere"}, memory=tmp_path, room=0) is None


def test_memory_with_room_is_chosen_and_without_room_or_absent_is_not(tmp_path: Path) -> None:
    room = free_bytes(tmp_path)
    assert room > 0
    assert chosen_temp_root({}, memory=tmp_path, room=room // 2) == (
        tmp_path / f"paella-tests-{os.getuid()}"
    )
    assert chosen_temp_root({}, memory=tmp_path, room=room * 4) is None  # a 64 MB /dev/shm
    assert chosen_temp_root({}, memory=tmp_path / "absent", room=0) is None
    assert free_bytes(tmp_path / "absent") == 0


def test_the_tests_and_their_subprocesses_work_in_the_chosen_folder(tmp_path: Path) -> None:
    """Whatever was chosen, a test's folder and a child's temporary folder are under TMPDIR."""
    root = Path(tempfile.gettempdir()).resolve()
    if os.environ.get("TMPDIR"):
        assert Path(os.environ["TMPDIR"]).resolve() == root
    assert root in tmp_path.resolve().parents
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).resolve() == root
