"""Validation of `paella.toml`: each table's rules, read into the model's typed values.

Every problem is collected, none stops the reading (a user fixes them all at once); the rules a
gate name and a prompt file must follow are shared with `paella init` and the commands.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path, PurePosixPath

from paella_tui.supervisor.agent.profiles.commands import (
    DEFAULT_AGENT_COMMANDS,
    DEFAULT_RESUME_COMMANDS,
    PROFILE_NAMES,
)
from paella_tui.supervisor.base.files import read_regular_file
from paella_tui.supervisor.contract.model import (
    DEFAULT_GATE_TIMEOUT,
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_STALL_AFTER,
    MAX_PROMPT_BYTES,
    Constraint,
    Contract,
    Episode,
    Gate,
    GatesConfig,
    RetryConfig,
    RunConfig,
    StepsConfig,
    WatchConfig,
)
from paella_tui.supervisor.contract.problems import ContractError, quoted, suggestion
from paella_tui.supervisor.contract.sections import KEYS, TABLES, Checker, table_sections
from paella_tui.supervisor.contract.toml_lines import TomlLines


def check_gate_name(name: str) -> str | None:
    """Why `name` cannot name a gate (it becomes a folder name), or None if it can."""
    if not name.strip():
        return "a gate name cannot be empty"
    if "/" in name or "\\" in name:
        return f"a gate name cannot contain a slash (it names a folder), got {quoted(name)}"
    if name in (".", ".."):
        return f"a gate name cannot be {quoted(name)} (it names a folder)"
    if not name.isprintable():
        return f"a gate name must be printable, got {quoted(name)}"
    if len(name.encode("utf-8", errors="surrogatepass")) > MAX_GATE_NAME_BYTES:
        return (
            f"a gate name names a folder, so it must fit in {MAX_GATE_NAME_BYTES} bytes "
            f"(this one has {len(name.encode('utf-8', errors='surrogatepass'))})"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"a gate name must be valid text, got {quoted(name)}"
    return None


MAX_GATE_NAME_BYTES = 100
"""Well under the 255 bytes a file name may have, so the gate's log folder can always be made."""


def prompt_file_problem(prompt_file: str, root: Path) -> str | None:
    """Why ``[run] prompt_file`` cannot be read as the task (missing, a folder, a device, too big)."""
    path = root / prompt_file
    try:
        data = read_regular_file(path, MAX_PROMPT_BYTES)
    except FileNotFoundError:
        return f"prompt_file {prompt_file!r} does not exist (in {root})"
    except OSError as exc:
        return f"prompt_file {prompt_file!r} cannot be read: {exc.strerror or exc}"
    except ValueError as exc:
        return f"prompt_file {prompt_file!r} cannot be the task: {exc}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return f"prompt_file {prompt_file!r} is not UTF-8 text"
    return None


def _top_level(checker: Checker, data: dict[str, object]) -> None:
    """Report unknown top-level keys, pointing stray `[run]` keys to their table."""
    for key in data:
        if key in TABLES:
            continue
        homes = [t for t in ("run", "retry", "watch", "gates", "steps") if key in KEYS[t]]
        if homes:
            hint = f" (did you mean to put it under [{homes[0]}]?)"
        else:
            hint = suggestion(key, TABLES, wrap="[{}]")
        checker.add(None, key, f"unknown key{hint}; known tables: {', '.join(TABLES)}")


