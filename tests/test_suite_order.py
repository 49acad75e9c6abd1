"""The order the suite hands its tests out in (conftest): tests marked ``waits`` spread evenly
among the others, each kind in its own order, none near the end."""

from __future__ import annotations

import itertools
import math

from conftest import spread_among
from hypothesis import given
from hypothesis import strategies as st


@given(
    kinds=st.lists(st.booleans(), max_size=300),
    over=st.floats(min_value=0.05, max_value=1.0),
)
def test_chosen_items_are_spread_evenly_and_each_kind_keeps_its_order(
    kinds: list[bool], over: float
) -> None:
    items = list(enumerate(kinds))  # (position, chosen?)
    spread = spread_among(items, lambda item: item[1], over)
    picked = [item for item in items if item[1]]
    others = [item for item in items if not item[1]]
    assert [item for item in spread if item[1]] == picked
    assert [item for item in spread if not item[1]] == others
    assert len(spread) == len(items)
    if not picked or not others:
        return
    step = len(others) * over / len(picked)
    # How many others come before each chosen one: the k-th after about (k + 0.5) steps.
    before = [n - k for k, n in enumerate(i for i, item in enumerate(spread) if item[1])]
    for k, count in enumerate(before):
        assert count == min(math.ceil((k + 0.5) * step), len(others))
    # None in the last (1 - over) of the others, but for rounding.
    assert before[-1] <= math.ceil(len(others) * over)


def test_the_suite_spreads_its_waiting_tests() -> None:
    """On a suite's shape: 40 waiting tests at the end of 1,000 come with 20 or 21 others
    between two, the first after 11, and the last 150 are the others'."""
    items = [("wait", i) if i >= 960 else ("cpu", i) for i in range(1000)]
    spread = spread_among(items, lambda item: item[0] == "wait", 0.85)
    places = [n for n, item in enumerate(spread) if item[0] == "wait"]
    assert places[0] == 11
    assert {b - a for a, b in itertools.pairwise(places)} == {21, 22}
    assert all(item[0] == "cpu" for item in spread[-150:])
