"""Watches the work tree and says when it has settled after a relevant change (SPEC 6, 8).

Relevant (:mod:`watch_plan`) means a change git could snapshot; git decides what it ignores, the
cheap way (:mod:`ignore_verdicts`), with verdicts kept for one burst (:mod:`batches`).

How it watches, and why (measured with watchfiles 1.3 on Linux):

- ``watchfiles``' ``watch_filter`` runs in Python after the fact, and notify's inotify backend
  still walks (and watches) every folder under a recursive root: the watches are planned around
  what git ignores, and re-planned when new folders come (:mod:`watch_plan`).
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
- The watches are ``watchfiles``' Rust core (as ``awatch`` uses it), asked for their changes by
  one thread this class owns (:mod:`streams`), not by ``awatch``: awaiting ``awatch`` parks each
  wait in anyio's pooled worker threads, which outlive the watcher. The thread is joined and
  every inotify handle closed when :meth:`WorkspaceWatcher.run` returns.

Latency and cost: :mod:`streams`; flapping: :mod:`flapping`; ready: ``wait_ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import watchfiles

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.store.workspace import Workspace
from paella_tui.supervisor.watch.batches import Batch, Classifier
from paella_tui.supervisor.watch.flapping import FlapGuard
from paella_tui.supervisor.watch.streams import (
    DEBOUNCE_MS,
    POLL_DELAY_MS,
    STEP_MS,
    Backoff,
    Stream,
    WatchSet,
    WatchThread,
    brief,
    close_all,
    open_streams,
    polling_warning,
)
from paella_tui.supervisor.watch.watch_plan import (
    RULES_LOOK_S,
    PathRules,
    RepositoryRules,
    WatchPlan,
    changed_since,
    compute_plan,
)

__all__ = ["DEBOUNCE_MS", "POLL_DELAY_MS", "STEP_MS", "WatchMode", "WatchPlan", "WorkspaceWatcher"]

WatchMode = Literal["inotify", "polling"]

ACTIVITY_INTERVAL = 0.25
"""Seconds between two ``on_activity`` calls, at least."""

_MAX_REPLAN_FAILURES = 5
_ADDED = watchfiles.Change.added
_UNDECODABLE = "Unable to decode path"  # watchfiles' error for a file name that is not UTF-8


POLLING_ASKED = "polling every 0.5 s, as asked: changes are seen up to half a second late"


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
        force_polling: bool = False,
        flaps: FlapGuard | None = None,
        on_resumed: Callable[[], None] | None = None,
    ) -> None:
        self.workspace = workspace
        self.settle = settle
        self.ignore = tuple(ignore)
        self.on_activity = on_activity
        self.on_settled = on_settled
        self.on_flapping = on_flapping
        # Changes may have gone unreported (a watch failed, polling): look at everything again.
        self.on_gap = on_gap
        self.flaps = flaps or FlapGuard()
        self.on_resumed = on_resumed
        self._rules = PathRules(workspace, self.ignore)
        self._root = self._rules.root
        self._mode: WatchMode = "polling" if force_polling else "inotify"
        self._skip_unreadable = False
        self._warning: str | None = POLLING_ASKED if force_polling else None
        self._burst: set[str] = set()
        self._burst_token = 0
        self._classifier = Classifier(self._rules, workspace.git)
        self._repository_rules = RepositoryRules(workspace)
        self._timer: asyncio.TimerHandle | None = None
        self._last_activity_call = float("-inf")
        self._current: WatchSet | None = None
        self._starting: WatchSet | None = None
        self._retired: list[WatchSet] = []
        self._replan_needed = False
        self._renewed: set[str] = set()
        """Folders the plan names that were made again since the watches started."""
        self._replan_failures = 0
        self._decode_backoff = Backoff()
        self._gap_since: float | None = None
        self._setup_seconds: float | None = None
        self._ready = asyncio.Event()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._queue: asyncio.Queue[tuple[Any, ...]] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._watch_thread: WatchThread | None = None

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
        """Flapping paused ``on_settled`` until :meth:`resume`, or quiet (``watch.flapping``)."""
        return self.flaps.paused

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
        self.flaps.resume()
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
        self._watch_thread = WatchThread(self._post)
        try:
            if self._stopping:
                return
            started = time.monotonic()
            plan = await self._in_thread(self._compute_plan)
            self._start_set(plan, started=started)
            self._loop.call_later(RULES_LOOK_S, self._post, ("rules",))
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
        close_all(sets, self._executor, self._watch_thread)
        self._current = self._starting = None
        self._retired.clear()

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
        elif kind == "quiet" and item[1] == self._burst_token and self.paused:
            self._resume_now()  # quiet long enough: what changed meanwhile is reported
            if self.on_resumed is not None:
                self.on_resumed()
        elif kind == "replan":
            self._replan_needed = True
        elif kind == "rules":
            if await self._in_thread(self._repository_rules.changed):
                self._replan_needed = True
            assert self._loop is not None
            self._loop.call_later(RULES_LOOK_S, self._post, ("rules",))

    # --- watch sets ------------------------------------------------------------------------

    def _start_set(self, plan: WatchPlan, *, started: float) -> None:
        polling = self._mode == "polling"
        skip = self._skip_unreadable
        streams = [
            Stream(paths, recursive=deep, polling=polling, skip_unreadable=skip)
            for paths, deep in ((plan.flat, False), (plan.deep, True))
            if paths
        ]
        previous = self._current.plan.deep if self._current else plan.deep
        # Folders made again, and what is in them, are new too: files may be there unseen.
        renewed, self._renewed = tuple(p + os.sep for p in self._renewed), set()
        new_roots = tuple(
            p for p in plan.deep if p not in previous or (p + os.sep).startswith(renewed)
        )
        watch_set = WatchSet(plan, polling, self._skip_unreadable, streams, started, new_roots)
        if self._starting is not None:
            self._retire(self._starting)
        self._starting = watch_set
        if not streams:  # nothing to watch at all: an empty work tree with .git pruned
            self._promote(watch_set)
            return
        assert self._loop is not None and self._watch_thread is not None
        # Setting watches up blocks (a folder walk): the worker does it, and posts each one's
        # "ready" (or its error) when done; the watch thread goes on with the current ones.
        self._loop.run_in_executor(
            self._executor, open_streams, streams, self._watch_thread, self._post
        )

    def _retire(self, watch_set: WatchSet) -> None:
        watch_set.stop()
        self._retired.append(watch_set)
        # Joined threads are done with; keep only the ones still on their way out.
        self._retired = [
            s for s in self._retired if any(not st.closed.is_set() for st in s.streams)
        ]

    def _set_of(self, stream: Stream) -> WatchSet | None:
        for watch_set in (self._current, self._starting):
            if watch_set is not None and stream in watch_set.streams:
                return watch_set
        return None

    async def _on_ready(self, stream: Stream) -> None:
        stream.ready = True
        watch_set = self._set_of(stream)
        if watch_set is not None and watch_set is self._starting and watch_set.ready:
            self._promote(watch_set)
            if watch_set.new_roots:
                # Files written into a new folder before its watch existed were not seen one by
                # one: look inside it now that every later write will be.
                new = {self._rules.rel(p): _ADDED for p in watch_set.new_roots}
                await self._consider(new, looking_into=True)
            if self._gap_since is not None:
                since, self._gap_since = self._gap_since, None
                await self._catch_up(since)
                if self.on_gap is not None:
                    # The catch-up goes by mtime (it cannot see a deletion): watches are live
                    # again, so a full scan from now on covers whatever it missed.
                    self.on_gap()

    def _promote(self, watch_set: WatchSet) -> None:
        """The new watches are live: only now stop the old ones, so no change falls in between."""
        if self._current is not None:
            self._retire(self._current)
        self._current, self._starting = watch_set, None
        self._setup_seconds = time.monotonic() - watch_set.started
        self._replan_failures = 0
        self._ready.set()

    def _on_error(self, stream: Stream, exc: Exception) -> None:
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
            delay = self._decode_backoff.next(time.monotonic())
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
            self._degrade(brief(exc))
        else:
            raise WorkspaceError(f"watching {self._root} failed: {brief(exc)}") from exc

    def _degrade(self, why: str) -> None:
        """Switch to polling (the new watches start before the old ones stop), and say why."""
        if self.on_gap is not None:
            self.on_gap()  # a folder went unwatched: its changes were never reported
        self._mode = "polling"
        self._add_warning(polling_warning(why))
        self._replan_needed = True

    def _add_warning(self, text: str) -> None:
        self._warning = text if not self._warning else f"{self._warning}; {text}"

    async def _replan(self) -> None:
        self._replan_needed = False
        started = time.monotonic()
        plan = await self._in_thread(self._compute_plan)
        current = self._current
        same = (
            not self._renewed
            and current is not None
            and current.plan == plan
            and current.polling == (self._mode == "polling")
            and current.skip_unreadable == self._skip_unreadable
        )
        if not same and not self._stopping:
            self._start_set(plan, started=started)

    # --- planning --------------------------------------------------------------------------

    def _compute_plan(self) -> WatchPlan:
        """Ask git which folders it ignores wholesale and plan watches around them (blocking)."""
        self._repository_rules.changed()  # looked at before git reads them: a later change shows
        return compute_plan(self._rules, self.workspace.git)

    # --- changes ---------------------------------------------------------------------------

    async def _on_changes(self, changes: set[tuple[watchfiles.Change, str]]) -> None:
        candidates: dict[str, watchfiles.Change] = {}
        for change, path in changes:
            rel = self._rules.rel(path)
            # Deleted and added in one batch: made again (a folder must count as new).
            if rel and self._rules.cheap_relevant(rel) and candidates.get(rel) != _ADDED:
                candidates[rel] = change
        if candidates:
            await self._consider(candidates)

    async def _consider(
        self, candidates: dict[str, watchfiles.Change], *, looking_into: bool = False
    ) -> None:
        """Classify changes in the worker thread; note the relevant ones; re-plan if needed.

        ``looking_into``: the candidates are the new watches' own folders, looked into once they
        are live (not folders made again under the plan's watches).
        """
        if self._timer is None:  # no burst is open: the rules may have changed since the last
            self._classifier.new_burst()
        sets = [s for s in (self._current, self._starting) if s is not None]
        flat = {p for s in sets for p in s.plan.flat}
        watched = frozenset(
            () if looking_into else (p for s in sets for p in (*s.plan.flat, *s.plan.deep))
        )
        inotify = self._mode == "inotify"
        batch: Batch = await self._in_thread(
            self._classifier.classify, candidates, flat, inotify, watched
        )
        self._renewed.update(batch.renewed)
        self._replan_needed = self._replan_needed or batch.replan or bool(batch.renewed)
        if batch.unwatched and self._mode == "inotify":
            shown = ", ".join(batch.unwatched[:3])
            self._degrade(f"no watch on the new folder {shown}: the watch limit is reached")
        if batch.report:
            self._note_relevant(batch.report)

    async def _catch_up(self, since: float) -> None:
        """Report what changed while no watch was live: files (and folders) modified since then."""
        if self._current is None:
            return
        found: list[str] = await self._in_thread(
            changed_since, self._rules, self._current.plan, since
        )
        if found:
            relevant: set[str] = await self._in_thread(self._classifier.counted, found)
            if relevant:
                self._note_relevant(relevant)

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
        self._classifier.new_burst()
        if self.paused and self._burst and self._loop is not None:
            item = ("quiet", self._burst_token)
            self._loop.call_later(self.flaps.quiet_resume - self.settle, self._post, item)
        if self.paused or not self._burst:
            return
        pause = self.flaps.hold(self._burst, time.monotonic())
        if pause is not None:
            if self.on_flapping is not None:
                self.on_flapping(pause)
            return
        paths = tuple(sorted(self._burst))
        self._burst.clear()
        self.on_settled(paths)
