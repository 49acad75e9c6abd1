"""How often an agent's daemons are named by the agent's end, when a gate ends at that moment.

The run loop's race (test_run_loop's leftover test failed now and then under the full suite): an
agent leaves two daemons (one in its session, one in a session of its own, both carrying its
marker) and exits; a gate, started before them, ends at the same moment. Both trees look at
paella's children then. Each round counts whether the agent's ``ExitInfo.leftovers`` names both
daemons, and whether the gate's result claimed any of them. Real processes, the real
``AgentProcess`` and ``run_gate``; nothing is timed.

    python benchmarks/orphan_attribution.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from paella_tui.supervisor.agent.agent_process import AgentProcess
from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.gates import run_gate

AGENT = """\
import os, subprocess, sys
def daemon(setsid):
    read_fd, write_fd = os.pipe()
    code = "import os, signal, sys, time\\n" + ("os.setsid()\\n" if setsid else "") + (
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\\n"
        "os.write(int(sys.argv[1]), b'x')\\ntime.sleep(300)\\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(write_fd)], pass_fds=[write_fd])
    os.close(write_fd)
    os.read(read_fd, 1)
    return child.pid
pids = [daemon(False), daemon(True)]
print("daemons", *pids, flush=True)
open("go", "w").close()
os._exit(0)
"""
GATE = Gate(
    name="g",
    argv=("sh", "-c", "while [ ! -f go ]; do sleep 0.002; done"),
    cmd="wait for go",
    timeout=60.0,
    retries=0,
    paths=(),
)


async def one_round(folder: Path) -> tuple[bool, bool]:
    """(the agent named both daemons, the gate claimed one)."""
    gate = asyncio.create_task(
        run_gate(GATE, tree="0" * 40, cwd=folder, log_path=folder / "gate.log")
    )
    await asyncio.sleep(0.05)  # the gate runs before the daemons are born
    agent = await AgentProcess.start(
        [sys.executable, "-c", AGENT], cwd=folder, env=None, log_path=folder / "agent.log"
    )
    info = await asyncio.wait_for(agent.wait(), 60)
    result = await asyncio.wait_for(gate, 60)
    line = next(line for line in info.tail if line.startswith("daemons"))
    daemons = {int(pid) for pid in line.split()[1:]}
    named = {p.pid for p in info.leftovers}
    return named == daemons, "stopped what it left running" in result.message


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    missed = claimed = 0
    for n in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            named, by_gate = asyncio.run(one_round(Path(tmp)))
        missed += not named
        claimed += by_gate
        print(f"round {n + 1}: agent named both: {named}; gate claimed some: {by_gate}")
    print("| rounds | agent's end missed a daemon | gate claimed a daemon |")
    print(f"| {rounds} | {missed} | {claimed} |")


if __name__ == "__main__":
    main()
