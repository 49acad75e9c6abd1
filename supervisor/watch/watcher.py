"""Watches the work tree and says when it has settled after a relevant change (SPEC 6, 8).

Relevant means a change git could snapshot: never anything under a ``.git`` folder, the git dir,
the common dir or paella's state dir; never a path matching a ``[watch] ignore`` glob (the path
or one of its folders); never a path git ignores. Git decides the last one itself, in a thread,
as ``git check-ignore`` with the index would (a tracked file that matches ``.gitignore`` still
counts, as it does for a snapshot), but asked the cheap way (:mod:`ignore_verdicts`): the rules
without the index, and each folder once, so a folder git ignores decides every path under it.
Verdicts are kept for one burst only, across its batches, because the rules can change with the
next one.

How it watches, and why (measured with watchfiles 1.3 on Linux):

- watchfiles' ``watch_filter`` runs in Python after the fact. The Rust side (notify's inotify
  backend) still walks every folder under a recursive root and adds one inotify watch to each,
  ``.git/objects`` and an ignored ``node_modules`` included: 3,100 folders take ~50 ms and
  3,100 watches, 33,000 take ~420 ms and 33,000 of the per-user limit
  (``/proc/sys/fs/inotify/max_user_watches``; 8,192 on older kernels). Polling is worse: notify
  re-scans every folder each interval, 21 % of a core for the 33,000-folder tree at 500 ms.
- So the watcher prunes. ``git status --ignored=matching`` names the folders git ignores
  wholesale (their content can never be re-included, and one holding a tracked file is not
  named), and those, ``.git`` and the state dir are never watched. Their ancestor folders get a
  non-recursive watch; every other folder directly inside an ancestor gets a recursive one (new
  subfolders are picked up there by notify itself). A new folder directly inside an ancestor,
  or a changed ``.gitignore``, re-plans: the new watches start before the old ones stop, and
  once they are live the files already in the new folder are reported, so nothing written
  before its watch existed goes unnoticed. (For that moment both sets of watches exist: a tree
  using over half the watch limit can tip into polling on a re-plan.)
- If inotify still cannot set up (watchfiles raises OSError "OS file watch limit reached", or
  too many inotify instances), the watcher switches to polling every 500 ms: ``mode`` says
  ``"polling"`` and ``warning`` says why, for the UI; changes are then seen up to half a second
  later. Hitting the limit later is silent in notify: a new folder simply gets no watch and its
  files are never reported. So after a batch with new folders inside recursively watched ones,
  the watcher looks for each of them among this process's inotify watches
  (``/proc/self/fdinfo``), and one missing means the limit: polling from then on. (Both paths are
  tested for real under a low per-namespace limit, ``/proc/sys/user/max_inotify_watches``.)
- A file name that is not UTF-8 makes watchfiles end its watch with an error (and drop the
  batch it was in). The watcher restarts the watch and, whenever watches were down, reports
  what was modified meanwhile (by mtime) once they are back, so nothing is lost.
- ``ignore_permission_denied`` stays off, because watchfiles then swallows every setup error,
  the watch limit included; only a PermissionError turns it on (and the warning says so).
- The watches run in ``watchfiles.watch`` (the same Rust core as ``awatch``) in threads this
  class owns, not in ``awatch``: awaiting ``awatch`` parks each wait in anyio's pooled worker
  threads, which outlive the watcher until the event loop's main task ends. Here every thread is
  joined and every inotify handle closed when :meth:`WorkspaceWatcher.run` returns.

Latency and cost: watchfiles hands over a batch ``step`` ms after the last event of it (50 ms
here, at most ``debounce`` = 50 ms into a continuous burst), git classifies it (a few ms), and the
settle timer starts. Measured with a 25 ms step: ``on_settled`` fired settle + 52 ms (median;
max 57) after the last change with inotify, settle + ~400 ms when polling; the 50 ms step adds
up to 25 ms to that. Each watch thread takes the GIL once a step to look at its stop event:
at 25 ms, the two threads cost about 0.35 % of one core while nothing changed, at 50 ms about
0.2 % (the step is the price of a latency well inside SPEC 13's settle + 200 ms). Watches are
known to exist when watchfiles first hands over (an empty batch after 100 ms):
:meth:`WorkspaceWatcher.wait_ready`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import watchfiles

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.base.globs import folder_match, match_any
from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.ignore_verdicts import IgnoreVerdicts

WatchMode = Literal["inotify", "polling"]

DEBOUNCE_MS = 50
"""Longest time watchfiles groups a continuous stream of events before handing them over."""
STEP_MS = 50
"""Quiet time after which watchfiles hands a batch over (and how often its thread wakes up)."""
POLL_DELAY_MS = 500
"""Scan interval in polling mode."""
ACTIVITY_INTERVAL = 0.25
"""Seconds between two ``on_activity`` calls, at least."""

# With yield_on_timeout, the first (empty) batch arrives this long after the watch is set up:
# the only way watchfiles tells that its watches exist.
_HEARTBEAT_MS = 100
_JOIN_TIMEOUT = 5.0
_MAX_REPLAN_FAILURES = 5
_EXPAND_LIMIT = 2000  # files listed for a new folder; past that the folder stands for them
_ADDED = watchfiles.Change.added
_UNDECODABLE = "Unable to decode path"  # watchfiles' error for a file name that is not UTF-8
_BIG_FOLDER = 100  # subfolders: a new ignored folder this big is worth a re-plan to unwatch it
_MTIME_MARGIN = 1.0  # seconds: file systems with coarse timestamps


@dataclass(frozen=True)
class WatchPlan:
    """Which folders are watched and how: the result of pruning what git ignores."""

    flat: tuple[str, ...]
    """Absolute folders watched without their subfolders (ancestors of pruned folders)."""
    deep: tuple[str, ...]
    """Absolute folders watched with everything under them."""
    pruned: tuple[str, ...] = field(default=(), compare=False)
    """Relative folders never watched: ``.git``, the state dir, folders git ignores wholesale."""


class _Stream:
    """One ``watchfiles.watch`` running in its own thread, posting what it sees to the loop."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        recursive: bool,
        polling: bool,
        skip_unreadable: bool,
        post: Callable[[tuple[Any, ...]], None],
    ) -> None:
        self.paths = tuple(paths)
        self.recursive = recursive
        self.polling = polling
        self.skip_unreadable = skip_unreadable
        self.ready = False
        self.last_ok: float | None = None
        """Wall-clock time of the last hand-over: every change before it was delivered."""
        self._post = post
        self._stop = threading.Event()
        kind = "deep" if recursive else "flat"
        self.thread = threading.Thread(target=self._main, name=f"paella-watch-{kind}", daemon=True)

    def start(self) -> None:
        """Start the thread; it posts ``ready`` once its watches exist."""
        self.thread.start()

    def stop(self) -> None:
        """Ask the thread to end (within one step)."""
        self._stop.set()

    def join(self) -> None:
        """Wait for the thread (and with it the inotify handle) to be gone."""
        if self.thread.ident is not None:
            self.thread.join(_JOIN_TIMEOUT)

    def _main(self) -> None:
        try:
            first = True
            for changes in watchfiles.watch(
                *self.paths,
                watch_filter=None,
                debounce=DEBOUNCE_MS,
                step=STEP_MS,
                stop_event=self._stop,
                rust_timeout=_HEARTBEAT_MS,
                yield_on_timeout=True,
                raise_interrupt=False,
                force_polling=self.polling,
                poll_delay_ms=POLL_DELAY_MS,
                recursive=self.recursive,
                ignore_permission_denied=self.skip_unreadable,
            ):
                if changes:
                    self._post(("changes", self, changes))
                self.last_ok = time.time()
                if first:
                    first = False
                    self._post(("ready", self))
        except Exception as exc:  # handed to the loop, which decides what it means
            if not self._stop.is_set():
                self._post(("error", self, exc))


