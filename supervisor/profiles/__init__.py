"""Agent profiles (SPEC 3 `profile`, SPEC 9): how each known agent is started and resumed, which
messages mark a transient failure, how its JSON stream reads, and how a false success looks.

The start and resume commands are the contract's (`contract.PROFILE_COMMANDS`), not restated.
`stream_args` are the flags that make the agent print its JSON stream; they are not in the
contract's commands, and `argv(..., stream=True)` puts them in after the command words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from supervisor.contract import DEFAULT_AGENT_COMMANDS, DEFAULT_RESUME_COMMANDS, expand_placeholders
from supervisor.events import AgentExited, Ending
from supervisor.profiles import aider, claude, codex, gemini, opencode
from supervisor.profiles.stream import DecodedStats, Dialect, DisplayLine, StreamDecoder
from supervisor.retry import classify

__all__ = [
    "PROFILES",
    "DecodedStats",
    "DisplayLine",
    "FalseSuccess",
    "Profile",
    "StreamDecoder",
    "get_profile",
]

FalseSuccess = Callable[[Sequence[str], int | None, DecodedStats], str | None]
"""(output tail, exit code, decoded stats) -> why an exit 0 is really a failure, or None."""


def _no_false_success(
    tail: Sequence[str], exit_code: int | None, decoded: DecodedStats
) -> str | None:
    return None


@dataclass(frozen=True)
class Profile:
    """One agent paella-tui knows: commands, limits, stream and exit codes."""

    name: str
    start: tuple[str, ...]
    """The start argv template (placeholders as in `contract.expand_placeholders`)."""
    resume: tuple[str, ...]
    """The resume argv template; uses `{session_id}` where the agent resumes by id."""
    command_words: int
    """How many leading words name the command (`codex exec` is 2): stream args go after them."""
    stream_args: tuple[str, ...] = ()
    """Flags that turn on the agent's JSON-lines stream (empty: the agent has none)."""
    transient: tuple[str, ...] = ()
    """Case-insensitive patterns marking a transient failure, added to the contract's."""
    decoder: Callable[[], StreamDecoder] | None = None
    """A fresh decoder for one attempt's output, or None when the output is plain text."""
    false_success: FalseSuccess = _no_false_success
    exit_code_meanings: Mapping[int, str] = field(default_factory=dict)
    """What the agent's own non-zero exit codes mean."""

    def argv(
        self, values: Mapping[str, object], *, resume: bool = False, stream: bool = True
    ) -> tuple[str, ...]:
        """The command to run, placeholders expanded; with `stream`, the stream flags put in."""
        template = self.resume if resume else self.start
        if stream and self.stream_args:
            k = self.command_words
            template = (*template[:k], *self.stream_args, *template[k:])
        return expand_placeholders(template, values)

    def transient_patterns(self, contract_patterns: Sequence[str]) -> tuple[str, ...]:
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

    def classify(
        self,
        exited: AgentExited,
        decoded: DecodedStats,
        *,
        all_gates_green: bool,
        transient: Sequence[str],
    ) -> tuple[Ending, str | None]:
        """`retry.classify` with this profile's patterns, seeing through a false success.

        Done is still what the gates say; but an exit 0 the profile calls a false success is
        judged as a failed exit (transient when a pattern matches) instead of claimed-done.
        Returns the ending and the false-success reason, if any.
        """
        patterns = self.transient_patterns(transient)
        ending = classify(exited, all_gates_green=all_gates_green, transient=patterns)
        if ending != "claimed-done":
            return ending, None
        reason = self.false_success(exited.tail, exited.exit_code, decoded)
        if reason is None:
            return ending, None
        failed = dataclasses.replace(exited, exit_code=1, tail=(*exited.tail, reason))
        return classify(failed, all_gates_green=False, transient=patterns), reason


def _profile(
    name: str, module: object, command_words: int, dialect: type[Dialect] | None
) -> Profile:
    def make() -> StreamDecoder:
        assert dialect is not None
        return StreamDecoder(dialect())

    return Profile(
        name=name,
        start=DEFAULT_AGENT_COMMANDS[name],
        resume=DEFAULT_RESUME_COMMANDS[name],
        command_words=command_words,
        stream_args=getattr(module, "STREAM_ARGS", ()),
        transient=getattr(module, "TRANSIENT", ()),
        decoder=make if dialect is not None else None,
        false_success=getattr(module, "false_success", _no_false_success),
        exit_code_meanings=dict(getattr(module, "EXIT_CODES", {})),
    )


PROFILES: dict[str, Profile] = {
    "claude": _profile("claude", claude, 1, claude.ClaudeDialect),
    "codex": _profile("codex", codex, 2, codex.CodexDialect),
    "gemini": _profile("gemini", gemini, 1, gemini.GeminiDialect),
    "aider": _profile("aider", aider, 1, None),
    "opencode": _profile("opencode", opencode, 2, opencode.OpencodeDialect),
}
"""Every known profile by name (the names of `contract.PROFILES`)."""


def get_profile(name: str | None) -> Profile | None:
    """The profile called `name`, or None (no profile, or an unknown one)."""
    return PROFILES.get(name) if name else None
