"""Agent profiles (SPEC 3 `profile`, SPEC 9): how each known agent is started and resumed, which
messages mark a transient failure, how its JSON stream reads, and how a false success looks.

The start and resume commands are in `commands` (`PROFILE_COMMANDS`, with the stream flags in
them): plain strings the contract reads a `profile` with. `registry` holds each `Profile`. A
contract may override either command; the stream is decoded when the command in use asks for it
(`Profile.stream_on`), and a resume by `{session_id}` falls back to the agent's "newest session
here" form when no id was seen (`Profile.resume_without_session`). Adding an agent: one module
with its flags, patterns and `Dialect`, one line in `commands.PROFILE_COMMANDS` and one in
`registry.PROFILES`. This package holds only this docstring, so loading a contract (which reads
the command table) never loads the agents' stream decoders.
"""