@dataclass(frozen=True)
class _Batch:
    """What one batch of events comes to."""

    report: set[str]
    """Relevant paths to report (files; a new folder only when it holds too many to list; a
    deleted folder for everything that was in it)."""
    replan: bool
    """A new folder appeared where only its parent is watched, or a .gitignore changed."""
    unwatched: tuple[str, ...] = ()
    """New folders inside watched ones that inotify is not watching (the watch limit)."""


@dataclass
class _WatchSet:
    """The streams that carry out one plan in one mode."""

    plan: WatchPlan
    polling: bool
    skip_unreadable: bool
    streams: list[_Stream]
    started: float
    new_roots: tuple[str, ...] = ()
    """Deep roots the previous plan did not have: looked into once this set is live."""

    @property
    def ready(self) -> bool:
        return all(s.ready for s in self.streams)

    def stop(self) -> None:
        for stream in self.streams:
            stream.stop()


class WorkspaceWatcher:
    """Watches a workspace; calls back on activity, once per settled burst, and when flapping.

    Callbacks run on the event loop's thread, from :meth:`run`'s task (an exception in one ends
    :meth:`run`). ``force_polling`` starts in polling mode (for file systems inotify cannot see,
    such as network mounts).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        settle: float,
        ignore: Sequence[str] = (),
        on_activity: Callable[[], None] | None = None,
        on_settled: Callable[[tuple[str, ...]], None],
        on_flapping: Callable[[str], None] | None = None,
        on_gap: Callable[[], None] | None = None,
        flap_limit: int = 10,
        flap_window: float = 60.0,
        force_polling: bool = False,
    ) -> None:
        self.workspace = workspace
        self.settle = settle
        self.ignore = tuple(ignore)
        self.on_activity = on_activity
        self.on_settled = on_settled
        self.on_flapping = on_flapping
        self.on_gap = on_gap
        """Called when changes may have gone unreported (a watch failed, a switch to polling):
        whoever follows the reported paths must look at everything again."""
        self.flap_limit = flap_limit
        self.flap_window = flap_window
        self._root = os.fspath(workspace.root)
        self._prefix = self._root.rstrip(os.sep) + os.sep
        self._private = self._private_dirs()
        self._mode: WatchMode = "polling" if force_polling else "inotify"
        self._skip_unreadable = False
        self._warning: str | None = (
            "polling every 0.5 s, as asked: changes are seen up to half a second late"
            if force_polling
            else None
        )
        self._paused = False
        self._fires: deque[float] = deque()
        self._burst: set[str] = set()
        self._burst_token = 0
        self._verdicts: dict[str, bool] = {}
        self._ignores = IgnoreVerdicts(workspace.git)
        self._listed: dict[str, tuple[int, int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_activity_call = float("-inf")
        self._current: _WatchSet | None = None
        self._starting: _WatchSet | None = None
        self._retired: list[_WatchSet] = []
        self._replan_needed = False
        self._replan_failures = 0
        self._decode_errors = 0
        self._last_decode_error = float("-inf")
        self._gap_since: float | None = None
        self._setup_seconds: float | None = None
        self._ready = asyncio.Event()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._queue: asyncio.Queue[tuple[Any, ...]] | None = None
        self._executor: ThreadPoolExecutor | None = None

    # --- what the UI reads -----------------------------------------------------------------

    @property
    def mode(self) -> WatchMode:
        """``"inotify"`` (instant) or ``"polling"`` (every 0.5 s; see ``warning``)."""
        return self._mode

    @property
    def warning(self) -> str | None:
        """Why watching is degraded (polling, unreadable folders), in words; None when it is not."""
        return self._warning

    @property
    def paused(self) -> bool:
        """Flapping paused ``on_settled`` until :meth:`resume` is called."""
        return self._paused

    @property
    def plan(self) -> WatchPlan | None:
        """The folders being watched, once the watches are set up."""
        return self._current.plan if self._current else None

    @property
    def setup_seconds(self) -> float | None:
        """How long the current watches took to set up (planning included)."""
        return self._setup_seconds

    async def wait_ready(self) -> None:
        """Return once the watches exist: changes from then on are seen."""
        await self._ready.wait()

    # --- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """End :meth:`run` soon (safe from any thread); cancelling its task works too."""
        self._stopping = True
        loop, queue = self._loop, self._queue
        if loop is not None and queue is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(queue.put_nowait, ("stop",))

    def resume(self) -> None:
        """Resume after flapping; changes made while paused are reported after the settle time."""
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._resume_now)
        else:
            self._resume_now()

    def _resume_now(self) -> None:
        self._paused = False
        self._fires.clear()
        if self._burst and self._loop is not None:
            self._arm_timer()

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch until :meth:`stop` or cancellation; every thread and watch is gone on return."""
        if self._loop is not None:
            raise RuntimeError("this WorkspaceWatcher is already running or has run")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="paella-watch-git")
        try:
            if self._stopping:
                return
            started = time.monotonic()
            plan = await self._in_thread(self._compute_plan)
            self._start_set(plan, started=started)
            while True:
                item = await self._queue.get()
                if item[0] == "stop":
                    return
                await self._handle(item)
                if self._replan_needed and self._starting is None:
                    await self._replan()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sets = [s for s in (self._current, self._starting, *self._retired) if s is not None]
        for watch_set in sets:
            watch_set.stop()
        # Each thread sees its stop event within one step (50 ms) and closes its watch on the
        # way out; waiting for it is what makes "no thread or inotify handle left" true.
        for watch_set in sets:
            for stream in watch_set.streams:
                stream.join()
        self._current = self._starting = None
        self._retired.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking work (git, file system) in this watcher's own worker thread."""
        assert self._loop is not None and self._executor is not None
        return await self._loop.run_in_executor(self._executor, fn, *args)

    def _post(self, item: tuple[Any, ...]) -> None:
        """From a watch thread: hand ``item`` to the loop (dropped once the loop is gone)."""
        loop, queue = self._loop, self._queue
        if loop is None or queue is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    async def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "ready":
            await self._on_ready(item[1])
        elif kind == "error":
            self._on_error(item[1], item[2])
        elif kind == "changes":
            await self._on_changes(item[2])
        elif kind == "settled" and item[1] == self._burst_token:
            self._on_quiet()
        elif kind == "replan":
            self._replan_needed = True

    # --- watch sets ------------------------------------------------------------------------

    def _start_set(self, plan: WatchPlan, *, started: float) -> None:
        polling = self._mode == "polling"
        streams = []
        if plan.flat:
            streams.append(self._stream(plan.flat, recursive=False, polling=polling))
        if plan.deep:
            streams.append(self._stream(plan.deep, recursive=True, polling=polling))
        previous = self._current.plan.deep if self._current else plan.deep
        new_roots = tuple(p for p in plan.deep if p not in previous)
        watch_set = _WatchSet(plan, polling, self._skip_unreadable, streams, started, new_roots)
        if self._starting is not None:
            self._retire(self._starting)
        self._starting = watch_set
        for stream in streams:
            stream.start()
        if not streams:  # nothing to watch at all: an empty work tree with .git pruned
            self._promote(watch_set)

    def _stream(self, paths: Sequence[str], *, recursive: bool, polling: bool) -> _Stream:
        return _Stream(
            paths,
            recursive=recursive,
            polling=polling,
            skip_unreadable=self._skip_unreadable,
            post=self._post,
        )

    def _retire(self, watch_set: _WatchSet) -> None:
        watch_set.stop()
        self._retired.append(watch_set)
        # Joined threads are done with; keep only the ones still on their way out.
        self._retired = [s for s in self._retired if any(st.thread.is_alive() for st in s.streams)]

    def _set_of(self, stream: _Stream) -> _WatchSet | None:
        for watch_set in (self._current, self._starting):
            if watch_set is not None and stream in watch_set.streams:
                return watch_set
        return None

    async def _on_ready(self, stream: _Stream) -> None:
        stream.ready = True
        watch_set = self._set_of(stream)
        if watch_set is not None and watch_set is self._starting and watch_set.ready:
            self._promote(watch_set)
            if watch_set.new_roots:
                # Files written into a new folder before its watch existed were not seen one by
                # one: look inside it now that every later write will be.
                await self._consider({self._rel(p): _ADDED for p in watch_set.new_roots})
            if self._gap_since is not None:
                since, self._gap_since = self._gap_since, None
                await self._catch_up(since)
                if self.on_gap is not None:
                    # The catch-up goes by mtime (it cannot see a deletion): watches are live
                    # again, so a full scan from now on covers whatever it missed.
                    self.on_gap()

    def _promote(self, watch_set: _WatchSet) -> None:
        """The new watches are live: only now stop the old ones, so no change falls in between."""
        if self._current is not None:
            self._retire(self._current)
        self._current, self._starting = watch_set, None
        self._setup_seconds = time.monotonic() - watch_set.started
        self._replan_failures = 0
        self._ready.set()

    def _on_error(self, stream: _Stream, exc: Exception) -> None:
        watch_set = self._set_of(stream)
        if watch_set is None:
            return  # a retired stream: its error no longer matters
        if self.on_gap is not None:
            self.on_gap()  # a watch ended, maybe with a batch: what it held is not reported
        if watch_set is self._current:
            self._current = None
            # Until new watches are live nothing is seen: look for what changed meanwhile then.
            seen = [st.last_ok for st in watch_set.streams if st.last_ok is not None]
            since = min(seen, default=time.time())
            self._gap_since = min(since, self._gap_since or since)
        else:
            self._starting = None
        self._retire(watch_set)
        if not os.path.isdir(self._root):
            raise WorkspaceError(f"the work tree {self._root} is gone: watching stopped")
        if _UNDECODABLE in str(exc):
            # A file name that is not UTF-8 ends a watchfiles watch (in either mode); the file
            # is found by the catch-up. Restart, waiting longer each time it happens again.
            assert self._loop is not None
            now = time.monotonic()
            if now - self._last_decode_error > 60:
                self._decode_errors = 0
            self._last_decode_error = now
            delay = min(0.1 * 2**self._decode_errors, 5.0)
            self._decode_errors += 1
            self._loop.call_later(delay, self._post, ("replan",))
        elif isinstance(exc, FileNotFoundError):
            # A folder vanished between planning and watching it: plan again.
            self._replan_failures += 1
            if self._replan_failures > _MAX_REPLAN_FAILURES:
                raise WorkspaceError(f"cannot watch {self._root}: {exc}") from exc
            self._replan_needed = True
        elif isinstance(exc, PermissionError) and not self._skip_unreadable:
            self._skip_unreadable = True
            self._add_warning(
                f"some folders cannot be read, so changes in them are not seen ({exc})"
            )
            self._replan_needed = True
        elif self._mode == "inotify":
            self._degrade(_brief(exc))
        else:
            raise WorkspaceError(f"watching {self._root} failed: {_brief(exc)}") from exc

    def _degrade(self, why: str) -> None:
        """Switch to polling (the new watches start before the old ones stop), and say why."""
        if self.on_gap is not None:
            self.on_gap()  # a folder went unwatched: its changes were never reported
        self._mode = "polling"
        limit = _read_int("/proc/sys/fs/inotify/max_user_watches")
        now = f" (now {limit})" if limit is not None else ""
        self._add_warning(
            f"inotify could not watch every folder ({why}), so the workspace is polled every "
            f"{POLL_DELAY_MS / 1000:g} s and changes are seen up to that late; raise "
            f"fs.inotify.max_user_watches{now} or ignore big generated folders in .gitignore "
            "to get instant updates back"
        )
        self._replan_needed = True

    def _add_warning(self, text: str) -> None:
        self._warning = text if not self._warning else f"{self._warning}; {text}"

    async def _replan(self) -> None:
        self._replan_needed = False
        started = time.monotonic()
        plan = await self._in_thread(self._compute_plan)
        current = self._current
        same = (
            current is not None
            and current.plan == plan
            and current.polling == (self._mode == "polling")
            and current.skip_unreadable == self._skip_unreadable
        )
        if not same and not self._stopping:
            self._start_set(plan, started=started)

    # --- planning --------------------------------------------------------------------------

    def _private_dirs(self) -> tuple[str, ...]:
        """Relative folders inside the work tree that belong to git or paella."""
        ws = self.workspace
        found = {".git"}
        for folder in (ws.git_dir, ws.common_dir, ws.state_dir):
            rel = self._rel_of(folder)
            if rel:
                found.add(rel)
        return tuple(sorted(found))

    def _rel_of(self, path: Path) -> str | None:
        try:
            rel = Path(os.path.abspath(path)).relative_to(self._root)
        except ValueError:
            return None
        return rel.as_posix() if rel.parts else None

    def _compute_plan(self) -> WatchPlan:
        """Ask git which folders it ignores wholesale and plan watches around them (blocking)."""
        pruned = {p for p in self._private if os.path.lexists(os.path.join(self._root, p))}
        proc = self.workspace.git.run(
            [
                "status",
                "--porcelain=v1",
                "-z",
                "--ignored=matching",
                "--untracked-files=normal",
                "--ignore-submodules=all",
                "--no-renames",
            ],
            check=False,
        )
        if proc.returncode == 0:
            for item in proc.stdout.split(b"\0"):
                if item.startswith(b"!! ") and item.endswith(b"/"):
                    pruned.add(item[3:-1].decode(errors="surrogateescape"))
        ancestors: set[str] = set()
        for rel in pruned:
            parts = rel.split("/")
            ancestors.update("/".join(parts[:i]) for i in range(len(parts)))
        if not ancestors:
            return WatchPlan(flat=(), deep=(self._root,), pruned=())
        deep: list[str] = []
        for folder in sorted(ancestors):
            absolute = self._abs(folder)
            try:
                entries = list(os.scandir(absolute))
            except OSError:
                continue
            for entry in entries:
                rel = f"{folder}/{entry.name}" if folder else entry.name
                if rel in ancestors or rel in pruned or not entry.is_dir(follow_symlinks=False):
                    continue
                if self.ignore and folder_match(rel, self.ignore):
                    continue
                deep.append(entry.path)
        flat = tuple(self._abs(a) for a in sorted(ancestors) if os.path.isdir(self._abs(a)))
        return WatchPlan(flat=flat, deep=tuple(sorted(deep)), pruned=tuple(sorted(pruned)))

    def _abs(self, rel: str) -> str:
        if not rel:
            return self._root
        # Called once per path of a burst: a concatenation, where the separator allows it.
        return self._prefix + rel if os.sep == "/" else os.path.join(self._root, *rel.split("/"))

    def _rel(self, path: str) -> str:
        if not path.startswith(self._prefix):
            return ""
        rel = path[len(self._prefix) :]
        return rel.replace(os.sep, "/") if os.sep != "/" else rel

    # --- changes ---------------------------------------------------------------------------

    async def _on_changes(self, changes: set[tuple[watchfiles.Change, str]]) -> None:
        candidates: dict[str, watchfiles.Change] = {}
        for change, path in changes:
            rel = self._rel(path)
            if rel and self._cheap_relevant(rel):
                candidates[rel] = change
        if candidates:
            await self._consider(candidates)

    async def _consider(self, candidates: dict[str, watchfiles.Change]) -> None:
        """Classify changes in the worker thread; note the relevant ones; re-plan if needed."""
        if self._timer is None:
            self._new_burst()  # no burst is open: the rules may have changed since the last
        flat = {p for s in (self._current, self._starting) if s is not None for p in s.plan.flat}
        batch: _Batch = await self._in_thread(self._classify, candidates, flat)
        self._replan_needed = self._replan_needed or batch.replan
        if batch.unwatched and self._mode == "inotify":
            shown = ", ".join(batch.unwatched[:3])
            self._degrade(f"no watch on the new folder {shown}: the watch limit is reached")
        if batch.report:
            self._note_relevant(batch.report)

    async def _catch_up(self, since: float) -> None:
        """Report what changed while no watch was live: files (and folders) modified since then."""
        if self._current is None:
            return
        found: list[str] = await self._in_thread(self._changed_since, self._current.plan, since)
        if found:
            ignored: set[str] = await self._in_thread(self._git_ignored, found)
            relevant = {p for p in found if p not in ignored}
            if relevant:
                self._note_relevant(relevant)

    def _changed_since(self, plan: WatchPlan, since: float) -> list[str]:
        """Relative paths under the plan's folders modified since ``since`` (blocking).

        A folder modified since then with nothing new inside lost an entry (a deletion, a
        rename): it is reported itself.
        """
        since_ns = int((since - _MTIME_MARGIN) * 1e9)
        files: list[str] = []
        folders: list[str] = []
        stack = [(p, self._rel(p), False) for p in plan.flat]
        stack += [(p, self._rel(p), True) for p in plan.deep]
        while stack and len(files) <= _EXPAND_LIMIT:
            path, sub, deep = stack.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for entry in entries:
                child = f"{sub}/{entry.name}" if sub else entry.name
                if not self._cheap_relevant(child):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if deep:
                        stack.append((entry.path, child, True))
                        if st.st_mtime_ns >= since_ns:
                            folders.append(child)
                elif st.st_mtime_ns >= since_ns:
                    files.append(child)
        if len(files) > _EXPAND_LIMIT:
            return [self._rel(p) for p in plan.deep] + files[:_EXPAND_LIMIT]
        lost = [f for f in folders if not any(p.startswith(f + "/") for p in files)]
        return files + lost

    def _cheap_relevant(self, rel: str) -> bool:
        """Everything but git's ignore rules: .git folders, the state dir, ``[watch] ignore``."""
        parts = rel.split("/")
        if ".git" in parts:
            return False
        for private in self._private:
            if rel == private or rel.startswith(private + "/"):
                return False
        # A glob that names a folder ignores everything in it, as in .gitignore; the path itself
        # may be a file or a folder: both readings count.
        return not (self.ignore and (folder_match(rel, self.ignore) or match_any(rel, self.ignore)))

    def _classify(self, candidates: dict[str, watchfiles.Change], flat: set[str]) -> _Batch:
        """Which changes are relevant, with one ``git check-ignore`` for the lot (blocking)."""
        # A deleted folder stands for what was in it: one verdict for a deleted tree, not one
        # per file (50,000 deleted files cost 3-5 x the ``git add -A`` recording them).
        stand_in = self._ignores.stand_in
        candidates = {stand_in(rel): change for rel, change in candidates.items()}
        links: dict[str, bool] = {}
        considered: list[str] = []
        ask: list[str] = []
        expanded: dict[str, list[str]] = {}
        new_folders: list[str] = []
        # New folders inside recursively watched ones, which notify should have watched itself.
        to_verify: list[str] = []  # relative
        big: list[str] = []
        for rel, change in candidates.items():
            full = self._abs(rel)
            if _beyond_symlink(rel, self._root, links):
                # Git records the link, never what lies behind it (and check-ignore would fail).
                self._verdicts[rel] = False
                continue
            if _is_dir(full):
                if change != _ADDED:
                    continue  # a folder's own metadata: git does not record it
                subfolders: list[str] = []
                if os.path.dirname(full) in flat:
                    new_folders.append(rel)
                # A new folder stands for what is in it: files may have landed there before
                # any watch on it existed. Its files are reported instead, when there are few.
                inside = self._files_in(full, rel, subfolders)
                if rel not in new_folders:
                    to_verify += [rel, *(self._rel(f) for f in subfolders)]
                if inside is None or len(subfolders) > _BIG_FOLDER:
                    big.append(rel)
                if inside is not None:
                    expanded[rel] = inside
                    ask.extend(inside)
            considered.append(rel)
            ask.append(rel)
        ask += to_verify
        unknown = [p for p in dict.fromkeys(ask) if p not in self._verdicts]
        if unknown:
            ignored = self._git_ignored(unknown)
            self._verdicts.update((p, p not in ignored) for p in unknown)
        verdict = self._verdicts.get
        report = {p for p in considered if verdict(p) and p not in expanded}
        for folder, inside in expanded.items():
            if verdict(folder):
                report.update(p for p in inside if verdict(p))
        replan = (
            any(verdict(p) for p in new_folders)
            or any(p == ".gitignore" or p.endswith("/.gitignore") for p in report)
            # A big new folder git ignores (an npm install in a subproject): prune it.
            or any(verdict(p) is False for p in big)
        )
        unwatched: list[str] = []
        to_verify = [p for p in to_verify if verdict(p)]  # an ignored folder may go unwatched
        if to_verify and self._mode == "inotify":
            # notify drops a failed watch on a new folder silently (the watch limit): look for
            # each new folder among this process's inotify watches.
            watched = _inotify_watched()
            if watched is not None:
                unwatched = [
                    p
                    for p in to_verify
                    if _dev_ino(self._abs(p)) not in watched and os.path.isdir(self._abs(p))
                ]
        return _Batch(report=report, replan=replan, unwatched=tuple(sorted(unwatched)))

    def _files_in(self, folder: str, rel: str, subfolders: list[str]) -> list[str] | None:
        """The files under a new folder not listed before as they are, or None if too many.

        The folders found under it are added to ``subfolders``.
        """
        found: list[str] = []
        stack = [(folder, rel)]
        while stack:
            path, sub = stack.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for entry in entries:
                child = f"{sub}/{entry.name}"
                if not self._cheap_relevant(child):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append((entry.path, child))
                    subfolders.append(entry.path)
                    continue
                # The same folder is looked into twice (its event, then its new watch): a file
                # unchanged since the first look is not news.
                signature = (st.st_mtime_ns, st.st_size)
                if self._listed.get(child) != signature:
                    self._listed[child] = signature
                    found.append(child)
            if len(found) > _EXPAND_LIMIT:
                return None
        if len(self._listed) > 4 * _EXPAND_LIMIT:
            self._listed.clear()
        return found

    def _git_ignored(self, paths: list[str]) -> set[str]:
        """Those of ``paths`` git ignores, as the burst's verdicts so far decide (blocking)."""
        return self._ignores.ignored(paths)

    def _new_burst(self) -> None:
        """Forget every verdict: the ignore rules and the index may change between bursts."""
        self._verdicts.clear()
        self._ignores = IgnoreVerdicts(self.workspace.git)

    def _note_relevant(self, paths: Iterable[str]) -> None:
        self._burst.update(paths)
        now = time.monotonic()
        if self.on_activity is not None and now - self._last_activity_call >= ACTIVITY_INTERVAL:
            self._last_activity_call = now
            self.on_activity()
        self._arm_timer()

    def _arm_timer(self) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._burst_token += 1
        token = self._burst_token
        self._timer = self._loop.call_later(self.settle, self._post, ("settled", token))

    def _on_quiet(self) -> None:
        """The settle time passed with no relevant change: report the burst, unless flapping."""
        self._timer = None
        self._new_burst()
        if self._paused or not self._burst:
            return
        now = time.monotonic()
        while self._fires and now - self._fires[0] > self.flap_window:
            self._fires.popleft()
        if len(self._fires) >= self.flap_limit:
            self._paused = True
            if self.on_flapping is not None:
                self.on_flapping(self._flapping_message())
            return
        self._fires.append(now)
        paths = tuple(sorted(self._burst))
        self._burst.clear()
        self.on_settled(paths)

    def _flapping_message(self) -> str:
        shown = sorted(self._burst)[:3]
        more = f" and {len(self._burst) - 3} more" if len(self._burst) > 3 else ""
        return (
            f"The workspace kept changing: gates would have been re-triggered more than "
            f"{self.flap_limit} times within {self.flap_window:g} s (latest: "
            f"{', '.join(shown)}{more}). Watching is "
            "paused so gates stop re-running on every write; resume it once the writes stop, "
            "and the changes made meanwhile are evaluated then."
        )


def _beyond_symlink(rel: str, root: str, cache: dict[str, bool]) -> bool:
    """Whether one of ``rel``'s folders is a symbolic link.

    ``cache`` maps a folder to whether it or one of its own folders is a link: a burst of
    thousands of files in a few folders looks at each folder once.
    """
    parent = rel.rpartition("/")[0]
    if not parent:
        return False
    known = cache.get(parent)
    if known is None:
        try:
            link = stat.S_ISLNK(os.lstat(os.path.join(root, parent)).st_mode)
        except OSError:
            link = False
        known = link or _beyond_symlink(parent, root, cache)
        cache[parent] = known
    return known


def _inotify_watched() -> set[tuple[int, int]] | None:
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


def _dev_ino(path: str) -> tuple[int, int] | None:
    """``path``'s device as the kernel writes it in fdinfo (major << 20 | minor), and inode."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (os.major(st.st_dev) << 20 | os.minor(st.st_dev), st.st_ino)


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _brief(exc: BaseException) -> str:
    """An exception in one line: watchfiles appends a Debug dump to its messages."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" (Error {")[0].strip()
