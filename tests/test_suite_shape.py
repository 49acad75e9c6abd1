"""``--suite-shape`` (cpu_meter): the cores a run's tests kept busy over time, and its tail."""

from __future__ import annotations

from cpu_meter import print_shape


def test_the_shape_spreads_each_tests_cpu_over_its_time_and_names_the_tail() -> None:
    lines: list[str] = []
    tests = [
        ("gw0", "t.py::busy", 0.0, 10.0, 10.0),  # one core for ten seconds
        ("gw1", "t.py::waits", 0.0, 20.0, 2.0),  # a tenth of a core for twenty
        ("gw0", "t.py::last", 25.0, 27.0, 1.0),
    ]
    print_shape(lines.append, lambda title: lines.append(f"== {title}"), tests)
    rows = [line.split() for line in lines[2:5]]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("0", "1.10", "2.00"),
        ("10", "0.10", "1.00"),
        ("20", "0.10", "0.20"),
    ]
    assert rows[0][3] == "#" * 22
    assert "tests' CPU 13.0 s over 27.0 s: 0.48 cores busy on average" in lines
    assert "  gw0: 2 tests, the last ended at 27.0 s" in lines
    assert "  gw1: 1 tests, the last ended at 20.0 s" in lines
    assert lines[-1].split()[-1] == "t.py::last" and lines[-3].split()[-1] == "t.py::busy"
