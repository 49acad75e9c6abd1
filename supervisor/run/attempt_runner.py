"""The agent's attempts, one after the other: the process started with the attempt's command, its
output (display tail, decoded stream), its own session id, its usage, and how it ended.

The run loop decides when an attempt starts and what follows its end; this holds everything
about the agent in between, so the loop's flow reads without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from paella_tui.supervisor.agent.agent_launch import AgentStartError
from paella_tui.supervisor.agent.agent_process import QUIET_AFTER_S, AgentProcess, ExitInfo
from paella_tui.supervisor.agent.attempt_command import AttemptInputs, attempt_command
from paella_tui.supervisor.agent.decoded_tail import DecodedTail
from paella_tui.supervisor.agent.failure_words import Permanent
from paella_tui.supervisor.agent.output_tail import OutputSink, OutputTail
from paella_tui.supervisor.agent.profiles.registry import get_profile
from paella_tui.supervisor.base.pace import Pace
from paella_tui.supervisor.contract.model import Contract
from paella_tui.supervisor.run.attempt_end import attempt_marker, exited_event
from paella_tui.supervisor.run.events import (
    AgentExited,
    AgentSession,
    AgentStarted,
    AgentStats,
    Event,
    Notice,
    Usage,
)
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run

STATS_EVERY_S = 1.0
"""The agent's CPU and memory are sampled this often while it is busy..."""
STATS_QUIET_S = 4.0
"""...and this seldom, at most, while it is quiet (issue 17: an idle TUI's cost)."""
BUSY_CPU_PERCENT = 5.0
"""A sample at or above this much CPU counts as busy, though the agent says nothing."""


