"""``paella init`` (write a commented contract) and ``paella check`` (validate it and say what a run would do)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paella_tui.commands.context import Context, command_found
from paella_tui.supervisor.agent.profiles.registry import get_profile
from paella_tui.supervisor.base.durations import format_duration, format_size
from paella_tui.supervisor.base.errors import EXIT_USAGE, EXIT_WORKSPACE, UsageError
from paella_tui.supervisor.base.files import write_atomic
from paella_tui.supervisor.base.globs import unmatched
from paella_tui.supervisor.contract.model import CONTRACT_FILE, Contract
from paella_tui.supervisor.contract.template import (
    PLACEHOLDER_PROMPT,
    detect_gates,
    parse_gate_option,
    render_contract,
    shell_join,
)
from paella_tui.supervisor.contract.validation import prompt_file_problem
from paella_tui.supervisor.judge.byproducts import (
    byproduct_globs,
    ecosystem_globs,
    gitignore_lines,
    untracked_byproducts,
)
from paella_tui.supervisor.store.gitcli import Git


def init(args: argparse.Namespace) -> int:
    """Write a commented ``paella.toml`` for this repository; never overwrite one."""
    ctx = Context.open()
    path = ctx.workspace.root / CONTRACT_FILE
    if path.exists():
        raise UsageError(
            f"{path} already exists; paella init never overwrites a contract",
            hint="edit it, or move it away and run `paella init` again.",
        )
    try:
        gates = [parse_gate_option(text) for text in args.gate]
    except ValueError as err:
        raise UsageError(str(err)) from err
    detected = [] if gates else detect_gates(ctx.workspace.root)
    ignore = ecosystem_globs([name for name, _ in detected])
    text = render_contract(
        ctx.workspace.root, agent=args.agent, gates=gates or detected, ignore=ignore
    )
    write_atomic(path, text)
    path.chmod(0o644)  # the contract is the user's file, meant to be read and committed
    print(f"✓ wrote {path}")
    if detected:
        print("  gates detected: " + ", ".join(f"{name} ({cmd})" for name, cmd in detected))
    elif not gates:
        print("  no test command detected: the example gate fails until you edit it")
    if ignore:
        print("  the gates' byproducts are left out of checkpoints ([watch] ignore); for git too,")
        print("  add to .gitignore: " + " ".join(ignore))
    print("  next: edit the task, gates and episodes, then `paella check` and `paella run`")
    return 0


def describe_run(contract: Contract) -> list[str]:
    """What a run under this contract would do, as lines for a person."""
    run = contract.run
    lines = [f"run {run.name!r}" + (f" with profile {run.profile}" if run.profile else "")]
    prompt = f"the file {run.prompt_file}" if run.prompt_file else repr((run.prompt or "")[:70])
    lines.append(f"  task: {prompt}")
    lines.append(
        f"  agent: {shell_join(run.agent)}" + ("" if run.tty else "  (pipes, no terminal)")
    )
    resume = (
        shell_join(run.resume) if run.resume else "the agent command, with the handoff as {prompt}"
    )
    lines.append(f"  resume: {resume}")
    lines.extend(f"  {line}" for line in profile_notes(contract))
    lines.append(
        f"  stall warning after {format_duration(run.stall_after)} of silence; "
        f"files over {format_size(run.max_file_size)} are left out of snapshots"
    )
    if run.scope:
        lines.append(f"  scope: {', '.join(run.scope)}")
    retry = contract.retry
    lines.append(
        f"  retry: up to {retry.max_attempts} transient failures, backoff "
        f"{format_duration(retry.backoff)} doubling to {format_duration(retry.max_backoff)}"
    )
    lines.append(
        f"  gates re-run {format_duration(contract.watch.settle)} after the last change, "
        f"{contract.gates_config.jobs} at a time:"
    )
    for gate in contract.gates:
        extra = (
            f", {gate.retries} retr{'y' if gate.retries == 1 else 'ies'}" if gate.retries else ""
        )
        lines.append(
            f"    {gate.name}: {gate.cmd}  (timeout {format_duration(gate.timeout)}{extra})"
        )
    lines.append("  episodes (cumulative: each needs every gate before it too):")
    for k, episode in enumerate(contract.episodes, start=1):
        lines.append(
            f"    {k}. {episode.name}: needs {', '.join(contract.episode_gates(k)) or 'no gate'}"
        )
    for constraint in contract.constraints:
        protect = f"  [protects {', '.join(constraint.protect)}]" if constraint.protect else ""
        lines.append(f"  constraint: {constraint.text}{protect}")
    return lines


def profile_notes(contract: Contract) -> list[str]:
    """What the agent's profile will read from its output, or the profile that would help."""
    run = contract.run
    profile = get_profile(run.profile)
    if profile is None:
        guess = Path(run.agent[0]).name
        if get_profile(guess) is not None:
            return [
                f'hint: set profile = "{guess}" for its readable stream, session resume, '
                "limit handling and false-success checks (`paella init --agent` shows it)"
            ]
        return []
    if profile.decoder is None:
        return [f"output: plain text ({profile.name} has no JSON stream)"]
    flags = " ".join(profile.stream_flags[0])
    commands = [("agent", run.agent)] + ([("resume", run.resume)] if run.resume else [])
    lines = []
    for key, template in commands:
        if profile.stream_on(template):
            lines.append(f"{key} output: decoded (readable log, session id, turns, tokens, cost)")
        else:
            lines.append(
                f"{key} output: raw text, no session id captured: add {flags} to `{key}` "
                "for the decoded stream"
            )
    return lines


