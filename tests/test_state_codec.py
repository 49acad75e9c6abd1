"""The kept state's fast row checker for snapshot records (issue 17) against the generic decoder:
the same records back, and the same verdict (a record, or a ValueError) on any damaged row, so
reading a thousand checkpoints fast never trusts what the field-by-field check would refuse."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paella_tui.supervisor.run import state_codec
from paella_tui.supervisor.store.snapshot_record import SnapshotRecord

NAMES = [f.name for f in fields(SnapshotRecord)]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
TEXT = st.text(max_size=8)
records = st.builds(
    SnapshotRecord,
    kind=st.sampled_from(["checkpoints", "salvage", "steps"]),
    n=st.integers(0, 10**9),
    ref=TEXT,
    commit=TEXT,
    tree=TEXT,
    head=st.none() | TEXT,
    branch=st.none() | TEXT,
    t=TEXT,
    episode=st.none() | st.integers(-3, 3) | st.sampled_from(["manual", "1"]),
    gates_green=st.lists(TEXT, max_size=3).map(tuple),
    label=TEXT,
    reason=TEXT,
    skipped_files=st.lists(st.dictionaries(TEXT, JSON, max_size=2), max_size=2).map(tuple),
    uncovered=st.lists(TEXT, max_size=2).map(tuple),
    index=st.none() | TEXT,
)


# The generic field-by-field decoder of a SnapshotRecord (``_decoder`` gives the fast row checker
# for it), built once: building it reads the class's type hints (~1 ms), and it is a pure function
# of the class, so every example gets the decoder a fresh build gives.
GENERIC = state_codec._dataclass(SnapshotRecord)


def _generic(row: list[Any]) -> Any:
    """The field-by-field decoder, given the same values as the object the generic codec keeps."""
    return GENERIC(dict(zip(NAMES, row, strict=True)))


def _verdict(decode: Any, row: Any) -> Any:
    try:
        return decode(row)
    except (ValueError, TypeError):
        return "refused"


@settings(max_examples=300, deadline=None)
@given(record=records)
def test_a_record_comes_back_from_its_row_through_json(record: SnapshotRecord) -> None:
    row = json.loads(json.dumps(state_codec.encode(record)))
    assert state_codec.decode(SnapshotRecord, row) == record
    assert state_codec.decode(SnapshotRecord, row) == _generic(row)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(record=records, at=st.integers(0, len(NAMES) - 1), value=JSON)
def test_a_damaged_row_gets_the_generic_decoders_verdict(
    record: SnapshotRecord, at: int, value: Any
) -> None:
    row = json.loads(json.dumps(record.to_row()))
    row[at] = value
    fast = _verdict(SnapshotRecord.from_row, row)
    assert fast == _verdict(_generic, row)


@given(row=JSON)
def test_anything_else_is_refused(row: Any) -> None:
    assert _verdict(SnapshotRecord.from_row, row) == "refused"
