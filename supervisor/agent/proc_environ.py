"""A process's environment, as far as it can be known now.

Between the start of an ``exec`` and the new program's stack being laid out, the kernel shows a
process with neither environment nor command line: ``/proc/<pid>/environ`` reads empty. A caller
that starts a child learns it has exec'd when the close-on-exec descriptors close, which the
kernel does *before* that layout, so a look right after such a start (or at a re-parented orphan
that is exec'ing) can read an empty environment that is no answer. Taking it for one made a
gate's tree claim an orphan that carried the agent's marker (the rare failure of
``test_an_orphan_marked_by_a_stopped_tree_is_anyones_to_stop``). A process that really has an
empty environment (a daemon that scrubbed it) still has a command line.
"""

from __future__ import annotations

import psutil


def environ_of(proc: psutil.Process) -> dict[str, str] | None:
    """``proc``'s environment, or None when it cannot be known now: unreadable, or read empty
    while its command line is empty too (mid-exec); ask again later. A zombie's is empty."""
    try:
        env: dict[str, str] = proc.environ()
        if env or proc.cmdline():
            return env
    except psutil.ZombieProcess:
        return {}  # it ended: nothing to read, ever (its parent reaps it as a member or not)
    except psutil.Error:
        pass
    return None
