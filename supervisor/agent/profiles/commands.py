"""The command table of the agent profiles: each known agent's start and resume command lines.

Plain strings, as a user would write them in `paella.toml`: the contract reads a `profile` with
them (so loading a contract never loads the profiles' stream decoders), and `registry` builds each
`Profile` on them.
"""

from __future__ import annotations

import shlex

PROFILE_NAMES = ("claude", "codex", "gemini", "aider", "opencode")
"""The agents paella-tui knows how to start headless and resume."""

PROFILE_COMMANDS: dict[str, tuple[str, str]] = {
    "claude": (
        "claude -p {prompt} --permission-mode acceptEdits --output-format stream-json --verbose",
        "claude -r {session_id} -p {handoff} --permission-mode acceptEdits"
        " --output-format stream-json --verbose",
    ),
    "codex": (
        "codex exec --json --sandbox workspace-write {prompt}",
        # `exec resume` takes no --sandbox of its own (openai/codex#40149): the config key does.
        "codex exec --json -c 'sandbox_mode=\"workspace-write\"' resume {session_id} {handoff}",
    ),
    "gemini": (
        "gemini -p {prompt} --approval-mode auto_edit -o stream-json",
        "gemini -r {session_id} -p {handoff} --approval-mode auto_edit -o stream-json",
    ),
    "aider": (
        "aider --message-file {prompt_file} --yes-always --no-stream --no-pretty",
        "aider --message-file {handoff_file} --yes-always --no-stream --no-pretty"
        " --restore-chat-history",
    ),
    "opencode": (
        "opencode run --auto --format json {prompt}",
        "opencode run --auto --format json -s {session_id} {handoff}",
    ),
}
"""Each profile's (start, resume) command line, as a user would write it in `paella.toml`."""

DEFAULT_AGENT_COMMANDS: dict[str, tuple[str, ...]] = {
    name: tuple(shlex.split(start)) for name, (start, _) in PROFILE_COMMANDS.items()
}
"""Each profile's headless start argv."""

DEFAULT_RESUME_COMMANDS: dict[str, tuple[str, ...]] = {
    name: tuple(shlex.split(resume)) for name, (_, resume) in PROFILE_COMMANDS.items()
}
"""Each profile's resume argv."""
