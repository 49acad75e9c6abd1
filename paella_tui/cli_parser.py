"""The parser of the ``paella`` command line: every command, its options and their help.

Every subcommand has a description and examples in its ``--help`` and a help line for every
argument; ``paella completion SHELL`` derives its scripts from this parser, so a command added here
is completed without more work. It imports nothing of the engine or Textual: ``paella --help``
must answer in well under 300 ms.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from paella_tui import __version__

ON_DEATH = ("ask", "rollback", "continue", "stop")
"""What ``--on-death`` may say happens when the agent dies."""

_DESCRIPTION = """\
Supervise a long coding-agent run: hold it to the gates of paella.toml, checkpoint every green
episode in git (never touching your branch or index), and recover in one key when it dies.

Exit status: 0 success (run/resume: the contract is done), 1 the run ended not done,
2 usage or contract error, 3 workspace error, 130 interrupted."""

_EPILOG = """\
examples:
  paella demo                      the whole story on a built-in scenario, in about a minute
  paella init --agent claude       write a commented paella.toml for this repository
  paella -C ~/src/app status       the newest run of another workspace
  paella COMMAND --help            what a command does, its options and examples"""


class _HelpFormatter(argparse.HelpFormatter):
    """Descriptions filled to the terminal paragraph by paragraph; examples kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return "\n\n".join(
            super(_HelpFormatter, self)._fill_text(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[tuple[str, str]],
) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary, a description and examples for its ``--help``."""
    width = max(len(cmd) for cmd, _ in examples)
    epilog = "examples:\n" + "\n".join(
        f"  {cmd:<{width}}  {what}" if what else f"  {cmd}" for cmd, what in examples
    )
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=_HelpFormatter,
    )


_TARGET_HELP = (
    "a checkpoint number (as `paella checkpoints` lists them) or salvage:N for a salvage snapshot"
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every command of SPEC 11 (and ``completion``)."""
    parser = argparse.ArgumentParser(
        prog="paella",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"paella-tui {__version__}")
    parser.add_argument(
        "-C",
        dest="chdir",
        metavar="DIR",
        action="append",
        default=[],
        help="run as if paella was started in DIR (like git; repeatable, each relative to the last)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = _add(
        sub,
        "init",
        "write a commented paella.toml for this repository",
        "Write a commented paella.toml at the top of the work tree: the task, the agent's start "
        "and resume commands (with the flags that turn on its JSON stream), gates detected from "
        "the project (pytest, npm, cargo, go, make) or given with --gate, and one episode. "
        "Never overwrites an existing paella.toml.",
        [
            ("paella init --agent claude", "Claude Code's profile: commands, stream, limits"),
            ("paella init --agent codex --gate tests='pytest -q'", "a profile and a gate"),
            ("paella init --agent 'my-agent --task {prompt_file}'", "any other command"),
        ],
    )
    p.add_argument(
        "--agent",
        metavar="NAME|CMD",
        help="an agent profile (claude, codex, gemini, aider, opencode) or a command line",
    )
    p.add_argument(
        "--gate",
        metavar="NAME=CMD",
        action="append",
        default=[],
        help="a gate: its name and the command that proves it (repeatable)",
    )

    _add(
        sub,
        "check",
        "validate paella.toml and the workspace; print what a run would do",
        "Validate paella.toml (every problem at once, with file, line and key) and the workspace "
        "(a git work tree, no merge or rebase in progress, the agent found on PATH), then print "
        "what a run would do: the agent's command, whether its stream will be decoded, the "
        "gates, the episodes. Exit 2 on a contract problem.",
        [("paella check", ""), ("paella -C ~/src/app check", "another workspace")],
    )

    for name, summary, description, examples in (
        (
            "run",
            "start a supervised run (the TUI, or event lines with --headless)",
            "Start a supervised run of paella.toml: launch the agent, re-run the gates as the "
            "work tree changes, checkpoint every green episode, retry transient failures, and "
            "when the agent dies, recover as --on-death says. The TUI on a terminal; one "
            "timestamped line per event with --headless (or when not on a terminal). Exit 0 "
            "when every gate is green on the final tree.",
            [
                ("paella run", "the TUI; the recovery screen asks when the agent dies"),
                ("paella run --headless --on-death rollback", "unattended, in CI or cron"),
            ],
        ),
        (
            "resume",
            "continue the newest run after a death, a stop or a crash",
            "Continue the newest run after the agent died, after a stop, or after paella itself "
            "was killed: any leftover agent is stopped, and the agent resumes with a handoff "
            "(its own session when its stream named one). After a stop on a far limit reset it "
            "waits for the reset (within max_wait) or refuses until then, unless --now.",
            [
                ("paella resume", "in the TUI"),
                ("paella resume --headless --on-death stop", "plain lines; stop at the next death"),
                ("paella resume --now", "without waiting for the agent's limit to reset"),
            ],
        ),
    ):
        p = _add(sub, name, summary, description, examples)
        p.add_argument(
            "--headless", action="store_true", help="plain timestamped event lines, no TUI"
        )
        p.add_argument(
            "--on-death",
            choices=ON_DEATH,
            default=None,
            help="what to do when the agent dies (default: ask in the TUI, stop headless)",
        )
        if name == "resume":
            p.add_argument(
                "--now",
                action="store_true",
                help="resume even though the agent's limit has not reset yet",
            )

    p = _add(
        sub,
        "demo",
        "the whole flow on a built-in scenario (no API key, no network)",
        "Play the whole story on a built-in scenario: a tiny project in a fresh git repository, "
        "a contract of four episodes and a scripted agent that completes two, breaks one while "
        "fixing the third, hits a rate limit, crashes, and finishes after the recovery. No API "
        "key, no network; about a minute.",
        [
            ("paella demo", "in the TUI: you choose the recovery"),
            ("paella demo --headless --fast", "as plain lines, in seconds"),
            ("paella demo --dir /tmp/ledger", "keep the repository, then try status, diff 2 in it"),
        ],
    )
    p.add_argument("--headless", action="store_true", help="tell the story as plain lines, no TUI")
    p.add_argument(
        "--dir", metavar="DIR", help="build the demo repository here instead of a temp folder"
    )
    p.add_argument(
        "--fast", action="store_true", help="shorten every pause (seconds, not a minute)"
    )

    p = _add(
        sub,
        "status",
        "the newest run's state, read from disk",
        "Print the newest run's state, read from disk (so it works from another pane while the "
        "run goes on): the agent, the episodes, the gates (regressions marked), the "
        "checkpoints, the drift. --json prints one object that follows "
        "paella_tui/schemas/status.schema.json.",
        [
            ("paella status", ""),
            ("paella status --watch", "redraw every 2 seconds"),
            ("paella status --json | jq .gates", "for scripts"),
            ("set -g status-right '#(paella status --tmux)'", "in ~/.tmux.conf"),
        ],
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object (schema: paella_tui/schemas/status.schema.json)",
    )
    p.add_argument("--watch", action="store_true", help="redraw every 2 seconds until Ctrl-C")
    p.add_argument("--tmux", action="store_true", help="one short line for a tmux status bar")

    p = _add(
        sub,
        "log",
        "the ledger, human-readable",
        "Print the newest run's ledger (events.jsonl) as one timestamped line per event.",
        [("paella log", ""), ("paella log -f", "keep printing new events, like tail -f")],
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events")

    p = _add(
        sub,
        "gates",
        "evaluate every gate once on the current tree (no agent)",
        "Run every gate of paella.toml once on a snapshot of the current work tree, without an "
        "agent, and print the results (recorded in the newest run's ledger). Exit 1 if any "
        "gate is red.",
        [
            ("paella gates", ""),
            ("paella gates --json", "schema: paella_tui/schemas/gates.schema.json"),
        ],
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object (schema: paella_tui/schemas/gates.schema.json)",
    )

    p = _add(
        sub,
        "checkpoint",
        "take a manual checkpoint now",
        "Checkpoint the work tree now, under refs/paella/<run-id>/checkpoints/<n>, without "
        "touching HEAD, the branch, the index or the work tree. Opens a manual run if there "
        "is none.",
        [("paella checkpoint", ""), ("paella checkpoint --label 'before the refactor'", "")],
    )
    p.add_argument(
        "--label", metavar="TEXT", default="", help="a few words to tell this checkpoint apart"
    )

    p = _add(
        sub,
        "checkpoints",
        "list checkpoints and salvage snapshots of the newest run",
        "List the newest run's checkpoints and salvage snapshots, the last green checkpoint "
        "marked ●.",
        [
            ("paella checkpoints", ""),
            ("paella checkpoints --json", "schema: paella_tui/schemas/checkpoints.schema.json"),
        ],
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object (schema: paella_tui/schemas/checkpoints.schema.json)",
    )

    p = _add(
        sub,
        "rollback",
        "restore checkpoint N (default: the last green one), salvaging first",
        "Restore a checkpoint's tree exactly (default: the last green one), or a step's, or "
        "the last step before a break where every gate green at the last checkpoint still "
        "passes (before-break). The current state is saved first as a salvage snapshot, so "
        "every rollback can be undone with `paella rollback salvage:N --yes`. Refuses while "
        "the agent runs or git is mid-operation.",
        [
            ("paella rollback", "the last green checkpoint, after asking"),
            ("paella rollback 2 --yes", "checkpoint 2, without asking"),
            ("paella rollback before-break --yes", "just before the step that broke a gate"),
            ("paella rollback step:16 --yes", "step 16 of the run (see `paella steps`)"),
            ("paella rollback salvage:1 --yes", "undo the first rollback"),
        ],
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="N|salvage:N|step:N|before-break",
        help=_TARGET_HELP + ", step:N for a step, or before-break",
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    p = _add(
        sub,
        "diff",
        "the diff from checkpoint N (default: last green) to the work tree",
        "Show the diff from a checkpoint (default: the last green one) to the work tree as it "
        "is now, untracked files included; for step:N, the change that step made.",
        [
            ("paella diff", "since the last green checkpoint"),
            ("paella diff 2 --stat", "files and lines changed since checkpoint 2"),
            ("paella diff salvage:1", "against the state a rollback saved"),
            ("paella diff step:17", "what step 17 changed"),
        ],
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="N|salvage:N|step:N",
        help=_TARGET_HELP + ", or step:N for a step's own change",
    )
    p.add_argument("--stat", action="store_true", help="files and lines changed only")

    p = _add(
        sub,
        "handoff",
        "write the handoff; print it without -o",
        "Write the newest run's handoff (what a resumed agent reads first: the task, the gates "
        "that must stay green, what changed since the last green checkpoint, the logs) to the "
        "run's handoff.md; print it too, or write it to FILE with -o.",
        [("paella handoff", ""), ("paella handoff -o HANDOFF.md", "")],
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="also write it to FILE (instead of printing it)"
    )

    p = _add(
        sub,
        "prune",
        "delete those runs' refs and state",
        "Delete the named runs: their refs under refs/paella/<run-id>/ and their state folder. "
        "Refuses a run whose agent is alive.",
        [
            ("paella prune 20261201-101500-ab12", "one run"),
            ("paella prune $(paella status --json | jq -r .run_id)", "the newest run"),
        ],
    )
    p.add_argument(
        "run_ids", nargs="+", metavar="RUN_ID", help="a run id, as `paella status` shows"
    )

    p = _add(
        sub,
        "steps",
        "the newest run's steps: every settled change, with files and gates known",
        "Every settled change of the newest run is kept as a step: its time, the files it "
        "changed with line counts, and the gates known on its tree. Steps are kept until "
        "[steps] keep after the run ends; checkpoints are never pruned.",
        [("paella steps", ""), ("paella steps --json", "every step as JSON")],
    )
    p.add_argument("--json", action="store_true", help="one JSON object with every step")

    p = _add(
        sub,
        "bisect",
        "find the step where GATE turned red (paella does this itself on a regression)",
        "Run GATE on the run's steps in a scratch tree outside your work tree, binary search "
        "between the newest step where it was green and the step where it is red, and name the "
        "step that broke it. A flaky gate is reported as flaky. Exit 0 when a step is named, 1 "
        "when none can be.",
        [
            ("paella bisect idempotency", ""),
            ("paella bisect lint --json", "the verdict as JSON"),
        ],
    )
    p.add_argument("gate", metavar="GATE", help="a gate of paella.toml or of the run's contract")
    p.add_argument("--json", action="store_true", help="the verdict as one JSON object")

    p = _add(
        sub,
        "completion",
        "print the shell completion script for bash, zsh or fish",
        "Print a completion script for SHELL, derived from paella's own parser (every command, "
        "option and choice; folders for DIR, files for FILE).",
        [
            ('eval "$(paella completion bash)"', "in ~/.bashrc"),
            ("paella completion zsh > ~/.zfunc/_paella", "with fpath+=(~/.zfunc) in ~/.zshrc"),
            ("paella completion fish > ~/.config/fish/completions/paella.fish", ""),
        ],
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete for")
    return parser
