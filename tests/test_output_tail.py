"""Tests of OutputTail: what a person sees of an agent's raw terminal output."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.agent.output_tail import OutputTail, strip_sgr

CUT = 64 * 1024


def fed(*chunks: bytes, **kwargs: int) -> OutputTail:
    tail = OutputTail(**kwargs)
    for chunk in chunks:
        tail.feed(chunk)
    return tail


def test_lines_are_split_across_chunks_and_the_partial_line_comes_last() -> None:
    tail = fed(b"one\ntw", b"o\nthr", b"ee")
    assert tail.lines() == ["one", "two", "three"]
    assert tail.partial == "three"
    assert (tail.total_lines, tail.total_bytes) == (2, 13)


def test_crlf_is_a_newline_even_when_split_between_chunks() -> None:
    assert fed(b"a\r\nb\r", b"\nc\r\r\n").lines() == ["a", "b", "c"]


def test_carriage_return_rewrites_the_line_so_progress_shows_its_last_state() -> None:
    tail = fed(b"start\nprogress 1%\rprogress 50%\rprogress 9")
    assert tail.lines() == ["start", "progress 9"]
    tail.feed(b"9%\r")
    assert tail.partial == "progress 99%"  # the last state stays until something replaces it
    tail.feed(b"progress 100%\ndone\n")
    assert tail.lines() == ["start", "progress 100%", "done"]


def test_a_carriage_return_at_a_chunk_end_waits_for_what_follows() -> None:
    tail = fed(b"old text\r")
    tail.feed(b"new")
    assert tail.partial == "new"
    assert fed(b"kept\r", b"\n").lines() == ["kept"]


def test_sgr_colours_are_kept_and_plain_lines_drop_them() -> None:
    tail = fed(b"\x1b[1;32mok\x1b[0m \x1b[38;5;208morange\x1b[m\n")
    assert tail.lines() == ["\x1b[1;32mok\x1b[0m \x1b[38;5;208morange\x1b[m"]
    assert tail.plain_lines() == ["ok orange"]
    assert tail.last_lines(1) == ["ok orange"]
    assert strip_sgr(tail.lines()[0]) == "ok orange"


def test_cursor_movement_erase_and_osc_sequences_are_removed() -> None:
    tail = fed(
        b"\x1b[2J\x1b[H\x1b[?25lhidden cursor\x1b[?25h\n"
        b"\x1b]0;title\x07\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\\n"
        b"\x1b[3A\x1b[10;20Hmoved\x1b[K\n"
        b"\x1b(Bcharset\x1b7\x1b8 \x1b[>4;2mkeys\n"
        b"\x1bPdevice control\x1b\\after dcs\n"
    )
    assert tail.lines() == ["hidden cursor", "link", "moved", "charset keys", "after dcs"]


def test_erase_line_and_column_one_redraw_the_line_like_a_carriage_return() -> None:
    tail = fed(b"spin |\x1b[2K\x1b[1Gspin /\x1b[2K\x1b[Gspin done\n")
    assert tail.lines() == ["spin done"]


def test_erase_to_end_of_line_keeps_the_text_as_grep_color_writes_it() -> None:
    tail = fed(b"src/a.py:\x1b[01;31m\x1b[Kneedle\x1b[m\x1b[K here\n")
    assert tail.lines() == ["src/a.py:\x1b[01;31mneedle\x1b[m here"]


def test_invalid_utf8_and_binary_become_visible_replacements_not_errors() -> None:
    tail = fed(b"bad \xff\xfe ok \xe2\x82", b"\xac euro \x00\x01\x07\x08\x7f|\tx\n")
    assert tail.lines() == ["bad \ufffd\ufffd ok € euro |\tx"]
    tail.feed(b"cut \xe2\x82")
    tail.finish()
    assert tail.partial == "cut \ufffd"


def test_escape_sequences_split_between_chunks_are_reassembled() -> None:
    tail = fed(b"a\x1b", b"[3", b"1mred\x1b[0", b"m\x1b]0;ti", b"tle\x1b", b"\\b\n")
    assert tail.lines() == ["a\x1b[31mred\x1b[0mb"]


def test_an_unterminated_osc_is_not_held_forever() -> None:
    tail = fed(b"\x1b]0;", b"a" * 20_000, b"\nnext\n")
    assert tail.plain_lines()[-1] == "next"
    assert tail.plain_lines()[0].endswith("a" * 100)


def test_a_1mb_line_is_cut_with_a_marker_and_never_buffered_whole() -> None:
    tail = OutputTail()
    piece = b"y" * 4096
    for _ in range(256):
        tail.feed(piece)
        assert len(tail.partial) <= CUT + 40
    assert tail.partial == "y" * CUT + f" …[cut {256 * 4096 - CUT} bytes]"
    tail.feed(b"\nafter\n")
    assert tail.lines() == ["y" * CUT + f" …[cut {256 * 4096 - CUT} bytes]", "after"]


def test_a_long_line_inside_one_chunk_is_cut_too() -> None:
    tail = fed(b"short\n" + "é".encode() * 70_000 + b"\nend\n")
    assert tail.lines() == ["short", "é" * CUT + f" …[cut {(70_000 - CUT) * 2} bytes]", "end"]


def test_a_cut_never_leaves_half_a_colour_sequence() -> None:
    tail = fed(b"abcdefgh\x1b[31mxyz\n", max_line_chars=10)
    assert tail.lines() == ["abcdefgh …[cut 8 bytes]"]


def test_only_max_lines_are_kept_but_all_are_counted() -> None:
    tail = fed(b"".join(b"line %d\n" % n for n in range(10_000)), b"partial")
    assert len(tail.lines()) == 5001
    assert tail.lines()[0] == "line 5000"
    assert tail.total_lines == 10_000
    assert tail.last_lines(3) == ["line 9998", "line 9999", "partial"]
    assert tail.lines(2) == ["line 9999", "partial"]
    assert tail.last_lines(0) == []


def test_a_character_budget_bounds_memory_whatever_the_line_length() -> None:
    tail = fed(b"".join(b"%d" % n + b"x" * 60_000 + b"\n" for n in range(100)), max_chars=200_000)
    kept = tail.lines()
    assert len(kept) == 3
    assert kept[-1].startswith("99x")


def test_version_changes_only_when_output_arrives() -> None:
    tail = OutputTail()
    start = tail.version
    tail.feed(b"")
    assert tail.version == start
    tail.feed(b"x")
    tail.feed(b"y\n")
    assert tail.version == start + 2


def test_a_listener_hears_each_change_and_nothing_else() -> None:
    tail = OutputTail()
    heard: list[int] = []
    tail.on_change = lambda: heard.append(tail.version)
    tail.feed(b"")
    assert heard == []  # nothing arrived: a quiet agent wakes nobody
    tail.feed(b"half a line \xe2")
    tail.feed(b"\x9c\x93 done\n")
    assert heard == [1, 2]
    assert tail.lines() == ["half a line ✓ done"]
    tail.finish()  # nothing held back: no change
    assert heard == [1, 2]
    tail.feed(b"cut \xe2")
    tail.finish()  # the held byte is flushed as a replacement character: a change
    assert heard == [1, 2, 3, 4]


# Pieces that stress every state the tail keeps across chunks.
_PIECES = [
    b"a",
    b"line",
    b"\n",
    b"\r",
    b"\r\n",
    b"\t",
    b"\x1b[31m",
    b"\x1b[0m",
    b"\x1b[2K",
    b"\x1b[1G",
    b"\x1b[K",
    b"\x1b[?25l",
    b"\x1b]0;t\x07",
    b"\x1b]8;;u\x1b\\",
    b"\x1b(B",
    b"\xe2\x82\xac",
    b"\xff",
    b"\x00",
    b"\x1b",
    "é".encode(),
]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from(_PIECES), max_size=60).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_how_output_is_split_into_chunks_never_changes_what_is_shown(
    data: bytes, cuts: list[int]
) -> None:
    whole = fed(data, max_line_chars=12)
    whole.finish()
    bounds = sorted({0, len(data), *(cut for cut in cuts if cut < len(data))})
    split = fed(*(data[a:b] for a, b in itertools.pairwise(bounds)), max_line_chars=12)
    split.finish()
    assert split.lines() == whole.lines()
    assert (split.total_lines, split.total_bytes) == (whole.total_lines, whole.total_bytes)


_UNRENDERABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=10))
def test_arbitrary_bytes_never_raise_and_leave_only_renderable_text(chunks: list[bytes]) -> None:
    tail = fed(*chunks)
    tail.finish()
    for line in tail.plain_lines():
        assert not _UNRENDERABLE.search(line), repr(line)
    for line in tail.lines():
        assert "\x1b" not in re.sub(r"\x1b\[[0-9;:]*m", "", line)
