"""The housekeeping pace (issue 17, item 5): the base period while something happens, doubling
to a ceiling while all is quiet, back to the base and awake at the first activity.

No timings are asserted: the periods are what the pace decides, and a sleep of a thousand
seconds that a stir ends is awaited with a bound a thousand times shorter.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_repo

from paella_tui.supervisor.agent.agent_process import TREE_REFRESH_QUIET_S, AgentProcess
from paella_tui.supervisor.base.pace import Pace
from paella_tui.supervisor.contract.loader import load_contract
from paella_tui.supervisor.run.attempt_runner import BUSY_CPU_PERCENT, STATS_EVERY_S, STATS_QUIET_S
from paella_tui.supervisor.run.decisions import policy
from paella_tui.supervisor.run.events import AgentStats
from paella_tui.supervisor.run.run_loop import RunLoop
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.workspace import Workspace


async def test_quiet_doubles_the_period_up_to_the_ceiling_and_activity_brings_the_base_back() -> (
    None
):
    pace = Pace(0.001, 0.008, quiet_after=0.0)
    periods = []
    for _ in range(6):
        await pace.sleep()
        periods.append(pace.period)
    assert periods == [0.002, 0.004, 0.008, 0.008, 0.008, 0.008]
    pace.stir()
    assert pace.period == 0.001


async def test_a_busy_loop_keeps_the_base_period() -> None:
    pace = Pace(0.001, 1000.0, quiet_after=1000.0)
    for _ in range(5):
        await pace.sleep()
        assert pace.period == 0.001


async def test_a_long_quiet_sleep_ends_at_the_first_activity() -> None:
    pace = Pace(0.001, 1000.0, quiet_after=1000.0)
    pace.period = 1000.0  # as after a long quiet spell
    sleeper = asyncio.create_task(pace.sleep())
    await asyncio.sleep(0.01)
    assert not sleeper.done()
    asyncio.get_running_loop().call_soon(pace.stir)  # as the output reader's callback does
    await asyncio.wait_for(sleeper, 10)
    # Woken by activity, it is not quiet: the next sleep is short again.
    assert pace.period == 0.001


@pytest.mark.parametrize(("base", "ceiling"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_a_pace_needs_a_positive_base_under_its_ceiling(base: float, ceiling: float) -> None:
    with pytest.raises(ValueError, match="base <= ceiling"):
        Pace(base, ceiling, quiet_after=1.0)


async def test_the_agents_output_brings_its_tree_refresh_back_to_the_base(tmp_path: Path) -> None:
    """A real agent that says nothing until the test writes to its FIFO: its tree's pace backs
    off while it is quiet, and its first output brings the base period back."""
    fifo = tmp_path / "say"
    os.mkfifo(fifo)
    code = f"import time; print(open({str(fifo)!r}).read(), flush=True); time.sleep(60)"
    agent = await AgentProcess.start(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(os.environ),
        tty=False,
        log_path=tmp_path / "agent.log",
    )
    try:
        agent.pace.quiet_after = 0.0  # quiet at once: the test need not wait seconds
        for _ in range(1000):
            if agent.pace.period >= 1.0:
                break
            await asyncio.sleep(0.01)
        assert 1.0 <= agent.pace.period <= TREE_REFRESH_QUIET_S
        agent.pace.quiet_after = 1000.0  # from now on, only activity moves the period
        with fifo.open("w") as writer:
            writer.write("hello")
        for _ in range(1000):
            if "hello" in agent.tail.plain_lines():
                break
            await asyncio.sleep(0.01)
        assert "hello" in agent.tail.plain_lines()
        assert agent.pace.period == agent.pace.base
    finally:
        await agent.stop(1.0)


def test_the_runs_sample_pace_follows_file_changes_and_a_busy_cpu(tmp_path: Path) -> None:
    """The run loop's sample pace (a real loop's attempt runner, not started): a changed file
    or a busy sample brings the base period back; an idle sample leaves a backed-off one."""
    repo = make_repo(tmp_path / "repo")
    subprocess.run(
        [sys.executable, "-m", "paella_tui", "init", "--agent", "true", "--gate", "unit=true"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    run = RunStore(Workspace.find(repo)).create(load_contract(repo / "paella.toml"), manual=False)
    contract = run.load_contract()
    assert contract is not None
    attempts = RunLoop(
        run=run, contract=contract, emit=lambda _e, _s: None, decide=policy("stop")
    ).attempts
    pace = attempts.pace
    assert pace.base == STATS_EVERY_S and pace.ceiling == STATS_QUIET_S

    def sample(cpu: float) -> AgentStats:
        return AgentStats(attempt=1, cpu_percent=cpu, rss_bytes=1, descendants=0, uptime_s=9.0)

    pace.period = pace.ceiling
    attempts.sampled(sample(BUSY_CPU_PERCENT / 2))
    assert pace.period == pace.ceiling
    attempts.sampled(sample(BUSY_CPU_PERCENT))
    assert pace.period == pace.base
    pace.period = pace.ceiling
    attempts.touched()  # the watcher saw a change in the work tree
    assert pace.period == pace.base
