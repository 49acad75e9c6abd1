"""``paella checkpoint [--label TEXT]`` and ``paella status [--json]`` are read without building
the parser (issue 17, start-up): for every command line the fast reading accepts, it gives what
argparse gives, and it leaves everything else (abbreviations, options, errors, ``--help``) to
argparse."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paella_tui.cli import _plain_checkpoint, _plain_status
from paella_tui.cli_parser import build_parser

PARSER = build_parser()  # one parser reads every example (it keeps no state between reads)


def parsed(words: list[str]) -> dict[str, object] | None:
    """What argparse makes of ``words`` (None when it refuses them)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return vars(PARSER.parse_args(words))
        except SystemExit:
            return None


@given(
    label=st.text(),
    form=st.sampled_from(["none", "space", "equals"]),
)
def test_the_fast_reading_is_argparse_reading(label: str, form: str) -> None:
    words = {
        "none": ["checkpoint"],
        "space": ["checkpoint", "--label", label],
        "equals": ["checkpoint", f"--label={label}"],
    }[form]
    fast = _plain_checkpoint(words)
    if fast is None:
        # Only a label argparse would take as an option is left to it.
        assert form == "space" and label.startswith("-")
        return
    assert vars(fast) == parsed(words)


@pytest.mark.parametrize("words", [["status"], ["status", "--json"]], ids=" ".join)
def test_the_fast_status_is_argparse_reading(words: list[str]) -> None:
    fast = _plain_status(words)
    assert fast is not None and vars(fast) == parsed(words)


@pytest.mark.parametrize(
    "words",
    [
        ["checkpoint", "--lab", "x"],
        ["checkpoint", "--label"],
        ["checkpoint", "--label", "-x"],
        ["checkpoint", "--label", "a", "--label", "b"],
        ["checkpoint", "--help"],
        ["checkpoint", "x"],
        ["-C", ".", "checkpoint"],
        ["checkpoints"],
        [],
    ],
    ids=lambda w: " ".join(w) or "nothing",
)
def test_everything_else_is_left_to_argparse(words: list[str]) -> None:
    assert _plain_checkpoint(words) is None


@pytest.mark.parametrize(
    "words",
    [
        ["status", "--js"],
        ["status", "--json", "--json"],
        ["status", "--watch"],
        ["status", "--tmux"],
        ["status", "--json", "--watch"],
        ["status", "--help"],
        ["status", "x"],
        ["-C", ".", "status"],
        ["stat"],
        ["checkpoint"],
        [],
    ],
    ids=lambda w: " ".join(w) or "nothing",
)
def test_every_other_status_is_left_to_argparse(words: list[str]) -> None:
    assert _plain_status(words) is None
