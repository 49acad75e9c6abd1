"""The ``paella`` command line (SPEC 11) and its state on disk (SPEC 4), through the real console
script in subprocesses."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from conftest import run_paella_in_process

from paella_tui import __version__
from paella_tui.supervisor.run.run_view import RUN_STATES
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace

COMMANDS = (
    "init",
    "check",
    "run",
    "resume",
    "demo",
    "status",
    "log",
    "gates",
    "checkpoint",
    "checkpoints",
    "rollback",
    "diff",
    "handoff",
    "prune",
)
STATUS_KEYS = {
    "run_id",
    "state",
    "contract",
    "agent",
    "episodes",
    "current_episode",
    "gates",
    "checkpoints",
    "salvage",
    "last_green_checkpoint",
    "drift",
    "done",
}
AGENT_KEYS = {
    "pid",
    "alive",
    "attempt",
    "exit_code",
    "signal",
    "cpu_percent",
    "rss_bytes",
    "descendants",
    "started",
}
CHECKPOINT_KEYS = {
    "n",
    "ref",
    "commit",
    "tree",
    "head",
    "branch",
    "episode",
    "gates_green",
    "skipped_files",
    "label",
    "t",
}
SALVAGE_KEYS = {"n", "ref", "commit", "t", "reason"}
CONTRACT = """\
[run]
prompt = "Do the task."
agent = "true"

[[gate]]
name = "ok"
cmd = "true"

[[episode]]
name = "one"
gates = ["ok"]
"""


@pytest.fixture
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The commands run through ``cli.main`` in this process (``run_paella_in_process``): these
    tests check what each command does; how the real console script starts, exits and is
    installed is checked here by ``test_help_lists_every_command`` and
    ``test_state_files_are_private``, and every command runs as a real subprocess elsewhere
    (test_bad_inputs, test_cli_conventions, test_rollback, test_headless)."""
    return run_paella_in_process


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def state_dir(repo: Path) -> Path:
    return repo / ".git" / "paella"


def only_run_dir(repo: Path) -> Path:
    (run_dir,) = (state_dir(repo) / "runs").iterdir()
    return run_dir


