"""Scripted agent: write what real CLIs write: `\\r` progress, colours, cursor movement,
OSC titles, invalid UTF-8 and binary, and a 1 MB line without a newline at the end.

`CHUNKS` is importable, so a test knows the exact bytes.
"""

import os
import time

CHUNKS: list[bytes] = [
    b"plain start\n",
    b"progress 0%\rprogress 10%\rprogress 5",
    b"0%\rprogress 100%\n",
    b"\x1b[1;32mgreen bold\x1b[0m and \x1b[31mred\x1b[0m\n",
    b"\x1b]0;window title\x07\x1b[2J\x1b[Hcleared screen\x1b[K\n",
    b"\x1b[?25lcursor hidden\x1b[?25h\n",
    b"spinner |\x1b[1G\x1b[2Kspinner /\x1b[1G\x1b[2Kspinner done\n",
    b"bad utf8 \xff\xfe here \xe2\x82 cut euro \xe2\x82\xac ok\n",
    b"binary \x00\x01\x02\x07\x08 junk\n",
    b"crlf line\r\n",
    b"split escape \x1b[3",
    b"4mblue\x1b[0m\n",
    b"x" * 1_000_000,
]


if __name__ == "__main__":
    for chunk in CHUNKS:
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view) :]
        time.sleep(0.01)  # let chunk boundaries reach the reader as separate reads
