"""One ``paella resume`` in the TUI, timed as a person sees it (issue 17: "TUI resume paints
within 1.5 × a fresh run").

The real console program (``python -m paella_tui resume``) runs on a pseudo-terminal of its own
(120x36, ``TERM=xterm-256color``, :class:`benchmarks.tui.TerminalChild`), from the moment the
process is started:

- **board painted**: the terminal shows the run's checkpoint count (the checkpoint list's title,
  ``checkpoints N``): the first frame that holds the run's state, not just the App's frame;
- **agent's line**: the terminal shows the first line the agent printed (the handoff was written
  and the agent started: what a resume is for);
- the process's peak RSS (``VmHWM``) by then.

Then it quits as a person does (``q``, ``y``), which records the attempt's end, so the next
resume starts clean. The screen is polled every 20 ms (a reading is late by up to that).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import clean_env
from benchmarks.probes import vm_status
from benchmarks.tui import TERM, TMUX_VARS, TerminalChild, stop_paella

POLL_S = 0.02
TIMEOUT_S = 300.0
_COUNT = re.compile(r"checkpoints (\d+)")


@dataclass(frozen=True)
class ResumeTimes:
    """One resume: seconds from the process's start, its peak RSS, and how it was stopped."""

    painted: float
    agent_line: float
    peak_rss: int
    stopped: str


def terminal_env(pycache: Path) -> dict[str, str]:
    """The children's environment: no git, paella, tmux or Textual variables, a terminal type,
    and bytecode cached (in ``pycache``) as an installation has it, even where
    ``PYTHONDONTWRITEBYTECODE`` is set."""
    env = {
        k: v
        for k, v in clean_env(drop=(*TMUX_VARS, "PYTHONDONTWRITEBYTECODE")).items()
        if k not in ("COLUMNS", "LINES") and not k.startswith("TEXTUAL")
    }
    return env | {"TERM": TERM, "PYTHONPYCACHEPREFIX": str(pycache)}


def _board_painted(text: str, checkpoints: int) -> bool:
    return any(int(n) >= checkpoints for n in _COUNT.findall(text))


def time_resume(
    repo: Path, *, checkpoints: int, agent_line: str, env: dict[str, str], root: Path
) -> ResumeTimes:
    """Resume the run of ``repo`` in the TUI and time what the terminal shows (``checkpoints``:
    how many the run holds, so the board's title says so once the state is painted)."""
    start = time.perf_counter()
    kid = TerminalChild([sys.executable, "-m", "paella_tui", "resume"], repo, env)
    kid.start_draining()
    painted = shown = None
    peak = 0
    try:
        while shown is None and time.perf_counter() - start < TIMEOUT_S:
            if kid.proc.poll() is not None:
                break
            text = kid.text()
            now = time.perf_counter() - start
            if painted is None and _board_painted(text, checkpoints):
                painted = now
            if agent_line in text:
                shown = now
                painted = painted if painted is not None else now
            time.sleep(POLL_S)
        peak = vm_status("VmHWM", kid.proc.pid) if kid.proc.poll() is None else 0
        if painted is None or shown is None:
            screen = kid.text()[-2000:]
            raise RuntimeError(f"`paella resume` in {repo} did not get there; it showed:\n{screen}")
    finally:
        stopped = stop_paella(kid, [], root)
        kid.close()
    return ResumeTimes(painted, shown, peak, stopped)
