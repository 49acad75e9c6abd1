"""``.ci/run``: it runs the README's two commands as written, in a copy of the checkout, so a
contributor's ``.venv`` (and anything else ignored) is never touched.

The real script runs on a small stand-in checkout whose README's commands are quick, with the
real ruff and mypy of this environment; and the real README is checked to still hold the two
commands the script reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "run"

README = """\
# stand-in

```sh
# 1. install and run the demo (no API key, no network)
mkdir .venv && echo "installed in $PWD" > .venv/made-by-ci && echo install ran

# 2. run the tests
echo "tests ran in $PWD"
```
"""

PYPROJECT = """\
[tool.mypy]
files = ["module.py"]
"""


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout with .ci/run, a README, a contributor's .venv and untracked files."""
    src = tmp_path / "src"
    (src / ".ci").mkdir(parents=True)
    shutil.copy2(SCRIPT, src / ".ci" / "run")
    (src / "README.md").write_text(README)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "module.py").write_text('"""A module."""\n\nANSWER: int = 42\n')
    (src / ".gitignore").write_text(".venv/\nignored.txt\n")
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "stand-in")
    (src / ".venv").mkdir()
    (src / ".venv" / "precious").write_text("the contributor's environment\n")
    (src / "untracked.py").write_text('"""Not committed yet, but part of the work."""\n')
    (src / "ignored.txt").write_text("never copied\n")
    return src


def run_ci(src: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # ruff and mypy from this environment, as the README's install would provide them.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PAELLA_CI_DIR": str(work),
        "PAELLA_CI_KEEP": "1",
    }
    return subprocess.run(
        ["bash", str(src / ".ci" / "run")],
        cwd=src.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.slow
def test_ci_runs_the_readme_commands_in_a_copy_and_leaves_the_venv_alone(
    checkout: Path, tmp_path: Path
) -> None:
    work = tmp_path / "ci"

    result = run_ci(checkout, work)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tests ran in {work}" in result.stdout
    assert "install ran" in result.stdout
    # The contributor's environment is as it was; the README's .venv was made in the copy.
    assert (checkout / ".venv" / "precious").read_text() == "the contributor's environment\n"
    assert sorted(p.name for p in (checkout / ".venv").iterdir()) == ["precious"]
    assert (work / ".venv" / "made-by-ci").read_text() == f"installed in {work}\n"
    # The copy is the work: committed and untracked files, nothing ignored.
    assert (work / "module.py").exists() and (work / "untracked.py").exists()
    assert not (work / "ignored.txt").exists()


def test_ci_refuses_a_readme_without_its_two_commands(checkout: Path, tmp_path: Path) -> None:
    (checkout / "README.md").write_text("# stand-in\n\nNo commands here.\n")
    result = run_ci(checkout, tmp_path / "ci")
    assert result.returncode == 1
    assert "ci: README lost its two commands" in result.stdout
    assert (checkout / ".venv" / "precious").exists()


def test_ci_refuses_a_work_folder_that_exists(checkout: Path, tmp_path: Path) -> None:
    work = tmp_path / "taken"
    work.mkdir()
    result = run_ci(checkout, work)
    assert result.returncode == 2 and "exists; name a new folder" in result.stdout


def test_the_real_readme_still_holds_the_two_commands_ci_reads() -> None:
    """The awk lines of .ci/run, on the real README: the install makes .venv where it runs."""
    text = SCRIPT.read_text()
    programs = [
        line.split("awk '", 1)[1].split("'", 1)[0] for line in text.splitlines() if "awk '" in line
    ]
    assert len(programs) == 2
    install, test = (
        subprocess.run(
            ["awk", program, str(ROOT / "README.md")], capture_output=True, text=True, check=True
        ).stdout.strip()
        for program in programs
    )
    assert install.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e")
    assert test == "python -m pytest -q"
    assert "rm -rf .venv" not in text
