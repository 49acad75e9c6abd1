"""What the suite does after each test (conftest): a passed test's folder emptied but kept (its
name stays taken), every dead child reaped and no live one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import empty_folder, reap_dead_children
from waiting import wait_until


def test_emptying_a_folder_removes_everything_inside_and_keeps_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "test_x0"
    (folder / "repo" / ".git" / "objects").mkdir(parents=True)
    (folder / "repo" / ".git" / "objects" / "blob").write_bytes(b"x" * 10)
    (folder / "file").write_text("data\n")
    locked = folder / "locked" / "inner"
    locked.mkdir(parents=True)
    (locked / "kept").write_text("x")
    locked.chmod(0o500)
    (folder / "locked").chmod(0o000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("not mine\n")
    (folder / "link").symlink_to(outside, target_is_directory=True)
    (folder / "dangling").symlink_to(tmp_path / "nowhere")

    empty_folder(folder)

    assert folder.is_dir() and list(folder.iterdir()) == []
    assert (outside / "target").read_text() == "not mine\n"  # a link is removed, not followed


def test_emptying_a_folder_that_is_gone_does_nothing(tmp_path: Path) -> None:
    empty_folder(tmp_path / "gone")
    assert not (tmp_path / "gone").exists()


def test_reaping_takes_the_dead_children_and_leaves_the_live_ones() -> None:
    live = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    try:
        wait_until(lambda: _state(dead.pid) == "Z", f"child {dead.pid} to be a zombie")

        reap_dead_children()

        assert not os.path.exists(f"/proc/{dead.pid}")  # reaped: no zombie left
        assert _state(live.pid) in {"S", "R"} and live.poll() is None
    finally:
        live.kill()
        live.wait()


def _state(pid: int) -> str | None:
    """The process's state letter (``Z`` for a zombie), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
