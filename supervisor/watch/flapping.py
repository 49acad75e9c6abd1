"""The flapping guard: more settled bursts than the limit within a window pause the watching.

A gate re-run on every write of an agent that never stops writing would judge nothing to the
end; paused, the watcher holds back what changes. It resumes at a person's ``g``, or by itself
once the workspace has been quiet for :data:`QUIET_RESUME_S` (a headless run has nobody to
press ``g``, and a person may be away for hours): what changed meanwhile is then reported as
one burst. Only bursts a gate could re-run on count (see ``WorkspaceWatcher.reruns_gates``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

QUIET_RESUME_S = 15.0
"""Seconds without a relevant change after which a paused watcher resumes by itself."""


class FlapGuard:
    """Counts the settled bursts within a window: one more than the limit pauses the watching."""

    def __init__(
        self,
        limit: int = 10,
        window: float = 60.0,
        reruns_gates: Callable[[Collection[str]], bool] | None = None,
        quiet_resume: float = QUIET_RESUME_S,
    ) -> None:
        """``reruns_gates``: whether a burst of these paths can re-run a gate (None: any can);
        one that cannot (outside every gate's ``paths``) is not counted. ``quiet_resume``:
        seconds of quiet after which a pause ends by itself."""
        self.limit = limit
        self.window = window
        self.quiet_resume = quiet_resume
        self.reruns_gates = reruns_gates
        self.paused = False
        self._fires: deque[float] = deque()

    def hold(self, burst: Collection[str], now: float) -> str | None:
        """None: report ``burst`` (settled at ``now``, monotonic); else why watching pauses
        now (the limit and window are read at each burst: they can be changed)."""
        if self.reruns_gates is not None and not self.reruns_gates(burst):
            return None
        while self._fires and now - self._fires[0] > self.window:
            self._fires.popleft()
        if len(self._fires) >= self.limit:
            self.paused = True
            return flapping_message(set(burst), self.limit, self.window)
        self._fires.append(now)
        return None

    def resume(self) -> None:
        """Watching resumes: forget the bursts so far."""
        self.paused = False
        self._fires.clear()


def flapping_message(burst: set[str], limit: int, window: float) -> str:
    """Why watching paused: the workspace kept changing (the latest paths named)."""
    shown = sorted(burst)[:3]
    more = f" and {len(burst) - 3} more" if len(burst) > 3 else ""
    return (
        f"The workspace kept changing: gates would have been re-triggered more than "
        f"{limit} times within {window:g} s (latest: {', '.join(shown)}{more}). Watching is "
        f"paused so gates stop re-running on every write; it resumes by itself once the "
        f"workspace is quiet for {QUIET_RESUME_S:g} s (or at g), and what changed meanwhile is "
        "judged then."
    )
