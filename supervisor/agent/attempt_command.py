"""The command line of one attempt: the contract's agent (or resume) template, its placeholders
filled in, and the environment the agent runs in.

A resume uses the contract's ``resume`` template; a resume by ``{session_id}`` with no id seen
yet becomes the profile's "newest session in this folder" form, and without either the agent is
started again with the handoff as its task.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.agent.profiles.registry import Profile
from paella_tui.supervisor.base.files import read_regular_file, write_atomic
from paella_tui.supervisor.contract.command_line import expand_placeholders
from paella_tui.supervisor.contract.model import MAX_PROMPT_BYTES, Contract


@dataclass(frozen=True)
class AttemptInputs:
    """What the command of one attempt is made from."""

    attempt: int
    episode: int
    run_id: str
    run_dir: Path
    root: Path
    session_id: str | None
    resume: bool
    handoff_path: Path | None
    fresh: bool = False
    """The agent's session was missing: start afresh with the handoff, whatever ``resume`` says."""


@dataclass(frozen=True)
class AttemptCommand:
    """The template chosen, the argv it expands to, and the agent's environment."""

    template: tuple[str, ...]
    argv: tuple[str, ...]
    env: dict[str, str]
    used_session: bool
    """The argv names the agent's own session (a missing session is then no permanent failure)."""
    notice: str | None = None
    """A warning to show: how a resume without a session id is done instead."""


def names_session(template: tuple[str, ...]) -> bool:
    """The template has a ``{session_id}`` placeholder."""
    return any("{session_id}" in word for word in template)


def prompt_file(contract: Contract, root: Path, run_dir: Path) -> Path:
    """The task file: the contract's ``prompt_file``, else its ``prompt`` written in the run's
    folder once."""
    run_cfg = contract.run
    if run_cfg.prompt_file:
        return (root / run_cfg.prompt_file).resolve()
    path = run_dir / "prompt.md"
    if not path.exists():
        write_atomic(path, run_cfg.prompt or "")
    return path


def attempt_command(
    contract: Contract, profile: Profile | None, inputs: AttemptInputs
) -> AttemptCommand:
    """The command of one attempt. Raises OSError or ValueError when the task file is unreadable
    (deleted, a folder, a FIFO)."""
    task_file = prompt_file(contract, inputs.root, inputs.run_dir)
    prompt = read_regular_file(task_file, MAX_PROMPT_BYTES).decode(errors="replace")
    handoff_path = inputs.handoff_path
    handoff_text = handoff_path.read_text(errors="replace") if handoff_path else ""
    values = {
        "prompt": prompt,
        "prompt_file": str(task_file),
        "handoff": handoff_text,
        "handoff_file": str(handoff_path or ""),
        "attempt": str(inputs.attempt),
        "run_id": inputs.run_id,
        "session_id": inputs.session_id or "",
    }
    template = contract.run.agent
    notice = None
    if inputs.resume:
        resume_template, notice = _resume_template(contract, profile, inputs)
        if resume_template is not None:
            template = resume_template
        else:
            # No usable resume command: start the agent again with the handoff as its task.
            values["prompt"] = handoff_text or prompt
            values["prompt_file"] = str(handoff_path or task_file)
    return AttemptCommand(
        template=template,
        argv=tuple(expand_placeholders(template, values)),
        env=_environment(os.environ, inputs),
        used_session=bool(inputs.session_id) and names_session(template),
        notice=notice,
    )


def _environment(base: Mapping[str, str], inputs: AttemptInputs) -> dict[str, str]:
    env = dict(base)
    env.update(
        PAELLA_RUN_ID=inputs.run_id,
        PAELLA_ATTEMPT=str(inputs.attempt),
        PAELLA_EPISODE=str(inputs.episode),
    )
    if inputs.resume and inputs.handoff_path is not None:
        env["PAELLA_HANDOFF_FILE"] = str(inputs.handoff_path)
    else:
        env.pop("PAELLA_HANDOFF_FILE", None)
    return env


def _resume_template(
    contract: Contract, profile: Profile | None, inputs: AttemptInputs
) -> tuple[tuple[str, ...] | None, str | None]:
    """The resume command to use now (None: start again with the handoff), and a notice."""
    template = contract.run.resume
    if inputs.fresh:
        return None, None  # the session was missing: start afresh with the handoff
    if template is None or inputs.session_id or not names_session(template):
        return template, None
    # `claude -r ""` would fail: the profile's "newest session here" form, else start afresh.
    newest = profile.resume_without_session(template) if profile else None
    instead = (
        "resuming the agent's newest session here"
        if newest is not None
        else "starting the agent again with the handoff"
    )
    return newest, f"no session id was seen: {instead}"
