"""Ignore rules that live outside the work tree (``info/exclude``, ``core.excludesFile``, git's
default excludes file) decide which folders the watcher leaves unwatched, and no change in the
work tree shows when they change. A folder they stop ignoring must be watched again (its edits
reported); one they start ignoring must be left. Real repositories, the real watcher.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import GitRunner
from test_watcher import watching, write
from waiting import wait_until_async

from paella_tui.supervisor.watch.watch_plan import RULES_LOOK_S

# Each case waits for the watcher's look at the rules (every RULES_LOOK_S), hardly using the CPU.
pytestmark = pytest.mark.waits


def _info_exclude(repo: Path, git: GitRunner, tmp_path: Path) -> Path:
    return repo / ".git" / "info" / "exclude"


def _configured(repo: Path, git: GitRunner, tmp_path: Path) -> Path:
    path = tmp_path / "my-excludes"
    git.run(repo, "config", "core.excludesFile", str(path))
    return path


def _xdg_default(repo: Path, git: GitRunner, tmp_path: Path) -> Path:
    # This test's own XDG_CONFIG_HOME (set before the watcher and its git start).
    return Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "ignore"


WHERE: dict[str, Callable[[Path, GitRunner, Path], Path]] = {
    "info/exclude": _info_exclude,
    "core.excludesFile": _configured,
    "git's default excludes file": _xdg_default,
}


def _deep(watcher: object) -> set[str]:
    plan = watcher.plan  # type: ignore[attr-defined]
    return set(plan.deep) | set(plan.flat) if plan is not None else set()


@pytest.mark.parametrize("where", list(WHERE))
async def test_a_folder_the_excludes_stop_ignoring_is_watched_again(
    repo: Path, git: GitRunner, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    rules = WHERE[where](repo, git, tmp_path)
    rules.parent.mkdir(parents=True, exist_ok=True)
    rules.write_text("gen/\n")
    write(repo, "gen/old.py")
    write(repo, "src/app.py")
    gen = str(repo / "gen")
    async with watching(repo) as (watcher, rec):
        assert gen not in _deep(watcher)
        rules.write_text("# gen/ is ours now\n")
        await wait_until_async(
            lambda: gen in _deep(watcher),
            "gen/ watched once the excludes file no longer ignores it",
            timeout=RULES_LOOK_S + 10,
            show=lambda: sorted(_deep(watcher)),
        )
        write(repo, "gen/new.py", "fresh\n")
        await wait_until_async(
            lambda: any("gen/new.py" in paths for paths in rec.paths),
            "a report of gen/new.py",
            timeout=10,
            show=lambda: rec.paths,
        )
        # And back: ignored again, it is left unwatched.
        rules.write_text("gen/\n")
        await wait_until_async(
            lambda: gen not in _deep(watcher),
            "gen/ unwatched once ignored again",
            timeout=RULES_LOOK_S + 10,
            show=lambda: sorted(_deep(watcher)),
        )
