"""The registry of agent profiles: each known agent as a `Profile` (its commands, stream decoder,
transient patterns, exit codes, false successes), built from its module and the command table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paella_tui.supervisor.agent.profiles import aider, claude, codex, gemini, opencode
from paella_tui.supervisor.agent.profiles.commands import (
    DEFAULT_AGENT_COMMANDS,
    DEFAULT_RESUME_COMMANDS,
)
from paella_tui.supervisor.agent.profiles.stream import DecodedStats, Dialect, StreamDecoder
from paella_tui.supervisor.contract.command_line import expand_placeholders

FalseSuccess = Callable[[Sequence[str], int | None, DecodedStats], str | None]
"""(output tail, exit code, decoded stats) -> why an exit 0 is really a failure, or None."""

Args = tuple[str, ...]


def _no_false_success(
    tail: Sequence[str], exit_code: int | None, decoded: DecodedStats
) -> str | None:
    return None


@dataclass(frozen=True)
class Profile:
    """One agent paella-tui knows: commands, limits, stream and exit codes."""

    name: str
    start: Args
    """The start argv template (placeholders as in `contract.command_line`)."""
    resume: Args
    """The resume argv template; uses `{session_id}` where the agent resumes by id."""
    stream_flags: tuple[Args, ...] = ()
    """Runs of arguments that turn on the agent's JSON-lines stream (any one of them); the first
    is the one its own commands use."""
    newest_session: tuple[tuple[Args, Args], ...] = ()
    """(resume by id, resume the newest session here) argument pairs, e.g. `-r {session_id}`
    and `-c`: how a resume reads when no session id was seen."""
    transient: Args = ()
    """Case-insensitive patterns marking a transient failure, added to the contract's."""
    decoder: Callable[[], StreamDecoder] | None = None
    """A fresh decoder for one attempt's output, or None when the output is plain text."""
    false_success: FalseSuccess = _no_false_success
    exit_code_meanings: Mapping[int, str] = field(default_factory=dict)
    """What the agent's own non-zero exit codes mean."""
    own_backoff: Args = ()
    """Regexes for the agent's notices of its own back-off (not a provider's reset time)."""
    checked_versions: tuple[str, str] | None = None
    """The lowest and highest version the profile was checked against (the corpus's range)."""

    def argv(self, values: Mapping[str, object], *, resume: bool = False) -> Args:
        """The profile's own start (or resume) command, placeholders expanded."""
        return expand_placeholders(self.resume if resume else self.start, values)

    def stream_on(self, template: Sequence[str]) -> bool:
        """Whether `template` (a contract's agent or resume) asks for the JSON stream."""
        if self.decoder is None:
            return False
        words = _split_equals(template)
        return any(_find_run(words, flags) is not None for flags in self.stream_flags)

    def resume_without_session(self, template: Sequence[str]) -> Args | None:
        """`template` resuming the newest session here instead of `{session_id}`; None when the
        template names the session some other way (or the agent has no such form)."""
        words = tuple(template)
        for by_id, newest in self.newest_session:
            at = _find_run(words, by_id)
            if at is None:
                continue
            result = (*words[:at], *newest, *words[at + len(by_id) :])
            if not any("{session_id}" in word for word in result):
                return result
        return None

    def transient_patterns(self, contract_patterns: Sequence[str]) -> Args:
        """The contract's patterns, then this profile's, without duplicates (case-insensitive)."""
        seen: set[str] = set()
        merged: list[str] = []
        for pattern in (*contract_patterns, *self.transient):
            if pattern and pattern.casefold() not in seen:
                seen.add(pattern.casefold())
                merged.append(pattern)
        return tuple(merged)

    def new_decoder(self) -> StreamDecoder:
        """A decoder for one attempt; plain text when the agent has no stream."""
        return self.decoder() if self.decoder is not None else StreamDecoder(Dialect())

    def exit_meaning(self, exit_code: int | None) -> str | None:
        """The agent's own name for an exit code, if it has one."""
        return None if exit_code is None else self.exit_code_meanings.get(exit_code)


def _split_equals(words: Sequence[str]) -> Args:
    """`--format=json` read as `--format json`."""
    out: list[str] = []
    for word in words:
        if word.startswith("-") and "=" in word:
            out.extend(word.split("=", 1))
        else:
            out.append(word)
    return tuple(out)


def _find_run(words: Sequence[str], run: Sequence[str]) -> int | None:
    """Where `run` starts as consecutive items of `words`, or None."""
    n = len(run)
    for i in range(len(words) - n + 1):
        if tuple(words[i : i + n]) == tuple(run):
            return i
    return None


def _profile(name: str, module: object, dialect: type[Dialect] | None) -> Profile:
    def make() -> StreamDecoder:
        assert dialect is not None
        return StreamDecoder(dialect())

    return Profile(
        name=name,
        start=DEFAULT_AGENT_COMMANDS[name],
        resume=DEFAULT_RESUME_COMMANDS[name],
        stream_flags=getattr(module, "STREAM_FLAGS", ()),
        newest_session=getattr(module, "NEWEST_SESSION", ()),
        transient=getattr(module, "TRANSIENT", ()),
        decoder=make if dialect is not None else None,
        false_success=getattr(module, "false_success", _no_false_success),
        exit_code_meanings=dict(getattr(module, "EXIT_CODES", {})),
        own_backoff=getattr(module, "OWN_BACKOFF", ()),
        checked_versions=getattr(module, "CHECKED_VERSIONS", None),
    )


PROFILES: dict[str, Profile] = {
    "claude": _profile("claude", claude, claude.ClaudeDialect),
    "codex": _profile("codex", codex, codex.CodexDialect),
    "gemini": _profile("gemini", gemini, gemini.GeminiDialect),
    "aider": _profile("aider", aider, None),
    "opencode": _profile("opencode", opencode, opencode.OpencodeDialect),
}
"""Every known profile by name (the names of `commands.PROFILE_NAMES`)."""


def get_profile(name: str | None) -> Profile | None:
    """The profile called `name`, or None (no profile, or an unknown one)."""
    return PROFILES.get(name) if name else None
