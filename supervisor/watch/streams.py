"""The watch thread: one thread runs every watchfiles watch of a watcher (issue 17).

A watch is a ``watchfiles`` ``RustNotify``: notify's own (Rust) threads block on inotify, or
poll, and gather the events; the Python side has to ask each watch for them, and every ask
sleeps a step first. A plan needs two watches: ``RustNotify`` takes one ``recursive`` flag for
all its paths, and the flat folders (the root and the other ancestors of pruned folders) must
not be watched recursively, or ``.git/objects`` and every ignored ``node_modules`` would be too;
the deep folders must be, so that notify itself watches their new subfolders. (A re-plan runs
two sets for a moment.) They used to have a thread each, waking every step. Here one thread
asks them in turn, each for its share of the step (``STEP_MS`` / the number of watches), so
every watch is looked at once a step, as with a thread each (by the arithmetic of the steps, a
single change is handed over 50 ms after it on average, at most 75; with a thread each, 75 and
100). After 30 s
without a change, each is asked for a whole step: half the wake-ups, which is what idle costs,
and the first change after such a quiet is handed over up to a step later (100 ms on average,
at most 150); the ones after it, within a share again. The asks carry no stop event
(watchfiles would call its ``is_set`` every step, a Python call each wake-up): the thread looks
at its own between two asks.

A watch is set up (:meth:`Stream.open`, blocking: it adds one inotify watch per folder, or makes
the first poll scan) outside this thread, by the watcher's worker; it exists, and sees every
change from then on, once ``open`` returns. Errors (the watch limit at setup, a file name that
is not UTF-8 later) are handed to the watcher like batches are. Closing a watch asks notify's
thread to close its inotify handle: :meth:`Stream.wait_released` waits for that.

Latency and cost: a batch is handed over a step or less after its last event (at most
``DEBOUNCE_MS`` into a continuous burst), git classifies it (a few ms), and the settle timer
starts. Measured with a 25 ms step and a thread per watch: ``on_settled`` fired settle + 52 ms
(median; max 57) after the last change with inotify, settle + ~400 ms when polling. Idle, the
one thread costs less than the two did: 0.14 % of a core against 0.17 % (the watcher's threads
in ``benchmarks/engine.py --only idle --against REF --idle-warmup 35``, side by side;
benchmarks/README.md). It cannot cost much less with watchfiles at this latency: each look is a
wake-up, and each watch must be looked at every step or so.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import watchfiles
from watchfiles._rust_notify import RustNotify

from paella_tui.supervisor.watch.watch_plan import WatchPlan

DEBOUNCE_MS = 50
"""Longest time watchfiles groups a continuous stream of events before handing them over."""
STEP_MS = 50
"""Quiet time after which a batch is handed over (and how often the watch thread wakes up)."""
POLL_DELAY_MS = 500
"""Scan interval in polling mode."""
_MIN_STEP_MS = 10
"""The shortest share of a step a watch is asked for (while a re-plan runs two sets)."""
_QUIET_S = 30.0
"""Seconds without a change after which each watch is asked for a whole step."""
_JOIN_TIMEOUT = 5.0

Post = Callable[[tuple[Any, ...]], None]


class Stream:
    """One watch (a set of folders, recursive or not, inotify or polling)."""

    def __init__(
        self, paths: Sequence[str], *, recursive: bool, polling: bool, skip_unreadable: bool
    ) -> None:
        self.paths = tuple(paths)
        self.recursive = recursive
        self.polling = polling
        self.skip_unreadable = skip_unreadable
        self.ready = False
        self.last_ok: float | None = None
        """Wall-clock time of the last hand-over: every change before it was delivered."""
        self.closed = threading.Event()
        """Set once the watch is closed (or will never be opened)."""
        self._notify: RustNotify | None = None
        self._stopping = False
        self._handles: set[int] = set()
        """The inotify file descriptors this watch opened (closed by notify's own thread)."""

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopping

    def open(self) -> None:
        """Set the watches up (blocking); raises what watchfiles raises (the watch limit...)."""
        before = set() if self.polling else inotify_handles()
        self._notify = RustNotify(
            list(self.paths),
            False,
            self.polling,
            POLL_DELAY_MS,
            self.recursive,
            self.skip_unreadable,
        )
        self.last_ok = time.time()
        if not self.polling:
            self._handles = inotify_handles() - before

    def stop(self) -> None:
        """Ask for the watch to end (the watch thread closes it within one round)."""
        self._stopping = True

    def join(self) -> None:
        """Wait for the watch (and its inotify handle) to be gone."""
        self.closed.wait(_JOIN_TIMEOUT)

    def wait_released(self, deadline: float) -> None:
        """Wait (until ``deadline``, monotonic) for notify's thread to close the inotify handle
        of a closed watch: closing only asks it to."""
        while self._handles & inotify_handles() and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self) -> None:
        """Close the watch now (from the watch thread, or when it never ran)."""
        notify, self._notify = self._notify, None
        if notify is not None:
            with contextlib.suppress(Exception):
                notify.close()
        self.closed.set()

    def collect(self, step_ms: int) -> Any:
        """One ask: a set of (change, path), or "timeout" (watchfiles' answers).

        It returns a step after it began when nothing came, else once a step passed with nothing
        new (or ``DEBOUNCE_MS`` into a stream of events). No stop event: watchfiles would call
        its ``is_set`` every step (a Python call each wake-up, ~15 % of the idle cost), and the
        watch thread looks at its own between two asks anyway.
        """
        assert self._notify is not None
        result = self._notify.watch(DEBOUNCE_MS, step_ms, step_ms, None)
        self.last_ok = time.time()
        return result


