"""Where the suite's CPU goes: ``python -m pytest --cpu-by-file`` prints, after the run, the CPU
seconds each test file cost (the test process itself and every child it waited for: git, the
``paella`` command, agents, gates) beside its wall time, and the costliest tests.

CPU time, not wall time, is what to compare on a shared 2-core machine: the wall time of a test
grows with the machine's load, its CPU time hardly does. What a detached process spends is not
counted (the tmux server), nor a child the test never reaped. Under pytest-xdist every worker
measures its own tests and the controller adds them up.
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

# How many of the costliest single tests the report lists.
TOP_TESTS = 25


def _cpu() -> tuple[float, float]:
    """(this process, its reaped children): user + system seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuMeter:
    """Sums, per test, the CPU of this process and its children and the wall time."""

    def __init__(self) -> None:
        self.tests: dict[str, list[float]] = {}
        self.start = _cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        """Measure one test: its fixtures' set-up and tear-down included."""
        own0, kids0 = _cpu()
        wall0 = time.monotonic()
        yield
        own1, kids1 = _cpu()
        self.tests[item.nodeid] = [own1 - own0, kids1 - kids0, time.monotonic() - wall0]

    def whole(self) -> list[float]:
        """The whole process since the meter started: [own, children]."""
        own, kids = _cpu()
        return [own - self.start[0], kids - self.start[1]]


class CpuReport:
    """Collects what the meters measured (its own, or each xdist worker's) and prints the table."""

    def __init__(self, meter: CpuMeter | None) -> None:
        self.meter = meter
        self.tests: dict[str, list[float]] = {}
        self.processes: list[list[float]] = []

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker finished: take in its measurements."""
        output = getattr(node, "workeroutput", {})
        self.tests.update(output.get("cpu_tests", {}))
        if "cpu_whole" in output:
            self.processes.append(output["cpu_whole"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print CPU per file and the costliest tests."""
        if self.meter is not None:
            self.tests.update(self.meter.tests)
            self.processes.append(self.meter.whole())
        files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        for nodeid, (own, kids, wall) in self.tests.items():
            row = files[nodeid.split("::", 1)[0]]
            row[0] += own
            row[1] += kids
            row[2] += wall
            row[3] += 1
        write = terminalreporter.write_line
        terminalreporter.section("CPU by test file (seconds; children = git, paella, agents)")
        write(f"{'file':44} {'tests':>5} {'own':>7} {'children':>8} {'cpu':>7} {'wall':>7}")
        ranked = sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
        for name, (own, kids, wall, count) in ranked:
            write(f"{name:44} {count:5.0f} {own:7.1f} {kids:8.1f} {own + kids:7.1f} {wall:7.1f}")
        own_sum = sum(row[0] for row in files.values())
        kids_sum = sum(row[1] for row in files.values())
        write(
            f"{'all tests':44} {len(self.tests):5d} {own_sum:7.1f} {kids_sum:8.1f} "
            f"{own_sum + kids_sum:7.1f}"
        )
        whole_own = sum(p[0] for p in self.processes)
        whole_kids = sum(p[1] for p in self.processes)
        write(
            f"{'test processes (with collection, fixtures)':44} {'':5} {whole_own:7.1f} "
            f"{whole_kids:8.1f} {whole_own + whole_kids:7.1f}"
        )
        write("")
        write(f"costliest {TOP_TESTS} tests (cpu, wall):")
        top = sorted(self.tests.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:TOP_TESTS]
        for nodeid, (own, kids, wall) in top:
            write(f"  {own + kids:6.2f} {wall:6.2f}  {nodeid}")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cpu-by-file``: print where the CPU went."""
    parser.addoption(
        "--cpu-by-file",
        action="store_true",
        help="after the run, print the CPU seconds each test file cost (with its children)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Start measuring (in a worker, or in a run without xdist) and, in the controlling process,
    register the report."""
    if not config.getoption("cpu_by_file"):
        return
    is_worker = hasattr(config, "workerinput")
    runs_tests = is_worker or not getattr(config.option, "numprocesses", None)
    meter = CpuMeter() if runs_tests else None
    if meter is not None:
        config.pluginmanager.register(meter, "cpu-meter")
    if is_worker:
        config.pluginmanager.register(_WorkerOutput(meter), "cpu-meter-output")
    else:
        config.pluginmanager.register(CpuReport(None if is_worker else meter), "cpu-report")


class _WorkerOutput:
    """Hands a worker's measurements to the controlling process."""

    def __init__(self, meter: CpuMeter | None) -> None:
        self.meter = meter

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Put the measurements where xdist sends them back."""
        if self.meter is not None:
            output = session.config.workeroutput  # type: ignore[attr-defined]
            output["cpu_tests"] = self.meter.tests
            output["cpu_whole"] = self.meter.whole()
