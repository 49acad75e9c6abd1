"""A project's first day through the real console script: init and check on a fresh repository,
panes laid out before the first run, a checkpoint before the task is written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import tomli_w


def paella_proc(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """``paella ARGS`` in the background, its output in a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "paella_tui", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 20.0) -> str:
    """Lines of ``proc``'s stdout until one holds ``needle`` (fail with what came otherwise)."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            seen.append(line)
            if needle in line:
                return "".join(seen)
        else:
            time.sleep(0.05)
    raise AssertionError(f"{needle!r} never came; saw:\n{''.join(seen)}")


def test_init_then_check_on_a_python_project_without_gitignore(repo: Path, paella) -> None:
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (repo / "src").mkdir()
    (repo / "src" / "m.py").write_text("x = 1\n")
    (repo / "src" / "__pycache__").mkdir()
    (repo / "src" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    subprocess.run(["git", "add", "pyproject.toml", "src/m.py"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "src"], cwd=repo, check=True)

    init = paella(repo, "init", "--agent", "true")
    assert init.returncode == 0, init.stderr
    assert "add to .gitignore: __pycache__/ *.pyc .pytest_cache/" in init.stdout
    text = (repo / "paella.toml").read_text()
    assert 'ignore = ["__pycache__/", "*.pyc", ".pytest_cache/", ".coverage", "htmlcov/"]' in text

    # A bare folder name is a folder, as in .gitignore; a pattern that names nothing is flagged.
    text = text.replace('# scope = ["src/**", "tests/**"]', 'scope = ["src", "lib/**"]')
    (repo / "paella.toml").write_text(text)
    check = paella(repo, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    warnings = [line for line in check.stdout.splitlines() if line.startswith("⚠")]
    assert any("still the template's 'Describe the task here.'" in w for w in warnings), warnings
    assert any("scope: 'lib/**' matches no file" in w for w in warnings), warnings
    assert not any("'src'" in w for w in warnings), warnings
    assert any(
        "1 untracked byproduct" in w and "src/__pycache__/m.cpython-311.pyc" in w for w in warnings
    ), warnings

    (repo / ".gitignore").write_text("__pycache__/\n")
    text = text.replace('prompt = "Describe the task here."', 'prompt = "Make m two."')
    (repo / "paella.toml").write_text(text.replace('"lib/**"', '"src/**"'))
    quiet = paella(repo, "check")
    assert not [line for line in quiet.stdout.splitlines() if line.startswith("⚠")], quiet.stdout


def test_checkpoint_and_rollback_need_no_task(repo: Path, paella) -> None:
    (repo / "paella.toml").write_text(tomli_w.dumps({"run": {"agent": "true"}}))
    (repo / "a.txt").write_text("one\n")
    taken = paella(repo, "checkpoint")
    assert taken.returncode == 0, taken.stderr
    (repo / "a.txt").write_text("two\n")
    back = paella(repo, "rollback", "1", "--yes")
    assert back.returncode == 0, back.stdout + back.stderr
    assert (repo / "a.txt").read_text() == "one\n"


def test_log_follow_and_status_watch_wait_for_the_first_run(repo: Path, paella) -> None:
    (repo / "paella.toml").write_text(tomli_w.dumps({"run": {"agent": "true", "prompt": "x"}}))
    follow = paella_proc(repo, "log", "-f")
    watch = paella_proc(repo, "status", "--watch")
    try:
        read_until(follow, "waiting for a run")
        read_until(watch, "waiting for a run")
        assert follow.poll() is None and watch.poll() is None, "they must wait, not exit 2"
        assert paella(repo, "checkpoint", "--label", "first").returncode == 0
        read_until(follow, "checkpoint 1 (manual: first)")
        read_until(watch, "run ")
    finally:
        for proc in (follow, watch):
            proc.terminate()
            proc.wait(10)
