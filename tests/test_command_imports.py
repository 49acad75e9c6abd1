"""Each command imports only what it uses (issue 17, start-up): the module set, not the time.

Every command runs for real in a fresh interpreter, in a real workspace with a run, a
checkpoint and a ledger; the modules loaded once it returned are compared with what the
command needs. A command that reads or writes the ledger and git never loads Textual, the
watcher, the run loop, the agent's process machinery or the agent profiles.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# What every command that opens the workspace and its newest run needs. ``snapshot`` comes with
# ``checkpoints`` (snapshot records), and ``byproducts`` (with ``globs``, whose matcher, pathspec,
# loads at the first match) with the files a snapshot leaves out; the snapshot's raw-bytes
# hashing (``raw_blobs``), churn rule, owned lock and record of the watcher's changed paths
# (``change_feed``), its private index's seed and memo (``private_index``); the integrity checks
# every command makes on the state it opens (``integrity`` with ``mirror``, its ledger copy in
# parts ``mirror_ledger`` and its plumbing writer ``mirror_local``, ``ledger_schema`` for each
# record, ``run_lock`` to name the supervisor; ``frozen_contract``, the contract a run is held
# to, which ``runs`` loads without importing ``integrity``). The run's state is the fold of its
# ledger, kept beside it (``state`` and its ``state_handlers``, ``state_store``, ``state_codec``;
# the snapshot records it holds are ``snapshot_record``'s, plain data): a command reads it
# instead of the whole ledger. Records become typed events: ``state_events`` holds the ones the
# state is made of and the records every command meets (a run's start, a checkpoint, a
# rollback's end), ``record_events`` reads those records; the run loop's ~30 event classes (``events``, ``ledger_events``: an agent, a
# gate, a recovery) load only when the fold meets one of their records (RUN_LOOP_EVENTS).
# Not here (issue 17, start-up): the contract's reader (below, only for a run that has a
# contract), the rollback and its raw restore (only when the state says one was interrupted),
# and psutil (a recorded pid's liveness is read from /proc: psutil only where there is none).
CORE = {
    "paella_tui",
    "paella_tui.cli",
    "paella_tui.cli_parser",
    "paella_tui.commands",
    "paella_tui.commands.context",
    "paella_tui.supervisor",
    "paella_tui.supervisor.judge.byproducts",
    "paella_tui.supervisor.store.change_feed",
    "paella_tui.supervisor.store.checkpoints",
    "paella_tui.supervisor.store.snapshot_record",
    "paella_tui.supervisor.store.churn",
    "paella_tui.supervisor.base.errors",
    "paella_tui.supervisor.base.files",
    "paella_tui.supervisor.store.gitcli",
    # how each git child dies with paella: its start (git_start) and the group it joins
    "paella_tui.supervisor.store.git_start",
    "paella_tui.supervisor.store.death_group",
    # what keeps every git command from starting a program the repository's configuration names
    "paella_tui.supervisor.store.git_programs",
    "paella_tui.supervisor.base.globs",
    "paella_tui.supervisor.run.integrity",
    "paella_tui.supervisor.run.frozen_contract",
    "paella_tui.supervisor.run.ledger",
    "paella_tui.supervisor.run.ledger_schema",
    "paella_tui.supervisor.store.mirror",
    "paella_tui.supervisor.store.mirror_ledger",
    "paella_tui.supervisor.store.mirror_local",
    # the mirror's loose objects, read (the state tip) and written (a ledger save) with no git
    "paella_tui.supervisor.store.loose_objects",
    # the repository's loose refs, objects and HEAD read with no git (integrity's snapshot refs)
    "paella_tui.supervisor.store.loose_reads",
    "paella_tui.supervisor.base.owned_lock",
    "paella_tui.supervisor.base.start_ticks",  # a lock holder's start time, from /proc
    "paella_tui.supervisor.store.raw_blobs",
    "paella_tui.supervisor.run.run_lock",
    "paella_tui.supervisor.run.run_view",
    "paella_tui.supervisor.run.runs",
    "paella_tui.supervisor.run.state_events",
    "paella_tui.supervisor.run.record_events",
    "paella_tui.supervisor.run.state",
    "paella_tui.supervisor.run.state_handlers",
    "paella_tui.supervisor.run.state_codec",
    "paella_tui.supervisor.run.state_store",
    # the status bar's facts, kept in the seal with every state.json written
    "paella_tui.supervisor.run.bar_facts",
    "paella_tui.supervisor.store.snapshot",
    "paella_tui.supervisor.store.private_index",
    # whether the ignore rules changed since the last snapshot (and what they now leave out)
    "paella_tui.supervisor.store.ignore_rules",
    # the snapshot's index update, and whether an attribute can apply (else no check-attr)
    "paella_tui.supervisor.store.index_update",
    "paella_tui.supervisor.store.git_words",  # what git says when it refuses a snapshot's work
    # tracked files the rules ignore, deleted and written back: held again
    "paella_tui.supervisor.store.dormant",
    # a full scan's two listings side by side (and, for `checkpoint`, started before the
    # imports: the early scan)
    "paella_tui.supervisor.store.scan_listing",
    # the workspace's and the snapshotter's first questions to git, answered early when nothing
    # they depend on changed (for `checkpoint`, started before the imports)
    "paella_tui.supervisor.store.early_reads",
    "paella_tui.supervisor.agent.usage",
    "paella_tui.supervisor.base.counts",
    "paella_tui.supervisor.store.workspace",
    # the kept state's seal, outside the work tree (a forged state.json is folded again)
    "paella_tui.supervisor.base.state_seal",
}
# The run loop's events: loaded by a fold that meets one of their records (the test's runs have
# none), by a command that shows events (``log``), or that works with them.
RUN_LOOP_EVENTS = {
    "paella_tui.supervisor.run.events",
    "paella_tui.supervisor.run.ledger_events",
}
# A run with a frozen contract reads it (its size cap, its byproducts): the contract's reader in
# parts (``loader``, ``validation``, ``sections``, ``toml_lines``, ``problems``,
# ``command_line``) and the profiles' command table (``agent.profiles.commands``, plain
# strings, in a package that holds only a docstring): a contract naming a ``profile`` is read
# with it, but the profiles' stream decoders (``agent.profiles.registry``) stay unloaded.
CONTRACT_READER = {
    "paella_tui.supervisor.contract.command_line",
    "paella_tui.supervisor.contract.loader",
    "paella_tui.supervisor.contract.model",
    "paella_tui.supervisor.contract.problems",
    "paella_tui.supervisor.contract.sections",
    "paella_tui.supervisor.contract.toml_lines",
    "paella_tui.supervisor.contract.validation",
    "paella_tui.supervisor.agent.profiles",
    "paella_tui.supervisor.agent.profiles.commands",
    "paella_tui.supervisor.base.durations",
}
# ``schemas`` holds the version the --json outputs carry (a constant; its schemas load lazily).
STATUS = CORE | {
    "paella_tui.commands.status_commands",
    "paella_tui.commands.tmux_line",
    "paella_tui.schemas",
}
# A status bar's line comes from the facts in the seal of the run's kept state (``tmux_line``)
# and /proc: no engine module (the fixture's `paella status` kept the state with its contract), not
# the count format (only a line with tokens and no cost needs it), and not the argument parser
# either (argparse: the line answers before any parsing).
TMUX = {
    "paella_tui",
    "paella_tui.cli",
    "paella_tui.commands",
    "paella_tui.commands.tmux_line",
    "paella_tui.supervisor",
    "paella_tui.supervisor.base.state_seal",  # the facts kept with the seal, outside the work tree
}
SNAPSHOTS = CORE | {"paella_tui.commands.snapshot_commands", "paella_tui.schemas"}
ALLOWED = {
    ("status", "--tmux"): TMUX,
    # A plain `status [--json]` is read without the parser (cli._plain_status).
    ("status",): STATUS - {"paella_tui.cli_parser"},
    ("status", "--json"): STATUS - {"paella_tui.cli_parser"},
    # The log says each record as the headless printer says its event (one describe), with
    # its durations: every record as its typed event.
    ("log",): STATUS
    | RUN_LOOP_EVENTS
    | {"paella_tui.ledger_text", "paella_tui.event_text", "paella_tui.supervisor.base.durations"},
    ("checkpoints",): SNAPSHOTS,
    # A plain `checkpoint [--label TEXT]` is read without the parser (cli._plain_checkpoint).
    ("checkpoint", "--label", "x"): SNAPSHOTS - {"paella_tui.cli_parser"},
    # The parser is its own module (``cli_parser``), so ``cli`` stays the dispatch and its errors.
    ("--help",): {"paella_tui", "paella_tui.cli", "paella_tui.cli_parser"},
}
# The engine's rooms are packages that hold only a docstring: loading one costs nothing, and what a
# command loads from inside a room is still checked module by module.
ROOMS = {
    f"paella_tui.supervisor.{room}"
    for room in ("base", "contract", "store", "agent", "watch", "judge", "run")
}
# Never for these commands: the TUI, the watcher, the supervising engine, GitPython, and the glob
# matcher (git matches the snapshot's patterns itself).
FORBIDDEN_TOP = {"textual", "rich", "watchfiles", "git", "asyncio", "tomli_w", "pathspec"}
# Nor, for what only reads and writes the run's records and git: process inspection (psutil; a
# recorded pid's liveness, for the status, comes from /proc) and, in a run without a contract, a
# TOML reader.
FORBIDDEN_MORE = {
    ("checkpoints",): {"psutil"},
    # A run id's random digits (secrets, with base64, hmac, random) only where a run is opened;
    # argparse (and gettext) only where the command line needs the parser.
    ("checkpoint", "--label", "x"): {"psutil", "secrets", "argparse"},
    ("status",): {"argparse"},
    ("status", "--json"): {"argparse"},
    # (the checkpoint's fold meets only run-started and checkpoint records: RUN_LOOP_EVENTS is
    # not in its set above, so loading them fails the test)
    ("status", "--tmux"): {"argparse", "psutil", "dataclasses"},
}
NO_CONTRACT_FORBIDDEN = {"tomllib"}

PROBE = r"""
import contextlib, io, json, sys
from paella_tui.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules), "out": out.getvalue()}))
"""


# The two workspaces are made once each for the whole module: its cases run on one xdist
# worker, not on each worker that would otherwise make both again.
pytestmark = pytest.mark.xdist_group("command-imports")


@pytest.fixture(scope="module", params=["contract", "manual"])
def workspace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace whose run has a frozen contract (``paella init`` first), or a manual run
    opened by a checkpoint where there is no ``paella.toml``. Made through ``cli.main`` in this
    process (the same commands and files, without an interpreter each): what is checked is the
    probe's fresh interpreter, not how these ran."""
    from conftest import make_repo, run_paella_in_process

    repo = make_repo(tmp_path_factory.mktemp(f"imports-{request.param}") / "repo")
    commands = [["checkpoint", "--label", "first"], ["status"]]
    if request.param == "contract":
        commands.insert(0, ["init", "--agent", "true", "--gate", "unit=true"])
    for command in commands:
        made = run_paella_in_process(repo, *command)
        assert made.returncode == 0, (command, made.stderr)
    return repo


