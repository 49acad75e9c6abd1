"""`paella check`'s reading of ``AGENT --version`` and the ranges the profiles were checked against."""

from __future__ import annotations

from pathlib import Path

import pytest

from paella_tui.supervisor.agent.profiles.registry import PROFILES
from paella_tui.supervisor.agent.profiles.versions import parse_version, probe_version, version_note


@pytest.mark.parametrize(
    ("printed", "version"),
    [
        ("2.1.107 (Claude Code)", (2, 1, 107)),
        ("codex-cli 0.130.0", (0, 130, 0)),
        ("0.28.0", (0, 28, 0)),
        ("aider 0.86.1", (0, 86, 1)),
        ("opencode v1.14.19", (1, 14, 19)),
        ("1.0", (1, 0, 0)),
        ("no version here", None),
    ],
)
def test_the_first_dotted_version_is_read(printed: str, version: tuple[int, int, int]) -> None:
    assert parse_version(printed) == version


def test_every_profile_names_the_range_it_was_checked_against() -> None:
    for profile in PROFILES.values():
        assert profile.checked_versions is not None, profile.name
        low, high = (parse_version(v) for v in profile.checked_versions)
        assert low is not None and high is not None and low <= high


def test_inside_outside_and_unknown() -> None:
    checked = ("2.0.0", "2.1.219")
    assert version_note("claude", "2.1.107 (Claude Code)", checked)[0]
    ok, note = version_note("claude", "3.0.0 (Claude Code)", checked)
    assert not ok and "outside the range" in note and "2.0.0–2.1.219" in note
    ok, note = version_note("claude", None, checked)
    assert not ok and "printed no version" in note


def test_probe_reads_a_real_command(tmp_path: Path) -> None:
    script = tmp_path / "fake-agent"
    script.write_text("#!/bin/sh\necho 'warming up'\necho 'fake-agent 4.5.6' >&2\n")
    script.chmod(0o755)
    assert probe_version(str(script), tmp_path) == "fake-agent 4.5.6"
    assert probe_version(str(tmp_path / "missing"), tmp_path) is None
