"""Fewer passes of Python's cyclic garbage collector while a test drives a Textual App.

A Textual App allocates tens of thousands of container objects per start and per frame (DOM
nodes, styles, caches, strips, segments), most of them freed at once by reference counting. With
the interpreter's default thresholds (a young-generation pass every 700 net allocations, an older
one every ten of those) the collector runs about 70 young and 6 middle passes per App and a full
one every other App, each walking the App's live DOM and the test process's whole heap: measured
here, 25-30 % of the CPU of a Pilot test (120x36 main screen: 557 ms of CPU per App with the
defaults, 381 ms with these thresholds; test_tui_screens, test_tui_screens_snapshots and
test_profile_log_view together 18.2 s -> 14.0 s of their own CPU, back to back).

The thresholds are raised for the test only and put back after it. Nothing a test asserts on
depends on when a cycle is collected: the App's processes and files are closed explicitly, and
cyclic garbage is still collected (later, in fewer passes).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000
"""Net container allocations between two young-generation passes (the default is 700)."""
OLDER_THRESHOLDS = (20, 20)
"""Young passes per middle pass, middle passes per full pass (the defaults are 10 and 10)."""


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds for the block; put back what they were after it."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
