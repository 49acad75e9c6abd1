"""One agent process tree: launch it, drain its output, notice its death, stop it.

`AgentProcess` runs the agent in its own session and process group, under a
pseudo-terminal (the default: many CLIs buffer or change behaviour without one) or with
pipes (`agent_launch` starts it). Everything runs on the asyncio loop it was started from (Textual's, or
`asyncio.run` headless):

- output is read by a loop reader as soon as it is there, appended byte-exact to
  `agent.log` and fed to an `OutputTail` that consumers poll: a slow consumer never
  blocks the agent;
- death is noticed through a pidfd (a thread doing `waitpid` where there is none), not
  through end-of-output, which a leftover grandchild can hold off for hours;
- after the death, descendants left behind are stopped and named before `wait()`
  returns, since they would hold ports and files the next attempt needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.agent.agent_launch import AgentStartError, spawn_agent
from paella_tui.supervisor.agent.output_tail import OutputSink, OutputTail
from paella_tui.supervisor.agent.process_cage import Cage
from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import (
    LeftoverProcess,
    ProcessStats,
    ProcessTree,
    become_subreaper,
)
from paella_tui.supervisor.base.pace import Pace

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
DEFAULT_STOP_GRACE_S = 10.0
LEFTOVER_GRACE_S = 2.0
EXIT_TAIL_LINES = 100
TREE_REFRESH_S = 0.5
TREE_REFRESH_QUIET_S = 4.0
"""The tree's refresh backs off to this while the agent is quiet (issue 17: idle cost); new
members are still found then, by the next refresh, the stats sample or the subreaper."""
QUIET_AFTER_S = 5.0
"""No output and nothing changed for this long: the agent is quiet."""
MARKER_ENV = "PAELLA_AGENT_TOKEN"
"""Environment variable carrying a per-launch token, so orphaned descendants are found."""

# One reader callback reads at most this much before giving the loop back, so a flood
# cannot starve the UI (and death notices) for long.
# One read per callback keeps a flood from hogging the event loop: keys stay quick while the
# loop still drains far faster than any agent writes (measured in benchmarks/tui.py).
_MAX_READ_PER_CALLBACK = READ_SIZE
_MAX_DRAIN_CALLBACKS = 64
# Once the tree is gone the pty or pipe reports end-of-file at once; waiting longer only
# helps when something outside the tree holds it open.
_EOF_WAIT_S = 0.5


@dataclass(frozen=True)
class ExitInfo:
    """How an agent process ended."""

    exit_code: int | None
    """The exit status, or None if a signal ended it."""
    signal: int | None
    """The signal that ended it, or None if it exited."""
    ended_at: float
    """When the death was noticed, seconds since the epoch."""
    tail: tuple[str, ...]
    """The last output lines, without colours."""
    leftovers: tuple[LeftoverProcess, ...]
    """Descendants still running after the agent ended, which were stopped."""
    stopped: bool = False
    """Whether `stop()` was asked for before it ended."""


class AgentProcess:
    """A running agent process tree; create it with `await AgentProcess.start(...)`."""

    def __init__(
        self,
        *,
        popen: subprocess.Popen[bytes],
        output_fd: int,
        log_fd: int,
        log_path: Path,
        tty: bool,
        tree: ProcessTree,
        tail: OutputSink,
        on_output: Callable[[bytes], None] | None,
        leftover_grace: float,
    ) -> None:
        """Take over a launched process; use `start()` rather than this."""
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self._fd = output_fd
        self._log_fd = log_fd
        self._log_path = log_path
        self._tty = tty
        self._tree = tree
        self._tail = tail
        self._read_bytes = 0
        self._on_output = on_output
        self._leftover_grace = leftover_grace
        self._started_at = time.time()
        self._reading = True
        self._eof = asyncio.Event()
        self._exited = asyncio.Event()
        self._ended_at: float | None = None
        self._stop_deadline: float | None = None
        self._stop_task: asyncio.Task[ExitInfo] | None = None
        self._finish_task: asyncio.Task[ExitInfo] | None = None
        self._result: asyncio.Future[ExitInfo] = self._loop.create_future()
        self._log_failed = False
        self._pidfd: int | None = None
        self.pace = Pace(TREE_REFRESH_S, TREE_REFRESH_QUIET_S, quiet_after=QUIET_AFTER_S)
        """How often the tree is searched for new members: stirred by output and by the run."""

        self._loop.add_reader(self._fd, self._on_readable)
        self._watch_exit()
        self._refresh_task: asyncio.Task[None] | None = self._loop.create_task(
            self._refresh_tree(), name=f"agent-{popen.pid}-tree"
        )

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str] | None,
        tty: bool = True,
        log_path: str | os.PathLike[str],
        on_output: Callable[[bytes], None] | None = None,
        tail: OutputSink | None = None,
        leftover_grace: float = LEFTOVER_GRACE_S,
    ) -> AgentProcess:
        """Launch `argv` (no shell) in its own session; raise AgentStartError if it cannot start.

        `env` is the whole environment (None: ours); `log_path` is appended to (mode 0600).
        Makes this process a child subreaper (best effort) so orphans stay reachable.
        """
        argv = [os.fspath(arg) for arg in argv]
        if not argv or not argv[0]:
            raise AgentStartError("the agent command is empty: check `agent` in paella.toml")
        if not os.path.isdir(cwd):
            raise AgentStartError(
                f"cannot start the agent: the folder {os.fspath(cwd)!r} is missing"
            )
        become_subreaper()
        log_file = Path(log_path)
        try:
            log_fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise AgentStartError(f"cannot open the agent log {log_file}: {exc.strerror}") from None
        token = uuid.uuid4().hex
        child_env = dict(os.environ if env is None else env)
        child_env[MARKER_ENV] = token
        if tty:
            child_env.setdefault("TERM", "xterm-256color")
        cage = Cage.create("agent")
        try:
            popen, output_fd = spawn_agent(argv, cwd=cwd, env=child_env, tty=tty, cage=cage)
        except BaseException:
            os.close(log_fd)
            if cage is not None:
                cage.remove()
            raise
        try:
            return cls(
                popen=popen,
                output_fd=output_fd,
                log_fd=log_fd,
                log_path=log_file,
                tty=tty,
                tree=ProcessTree(popen.pid, marker=(MARKER_ENV, token), cage=cage),
                tail=tail if tail is not None else OutputTail(),
                on_output=on_output,
                leftover_grace=leftover_grace,
            )
        except BaseException:
            # Never leave an agent running unsupervised.
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(output_fd)
            with contextlib.suppress(OSError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
            os.close(output_fd)
            os.close(log_fd)
            raise

    @property
    def pid(self) -> int:
        """The agent's pid (also its process group and session id)."""
        return self._popen.pid

    @property
    def tail(self) -> OutputSink:
        """Where the output is shown (an `OutputTail`: poll its `version`)."""
        return self._tail

    @property
    def tree(self) -> ProcessTree:
        """Every process of the agent's tree seen so far."""
        return self._tree

    @property
    def returncode(self) -> int | None:
        """Like Popen's: None while running, -N if signal N ended it. Set when death is noticed."""
        return self._popen.returncode if self._ended_at is not None else None

    @property
    def tty(self) -> bool:
        """Whether it runs under a pseudo-terminal (else with pipes)."""
        return self._tty

    @property
    def started_at(self) -> float:
        """When it was launched, seconds since the epoch."""
        return self._started_at

    @property
    def log_path(self) -> Path:
        """The file the output is appended to."""
        return self._log_path

    def stats(self) -> ProcessStats:
        """CPU (since the previous call), memory and descendants of the whole tree."""
        return self._tree.stats()

    async def wait(self) -> ExitInfo:
        """Wait for the end: the death, the leftovers stopped, the output drained."""
        return await asyncio.shield(self._result)

    async def stop(self, grace: float = DEFAULT_STOP_GRACE_S) -> ExitInfo:
        """SIGTERM the tree, SIGKILL what still runs after `grace` seconds; idempotent."""
        if self._stop_task is None:
            self._stop_task = self._loop.create_task(
                self._stop(grace), name=f"agent-{self.pid}-stop"
            )
        return await asyncio.shield(self._stop_task)

    async def _stop(self, grace: float) -> ExitInfo:
        if not self._exited.is_set():
            self._stop_deadline = time.monotonic() + grace
            self._tree.refresh()
            self._tree.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._exited.wait(), grace)
            except TimeoutError:
                self._tree.refresh()
                self._tree.signal(signal.SIGKILL)
        return await self.wait()

    # -- output -----------------------------------------------------------------------

    def _on_readable(self) -> None:
        chunks: list[bytes] = []
        size = 0
        while size < _MAX_READ_PER_CALLBACK:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                # EIO from a pty master means every slave end is closed: end of output.
                if exc.errno != errno.EIO:
                    log.warning("reading the agent's output failed: %s", exc)
                self._end_of_output()
                break
            if not data:
                self._end_of_output()
                break
            chunks.append(data)
            size += len(data)
        if chunks:
            self._consume(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _consume(self, data: bytes) -> None:
        self._read_bytes += len(data)
        self.pace.stir()
        self._write_log(data)
        self._tail.feed(data)
        if self._on_output is not None:
            try:
                self._on_output(data)
            except Exception:
                log.exception("an on_output callback failed; output is still logged")

    def _write_log(self, data: bytes) -> None:
        if self._log_failed:
            return
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._log_fd, view)
                view = view[written:]
        except OSError as exc:
            # Keep draining (the agent must never block on us); the tail still shows output.
            self._log_failed = True
            log.error("writing %s failed, output is no longer logged: %s", self._log_path, exc)

    def _end_of_output(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)
        self._eof.set()

    def _drain_readable(self) -> None:
        """Read what is there now, without waiting for more (bounded: a leftover may flood)."""
        for _ in range(_MAX_DRAIN_CALLBACKS):
            if not self._reading:
                break
            before = self._read_bytes
            self._on_readable()
            if self._read_bytes == before:
                break

    # -- death ------------------------------------------------------------------------

    def _watch_exit(self) -> None:
        try:
            self._pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):
            thread = threading.Thread(
                target=self._wait_in_thread, name=f"agent-{self.pid}-wait", daemon=True
            )
            thread.start()
            return
        self._loop.add_reader(self._pidfd, self._on_pidfd)

    def _on_pidfd(self) -> None:
        if self._popen.poll() is None:
            return  # spurious wake-up: keep watching
        assert self._pidfd is not None
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        self._noticed_exit()

    def _wait_in_thread(self) -> None:
        self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._noticed_exit)

    def _noticed_exit(self) -> None:
        if self._ended_at is not None:
            return
        self._ended_at = time.time()
        self._exited.set()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            self._refresh_task = None
        self._finish_task = self._loop.create_task(self._finish(), name=f"agent-{self.pid}-exit")

    async def _finish(self) -> ExitInfo:
        try:
            info = await self._settle()
        except BaseException as exc:
            self._close_output()
            if isinstance(exc, asyncio.CancelledError):
                self._result.cancel()
            elif not self._result.done():
                self._result.set_exception(exc)
            raise
        self._result.set_result(info)
        return info

    async def _settle(self) -> ExitInfo:
        self._drain_readable()
        if self._stop_deadline is not None:
            grace = max(0.0, self._stop_deadline - time.monotonic())
        else:
            grace = self._leftover_grace
        try:
            leftovers = await asyncio.to_thread(stop_tree, self._tree, grace)
        except Exception:
            log.exception("stopping what agent %d left behind failed", self.pid)
            leftovers = []
        if leftovers:
            log.info("stopped what agent %d left behind: %s", self.pid, leftovers)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._eof.wait(), _EOF_WAIT_S)
        self._close_output()
        returncode = self._popen.returncode
        assert returncode is not None and self._ended_at is not None
        if self._tree.cage is not None:
            # The root is reaped and its tree stopped: the empty cgroup goes.
            await asyncio.to_thread(self._tree.cage.remove)
        return ExitInfo(
            exit_code=returncode if returncode >= 0 else None,
            signal=-returncode if returncode < 0 else None,
            ended_at=self._ended_at,
            tail=tuple(self._tail.last_lines(EXIT_TAIL_LINES)),
            leftovers=tuple(leftovers),
            stopped=self._stop_deadline is not None,
        )

    def _close_output(self) -> None:
        if self._fd < 0:
            return
        self._drain_readable()
        self._end_of_output()
        self._tail.finish()
        os.close(self._fd)
        self._fd = -1
        os.close(self._log_fd)

    async def _refresh_tree(self) -> None:
        """Look for new descendants now and then, so short-lived parents do not hide them."""
        while True:
            await self.pace.sleep()
            if time.monotonic() - self._tree.last_refresh < TREE_REFRESH_S / 2:
                continue  # stats() just did it
            try:
                self._tree.refresh()
            except Exception:
                log.exception("refreshing the agent's process tree failed")
