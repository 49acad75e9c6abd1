"""What git says when it refuses a snapshot's work, as patterns: a path it cannot process or
decode, an index it cannot read, an object the repository lost. The snapshot reads them to act
(store the bytes raw, leave one path out, rebuild its private index) rather than fail whole.
Matched against git 2.39's messages (``convert.c``, ``read-cache.c``); tests make git say each.
"""

from __future__ import annotations

import re

UNPROCESSABLE = re.compile(r"Unable to process path (.+)$", re.MULTILINE)
# git refuses to hash a file whose bytes do not decode from its working-tree-encoding.
UNENCODABLE = re.compile(
    r"(?:failed to encode|BOM is required in|BOM is prohibited in) '(.+)'(?: from| if)", re.M
)
# git's messages when an index file cannot be read.
CORRUPT_INDEX = re.compile(
    r"index file corrupt|bad signature|bad index|index file smaller|unknown index entry|"
    r"index uses .* extension|unable to read|cannot read|unknown index version",
    re.IGNORECASE,
)
# git's messages when an entry of the private index names an object the repository lost (a
# `git gc --prune=now` after paella's refs were deleted: the private index is no gc root).
MISSING_OBJECT = re.compile(
    r"invalid object|bad object|missing (blob|object)|unable to read [0-9a-f]{7,}", re.IGNORECASE
)
