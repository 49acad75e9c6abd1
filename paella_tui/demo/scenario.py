"""The demo scenario: a small project, its contract and a scripted agent, built as a git repository.

:func:`build` copies the project (package data under ``project/``), writes a ``paella.toml``
whose gates and agent run with this very Python (so the demo needs no ``pytest`` and nothing on
PATH), and makes the initial commit with a local identity (so it works on a machine without
one). :func:`agent_env` is what the scripted agent (``agent.py``) reads from its environment.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.contract.model import CONTRACT_FILE
from paella_tui.supervisor.store.gitcli import SCRUBBED_ENV

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "project"
"""The demo repository's files as the run starts."""
AGENT = HERE / "agent.py"
"""The scripted agent."""
MARKER = "paella-demo.json"
"""A file in the demo repository's ``.git``: this folder is a demo, and may be rebuilt."""
AGENT_STATE = "paella-demo-agent.json"
"""The agent's memory, in ``.git``, where a rollback of the work tree cannot reach it."""

EPISODES = (
    ("idempotent ingest", "Replaying an event changes nothing.", "idempotency"),
    ("privacy", "No raw e-mail address reaches a log.", "privacy"),
    ("export format", "One numbered CSV row per event, amounts exact, addresses masked.", "export"),
    (
        "summary report",
        "Counts by kind, customers and net revenue, the same after a replay.",
        "report",
    ),
)
"""(name, goal, gate) per episode; each gate runs ``tests/check_<gate>.py``."""

PROMPT = """\
Build the event ledger in ledger/, episode by episode (README.md says what each one means).
Each episode is proven by its check in tests/; keep every earlier check passing.
Do not edit tests/ or paella.toml."""

# Settle, backoff and stall: the normal demo paces itself for a person to follow (about 75 s);
# --fast shrinks every wait so the whole story plays in seconds (tests, a quick look).
_PACE = {
    False: {"settle": "1s", "backoff": "5s", "stall_after": "2m"},
    True: {"settle": "100ms", "backoff": "200ms", "stall_after": "2m"},
}

# Variables that would point git at another repository (paella's one list), or give the
# demo's commit another author.
_GIT_SCRUBBED = SCRUBBED_ENV | {
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
}


def _toml(value: str | list[str]) -> str:
    """A TOML string or array of strings (JSON's escapes are valid TOML basic strings)."""
    return json.dumps(value, ensure_ascii=False)


def contract_text(*, python: str = sys.executable, fast: bool = False) -> str:
    """The demo's ``paella.toml``: four cumulative episodes, a gate each, protected tests."""
    pace = _PACE[fast]
    agent = str(AGENT)
    lines = [
        "# The contract of the paella-tui demo (written by `paella demo` for this machine's Python).",
        "# Four cumulative episodes: episode k is complete when the gates of episodes 1..k all pass.",
        "",
        "[run]",
        'name = "ledger demo"',
        f"prompt = '''\n{PROMPT}'''",
        "# The scripted agent: no API key, no network. A resume hands it the handoff file.",
        f"agent = {_toml([python, agent, '--prompt-file', '{prompt_file}'])}",
        f"resume = {_toml([python, agent, '--handoff-file', '{handoff_file}'])}",
        'scope = ["ledger/**"]',
        f'stall_after = "{pace["stall_after"]}"',
        "",
        "[retry]",
        "max_attempts = 3",
        "# Output that marks a failure as transient (a bare 429 could match a line number).",
        'transient = ["API Error: 429", "rate_limit_error", "overloaded", "usage limit"]',
        f'backoff = "{pace["backoff"]}"',
        'max_backoff = "1m"',
        "",
        "[watch]",
        f'settle = "{pace["settle"]}"',
        "",
        "[gates]",
        "jobs = 2",
    ]
    for _, _, gate in EPISODES:
        command = shlex.join([python, f"tests/check_{gate}.py"])
        lines += ["", "[[gate]]", f'name = "{gate}"', f"cmd = {_toml(command)}", 'timeout = "30s"']
    for name, goal, gate in EPISODES:
        lines += [
            "",
            "[[episode]]",
            f'name = "{name}"',
            f"goal = {_toml(goal)}",
            f'gates = ["{gate}"]',
        ]
    lines += [
        "",
        "[[constraint]]",
        'text = "Ledger.ingest(event) keeps its signature. The checks in tests/ are the judge: never edit them."',
        'protect = ["tests/**", "paella.toml"]',
        "",
    ]
    return "\n".join(lines)


def _git(root: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_SCRUBBED}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        subprocess.run(
            ["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError) as err:
        why = getattr(err, "stderr", None) or str(err)
        raise WorkspaceError(
            f"could not build the demo repository in {root}: `git {args[0]}` failed: {why.strip()}",
            hint="paella needs git on PATH.",
        ) from None


def is_demo(root: Path) -> bool:
    """Whether ``root`` is a repository an earlier ``paella demo`` built."""
    return (root / ".git" / MARKER).is_file()


def build(root: Path, *, fast: bool = False) -> None:
    """Build the demo repository in ``root`` (an empty folder): files, contract, first commit."""
    shutil.copytree(
        PROJECT, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    (root / ".gitignore").write_text("__pycache__/\n*.pyc\n", encoding="utf-8")
    (root / CONTRACT_FILE).write_text(contract_text(fast=fast), encoding="utf-8")
    _git(root, "init", "-q")
    _git(root, "symbolic-ref", "HEAD", "refs/heads/main")
    # A local identity and no signing: the commit works on any machine, whatever its config.
    _git(root, "config", "user.name", "paella demo")
    _git(root, "config", "user.email", "demo@paella.invalid")
    _git(root, "config", "commit.gpgsign", "false")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--no-verify", "-m", "ledger: the project before the agent starts")
    (root / ".git" / MARKER).write_text(
        json.dumps({"fast": fast, "agent": str(AGENT)}) + "\n", encoding="utf-8"
    )


def agent_env(root: Path, *, fast: bool = False) -> dict[str, str]:
    """The environment the scripted agent reads: where its memory is, and its pace."""
    return {
        "PAELLA_DEMO_STATE": str(root / ".git" / AGENT_STATE),
        "PAELLA_DEMO_FAST": "1" if fast else "0",
    }
