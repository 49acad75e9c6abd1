"""How often an agent's daemons are named by the agent's end, when a gate ends at that moment.

The run loop's race (test_run_loop's leftover test failed now and then under the full suite): an
agent leaves two daemons (one in its session, one in a session of its own, both carrying its
marker) and exits; a gate, started before them, ends at the same moment. Both trees look at
paella's children then. Each round counts whether the agent's ``ExitInfo.leftovers`` names both
daemons, and whether the gate's result claimed any of them. Real processes, the real
``AgentProcess`` and ``run_gate``; nothing is timed.

    python -m benchmarks.orphan_attribution [--rounds 40] [--before DIR]

``--before DIR`` runs the same rounds with another checkout's code (``git worktree add DIR
<commit>``) first, in a process of its own, and prints both rows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

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


async def one_round(folder: Path) -> tuple[bool, bool, int]:
    """(the agent named both daemons, the gate claimed one, how many still run after both)."""
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
    running = sum(_running(pid) for pid in daemons)
    for pid in daemons:  # whatever happened, nothing outlives the round
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return named == daemons, "stopped what it left running" in result.message, running


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def rounds_of(rounds: int) -> tuple[int, int, int]:
    """(rounds whose agent's end missed a daemon, rounds a gate claimed one, daemons left)."""
    missed = claimed = left = 0
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            named, by_gate, running = asyncio.run(one_round(Path(tmp)))
        missed += not named
        claimed += by_gate
        left += running
    return missed, claimed, left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--before", type=Path, help="another checkout, measured first")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:  # a --before run: the numbers only
        print(json.dumps(rounds_of(args.rounds)))
        return
    rows = []
    if args.before is not None:
        before = subprocess.run(
            [sys.executable, __file__, "--rounds", str(args.rounds), "--json"],
            env={**os.environ, "PYTHONPATH": str(args.before.resolve())},
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append((f"before ({args.before})", json.loads(before.stdout.splitlines()[-1])))
    rows.append(("this checkout", list(rounds_of(args.rounds))))
    print(f"{args.rounds} rounds each\n")
    print("| code | agent's end missed a daemon | a gate claimed one | daemons left running |")
    print("|---|---|---|---|")
    for name, (missed, claimed, left) in rows:
        print(f"| {name} | {missed} | {claimed} | {left} |")


if __name__ == "__main__":
    main()