def tree_warnings(contract: Contract, root: Path) -> list[str]:
    """What a run would trip on though the contract is valid: a placeholder task, globs that
    match nothing in the tree, byproducts git does not ignore."""
    warnings: list[str] = []
    if (contract.run.prompt or "").strip() == PLACEHOLDER_PROMPT:
        warnings.append(
            f"the task is still the template's {PLACEHOLDER_PROMPT!r}: write the real task in "
            "`prompt` (or `prompt_file`)"
        )
    files = Git(root).lines_z(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    keys: list[tuple[str, tuple[str, ...]]] = [("scope", contract.run.scope)]
    keys += [(f"constraint {c.text[:40]!r} protect", c.protect) for c in contract.constraints]
    keys += [(f"gate {g.name!r} paths", g.paths) for g in contract.gates]
    for key, patterns in keys:
        for pattern in unmatched(patterns, files):
            warnings.append(
                f"{key}: {pattern!r} matches no file in the tree (globs read like .gitignore: "
                "`src` covers the folder src)"
            )
    byproducts = untracked_byproducts(root, byproduct_globs(contract))
    if byproducts:
        lines = gitignore_lines(byproducts, byproduct_globs(contract))
        warnings.append(
            f"{len(byproducts)} untracked byproduct{'s' if len(byproducts) != 1 else ''} of the "
            f"gates ({byproducts[0]}{', …' if len(byproducts) > 1 else ''}): paella leaves them "
            "out of checkpoints; add these lines to .gitignore so git does too: " + " ".join(lines)
        )
    return warnings


def check(args: argparse.Namespace) -> int:
    """Validate the contract and the workspace; print what a run would do."""
    ctx = Context.open()
    contract = ctx.contract()  # a broken contract raises ContractError: exit 2 with every problem
    ws = ctx.workspace
    print(f"✓ {ws.root / CONTRACT_FILE} is valid")
    print(f"  workspace {ws.root} on {ws.head().describe()}; state in {ws.state_dir}")
    for line in describe_run(contract):
        print(line)
    problems: list[tuple[int, str]] = []
    if not contract.gates:
        problems.append(
            (EXIT_USAGE, "the contract has no gate: nothing could ever prove the run done")
        )
    if not contract.episodes:
        problems.append(
            (EXIT_USAGE, "the contract has no episode: add [[episode]] tables naming gates")
        )
    if not command_found(contract.run.agent, ws.root):
        problems.append(
            (
                EXIT_USAGE,
                f"the agent command {contract.run.agent[0]!r} is not found on PATH: "
                "install it or fix `agent` in paella.toml",
            )
        )
    for gate in contract.gates:
        if not command_found(gate.argv, ws.root):
            problems.append(
                (EXIT_USAGE, f"gate {gate.name!r}: command {gate.argv[0]!r} is not found on PATH")
            )
    if contract.run.prompt_file:
        unreadable = prompt_file_problem(contract.run.prompt_file, ws.root)
        if unreadable:
            problems.append((EXIT_USAGE, unreadable))
    busy = ws.operation_in_progress()
    if busy is not None:
        problems.append(
            (EXIT_WORKSPACE, f"{busy[0]} is in progress: finish or abort it first ({busy[1]})")
        )
    profile = get_profile(contract.run.profile)
    agent_name = Path(contract.run.agent[0]).name
    if (
        profile is not None
        and agent_name == profile.name
        and command_found(contract.run.agent, ws.root)
    ):
        # Only the agent's own CLI: a wrapper's version says nothing about the agent's output.
        from paella_tui.supervisor.agent.profiles.versions import probe_version, version_note

        found = probe_version(contract.run.agent[0], ws.root)
        ok, note = version_note(agent_name, found, profile.checked_versions)
        print(f"  {note}" if ok else f"⚠ {note}")
    for warning in tree_warnings(contract, ws.root):
        print(f"⚠ {warning}")
    for _, message in problems:
        print(f"✗ {message}", file=sys.stderr)
    if problems:
        return max(code for code, _ in problems)
    print("✓ ready: `paella run` starts it")
    return 0
