"""Running one gate once: its own process group, its timeout, its log file, its verdict.

A gate is a command run without a shell in the workspace. It gets its own session (so its whole
process group can be killed), stdin from /dev/null, and its stdout and stderr appended to
``<run dir>/gates/<gate>/<n>.log``. Whatever it leaves running when it ends, or when its timeout
hits, is stopped through :mod:`paella_tui.supervisor.agent.process_stop`, so a test server a gate started never
holds a port the next gate needs. Problems starting it become an ``error`` result with words
saying what to do, never a traceback.
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from paella_tui.supervisor.agent.process_cage import Cage
from paella_tui.supervisor.agent.process_stop import stop_tree
from paella_tui.supervisor.agent.process_tree import (
    LeftoverProcess,
    ProcessTree,
    become_subreaper,
)
from paella_tui.supervisor.agent.tree_roots import spawning_root
from paella_tui.supervisor.base.durations import format_duration
from paella_tui.supervisor.base.files import FILE_MODE, ensure_dir
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.failures import failing_tests_in_log
from paella_tui.supervisor.run.events import GREEN, GateResult, GateStatus

log = logging.getLogger(__name__)

TAIL_LINES = 30
"""How many of the last output lines a result keeps for the handoff."""

MARKER_ENV = "PAELLA_GATE_TOKEN"
"""Carried by every process of a gate's tree, so ones that left its group are still found."""

LEFTOVER_GRACE_S = 1.0
"""How long what a gate left running gets between SIGTERM and SIGKILL."""

_TAIL_BYTES = 64 * 1024
_REFRESH_S = 0.5


def next_log_path(run_dir: Path, gate_name: str) -> Path:
    """Create and return the gate's next numbered log file, ``<run dir>/gates/<gate>/<n>.log``.

    The file is created here (empty, mode 0600, folders 0700) so that two callers never get
    the same number.
    """
    # One level at a time: mkdir(parents=True) would give the middle folder the umask's mode.
    folder = ensure_dir(ensure_dir(run_dir / "gates") / gate_name)
    numbers = [int(p.stem) for p in folder.glob("*.log") if p.stem.isdigit()]
    n = max(numbers, default=0) + 1
    while True:
        path = folder / f"{n}.log"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return path


async def run_gate(
    gate: Gate,
    *,
    tree: str,
    cwd: Path,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    leftover_grace: float = LEFTOVER_GRACE_S,
) -> GateResult:
    """Run ``gate`` on the work tree in ``cwd`` (snapshotted as ``tree``) and judge it.

    ``env`` is the base environment (None: ours); ``PAELLA_GATE`` and ``PAELLA_TREE`` are added.
    Failures (timeouts too) are re-run up to ``gate.retries`` times into the same log; a
    command that cannot start is not. Cancelling it kills
    the gate's whole process tree.
    """
    ensure_dir(log_path.parent)
    # Readable too: a separator line checks how the gate's output ended.
    log_fd = os.open(log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    started = time.monotonic()
    try:
        attempt = 0
        while True:
            attempt += 1
            if attempt > 1:
                _note(log_fd, f"retry {attempt - 1} of {gate.retries}")
            outcome = await _attempt(
                gate,
                tree=tree,
                cwd=cwd,
                log_path=log_path,
                log_fd=log_fd,
                env=env,
                grace=leftover_grace,
            )
            _note(log_fd, outcome.summary)
            # A command that cannot start will not start on a retry either.
            if outcome.status in ("pass", "error") or attempt > gate.retries:
                break
        status: GateStatus = outcome.status
        if status == "pass" and attempt > 1:
            status = "flaky"
        return GateResult(
            gate=gate.name,
            status=status,
            tree=tree,
            duration_s=time.monotonic() - started,
            exit_code=outcome.exit_code,
            attempts=attempt,
            log_path=str(log_path),
            tail=outcome.tail,
            message=outcome.message,
            failed_tests=failing_tests_in_log(log_path) if status not in GREEN else (),
        )
    finally:
        os.close(log_fd)


@dataclass(frozen=True)
class _Outcome:
    """How one attempt ended."""

    status: GateStatus
    exit_code: int | None
    message: str
    summary: str
    """The line written to the log after the attempt: how it ended."""
    tail: tuple[str, ...] = ()


async def _attempt(
    gate: Gate,
    *,
    tree: str,
    cwd: Path,
    log_path: Path,
    log_fd: int,
    env: Mapping[str, str] | None,
    grace: float,
) -> _Outcome:
    """Run the gate's command once, with its timeout, and stop whatever it leaves behind."""
    token = uuid.uuid4().hex
    child_env = dict(os.environ if env is None else env)
    child_env.update({"PAELLA_GATE": gate.name, "PAELLA_TREE": tree, MARKER_ENV: token})
    argv = list(gate.argv)
    _note(log_fd, f'gate "{gate.name}" on tree {tree[:12]}: {gate.cmd}')
    output_start = os.fstat(log_fd).st_size
    started = time.monotonic()
    # Subreaper: what the gate orphans is re-parented to us, not lost to init.
    become_subreaper()
    cage = Cage.create(f"gate-{gate.name}")
    try:
        with spawning_root() as register:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=cage.enter if cage is not None else None,
            )
            register(popen.pid)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument
        if cage is not None:
            cage.remove()
        message = _start_error(gate, argv[0], cwd, exc)
        return _Outcome("error", exit_code=None, message=message, summary=message)
    # The root stays unreaped until our own wait below, so it can always be looked up here.
    tree_ = ProcessTree(popen.pid, marker=(MARKER_ENV, token), cage=cage)
    exited = _wait_in_thread(popen)
    refresher = asyncio.create_task(_refresh(tree_), name=f"gate-{gate.name}-tree")
    timed_out = False
    try:
        try:
            returncode = await asyncio.wait_for(asyncio.shield(exited), gate.timeout)
        except TimeoutError:
            timed_out = True
            leftovers = await asyncio.to_thread(stop_tree, tree_, grace)
            returncode = await exited
        else:
            leftovers = await asyncio.to_thread(stop_tree, tree_, grace)
    except asyncio.CancelledError:
        # Shielded: a second cancellation must not leave the gate's processes running.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.to_thread(stop_tree, tree_, 0.0))
        raise
    finally:
        refresher.cancel()
        if cage is not None:
            # The root is reaped (awaited above) and the tree stopped: the empty cgroup goes.
            await asyncio.to_thread(cage.remove)
    elapsed = time.monotonic() - started
    tail = tuple(_read_tail(log_path, output_start)[-TAIL_LINES:])
    if leftovers:
        _note(log_fd, "stopped what it left running: " + _names(leftovers))
    if timed_out:
        message = (
            f"timed out after {format_duration(gate.timeout)}: its whole process group was "
            f"killed; raise `timeout` of this gate in paella.toml if it needs longer"
        )
        return _Outcome("timeout", exit_code=None, message=message, summary=message, tail=tail)
    took = format_duration(elapsed)
    if returncode == 0:
        # Named in the result (ledger, screen): a gate that leaves processes behind is news.
        left = f"stopped what it left running: {_names(leftovers)}" if leftovers else ""
        return _Outcome(
            "pass", exit_code=0, message=left, summary=f"exit 0 after {took}", tail=tail
        )
    how = f"killed by {_signal_name(-returncode)}" if returncode < 0 else f"exit {returncode}"
    return _Outcome(
        "fail",
        exit_code=returncode,
        message=how if returncode < 0 else "",
        summary=f"{how} after {took}",
        tail=tail,
    )


