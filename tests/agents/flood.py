"""Scripted agent: write N (default 1,000,000) deterministic ~100-byte lines, fast.

`flood_blocks(n)` is importable, so a test can compute what the agent wrote.
"""

import os
import sys
from collections.abc import Iterator

_LETTERS = b"abcdefghijklmnopqrstuvwxyz" * 5
_BLOCK_LINES = 1000


def flood_blocks(n: int) -> Iterator[bytes]:
    """The output, in blocks of 1,000 lines: `0000042 ` then 91 letters, then a newline."""
    for start in range(0, n, _BLOCK_LINES):
        # Line start + j is `%04d` of start // 1,000 (the number's first digits), then what
        # _tails holds for j: a join of a block's own bytes, not a formatting of each line (the
        # agent writes a million lines, and a test computes them again: ~1 s of CPU each).
        head = b"%04d" % (start // _BLOCK_LINES)
        yield head.join(_tails(start % 26, min(n - start, _BLOCK_LINES)))


# (the block's first letter offset, its lines) -> b"" and then, for each line j, `%03d` of j,
# a space, 91 letters and a newline. A block starts at a multiple of 1,000, so there are 13
# offsets (and the last block's length): a few lists in all.
_TAILS: dict[tuple[int, int], list[bytes]] = {}


def _tails(offset: int, lines: int) -> list[bytes]:
    key = (offset, lines)
    if key not in _TAILS:
        _TAILS[key] = [b""] + [
            b"%03d %s\n" % (j, _LETTERS[(offset + j) % 26 : (offset + j) % 26 + 91])
            for j in range(lines)
        ]
    return _TAILS[key]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    for block in flood_blocks(count):
        view = memoryview(block)
        while view:
            view = view[os.write(1, view) :]
