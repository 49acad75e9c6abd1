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
        yield b"".join(
            b"%07d %s\n" % (i, _LETTERS[i % 26 : i % 26 + 91])
            for i in range(start, min(n, start + _BLOCK_LINES))
        )


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    for block in flood_blocks(count):
        view = memoryview(block)
        while view:
            view = view[os.write(1, view) :]
