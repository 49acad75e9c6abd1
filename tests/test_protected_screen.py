"""The protected-files screen driven with Pilot over real runs: the agent edits a protected test
and exits 0 with every gate green; a person accepts, reverts, or leaves it for later.

Asserted on what a person sees (the screen's text) and on what the run leaves: the exit status,
the ledger record with who decided, the file's bytes, and the undo of a revert.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import GitRunner, run_paella_in_process
from test_tui_app import ledger, make_app, new_run, running, screen_text, until

from paella_tui.protected_screen import ProtectedScreen
from paella_tui.recovery_screen import RecoveryScreen

SPEC = b"frozen spec\r\nno newline at the end"
EDITED = b"the agent's spec\n"


def _project(repo: Path, git: GitRunner, tmp_path: Path) -> None:
    """A contract whose agent does the work and edits the protected ``tests/spec.txt``."""
    script = tmp_path / "agent.sh"
    script.write_text('echo a > a.txt\nprintf "the agent\'s spec\\n" > tests/spec.txt\nexit 0\n')
    contract: dict[str, Any] = {
        "run": {"name": "protected", "prompt": "make a.txt", "agent": ["sh", str(script)]},
        "watch": {"settle": "0.2s"},
        "gate": [{"name": "a", "cmd": "test -f a.txt", "timeout": "10s"}],
        "episode": [{"name": "first", "goal": "a.txt exists", "gates": ["a"]}],
        "constraint": [{"text": "the spec is the spec", "protect": ["tests/**"]}],
    }
    (repo / "paella.toml").write_text(tomli_w.dumps(contract))
    (repo / "tests").mkdir()
    (repo / "tests" / "spec.txt").write_bytes(SPEC)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "contract and spec")


@pytest.mark.parametrize("key", ["a", "v", "l"])
async def test_a_person_accepts_reverts_or_leaves_a_changed_protected_file(
    repo: Path, git: GitRunner, tmp_path: Path, key: str
) -> None:
    _project(repo, git, tmp_path)
    run = new_run(repo)
    app = make_app(run)
    async with running(app) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ProtectedScreen), "the protected screen")
        await until(pilot, lambda: "tests/spec.txt" in screen_text(app), "the screen drawn")
        text = screen_text(app)
        assert "Not done: 1 protected file changed" in text
        assert "tests/spec.txt" in text and "the agent's spec" in text  # the diff is shown
        await pilot.press(key)
        if key == "l":
            await until(
                pilot, lambda: isinstance(app.screen, RecoveryScreen), "the recovery screen"
            )
            assert not ledger(run, "run-done")
            await pilot.press("h")  # handoff and stop
        await until(pilot, lambda: app.board.state in ("done", "stopped"), "the run to end")
    spec = (repo / "tests" / "spec.txt").read_bytes()
    if key == "a":
        assert app.status == 0
        [accepted] = ledger(run, "protected-accepted")
        assert accepted["paths"] == ["tests/spec.txt"] and accepted["by"] == "user"
        assert spec == EDITED
        assert ledger(run, "run-done")
    elif key == "v":
        assert app.status == 0
        [reverted] = ledger(run, "protected-reverted")
        assert reverted["paths"] == ["tests/spec.txt"] and reverted["by"] == "user"
        assert spec == SPEC  # byte for byte, CRLF and the missing final newline included
        # The revert is undoable: its salvage holds the agent's version.
        undo = run_paella_in_process(repo, "rollback", f"salvage:{reverted['salvage']}", "--yes")
        assert undo.returncode == 0, undo.stderr
        assert (repo / "tests" / "spec.txt").read_bytes() == EDITED
    else:
        assert app.status == 1
        assert not ledger(run, "protected-accepted") and not ledger(run, "protected-reverted")
        assert spec == EDITED
        assert "tests/spec.txt" in (run.dir / "handoff.md").read_text()
