"""The contract's model: the frozen, typed values a validated `paella.toml` is read into.

Reading and checking the file is `contract.loader` (with `validation`, `sections` and
`toml_lines`); what is wrong with one is `contract.problems`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

CONTRACT_FILE = "paella.toml"
"""The contract's file name, at the workspace root."""

DEFAULT_STALL_AFTER = 15 * 60.0
DEFAULT_MAX_FILE_SIZE = 50 * 1024**2
DEFAULT_GATE_TIMEOUT = 10 * 60.0
MAX_CONTRACT_BYTES = 1 << 20
"""A contract is a page of TOML; anything bigger is not one (and is not read whole)."""
MAX_PROMPT_BYTES = 1 << 20
"""A task is text a person wrote; a bigger prompt_file is a mistake (or /dev/zero)."""


@dataclass(frozen=True)
class Gate:
    """A named check command; green on a tree when it exits 0 within its timeout."""

    name: str
    """Unique within the contract; also a folder name for its logs."""
    argv: tuple[str, ...]
    """The command, split like a shell would; run without one."""
    cmd: str
    """The command as written (an array is shown shell-quoted)."""
    timeout: float
    """Seconds before the gate's process group is killed and the gate is red."""
    retries: int
    """How many times a failure is re-run; a pass after a failure is flaky."""
    paths: tuple[str, ...]
    """Globs: only changes under these make the gate's result stale; empty means any change."""

    def definition_key(self) -> str:
        """A stable sha256 of what decides the gate's result (argv, timeout, retries)."""
        payload = json.dumps(
            {"argv": list(self.argv), "timeout": self.timeout, "retries": self.retries},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Episode:
    """A named step; complete when every gate of it and of the episodes before it is green."""

    name: str
    """Unique within the contract."""
    goal: str
    """What the step achieves, in words (shown and put in the handoff)."""
    gates: tuple[str, ...]
    """Names of the gates this episode adds."""


@dataclass(frozen=True)
class Constraint:
    """A rule the agent must keep, with files it must not change."""

    text: str
    """The rule, in words (put in the prompt and the handoff)."""
    protect: tuple[str, ...]
    """Globs of files the agent must not change: a change is drift."""


@dataclass(frozen=True)
class RunConfig:
    """The `[run]` table: the task, the agent command and how it is watched."""

    name: str
    """The run's display name; default: the workspace folder name."""
    prompt: str | None
    """The task text, when given inline."""
    prompt_file: str | None
    """A file holding the task, relative to the workspace, when given that way."""
    profile: str | None
    """The agent profile (one of `agent.profiles.commands.PROFILE_NAMES`), if any."""
    agent: tuple[str, ...]
    """The agent's start argv, with placeholders still in it."""
    resume: tuple[str, ...] | None
    """The resume argv; None means: the agent argv with {prompt} given the handoff text."""
    stall_after: float
    """Seconds with no output and no file change before a stall is drift."""
    scope: tuple[str, ...]
    """Globs; a change outside them is drift. Empty means anywhere."""
    tty: bool
    """Run the agent under a pseudo-terminal (True) or with pipes."""
    max_file_size: int
    """Bytes; larger files are left out of snapshots, and named."""


@dataclass(frozen=True)
class RetryConfig:
    """The `[retry]` table: the governed retry after a transient failure."""

    max_attempts: int = 3
    """Attempts per run, not counting resumes a person chose."""
    backoff: float = 30.0
    """Seconds of the first wait; it doubles each time."""
    max_backoff: float = 900.0
    """The longest blind wait, in seconds."""
    transient: tuple[str, ...] = ("rate limit", "429", "overloaded", "usage limit")
    """Case-insensitive patterns (whole words; digits: an HTTP status) marking a failure transient."""
    max_wait: float = 6 * 3600.0
    """The longest wait for a reset the agent printed; a later one stops the run and says when
    to resume."""


@dataclass(frozen=True)
class WatchConfig:
    """The `[watch]` table: when file changes trigger the gates."""

    settle: float = 2.0
    """Seconds of quiet after the last change before gates re-run."""
    ignore: tuple[str, ...] = ()
    """Globs ignored in addition to .gitignore and the state folder."""


def _cpu_count() -> int:
    """The CPU count, or 1 when unknown."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class GatesConfig:
    """The `[gates]` table: how gates are run together."""

    jobs: int = field(default_factory=_cpu_count)
    """How many gates run in parallel."""


DEFAULT_STEPS_KEEP = 7 * 24 * 3600.0
"""Seven days: how long steps outlive the end of their run by default."""


@dataclass(frozen=True)
class StepsConfig:
    """The `[steps]` table: every settled change kept as a step, and how a bisect sees it."""

    keep: float = DEFAULT_STEPS_KEEP
    """Seconds the steps of an ended run are kept before they are pruned (checkpoints never are)."""
    link: tuple[str, ...] = ()
    """Ignored paths of the work tree (a virtualenv, node_modules) linked into a bisect's
    scratch tree, so gates find what they need there."""


@dataclass(frozen=True)
class Contract:
    """A validated `paella.toml`, with the text and hash it was read from."""

    path: Path
    """Where it was read from."""
    text: str
    """The source text (a run freezes this copy)."""
    sha256: str
    """sha256 hex of the UTF-8 text."""
    run: RunConfig
    retry: RetryConfig
    watch: WatchConfig
    gates_config: GatesConfig
    gates: tuple[Gate, ...]
    """In file order."""
    episodes: tuple[Episode, ...]
    """In file order; episode k (1-based) is complete when episodes 1..k's gates are green."""
    constraints: tuple[Constraint, ...]
    steps: StepsConfig = field(default_factory=StepsConfig)
    """The `[steps]` table."""

    def gate(self, name: str) -> Gate:
        """The gate called `name` (KeyError if there is none)."""
        for gate in self.gates:
            if gate.name == name:
                return gate
        raise KeyError(name)

    def episode_gates(self, k: int) -> tuple[str, ...]:
        """The gate names episode k (1-based) needs green: those of episodes 1..k, in order."""
        if not 0 <= k <= len(self.episodes):
            raise IndexError(f"episode {k} is not in 1..{len(self.episodes)}")
        names = (name for episode in self.episodes[:k] for name in episode.gates)
        return tuple(dict.fromkeys(names))

    def protected_globs(self) -> tuple[str, ...]:
        """Every constraint's protected globs, in order, without duplicates."""
        return tuple(dict.fromkeys(g for c in self.constraints for g in c.protect))