class AttemptRunner:
    """Starts each attempt's agent and reports what it did; one per run loop."""

    def __init__(
        self, *, run: Run, contract: Contract, view: RunView, emit: Callable[[Event], None]
    ) -> None:
        self.run_ = run
        self.contract = contract
        self.emit = emit
        self.tail = OutputTail()
        """The agent's output across attempts, display-ready; poll its ``version``."""
        self.attempt = view.run_state.attempt
        """The number of the newest attempt (0 before the first)."""
        self.profile = get_profile(contract.run.profile)
        self.transient = (
            self.profile.transient_patterns(contract.retry.transient)
            if self.profile is not None
            else contract.retry.transient
        )
        """The patterns that mark a failure transient (the contract's, the profile's)."""
        self.session_id: str | None = view.session_id()
        """The agent's own session id, as its stream last reported it (for `{session_id}`)."""
        self.usage_before = view.usage() or Usage()
        """What the stream reported in the attempts before this one."""
        self.agent: AgentProcess | None = None
        self.last_activity = time.monotonic()
        """When the agent last did something (output, a file changed): the stall check's clock."""
        self.user_stopped = False
        """The person stopped this attempt (``s``)."""
        self.pace = Pace(STATS_EVERY_S, STATS_QUIET_S, quiet_after=QUIET_AFTER_S)
        """When the run loop samples the agent next: output, a changed file or a busy CPU
        keep it at every second, and a long wait ends at the first of them."""
        self._decoded: DecodedTail | None = None
        self._used_session = False
        self._fresh_next = False

    @property
    def alive(self) -> bool:
        """The current attempt's agent is running."""
        return self.agent is not None and self.agent.returncode is None

    @property
    def usage(self) -> Usage | None:
        """Turns, tokens and cost over every attempt so far (None: no stream reported any)."""
        live = self._decoded.stats.usage() if self._decoded is not None else Usage()
        total = self.usage_before + live
        return None if total.empty and self._decoded is None else total

    def touched(self) -> None:
        """Something happened in the work tree: the agent is not stalled."""
        self.last_activity = time.monotonic()
        self._stir()

    def _stir(self) -> None:
        """The agent did something: sample it, and look for its processes, at the base pace."""
        self.pace.stir()
        if self.agent is not None:
            self.agent.pace.stir()

    def sampled(self, stats: AgentStats) -> None:
        """A sample was taken (on the loop's thread): a busy CPU keeps the pace up."""
        if stats.cpu_percent >= BUSY_CPU_PERCENT:
            self._stir()

    async def start(
        self, *, resume: bool, handoff_path: Path | None, episode: int
    ) -> AgentProcess | str:
        """Start the next attempt's agent; why it could not start, in words, when it did not."""
        self.attempt += 1
        self.user_stopped = False
        # The display tail runs across attempts; a marker line separates them (and lets the
        # death report show this attempt's lines only).
        self.tail.feed(attempt_marker(self.attempt))
        inputs = AttemptInputs(
            attempt=self.attempt,
            episode=episode,
            run_id=self.run_.run_id,
            run_dir=self.run_.dir,
            root=self.run_.workspace.root,
            session_id=self.session_id,
            resume=resume,
            handoff_path=handoff_path,
            fresh=resume and self._fresh_next,
        )
        self._fresh_next = self._fresh_next and not resume
        try:
            command = attempt_command(self.contract, self.profile, inputs)
        except (OSError, ValueError) as err:
            # The task file turned into something unreadable (deleted, a folder, a FIFO).
            self.emit(Notice(message=f"cannot read the task: {err}", level="error"))
            return f"cannot read the task: {err}"
        if command.notice:
            self.emit(Notice(message=command.notice, level="warning"))
        self._used_session = command.used_session
        output: OutputSink = self.tail
        self._decoded = None
        if self.profile is not None and self.profile.stream_on(command.template):
            # The log view shows what the agent says and does; agent.log keeps the raw bytes.
            self._decoded = DecodedTail(self.tail, self.profile.new_decoder())
            output = self._decoded
        try:
            agent = await AgentProcess.start(
                list(command.argv),
                cwd=self.run_.workspace.root,
                env=command.env,
                tty=self.contract.run.tty,
                log_path=self.run_.dir / "agent.log",
                on_output=self._on_output,
                tail=output,
            )
        except AgentStartError as err:
            self.emit(Notice(message=str(err), level="error"))
            return str(err)
        self.agent = agent
        self.last_activity = time.monotonic()
        self._stir()
        self.emit(
            AgentStarted(
                attempt=self.attempt,
                pid=agent.pid,
                create_time=agent.tree.started,
                argv=command.argv,
                resumed=resume,
                tty=self.contract.run.tty,
            )
        )
        return agent

    def _on_output(self, _data: bytes) -> None:
        self.last_activity = time.monotonic()
        self.pace.stir()  # the agent's own tree pace is stirred by its reader
        decoded = self._decoded
        if decoded is not None:
            # Recorded the moment it is seen: a paella killed mid-attempt still resumes it.
            session = decoded.stats.session_id
            if session and session != self.session_id:
                self.session_id = session
                self.emit(AgentSession(attempt=self.attempt, session_id=session))

    def exited(self, info: ExitInfo) -> AgentExited:
        """The attempt's end, emitted; its usage counts from now on."""
        decoded = self._decoded
        event = exited_event(
            info,
            attempt=self.attempt,
            profile=self.profile,
            stats=decoded.stats if decoded is not None else None,
            stopped_by_user=self.user_stopped,
        )
        if event.usage is not None:
            self.usage_before = self.usage_before + event.usage
        self._decoded = None
        self.emit(event)
        return event

    def forget_missing_session(self, exited: AgentExited, permanent: Permanent) -> bool:
        """A missing session, when this attempt resumed one: forget it, so the next attempt
        starts afresh with the handoff (True). Any other permanent failure stops the run."""
        resumed_session = bool(self.session_id) and self._used_session
        if permanent.kind != "session-missing" or not resumed_session or self._fresh_next:
            return False
        self.emit(
            Notice(
                message=f"the agent's session {self.session_id} is gone "
                f"({permanent.matched.describe()}): starting it afresh with the handoff",
                level="warning",
            )
        )
        self.session_id = None
        # Recorded, so a resume after a crash of paella does not reach for it again.
        self.emit(AgentSession(attempt=exited.attempt, session_id=""))
        self._fresh_next = True
        return True

    async def stop(self, grace: float, *, by_user: bool = False) -> None:
        """Stop the running agent (SIGTERM, ``grace`` seconds, SIGKILL)."""
        if by_user:
            self.user_stopped = True
        if self.agent is not None:
            await self.agent.stop(grace)

    def stats(self) -> AgentStats | None:
        """The running agent's CPU, memory, processes and usage now (None: none runs). Blocks."""
        agent = self.agent
        if agent is None or agent.returncode is not None:
            return None
        stats = agent.stats()
        return AgentStats(
            attempt=self.attempt,
            cpu_percent=stats.cpu_percent,
            rss_bytes=stats.rss_bytes,
            descendants=stats.descendants,
            uptime_s=time.time() - stats.started,
            usage=self._decoded.stats.usage() if self._decoded is not None else None,
        )