@dataclass
class WatchSet:
    """The streams that carry out one plan in one mode."""

    plan: WatchPlan
    polling: bool
    skip_unreadable: bool
    streams: list[Stream]
    started: float
    new_roots: tuple[str, ...] = ()
    """Deep roots the previous plan did not have: looked into once this set is live."""

    @property
    def ready(self) -> bool:
        """Every stream's watches exist."""
        return all(s.ready for s in self.streams)

    def stop(self) -> None:
        """Ask every stream to end."""
        for stream in self.streams:
            stream.stop()


class WatchThread:
    """The one thread that asks every open watch for its changes and posts them."""

    def __init__(self, post: Post) -> None:
        self._post = post
        self._streams: list[Stream] = []
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, stream: Stream) -> None:
        """Watch with ``stream`` (already open) from the next round on."""
        with self._guard:
            if self._stop.is_set() or stream.stopping:
                stream.close()
                return
            self._streams.append(stream)
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="paella-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop the thread and close every watch (waits for it: no thread or handle is left)."""
        with self._guard:
            self._stop.set()
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(_JOIN_TIMEOUT)
        with self._guard:
            for stream in self._streams:
                stream.close()
            self._streams.clear()

    def _live(self) -> list[Stream]:
        """The streams to ask this round; stopped ones are closed and dropped."""
        with self._guard:
            for stream in [s for s in self._streams if s.stopping]:
                stream.close()
                self._streams.remove(stream)
            return list(self._streams)

    def _main(self) -> None:
        last_change = time.monotonic()
        while not self._stop.is_set():
            streams = self._live()
            if not streams:
                self._wake.wait(STEP_MS / 1000)
                self._wake.clear()
                continue
            # Each watch is asked in turn for a share of the step, so every one is looked at once
            # a step, as with a thread per watch. After a quiet while, each for a whole step:
            # half the wake-ups, and the first change after the quiet is handed over up to a
            # step later (the ones after it, within a share again).
            if time.monotonic() - last_change < _QUIET_S:
                step = max(STEP_MS // len(streams), _MIN_STEP_MS)
            else:
                step = STEP_MS
            for stream in streams:
                try:
                    result = stream.collect(step)
                except Exception as exc:  # handed to the watcher, which decides what it means
                    with self._guard:
                        if stream in self._streams:
                            self._streams.remove(stream)
                    stream.close()
                    if not self._stop.is_set():
                        self._post(("error", stream, exc))
                    continue
                if isinstance(result, set) and result:
                    last_change = time.monotonic()
                    changes = {(watchfiles.Change(change), path) for change, path in result}
                    self._post(("changes", stream, changes))


class Backoff:
    """Waits before a restart: 0.1 s, doubling each time it comes again within a minute, 5 s
    at most."""

    def __init__(self) -> None:
        self._count = 0
        self._last = float("-inf")

    def next(self, now: float) -> float:
        """The wait before this restart (``now``: monotonic seconds)."""
        if now - self._last > 60:
            self._count = 0
        self._last = now
        delay = min(0.1 * 2.0**self._count, 5.0)
        self._count += 1
        return delay


def open_streams(streams: Sequence[Stream], thread: WatchThread, post: Post) -> None:
    """Set up each stream's watches (blocking) and hand it to the watch thread; post
    ``ready`` or ``error`` for each."""
    for stream in streams:
        if stream.stopping:
            stream.close()
            continue
        try:
            stream.open()
        except Exception as exc:
            stream.close()
            post(("error", stream, exc))
            continue
        thread.add(stream)
        post(("ready", stream))


def inotify_handles() -> set[int]:
    """The file descriptors of this process's inotify handles (none off Linux)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                    found.add(int(fd))
    return found


def inotify_watched() -> set[tuple[int, int]] | None:
    """(kernel device, inode) of every folder this process's inotify handles watch; None off Linux."""
    found: set[tuple[int, int]] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as handle:
                for line in handle:
                    # inotify wd:3 ino:2a0c sdev:800021 mask:fc6 ...
                    if line.startswith("inotify wd:"):
                        fields = dict(part.split(":", 1) for part in line.split()[1:4])
                        found.add((int(fields["sdev"], 16), int(fields["ino"], 16)))
        except (OSError, ValueError, KeyError):
            continue
    return found


def dev_ino(path: str) -> tuple[int, int] | None:
    """``path``'s device as the kernel writes it in fdinfo (major << 20 | minor), and inode."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (os.major(st.st_dev) << 20 | os.minor(st.st_dev), st.st_ino)


def brief(exc: BaseException) -> str:
    """An exception in one line: watchfiles appends a Debug dump to its messages."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" (Error {")[0].strip()


def polling_warning(why: str) -> str:
    """What the UI says when inotify could not watch every folder and polling took over."""
    limit = _read_int("/proc/sys/fs/inotify/max_user_watches")
    now = f" (now {limit})" if limit is not None else ""
    return (
        f"inotify could not watch every folder ({why}), so the workspace is polled every "
        f"{POLL_DELAY_MS / 1000:g} s and changes are seen up to that late; raise "
        f"fs.inotify.max_user_watches{now} or ignore big generated folders in .gitignore "
        "to get instant updates back"
    )


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def close_all(
    sets: list[WatchSet], executor: ThreadPoolExecutor | None, thread: WatchThread | None
) -> None:
    """Stop every watch of ``sets``, the worker that sets watches up and the watch thread, and
    wait (a second at most) until notify's threads have closed their inotify handles."""
    for watch_set in sets:
        watch_set.stop()
    # No watch is set up after this (the worker sets them up), and the watch thread sees its
    # stop event within one step, closing every watch: no thread or handle is left.
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
    if thread is not None:
        thread.close()
    deadline = time.monotonic() + 1.0
    for stream in [st for watch_set in sets for st in watch_set.streams]:
        stream.close()  # one never set up (its setup was cancelled)
        stream.wait_released(deadline)
