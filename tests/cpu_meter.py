"""Where the suite's CPU goes: ``python -m pytest --cpu-by-file`` prints, after the run, the CPU
seconds each test file cost (the test process itself and every child it waited for: git, the
``paella`` command, agents, gates) beside its wall time, and the costliest tests.

CPU time, not wall time, is what to compare on a shared 2-core machine: the wall time of a test
grows with the machine's load, its CPU time hardly does. What a detached process spends is not
counted (the tmux server), nor a child the test never reaped. Under pytest-xdist every worker
measures its own tests and the controller adds them up.

``--suite-shape`` prints how the run used the cores over time: per ten seconds, the CPU the tests
used (their processes and children) per second, i.e. the cores they kept busy, and how many
workers were in a test; then when each worker ran out of tests and the last tests to end (the
tail, where cores are idle). Workers that are in a test while the cores stay idle are waiting.
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# How many of the costliest single tests the report lists.
TOP_TESTS = 25
# The suite's shape: seconds per line, and how many of the last tests to end are listed.
SHAPE_STEP_S = 10
SHAPE_TAIL = 12


def _cpu() -> tuple[float, float]:
    """(this process, its reaped children): user + system seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuMeter:
    """Sums, per test, the CPU of this process and its children and the wall time."""

    def __init__(self, worker: str = "main") -> None:
        self.tests: dict[str, list[float]] = {}
        self.spans: dict[str, tuple[str, float, float]] = {}
        """nodeid -> (worker, start, end): wall-clock times, comparable between workers."""
        self.worker = worker
        self.start = _cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        """Measure one test: its fixtures' set-up and tear-down included."""
        own0, kids0 = _cpu()
        wall0 = time.monotonic()
        started = time.time()
        yield
        own1, kids1 = _cpu()
        self.tests[item.nodeid] = [own1 - own0, kids1 - kids0, time.monotonic() - wall0]
        self.spans[item.nodeid] = (self.worker, started, time.time())

    def whole(self) -> list[float]:
        """The whole process since the meter started: [own, children]."""
        own, kids = _cpu()
        return [own - self.start[0], kids - self.start[1]]


class CpuReport:
    """Collects what the meters measured (its own, or each xdist worker's) and prints the table."""

    def __init__(self, meter: CpuMeter | None, *, by_file: bool, shape: bool) -> None:
        self.meter = meter
        self.by_file = by_file
        self.shape = shape
        self.tests: dict[str, list[float]] = {}
        self.spans: dict[str, tuple[str, float, float]] = {}
        self.processes: list[list[float]] = []

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker finished: take in its measurements."""
        output = getattr(node, "workeroutput", {})
        self.tests.update(output.get("cpu_tests", {}))
        self.spans.update({k: tuple(v) for k, v in output.get("cpu_spans", {}).items()})
        if "cpu_whole" in output:
            self.processes.append(output["cpu_whole"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print what was asked: CPU per file and the costliest tests, the suite's shape."""
        if self.meter is not None:
            self.tests.update(self.meter.tests)
            self.spans.update(self.meter.spans)
            self.processes.append(self.meter.whole())
        if self.by_file:
            self.print_by_file(terminalreporter)
        if self.shape and self.spans:
            print_shape(terminalreporter.write_line, terminalreporter.section, self.shaped())

    def shaped(self) -> list[tuple[str, str, float, float, float]]:
        """Each test as (worker, nodeid, start, end, cpu), in seconds from the first start."""
        t0 = min(start for _, start, _ in self.spans.values())
        return [
            (worker, nodeid, start - t0, end - t0, sum(self.tests[nodeid][:2]))
            for nodeid, (worker, start, end) in self.spans.items()
        ]

    def print_by_file(self, terminalreporter: Any) -> None:
        """CPU per file and the costliest tests."""
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


def print_shape(
    write: Callable[[str], None],
    section: Callable[[str], None],
    tests: list[tuple[str, str, float, float, float]],
) -> None:
    """The run over time: per ``SHAPE_STEP_S`` seconds, the cores the tests' CPU kept busy (a
    test's CPU spread evenly over its wall time) and the workers in a test; each worker's end;
    the last tests to end."""
    end = max(t[3] for t in tests)
    steps = int(end // SHAPE_STEP_S) + 1
    cpu, inside = [0.0] * steps, [0.0] * steps
    for _, _, start, stop, used in tests:
        length = max(stop - start, 1e-9)
        for step in range(int(start // SHAPE_STEP_S), int(stop // SHAPE_STEP_S) + 1):
            overlap = min(stop, (step + 1) * SHAPE_STEP_S) - max(start, step * SHAPE_STEP_S)
            if overlap > 0:
                cpu[step] += used * overlap / length
                inside[step] += overlap
    section("the suite's shape (cores = the tests' CPU seconds per second)")
    write(f"{'from s':>6} {'cores':>5} {'workers in a test':>17}")
    for step in range(steps):
        cores, workers = cpu[step] / SHAPE_STEP_S, inside[step] / SHAPE_STEP_S
        write(f"{step * SHAPE_STEP_S:6d} {cores:5.2f} {workers:17.2f}  {'#' * round(cores * 20)}")
    total = sum(t[4] for t in tests)
    write(f"tests' CPU {total:.1f} s over {end:.1f} s: {total / end:.2f} cores busy on average")
    for worker in sorted({t[0] for t in tests}):
        mine = [t for t in tests if t[0] == worker]
        write(f"  {worker}: {len(mine)} tests, the last ended at {max(t[3] for t in mine):.1f} s")
    write(f"the last {SHAPE_TAIL} tests to end (worker, start-end s, cpu s):")
    for worker, nodeid, start, stop, used in sorted(tests, key=lambda t: t[3])[-SHAPE_TAIL:]:
        write(f"  {worker} {start:6.1f}-{stop:6.1f} {used:5.2f}  {nodeid}")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cpu-by-file``: print where the CPU went; ``--suite-shape``: and when."""
    parser.addoption(
        "--cpu-by-file",
        action="store_true",
        help="after the run, print the CPU seconds each test file cost (with its children)",
    )
    parser.addoption(
        "--suite-shape",
        action="store_true",
        help="after the run, print the cores the tests kept busy over time and the last tests",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Start measuring (in a worker, or in a run without xdist) and, in the controlling process,
    register the report."""
    by_file, shape = config.getoption("cpu_by_file"), config.getoption("suite_shape")
    if not (by_file or shape):
        return
    is_worker = hasattr(config, "workerinput")
    runs_tests = is_worker or not getattr(config.option, "numprocesses", None)
    worker = config.workerinput["workerid"] if is_worker else "main"  # type: ignore[attr-defined]
    meter = CpuMeter(worker) if runs_tests else None
    if meter is not None:
        config.pluginmanager.register(meter, "cpu-meter")
    if is_worker:
        config.pluginmanager.register(_WorkerOutput(meter), "cpu-meter-output")
    else:
        report = CpuReport(meter, by_file=by_file, shape=shape)
        config.pluginmanager.register(report, "cpu-report")


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
            output["cpu_spans"] = self.meter.spans
            output["cpu_whole"] = self.meter.whole()