def _read_run(checker: Checker, data: dict[str, object], default_name: str) -> RunConfig | None:
    """The `[run]` table."""
    sections = table_sections(checker, data, "run")
    if not sections:
        if "run" not in data:
            checker.add(None, "run", "[run] is missing: it holds the task and the agent command")
        return None
    run = sections[0]
    run.unknown_keys()
    name = run.text("name") or default_name
    prompt = run.text("prompt")
    prompt_file = run.text("prompt_file")
    if "prompt" in run.data and "prompt_file" in run.data:
        run.problem("prompt_file", "set prompt or prompt_file, not both")
    elif "prompt" not in run.data and "prompt_file" not in run.data:
        run.problem(None, "set prompt (the task) or prompt_file (a file holding the task)")
    profile = run.text("profile")
    if profile is not None and profile not in PROFILE_NAMES:
        hint = suggestion(profile, PROFILE_NAMES)
        run.problem(
            "profile", f"unknown profile {quoted(profile)}{hint}; known: {', '.join(PROFILE_NAMES)}"
        )
        profile = None
    agent = run.command("agent", placeholders=True)
    resume = run.command("resume", placeholders=True)
    if "agent" not in run.data:
        if profile is not None:
            agent = DEFAULT_AGENT_COMMANDS[profile]
            # The profile's resume belongs with the profile's own start command only.
            if "resume" not in run.data:
                resume = DEFAULT_RESUME_COMMANDS[profile]
        elif "profile" not in run.data:
            run.problem(
                None,
                f"set agent (the command that starts the agent) or profile ({', '.join(PROFILE_NAMES)})",
            )
    stall_after = run.duration("stall_after", DEFAULT_STALL_AFTER, positive=True)
    scope = run.strings("scope")
    tty = run.flag("tty", True)
    max_file_size = run.size("max_file_size", DEFAULT_MAX_FILE_SIZE)
    if agent is None:
        return None
    return RunConfig(
        name=name,
        prompt=prompt,
        prompt_file=prompt_file,
        profile=profile,
        agent=agent,
        resume=resume,
        stall_after=stall_after,
        scope=scope,
        tty=tty,
        max_file_size=max_file_size,
    )


def _read_retry(checker: Checker, data: dict[str, object]) -> RetryConfig:
    """The `[retry]` table."""
    defaults = RetryConfig()
    sections = table_sections(checker, data, "retry")
    if not sections:
        return defaults
    retry = sections[0]
    retry.unknown_keys()
    backoff = retry.duration("backoff", defaults.backoff)
    max_backoff = retry.duration("max_backoff", defaults.max_backoff)
    if max_backoff < backoff:
        retry.problem(
            "max_backoff" if "max_backoff" in retry.data else "backoff",
            f"max_backoff ({max_backoff:g}s) is shorter than backoff ({backoff:g}s)",
        )
    return RetryConfig(
        max_attempts=retry.integer("max_attempts", defaults.max_attempts, minimum=1),
        backoff=backoff,
        max_backoff=max_backoff,
        transient=retry.strings("transient", defaults.transient),
        max_wait=retry.duration("max_wait", defaults.max_wait),
    )


def _read_watch(checker: Checker, data: dict[str, object]) -> WatchConfig:
    """The `[watch]` table."""
    defaults = WatchConfig()
    sections = table_sections(checker, data, "watch")
    if not sections:
        return defaults
    watch = sections[0]
    watch.unknown_keys()
    return WatchConfig(
        settle=watch.duration("settle", defaults.settle),
        ignore=watch.strings("ignore"),
    )


def _read_gates_config(checker: Checker, data: dict[str, object]) -> GatesConfig:
    """The `[gates]` table."""
    defaults = GatesConfig()
    sections = table_sections(checker, data, "gates")
    if not sections:
        return defaults
    gates = sections[0]
    gates.unknown_keys()
    return GatesConfig(jobs=gates.integer("jobs", defaults.jobs, minimum=1))


def _read_steps(checker: Checker, data: dict[str, object]) -> StepsConfig:
    """The `[steps]` table: `keep` a duration, `link` relative paths inside the workspace."""
    defaults = StepsConfig()
    sections = table_sections(checker, data, "steps")
    if not sections:
        return defaults
    steps = sections[0]
    steps.unknown_keys()
    links = steps.strings("link")
    good: list[str] = []
    for link in links:
        parts = PurePosixPath(link).parts
        if link.startswith("/") or ".." in parts or not parts or parts[0] == ".git":
            steps.problem(
                "link",
                f"{link!r} must be a path inside the workspace, relative to its root "
                '(like ".venv" or "frontend/node_modules")',
            )
        else:
            good.append(link.rstrip("/"))
    return StepsConfig(keep=steps.duration("keep", defaults.keep), link=tuple(good))