def _allowed(argv: tuple[str, ...], with_contract: bool) -> set[str]:
    opens_run = argv not in (("--help",), ("status", "--tmux"))
    return ALLOWED[argv] | (CONTRACT_READER if with_contract and opens_run else set())


@pytest.mark.parametrize("argv", list(ALLOWED), ids=" ".join)
def test_a_command_loads_only_what_it_uses(workspace: Path, argv: tuple[str, ...]) -> None:
    with_contract = (workspace / "paella.toml").exists()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] in (0, None), result["out"]
    loaded = set(result["modules"])
    ours = {m for m in loaded if m.startswith("paella_tui")}
    extra = ours - _allowed(argv, with_contract) - ROOMS
    assert extra == set(), f"{' '.join(argv)} loads more than it uses"
    forbidden = FORBIDDEN_TOP | FORBIDDEN_MORE.get(argv, set())
    if not with_contract:
        forbidden |= NO_CONTRACT_FORBIDDEN
    assert {m.split(".")[0] for m in loaded} & forbidden == set()


# What the line may load past a bare interpreter's start: its own modules, CPython's own sha256
# (the seal's file name; `_sha2` from 3.12) and `__future__` (its modules' annotations).
LINE_EXTRA = TMUX | ROOMS | {"_sha256", "_sha2", "__future__"}


def _imported(argv: list[str], cwd: Path) -> tuple[set[str], str]:
    """The modules ``python -X importtime ARGV`` imports (the interpreter's start included), and
    what it printed."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "[us]" not in line
    }
    return names, proc.stdout


def test_the_status_bars_line_loads_nothing_a_bare_python_start_does_not(workspace: Path) -> None:
    """Through the installed ``paella`` command, as a status bar runs it: no ``re``, ``json``,
    ``typing``, ``pathlib``, ``subprocess``, ``contextlib`` or ``importlib`` (each is
    milliseconds of a line that should cost a bare start and a ``git rev-parse``; issue 17)."""
    command = Path(sys.executable).with_name("paella")
    bare, _ = _imported(["-c", "pass"], workspace)
    line, out = _imported([str(command), "status", "--tmux"], workspace)
    assert out.startswith("paella ") and out.count("\n") == 1, out
    assert "paella_tui.commands.tmux_line" in line and "argparse" not in line
    extra = line - bare - LINE_EXTRA
    assert extra == set(), (
        f"the line loads {sorted(extra)}; the installed command must be the project's own "
        f"script (scripts/paella: re-run `pip install -e .` after it changed)"
    )