def _wait_in_thread(popen: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future of the exit status, waited for in a thread of its own (not the shared pool,
    which a few long gates would otherwise fill)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    def deliver(code: int) -> None:
        if not future.done():
            future.set_result(code)

    def wait() -> None:
        code = popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(deliver, code)

    threading.Thread(target=wait, name=f"gate-wait-{popen.pid}", daemon=True).start()
    return future


async def _refresh(tree: ProcessTree) -> None:
    """Look for new members now and then, so a short-lived parent does not hide its children."""
    while True:
        await asyncio.sleep(_REFRESH_S)
        try:
            tree.refresh()
        except psutil.Error:
            log.debug("refreshing a gate's process tree failed", exc_info=True)


def _start_error(gate: Gate, command: str, cwd: Path, exc: OSError | ValueError) -> str:
    """Why the command could not start, and what to do, in words."""
    where = f'gate "{gate.name}": cannot start {command!r}'
    fix = "fix `cmd` of this gate in paella.toml"
    if not cwd.is_dir():
        return f"{where}: the folder {str(cwd)!r} it runs in is missing"
    if isinstance(exc, ValueError):
        return f"{where}: {exc}; {fix}"
    if exc.errno == errno.ENOENT:
        if os.sep in command:
            return f"{where}: no such file; {fix}"
        return f"{where}: command not found on PATH; install it or {fix}"
    if exc.errno == errno.EACCES:
        return f"{where}: permission denied (is it executable? chmod +x it) or {fix}"
    if exc.errno == errno.ENOEXEC:
        return f"{where}: not a program the system can run (a script needs a #! line); {fix}"
    return f"{where}: {exc.strerror or exc}; {fix}"


def _note(log_fd: int, text: str) -> None:
    """Append a separator line of paella's own to the gate's log."""
    line = f"----- paella: {text} -----\n"
    size = os.fstat(log_fd).st_size
    # Start on a fresh line even when the gate's output did not end with one.
    if size and os.pread(log_fd, 1, size - 1) != b"\n":
        line = "\n" + line
    os.write(log_fd, line.encode("utf-8", errors="replace"))


def _read_tail(log_path: Path, start: int) -> list[str]:
    """The lines in the last 64 KiB written to the log since offset ``start``."""
    try:
        with open(log_path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            offset = max(start, size - _TAIL_BYTES)
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if offset > start and lines:
        lines = lines[1:]  # cut mid-line
    return lines


def _names(leftovers: list[LeftoverProcess]) -> str:
    """``sleep 60 (pid 12), python3 -m http.server (pid 14)``: what a person can recognise."""
    return ", ".join(f"{' '.join(p.cmdline)[:80] or p.name} (pid {p.pid})" for p in leftovers)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def log_tail(log_path: str | Path, lines: int = TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` output lines of a gate log, without paella's separator lines."""
    kept = [line for line in _read_tail(Path(log_path), 0) if not line.startswith("----- paella:")]
    return tuple(kept[-lines:])