def _read_gates(checker: Checker, data: dict[str, object]) -> list[Gate]:
    """The `[[gate]]` tables."""
    gates: list[Gate] = []
    first_seen: dict[str, str] = {}
    for section in table_sections(checker, data, "gate"):
        section.unknown_keys()
        name = section.text("name", required=True)
        if name is not None:
            why = check_gate_name(name)
            if why:
                section.problem("name", why)
                name = None
            elif name in first_seen:
                section.problem("name", f"{quoted(name)} is already the name of {first_seen[name]}")
                name = None
            else:
                first_seen[name] = section.label
        argv = section.command("cmd", placeholders=False)
        if argv is None and "cmd" not in section.data:
            section.problem(None, "cmd is missing: the command that checks the work")
        raw = section.data.get("cmd")
        timeout = section.duration("timeout", DEFAULT_GATE_TIMEOUT, positive=True)
        retries = section.integer("retries", 0, minimum=0)
        paths = section.strings("paths")
        if name is not None and argv is not None:
            cmd = raw if isinstance(raw, str) else shlex.join(argv)
            gates.append(Gate(name, argv, cmd, timeout, retries, paths))
    return gates


def _read_episodes(
    checker: Checker, data: dict[str, object], gate_names: set[str]
) -> list[Episode]:
    """The `[[episode]]` tables; `gate_names` are every gate named in the file."""
    episodes: list[Episode] = []
    first_seen: dict[str, str] = {}
    for section in table_sections(checker, data, "episode"):
        section.unknown_keys()
        name = section.text("name", required=True)
        if name is not None and name in first_seen:
            section.problem("name", f"{quoted(name)} is already the name of {first_seen[name]}")
            name = None
        elif name is not None:
            first_seen[name] = section.label
        goal = section.text("goal") or ""
        gates = section.strings("gates")
        if "gates" not in section.data:
            section.problem(None, "gates is missing: the gates that show this episode is done")
        elif section.data["gates"] == []:
            section.problem("gates", "name at least one gate")
        for gate in gates:
            if gate not in gate_names:
                hint = suggestion(gate, gate_names)
                section.problem("gates", f"no gate is named {quoted(gate)}{hint}")
        duplicates = sorted({g for g in gates if gates.count(g) > 1})
        for gate in duplicates:
            section.problem("gates", f"{quoted(gate)} is listed twice")
        if name is not None:
            episodes.append(Episode(name, goal, gates))
    return episodes


def _read_constraints(checker: Checker, data: dict[str, object]) -> list[Constraint]:
    """The `[[constraint]]` tables."""
    constraints: list[Constraint] = []
    for section in table_sections(checker, data, "constraint"):
        section.unknown_keys()
        text = section.text("text", required=True)
        protect = section.strings("protect")
        if text is not None:
            constraints.append(Constraint(text, protect))
    return constraints


def _gate_names(data: dict[str, object]) -> set[str]:
    """Every string gate name in the file, valid or not (so episodes are not blamed twice)."""
    gates = data.get("gate")
    if not isinstance(gates, list):
        return set()
    return {g["name"] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)}


def contract_from_toml(
    data: dict[str, object],
    *,
    text: str,
    path: Path,
    lines: TomlLines,
    default_name: str,
    frozen: bool = False,
) -> Contract:
    """The Contract in parsed TOML `data` (read from `text`); raises ContractError listing every
    problem, each at the line `lines` finds for it."""
    checker = Checker(path, lines, frozen=frozen)
    _top_level(checker, data)
    run = _read_run(checker, data, default_name)
    retry = _read_retry(checker, data)
    watch = _read_watch(checker, data)
    gates_config = _read_gates_config(checker, data)
    steps = _read_steps(checker, data)
    gates = _read_gates(checker, data)
    episodes = _read_episodes(checker, data, _gate_names(data))
    constraints = _read_constraints(checker, data)
    if checker.problems or run is None:
        # Stable: problems on one line keep the order they were found in.
        ordered = sorted(checker.problems, key=lambda p: p.line if p.line is not None else 1 << 30)
        raise ContractError(ordered)
    return Contract(
        path=path,
        text=text,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        run=run,
        retry=retry,
        watch=watch,
        gates_config=gates_config,
        gates=tuple(gates),
        episodes=tuple(episodes),
        constraints=tuple(constraints),
        steps=steps,
    )