def utc_time(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_help_lists_every_command() -> None:
    script = Path(sys.executable).with_name("paella")
    assert script.exists(), "the `paella` console script is not installed in the venv"
    for argv in ([str(script), "--help"], [sys.executable, "-m", "paella_tui", "--help"]):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        listed = re.findall(r"^\s{4}(\w+)\s", result.stdout, re.MULTILINE)
        assert set(COMMANDS) <= set(listed), result.stdout
        assert "Exit status" in result.stdout


def test_version(tmp_path: Path, paella) -> None:
    result = ok(paella(tmp_path, "--version"))
    assert result.stdout.strip() == f"paella-tui {__version__}"


def test_no_command_prints_help_and_exits_2(tmp_path: Path, paella) -> None:
    result = paella(tmp_path)
    assert result.returncode == 2
    assert "checkpoint" in result.stdout


def test_checkpoints_json_shape(repo: Path, git, paella) -> None:
    (repo / "wip.txt").write_text("wip\n")
    ok(paella(repo, "checkpoint", "--label", "first"))
    (repo / "wip.txt").write_text("later\n")
    ok(paella(repo, "rollback", "1", "--yes"))

    data = json.loads(ok(paella(repo, "checkpoints", "--json")).stdout)

    assert set(data) == {"schema_version", "checkpoints", "salvage"}
    (ckpt,) = data["checkpoints"]
    (salvage,) = data["salvage"]
    assert set(ckpt) >= CHECKPOINT_KEYS
    assert set(salvage) >= SALVAGE_KEYS
    run_id = only_run_dir(repo).name
    assert ckpt["n"] == 1
    assert ckpt["ref"] == f"refs/paella/{run_id}/checkpoints/1"
    assert git(repo, "rev-parse", ckpt["ref"]) == ckpt["commit"]
    assert git(repo, "rev-parse", f"{ckpt['commit']}^{{tree}}") == ckpt["tree"]
    assert ckpt["head"] == git.head(repo)
    assert ckpt["branch"] == "main"
    assert ckpt["episode"] == "manual"
    assert ckpt["gates_green"] == []
    assert ckpt["skipped_files"] == []
    assert ckpt["label"] == "first"
    utc_time(ckpt["t"])
    assert salvage["ref"] == f"refs/paella/{run_id}/salvage/1"
    assert git(repo, "rev-parse", salvage["ref"]) == salvage["commit"]
    assert salvage["reason"] == "rollback to 1"
    assert utc_time(salvage["t"]) >= utc_time(ckpt["t"])


def test_status_json_has_the_spec_schema(repo: Path, paella) -> None:
    (repo / "paella.toml").write_text(CONTRACT)
    ok(paella(repo, "checkpoint"))

    data = json.loads(ok(paella(repo, "status", "--json")).stdout)

    assert set(data) >= STATUS_KEYS
    assert data["run_id"] == only_run_dir(repo).name
    assert data["state"] in RUN_STATES
    assert set(data["contract"]) >= {"path", "sha256", "changed"}
    assert data["contract"]["changed"] is False
    assert set(data["agent"]) >= AGENT_KEYS
    assert data["episodes"] == [{"n": 1, "name": "one", "complete": False, "checkpoint": None}]
    assert data["current_episode"] == 1
    assert [g["name"] for g in data["gates"]] == ["ok"]
    assert set(data["gates"][0]) >= {
        "name",
        "status",
        "tree",
        "duration_s",
        "ever_green",
        "regressed",
    }
    assert len(data["checkpoints"]) == 1 and set(data["checkpoints"][0]) >= CHECKPOINT_KEYS
    assert data["salvage"] == []
    assert data["last_green_checkpoint"] is None
    assert data["drift"] == []
    assert data["done"] is False

    (repo / "paella.toml").write_text(CONTRACT + "\n# edited\n")
    again = json.loads(ok(paella(repo, "status", "--json")).stdout)
    assert again["contract"]["changed"] is True


def test_status_tmux_prints_one_line(repo: Path, paella) -> None:
    nothing = ok(paella(repo, "status", "--tmux")).stdout
    assert nothing.count("\n") == 1 and "no run" in nothing
    ok(paella(repo, "checkpoint"))
    line = ok(paella(repo, "status", "--tmux")).stdout
    assert line.count("\n") == 1 and line.startswith("paella ")


def test_status_tmux_fast_line_says_what_status_says(repo: Path) -> None:
    """The status bar's fast way (the kept state.json and /proc, no engine) prints the line
    the ordinary way prints; without a usable kept state it gives way to it."""
    # What the kept state holds once a command has ended is the point: each command runs as a
    # new process would (run_paella_in_process forgets the process's fold memo first; with it,
    # the `status` after `gates` read nothing from disk and kept nothing).
    paella = run_paella_in_process
    from paella_tui.commands.tmux_line import fast_line, tmux_line
    from paella_tui.supervisor.run.run_view import RunView
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    contract = CONTRACT.replace('cmd = "true"', 'cmd = "test -f good"')
    (repo / "paella.toml").write_text(contract)
    ok(paella(repo, "checkpoint"))
    for step in ("red", "green"):
        if step == "green":
            (repo / "good").write_text("yes\n")
        paella(repo, "gates")
        run = RunStore(Workspace.find(repo)).current()
        assert run is not None
        slow = tmux_line(RunView.load(run, verify_mirror=False).to_json())
        assert fast_line(repo) == slow
        assert ok(paella(repo, "status", "--tmux")).stdout == slow + "\n"
    kept = run.dir / "state.json"
    kept.unlink()
    assert fast_line(repo) is None  # nothing kept: the ordinary way answers (and keeps it)
    assert ok(paella(repo, "status", "--tmux")).stdout == slow + "\n"
    assert fast_line(repo) == slow
    kept.write_text("{not json")
    assert fast_line(repo) is None


def test_the_fast_line_reads_the_format_the_seal_facts_are_kept_in() -> None:
    """The status bar's line imports no engine module past the seal's, so it names the seal
    facts' format itself."""
    from paella_tui.commands.tmux_line import FACTS_FORMAT
    from paella_tui.supervisor.run.bar_facts import FORMAT

    assert FACTS_FORMAT == FORMAT


def test_log_prints_the_records(repo: Path, paella) -> None:
    (repo / "wip.txt").write_text("wip\n")
    ok(paella(repo, "checkpoint", "--label", "green-ish"))
    ok(paella(repo, "rollback", "1", "--yes"))

    lines = ok(paella(repo, "log")).stdout.splitlines()

    assert all(re.match(r"\d\d:\d\d:\d\d  ", line) for line in lines), lines
    text = "\n".join(lines)
    assert "manual run" in lines[0]
    assert "checkpoint 1 (manual: green-ish)" in text
    assert "salvage:1 saved" in text
    assert "rollback to checkpoint 1 begins" in text
    assert "rollback to checkpoint 1 done" in text


def test_diff_and_diff_stat(repo: Path, paella) -> None:
    (repo / "README.md").write_text("hello\nsecond line\n")
    ok(paella(repo, "checkpoint"))
    assert "no changes since 1" in ok(paella(repo, "diff", "1")).stdout

    (repo / "README.md").write_text("hello\nchanged line\n")
    (repo / "new file.txt").write_text("new\n")

    full = ok(paella(repo, "diff", "1")).stdout
    assert "-second line" in full and "+changed line" in full
    assert "+new" in full and "new file.txt" in full
    assert "\x1b[" not in full  # NO_COLOR, and not a terminal
    stat_out = ok(paella(repo, "diff", "1", "--stat")).stdout
    assert re.search(r"README\.md\s+\|\s+2 \+-", stat_out), stat_out
    assert "2 files changed" in stat_out
    assert "changed line" not in stat_out
    # No green checkpoint yet: the default is the newest one, with a warning.
    default = paella(repo, "diff", "--stat")
    assert default.returncode == 0 and "no green checkpoint" in default.stderr
    assert default.stdout == stat_out


def test_prune_deletes_refs_and_state_and_repoints_current(repo: Path, git, paella) -> None:
    ok(paella(repo, "checkpoint"))
    first = only_run_dir(repo).name
    (repo / "x.txt").write_text("x\n")
    ok(paella(repo, "rollback", "1", "--yes"))  # a salvage ref too
    ws = Workspace.find(repo)
    second = RunStore(ws).create(None, manual=True, reason="a second run").run_id
    ok(paella(repo, "checkpoint"))
    assert (state_dir(repo) / "current").read_text().strip() == second

    result = ok(paella(repo, "prune", second))

    assert "1 ref(s)" in result.stdout
    assert git(repo, "for-each-ref", f"refs/paella/{second}/") == ""
    assert not (state_dir(repo) / "runs" / second).exists()
    assert (state_dir(repo) / "current").read_text().strip() == first
    assert len(git(repo, "for-each-ref", f"refs/paella/{first}/").splitlines()) == 2

    ok(paella(repo, "prune", first))
    assert git(repo, "for-each-ref", "refs/paella/") == ""
    assert not (state_dir(repo) / "current").exists()
    unknown = paella(repo, "prune", "20990101-000000-abcd")
    assert unknown.returncode == 2 and "no run" in unknown.stderr


def test_state_files_are_private(repo: Path) -> None:
    (repo / "paella.toml").write_text(CONTRACT)
    # A permissive umask: the modes must come from paella, not from the environment.
    subprocess.run(
        [sys.executable, "-m", "paella_tui", "checkpoint"],
        cwd=repo,
        capture_output=True,
        check=True,
        umask=0,
    )
    run_dir = only_run_dir(repo)
    folders = [state_dir(repo), state_dir(repo) / "runs", run_dir]
    files = [
        run_dir / "events.jsonl",
        run_dir / "contract.toml",
        state_dir(repo) / "current",
    ]
    for folder in folders:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


def test_paella_state_dir_relocates_the_state(repo: Path, tmp_path: Path, git, paella) -> None:
    elsewhere = tmp_path / "elsewhere" / "state"
    env = {"PAELLA_STATE_DIR": str(elsewhere)}

    ok(paella(repo, "checkpoint", env=env))

    assert not state_dir(repo).exists()
    (run_dir,) = (elsewhere / "runs").iterdir()
    assert (elsewhere / "current").read_text().strip() == run_dir.name
    listed = json.loads(ok(paella(repo, "checkpoints", "--json", env=env)).stdout)
    assert [c["n"] for c in listed["checkpoints"]] == [1]
    assert git(repo, "rev-parse", listed["checkpoints"][0]["ref"])  # refs stay in the repo
    # Without the variable, paella looks in .git/paella and finds no run there.
    assert json.loads(ok(paella(repo, "checkpoints", "--json")).stdout)["checkpoints"] == []


def test_commands_work_from_a_subfolder(repo: Path, git, paella, tree_state) -> None:
    sub = repo / "src" / "deep"
    sub.mkdir(parents=True)
    (sub / "mod.py").write_text("x = 1\n")

    ok(paella(sub, "checkpoint"))
    checkpoint_state = tree_state(repo)
    (sub / "mod.py").write_text("x = 2\n")
    (repo / "top.txt").write_text("top\n")

    assert json.loads(ok(paella(sub, "status", "--json")).stdout)["run_id"]
    assert "src/deep/mod.py" in ok(paella(sub, "diff", "1", "--stat")).stdout
    ok(paella(sub, "rollback", "1", "--yes"))
    assert tree_state(repo) == checkpoint_state
    assert (state_dir(repo) / "current").exists()
    assert not (sub / ".git").exists()


def test_checkpoint_with_no_run_opens_a_manual_run(repo: Path, paella) -> None:
    for command in (("log",), ("diff",), ("rollback", "--yes"), ("checkpoints",)):
        result = paella(repo, *command)
        assert result.returncode == 2, command
        assert "no run yet" in result.stderr
    assert not (state_dir(repo) / "runs").exists()  # asking opened nothing

    result = ok(paella(repo, "checkpoint"))

    run_id = only_run_dir(repo).name
    assert run_id in result.stdout
    first = json.loads((only_run_dir(repo) / "events.jsonl").read_text().splitlines()[0])
    assert first["kind"] == "run-started"
    assert first["manual"] is True
    assert first["run_id"] == run_id
    assert json.loads(ok(paella(repo, "status", "--json")).stdout)["run_id"] == run_id


def test_env_secrets_never_reach_the_state(repo: Path, paella) -> None:
    secret = "sk-test-0123456789-do-not-store"
    ok(paella(repo, "checkpoint", env={"OPENAI_API_KEY": secret}))
    for path in state_dir(repo).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_init_agent_writes_a_profile_contract_that_check_accepts(
    repo: Path, tmp_path: Path, paella
) -> None:
    # `paella check` wants the agent on PATH; a stand-in named gemini is enough to find.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gemini").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gemini").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    ok(paella(repo, "init", "--agent", "gemini", env=env))

    text = (repo / "paella.toml").read_text()
    assert 'profile = "gemini"' in text
    assert "--approval-mode auto_edit approves file edits without asking" in text
    assert "#   gemini -r latest -p {handoff} --approval-mode auto_edit -o stream-json\n" in text
    checked = ok(paella(repo, "check", env=env))
    assert "with profile gemini" in checked.stdout
    assert "-o stream-json" in checked.stdout
    assert "ready" in checked.stdout

    again = paella(repo, "init", "--agent", "claude", env=env)
    assert again.returncode == 2
    assert "never overwrites" in again.stderr
    assert (repo / "paella.toml").read_text() == text


def test_status_after_a_rollback_shows_the_restored_trees_verdicts(repo: Path, paella) -> None:
    """A rollback from the command line leaves no stale verdict: the gates shown are the
    restored tree's (known from when it was judged), not the abandoned tree's regression."""
    contract = CONTRACT.replace('cmd = "true"', 'cmd = "test -f good"')
    (repo / "paella.toml").write_text(contract)
    (repo / "good").write_text("yes\n")
    ok(paella(repo, "checkpoint"))  # opens the run
    ok(paella(repo, "gates"))  # judges the checkpoint's tree: green
    green = json.loads(ok(paella(repo, "status", "--json")).stdout)
    assert [(g["name"], g["status"]) for g in green["gates"]] == [("ok", "pass")]
    restored_tree = green["gates"][0]["tree"]

    (repo / "good").unlink()
    paella(repo, "gates")  # red on the new tree: a regression
    red = json.loads(ok(paella(repo, "status", "--json")).stdout)
    assert [(g["status"], g["regressed"]) for g in red["gates"]] == [("fail", True)]

    ok(paella(repo, "rollback", "1", "--yes"))
    after = json.loads(ok(paella(repo, "status", "--json")).stdout)
    assert (repo / "good").read_text() == "yes\n"
    gate = after["gates"][0]
    assert (gate["status"], gate["regressed"], gate["tree"]) == ("pass", False, restored_tree)


@pytest.mark.parametrize(
    ("attribute", "data"),
    [
        # An odd byte count is no UTF-16: "failed to encode ... from UTF-16LE".
        ("text working-tree-encoding=UTF-16LE eol=crlf", b"x\x00y\x00\r\x00\n\x00z"),
        ("working-tree-encoding=UTF-16", b"a\r\n"),  # "BOM is required"
        ("working-tree-encoding=UTF-16LE", b"\xff\xfea\x00"),  # "BOM is prohibited"
        ("working-tree-encoding=SHIFT-JIS", b"\xff\xff\xfe"),  # not Shift-JIS at all
    ],
    ids=["odd-utf16", "bom-required", "bom-prohibited", "not-shift-jis"],
)
def test_a_file_git_cannot_decode_is_kept_raw_and_restored(
    repo: Path, paella, attribute: str, data: bytes
) -> None:
    """working-tree-encoding: git refuses to hash bytes that do not decode, in several words;
    the checkpoint keeps them raw all the same (a snapshot used to fail whole on the BOM ones),
    and rollback and undo give them back."""
    (repo / "paella.toml").write_text(CONTRACT)
    (repo / ".gitattributes").write_text(f"*.u16 {attribute}\n")
    (repo / "a.u16").write_bytes(data)
    ok(paella(repo, "checkpoint"))
    (repo / "a.u16").write_bytes(b"damage")
    ok(paella(repo, "rollback", "1", "--yes"))
    assert (repo / "a.u16").read_bytes() == data
    ok(paella(repo, "rollback", "salvage:1", "--yes"))
    assert (repo / "a.u16").read_bytes() == b"damage"
