"""The evaluator's queue: a request waiting for its verdict, the pass judging one tree, and the
ways they end (split from :mod:`paella_tui.supervisor.judge.evaluation`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from paella_tui.supervisor.judge.frozen import Judged
from paella_tui.supervisor.run.events import EvaluationFinished, GateResult
from paella_tui.supervisor.store.snapshot import Snapshot


class EvaluatorClosed(RuntimeError):
    """The evaluator was closed: no evaluation will answer this request."""


@dataclass
class Request:
    """A queued evaluation: the newest trigger's reason, and who waits for its verdict."""

    reason: str
    force: bool
    follow: bool = False
    """Only the watcher's settled paths changed since the last snapshot (issue 17)."""
    since: float = field(default_factory=time.monotonic)
    """When the newest trigger came (``time.monotonic()``): a scan begun after it may answer."""
    waiters: list[asyncio.Future[EvaluationFinished]] = field(default_factory=list)
    on_tree: list[Callable[[str], None]] = field(default_factory=list)
    """Told the tree this request's pass judges, once it is snapshotted (before its gates run)."""


@dataclass
class Pass:
    """One evaluation in progress: the tree it judges and whether the workspace left it."""

    snap: Snapshot
    judged: Judged
    """What the gates judge: the tree itself, or it with protected paths at their frozen content."""
    cwd: Path
    """Where the gates run: the work tree, or a scratch tree holding ``judged.tree``."""
    moved: bool = False
    check: asyncio.Lock = field(default_factory=asyncio.Lock)
    running: set[str] = field(default_factory=set)
    """The gates of this pass running now."""
    ends: asyncio.Condition = field(default_factory=asyncio.Condition)
    """Notified when a gate of this pass ends (gates ending together share one check)."""
    last_end: float = float("-inf")
    """When the newest gate of this pass ended (``time.monotonic()``)."""

    @property
    def tree(self) -> str:
        """The tree being judged."""
        return self.snap.tree


def as_stale(result: GateResult) -> GateResult:
    """The result with status ``stale``, its verdict kept in words."""
    was = f"{result.status} on a tree that changed while it ran"
    return replace(
        result, status="stale", message=f"{was}; {result.message}" if result.message else was
    )


def fail(request: Request, exc: BaseException) -> None:
    """Answer everyone waiting for ``request`` with ``exc``."""
    for future in request.waiters:
        if not future.done():
            future.set_exception(exc)
