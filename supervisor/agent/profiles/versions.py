"""Which version of an agent is installed, and whether its profile was checked against it.

`paella check` runs ``AGENT --version`` (2 s at most: a CLI that wants a login or an update
must not hang the check), reads the first dotted version in what it prints, and compares it with
the range of versions the profile's corpus covers (`Profile.checked_versions`).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

VERSION_TIMEOUT_S = 2.0
_VERSION = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first ``1.2.3`` (or ``1.2``) in ``text``: ``claude 2.1.107 (Claude Code)`` -> (2, 1, 107)."""
    match = _VERSION.search(text)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def probe_version(command: str, cwd: Path, timeout: float = VERSION_TIMEOUT_S) -> str | None:
    """What ``command --version`` prints first (stripped), or None when it fails or hangs."""
    try:
        done = subprocess.run(
            [command, "--version"],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if parse_version(line) is not None:
            return line.strip()
    return None


def version_note(name: str, found: str | None, checked: Sequence[str] | None) -> tuple[bool, str]:
    """(within the checked range, a line for `paella check`)."""
    if found is None:
        return False, f"{name} --version printed no version (or took over {VERSION_TIMEOUT_S:g} s)"
    version = parse_version(found)
    if checked is None or version is None:
        return True, f"{name} version: {found}"
    low, high = (parse_version(v) for v in checked)
    assert low is not None and high is not None
    if low <= version <= high:
        return True, f"{name} version: {found} (profile checked against {checked[0]}–{checked[1]})"
    return False, (
        f"{name} version: {found}, outside the range the profile was checked against "
        f"({checked[0]}–{checked[1]}): its output may read differently; see the README"
    )
