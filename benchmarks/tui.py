"""TUI benchmark (SPEC 12, 13): keys during an output flood, agent death → recovery screen, idle cost.

Parts 1 and 2 drive the real :class:`~paella_tui.app.PaellaApp` headlessly
(``app.run_test(size=(120, 36))``, notifications on) over a real run of a temporary git
repository: the real ``RunLoop`` in the App's worker, a real agent process under a pty, a contract
of two tiny gates with ``settle = "0.5s"``. Part 3 runs the real console program in a terminal.
Each part runs in a child process of its own, so its RSS is the App's alone.

1. **keys during a flood.** The agent first waits (idle), then prints 1,000,000 deterministic lines
   (100,000,000 bytes) as fast as it can, then the sha256 of what it wrote. Keys are sent the way
   Textual's input thread sends them (``driver.send_message`` from another thread), one at a
   time, with a spread of pauses between them: ``f`` (timed until the agent-log's new title is
   painted), ``?`` (until the help screen is painted) and ``escape`` (until the main screen is
   painted again). Idle agent first (the baseline), then during the flood, side by side. Also the
   App process's peak RSS (``VmHWM``), agent.log byte-exact, and the event loop's lateness.
2. **agent death → recovery screen.** An agent writes ``time.time()`` to a file just before
   ``os._exit(1)``; timed until the ``RecoveryScreen`` is painted. A fresh run and App each
   round; two cases interleaved: gates cached at the time of death (the agent changed nothing),
   and a gate that takes 2 s on the final tree (the agent changed a file just before dying).
3. **idle in a terminal.** ``python -m paella_tui run`` on a pseudo-terminal of its own (120x36,
   ``TERM=xterm-256color``; a thread drains the master side as a terminal would), the agent
   ``sleep 3600``. After a warm-up (70 s: in the first minute the gates' ages change every
   second), the paella process alone is sampled for 60 s: CPU (psutil ``cpu_times`` over the
   window: the verdict; per-second samples; per thread), RSS, the bytes it wrote to the terminal.
   Side by side, sampled at the same time: a minimal Textual App showing a static text, with the
   same imports, on a terminal of its own (Textual's floor). Then ``q``, ``y``, as a person quits.

"Painted" means Textual's ``App._display`` was handed the screen's update and it was rendered
into the bytes a terminal would get: the benchmark wraps ``_display`` on the App instance (in the
child only; headless Textual skips that rendering, so the wrapper does it) and looks for the
effect in the text. Nothing in ``paella_tui/``, ``widgets/`` or ``supervisor/`` is changed.

It prints the machine, a Markdown table (measure | p50 | p95 | max | target | verdict; verdicts
on the p95, RSS on the peak) and says which SPEC 13 target was missed. It exits 0 once it has
measured: it is a report, not a test. ``--profile DIR`` runs each child under ``py-spy record``
(when py-spy is installed) and prints where the App's thread spent its time.

Usage::

    python benchmarks/tui.py [--quick] [--only keys|death|idle] [--lines 1000000]
                             [--idle-warmup 70] [--idle-window 60] [--keep DIR] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil

# Run as a script (``python benchmarks/tui.py``, as its children are), Python puts only this
# folder on sys.path, and the editable install maps only paella_tui: add the repository root.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import (
    AGENT_PRELUDE,
    clean_env,
    commit_workspace,
    log,
    new_repo,
    work_folder,
)
from benchmarks.machine import cores_line, nproc
from benchmarks.probes import (
    children_cpu,
    lateness_monitor,
    process_cpu,
    sha256_file,
    thread_schedstat,
    vm_status,
)
from benchmarks.stats import ms, p95

SIZE = (120, 36)
SETTLE = "0.5s"
KEYS_TARGET_S = 0.200
FLOOD_RSS_TARGET_MB = 200.0
DEATH_TARGET_S = 0.250
SLOW_GATE_S = 2.0
KEY_TIMEOUT_S = 10.0
MB = 1024 * 1024
CACHED = "gates cached at death"
SLOW = "a gate takes 2 s on the final tree"
PARTS = ("keys", "death", "idle")
IDLE_CPU_TARGET = 0.5
"""% of one core, over the whole window (psutil): issue 17 (SPEC 13 said 1 %)."""
IDLE_RATIO_TARGET = 4.0
"""paella's idle CPU against the bare Textual App's, in the same kind of pane (issue 17)."""
IDLE_RSS_TARGET_MB = 120.0
IDLE_AGENT = ["sleep", "3600"]
TERM = "xterm-256color"
FIRST_MINUTE_S = 60.0
"""While the gates ran less than a minute ago, their ages ("ran 5s ago") change every second."""
TMUX_VARS = ("TMUX", "TMUX_PANE")
"""Left out of the children's environment: inside tmux, paella's alerts also run
``tmux display-message`` and wrap their escape sequences for tmux, which the run under test
must not do."""

# The scripted agent: harness.AGENT_PRELUDE (``stamp``, ``flood``, ...), then its modes:
#   flood GO N DIR          for k = 1, 2, ...: wait until GO-k exists (exit 0 once GO-stop does);
#                           write DIR/flood-start-k, then N lines to stdout, then DIR/flood-k.json
#                           (sha256 and bytes of everything written so far, start and end times)
#   exit GO STAMP CODE [TOUCH]  wait until GO exists, optionally write TOUCH, write time.time()
#                           to STAMP, os._exit(CODE)
AGENT = (
    AGENT_PRELUDE
    + r"""
def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.02)

mode = sys.argv[1]
if mode == "flood":
    go, n, folder = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    digest, size, k = hashlib.sha256(), 0, 0
    while True:
        k += 1
        while not os.path.exists(f"{go}-{k}"):
            if os.path.exists(f"{go}-stop"):
                sys.exit(0)
            time.sleep(0.02)
        started = time.time()
        stamp(os.path.join(folder, f"flood-start-{k}"))
        size += flood(n, digest)
        record_flood(os.path.join(folder, f"flood-{k}.json"), digest, size, started)
elif mode == "exit":
    go, out, code = sys.argv[2], sys.argv[3], int(sys.argv[4])
    wait_for(go)
    if len(sys.argv) > 5:
        with open(sys.argv[5], "w") as handle:
            handle.write("work %d\n" % time.time_ns())
    stamp(out)
    os._exit(code)
"""
)


# ----------------------------------------------------------------------------------------------
# Small helpers


def missing(path: Path) -> bool:
    """Whether ``path`` does not exist (yet)."""
    return not path.exists()


def make_workspace(root: Path, name: str, *, agent: list[str], gate_b: str = "true") -> Path:
    """A committed git repository of 200 small files with a paella.toml: two tiny gates."""
    repo = root / name
    new_repo(repo)
    for i in range(200):
        (repo / "src" / f"mod_{i:03d}.py").write_text(f'"""Module {i}."""\n\nVALUE = {i}\n')
    contract: dict[str, Any] = {
        "run": {"name": name, "prompt": "benchmark", "agent": agent, "stall_after": "2h"},
        "watch": {"settle": SETTLE},
        "gate": [
            {"name": "a", "cmd": ["sh", "-c", "test -d src"], "timeout": "1m"},
            {"name": "b", "cmd": ["sh", "-c", gate_b], "timeout": "1m"},
        ],
        "episode": [{"name": "bench", "gates": ["a", "b"]}],
    }
    commit_workspace(repo, contract)
    return repo


# ----------------------------------------------------------------------------------------------
# In the child: the App, a paint probe, keys sent from another thread

_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-Za-z])")


@dataclass
class Waiter:
    """Someone waiting for a paint that satisfies ``check(screen, text)``."""

    check: Callable[[Any, str], bool]
    done: threading.Event
    at: float = 0.0
    """``time.time()`` of the paint that satisfied it."""


class PaintProbe:
    """Wraps ``App._display`` on one App instance: wakes the waiters a paint satisfies.

    Headless Textual computes each screen update but skips turning it into terminal bytes; the
    probe does that (``render_segments``), as a real terminal's App would, and searches the text.
    """

    def __init__(self, app: Any) -> None:
        from textual._compositor import CompositorUpdate

        self.app = app
        self._update_type = CompositorUpdate
        self._original = app._display
        self._lock = threading.Lock()
        self._waiters: list[Waiter] = []
        app._display = self._display

    def _display(self, screen: Any, renderable: Any) -> None:
        self._original(screen, renderable)
        if renderable is None or self.app._batch_count:
            return
        if isinstance(renderable, self._update_type):
            raw = renderable.render_segments(self.app.console)
        else:
            raw = ""
        now = time.time()
        with self._lock:
            waiters = list(self._waiters)
        if not waiters:
            return
        text = _ESCAPES.sub("", raw)
        for waiter in waiters:
            if waiter.check(screen, text):
                waiter.at = now
                with self._lock:
                    self._waiters.remove(waiter)
                waiter.done.set()

    def expect(self, check: Callable[[Any, str], bool]) -> Waiter:
        """Register a waiter (before the action that should cause the paint)."""
        waiter = Waiter(check, threading.Event())
        with self._lock:
            self._waiters.append(waiter)
        return waiter

    def forget(self, waiter: Waiter) -> None:
        """Drop a waiter that timed out."""
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)


class EventTimes:
    """Wraps the App's ``feed`` (the run loop's consumer): when each event reached the App."""

    def __init__(self, app: Any) -> None:
        self.events: list[tuple[float, str]] = []
        original = app.feed

        def feed(event: Any, state: Any = None) -> None:
            self.events.append((time.time(), type(event).__name__))
            original(event, state)

        app.feed = feed

    def first(self, kind: str, after: float = 0.0) -> float | None:
        """When the first event of ``kind`` reached the App after ``after``, or None."""
        return next((t for t, k in self.events if k == kind and t >= after), None)


def key_event(app: Any, key: str) -> Any:
    """The Key event Textual's driver would send for ``key``."""
    from textual import events

    character = {"question_mark": "?", "escape": "\x1b"}.get(key, key)
    event = events.Key(key, character)
    event.set_sender(app)
    return event


def paint_check(app: Any, agent_log: Any, key: str) -> Callable[[Any, str], bool]:
    """What a paint must show for ``key`` to have taken effect (judged on the loop's thread)."""
    from paella_tui.help_screen import MAIN_KEYS, HelpScreen
    from paella_tui.main_screen import MainScreen

    if key == "f":
        want = not agent_log.follow

        def followed(screen: Any, text: str) -> bool:
            title = str(agent_log.border_title or "")
            return (
                isinstance(screen, MainScreen)
                and agent_log.follow == want
                and bool(title)
                and title in text
            )

        return followed
    if key == "question_mark":
        marker = MAIN_KEYS[0][1][:30]  # the help's first line, as drawn
        return lambda screen, text: isinstance(screen, HelpScreen) and marker in text
    return lambda screen, _text: isinstance(screen, MainScreen) and app.screen is screen


def send_keys(
    app: Any,
    probe: PaintProbe,
    agent_log: Any,
    plan: list[tuple[str, float]],
    active: Callable[[], bool],
) -> list[dict[str, Any]]:
    """In a thread, as Textual's input thread would: each key after its pause, then wait for its
    effect to be painted. Stops early once ``active()`` is false. Returns one record per key."""
    records: list[dict[str, Any]] = []
    for key, pause in plan:
        time.sleep(pause)
        if not active():
            break
        check = paint_check(app, agent_log, key)
        waiter = probe.expect(check)
        pressed = time.time()
        app._driver.send_message(key_event(app, key))
        ok = waiter.done.wait(KEY_TIMEOUT_S)
        if not ok:
            probe.forget(waiter)
        records.append(
            {"key": key, "pressed": pressed, "latency": waiter.at - pressed if ok else None}
        )
    return records


def key_plan(n: int, seed: int) -> list[tuple[str, float]]:
    """``n`` presses cycling ``f``, ``?``, ``escape``, each after a pause: none, short or long."""
    rng = random.Random(seed)
    keys = ("f", "question_mark", "escape")
    plan: list[tuple[str, float]] = []
    for i in range(n):
        pause = rng.choice((0.0, rng.uniform(0.01, 0.1), rng.uniform(0.1, 0.35)))
        plan.append((keys[i % 3], pause))
    return plan


def rss_sampler(samples: list[tuple[float, int]], stop: threading.Event) -> None:
    """Every 50 ms, this process's RSS."""
    while not stop.wait(0.05):
        samples.append((time.time(), vm_status("VmRSS")))


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` every 5 ms until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def new_app(workspace: Path) -> tuple[Any, Any]:
    """A fresh run of the workspace's contract and the App over it: (app, run)."""
    from paella_tui.app import PaellaApp
    from paella_tui.supervisor.contract.loader import load_contract
    from paella_tui.supervisor.run.runs import RunStore
    from paella_tui.supervisor.store.workspace import Workspace

    contract = load_contract(workspace / "paella.toml")
    run = RunStore(Workspace.find(workspace)).create(contract, manual=False)
    frozen = run.load_contract()  # what `paella run` hands the App: the run's frozen copy
    app = PaellaApp(run=run, contract=frozen or contract, on_death="ask", stop_grace=2.0)
    return app, run


async def engine_ready(app: Any) -> Any:
    """Until the agent runs, the watches exist and the first evaluation is over; returns the
    main screen's AgentLog (found here, on the event loop's thread)."""
    await wait_until(
        lambda: app.run_loop is not None and app.run_loop.agent is not None, "the agent"
    )
    await app.run_loop.watcher.wait_ready()
    await app.run_loop.evaluator.idle()
    await asyncio.sleep(0.5)  # the board drawn, the first stats shown
    from paella_tui.widgets.agent_log import AgentLog

    return app.main.query_one(AgentLog)


async def quit_app(app: Any) -> None:
    """``h`` on a recovery screen (write the handoff and stop), then ``q``, as a person would."""
    from paella_tui.recovery_screen import RecoveryScreen

    if isinstance(app.screen, RecoveryScreen):
        app._driver.send_message(key_event(app, "h"))
        await wait_until(lambda: not app.engine_live, "the run loop to stop", 30)
    app._driver.send_message(key_event(app, "q"))
    with contextlib.suppress(TimeoutError):
        await wait_until(lambda: not app.is_running, "the App to exit", 10)
    if app.is_running:
        app.exit()


async def child_keys(
    workspace: Path, stamps: Path, n_keys: int, max_floods: int, out: Path
) -> None:
    """Part 1: keys with an idle agent, then during floods (a new one until ``n_keys`` were sent
    during floods, at most ``max_floods``)."""
    app, run = new_app(workspace)
    events = EventTimes(app)
    lateness: list[tuple[float, float]] = []
    rss: list[tuple[float, int]] = []
    stop_rss = threading.Event()
    sampler = threading.Thread(target=rss_sampler, args=(rss, stop_rss), daemon=True)
    sampler.start()
    result: dict[str, Any] = {"log": str(run.dir / "agent.log"), "floods": []}
    go = stamps / "go"
    flood: list[dict[str, Any]] = []
    try:
        async with app.run_test(size=SIZE, notifications=True):
            probe = PaintProbe(app)
            stop = asyncio.Event()
            monitor = asyncio.create_task(lateness_monitor(lateness, stop))
            agent_log = await engine_ready(app)
            idle = await asyncio.to_thread(
                send_keys, app, probe, agent_log, key_plan(n_keys, 1), lambda: True
            )
            await asyncio.sleep(0.3)
            result["rss_before_flood"] = vm_status("VmRSS")
            plan = key_plan(n_keys, 2)
            for k in range(1, max_floods + 1):
                if len(flood) >= n_keys:
                    break
                done = stamps / f"flood-{k}.json"
                Path(f"{go}-{k}").touch()
                await wait_until((stamps / f"flood-start-{k}").exists, "a flood")
                flood += await asyncio.to_thread(
                    send_keys, app, probe, agent_log, plan[len(flood) :], partial(missing, done)
                )
                await wait_until(done.exists, "the flood's end", 300)
                result["floods"].append(json.loads(done.read_text()))
            Path(f"{go}-stop").touch()
            await wait_until(lambda: events.first("AgentExited") is not None, "the exit", 60)
            await wait_until(lambda: not app.engine_live, "the run to end", 60)
            stop.set()
            await monitor
            result["board_state"] = app.board.state
            await quit_app(app)
    finally:
        await app.settle_engine("benchmark ended")
        stop_rss.set()
        sampler.join()
    result |= {
        "idle": idle,
        "flood": flood,
        "lateness": lateness,
        "rss": rss,
        "hwm": vm_status("VmHWM"),
    }
    out.write_text(json.dumps(result))


async def death_round(workspace: Path, root: Path, label: str) -> dict[str, Any]:
    """Part 2, one round: a fresh run and App; the agent dies; until the recovery screen shows."""
    from paella_tui.recovery_screen import RecoveryScreen, recovery_title

    app, run = new_app(workspace)
    events = EventTimes(app)
    marks: dict[str, float] = {}
    original_push = app.push_screen
    original_css = app._load_screen_css

    def push_screen(screen: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(screen, RecoveryScreen):
            marks.setdefault("pushed", time.time())
        return original_push(screen, *args, **kwargs)

    def load_screen_css(screen: Any) -> None:
        started = time.time()
        original_css(screen)
        if isinstance(screen, RecoveryScreen):
            marks.setdefault("css", time.time())
            marks.setdefault("css_took", time.time() - started)

    app.push_screen = push_screen
    app._load_screen_css = load_screen_css
    record: dict[str, Any] = {"label": label}
    try:
        async with app.run_test(size=SIZE, notifications=True):
            probe = PaintProbe(app)
            waiter = probe.expect(lambda screen, _text: isinstance(screen, RecoveryScreen))
            titled: dict[str, bool] = {}

            def title_check(screen: Any, text: str) -> bool:
                if not isinstance(screen, RecoveryScreen):
                    return False
                titled["first"] = recovery_title(screen.facts) in text
                return True

            probe.expect(title_check)
            await engine_ready(app)
            (root / f"go-{run.run_id}").touch()
            await wait_until(waiter.done.is_set, "the recovery screen", 30)
            died = float((root / f"death-{run.run_id}.stamp").read_text())
            screen = app.screen
            facts = screen.facts if isinstance(screen, RecoveryScreen) else None
            record |= {
                "painted": waiter.at - died,
                "gates_final": facts.gates_final if facts else None,
                "title_in_first_paint": titled.get("first", False),
                "css_took": marks.get("css_took", 0.0),
            }
            for key in ("pushed", "css"):
                if key in marks:
                    record[key] = marks[key] - died
            for kind in (
                "AgentExited",
                "EvaluationStarted",
                "EvaluationFinished",
                "RecoveryNeeded",
            ):
                at = events.first(kind, after=died)
                if at is not None and at <= waiter.at:
                    record[kind] = at - died
            await asyncio.sleep(0.2)
            await quit_app(app)
    finally:
        await app.settle_engine("benchmark ended")
    return record


async def child_death(cached: Path, slow: Path, root: Path, n: int, out: Path) -> None:
    """Part 2: ``n`` rounds of each case, interleaved (the order alternates each round)."""
    rounds: list[dict[str, Any]] = []
    cases = [(cached, CACHED), (slow, SLOW)]
    for r in range(n):
        for workspace, label in cases if r % 2 == 0 else cases[::-1]:
            rounds.append(await death_round(workspace, root, label))
            (workspace / "src" / "work.txt").unlink(missing_ok=True)
            log(f"  {label}: {ms(rounds[-1]['painted'])}")
    out.write_text(json.dumps(rounds))


def child_idle_floor() -> None:
    """Part 3's baseline, on its terminal: paella's imports, then a Textual App doing nothing."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    import paella_tui.app  # noqa: F401  (what `paella run` loads, so both start from the same)

    class Floor(App[None]):
        """An App showing a static text, and nothing else."""

        def compose(self) -> ComposeResult:
            """The text."""
            yield Static("An App doing nothing: Textual's own floor.")

    Floor().run()


def child_main(args: argparse.Namespace) -> int:
    """Run one child part (``--child``)."""
    os.environ.pop("PAELLA_STATE_DIR", None)
    root = args.root
    if args.child == "idle-floor":
        child_idle_floor()
    elif args.child == "keys":
        asyncio.run(
            child_keys(root / "keys", root / "keys-stamps", args.n, args.floods, Path(args.out))
        )
    elif args.child == "death":
        asyncio.run(
            child_death(root / "death-cached", root / "death-slow", root, args.n, Path(args.out))
        )
    return 0


# ----------------------------------------------------------------------------------------------
# In the parent: workspaces, children, the report


def spawn_child(
    part: str, root: Path, n: int, profile: Path | None, floods: int = 0
) -> dict[str, Any] | list[Any]:
    """Run this script as a child for one part; return what it wrote."""
    out = root / f"{part}.json"
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        part,
        "--root",
        str(root),
        "--n",
        str(n),
        "--out",
        str(out),
        "--floods",
        str(floods),
    ]
    if profile is not None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        argv = [spy, "record", "-r", "250", "-f", "raw", "-o", str(profile / f"{part}.txt"),
                "--", *argv]  # fmt: skip
    subprocess.run(argv, env=clean_env(drop=TMUX_VARS), check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] | list[Any] = json.loads(out.read_text())
    return result


@dataclass
class Row:
    """One line of the results table."""

    measure: str
    p50: str
    p95: str = ""
    max: str = ""
    target: str = ""
    ok: bool | None = None
    """PASS, FAIL, or None for a line with no target."""
    name: str = ""
    """The measure in a few words, for the line that names what was missed."""


def timing_row(
    label: str,
    values: list[float | None],
    target: float | None,
    text: str,
    *,
    heading: str = "",
    detail: str = "",
) -> Row:
    """A row for latencies (verdict on the p95); an effect never painted counts as infinite."""
    seen = [v for v in values if v is not None]
    lost = len(values) - len(seen)
    note = f", {lost} never painted within {KEY_TIMEOUT_S:g} s" if lost else ""
    measure = f"{heading}{label} ({detail}n={len(values)}{note})"
    if not seen:
        return Row(measure, "—", "—", "—", text, False, label)
    padded = seen + [float("inf")] * lost
    worst = p95(padded)
    return Row(
        measure,
        ms(statistics.median(padded)),
        ms(worst) if worst != float("inf") else "∞",
        ms(max(padded)) if not lost else "∞",
        text,
        None if target is None else worst <= target,
        label,
    )


def keys_rows(result: dict[str, Any], flood_info: dict[str, Any]) -> list[Row]:
    """The rows of part 1: each measure with an idle agent (the baseline), then in the flood."""
    phases = (("idle", "idle agent (baseline)"), ("flood", "during the flood"))
    rows: list[Row] = []
    for key, name in (
        ("f", "`f` → the log's new title painted"),
        ("question_mark", "`?` → the help screen painted"),
        ("escape", "`escape` → the main screen painted again"),
        ("", "every key"),
    ):
        for phase, when in phases:
            values = [r["latency"] for r in result[phase] if not key or r["key"] == key]
            counts = not key and phase == "flood"
            rows.append(
                timing_row(
                    f"{when}: {name}",
                    values,
                    KEYS_TARGET_S if counts else None,
                    "p95 ≤ 200 ms" if counts else "",
                    heading="**1. keys, press → painted.** " if not rows else "",
                )
            )
    for phase, when in phases:
        late = [x for t, x in result["lateness"] if phase_window(result, phase, t)]
        if late:
            rows.append(
                Row(
                    f"{when}: event-loop lateness of a 10 ms sleep (n={len(late)})",
                    ms(statistics.median(late)),
                    ms(p95(late)),
                    ms(max(late)),
                )
            )
    walls = flood_info["walls"]
    rows.append(
        Row(
            f"flood: {flood_info['lines']:,} lines written and read by the App (n={len(walls)} "
            f"floods, {flood_info['keys_in_flood']} keys sent during them; the reader sets the "
            "agent's pace)",
            f"{statistics.median(walls):.2f} s",
            "",
            f"{max(walls):.2f} s",
        )
    )
    rows.append(
        Row(
            f"flood: App process peak RSS (VmHWM; {result['rss_before_flood'] / MB:.1f} MB "
            "before the flood)",
            f"{result['hwm'] / MB:.1f} MB",
            "",
            f"{flood_info['rss_peak_flood'] / MB:.1f} MB (sampled)",
            "≤ 200 MB",
            result["hwm"] <= FLOOD_RSS_TARGET_MB * MB,
            "the App's peak RSS",
        )
    )
    rows.append(
        Row(
            f"flood: agent.log byte-exact ({flood_info['log_bytes']:,} bytes)",
            "yes" if flood_info["exact"] else "**no**",
            "",
            "",
            "byte-exact",
            flood_info["exact"],
            "agent.log byte-exact",
        )
    )
    return rows


def phase_window(result: dict[str, Any], phase: str, t: float) -> bool:
    """Whether time ``t`` falls while the keys of ``phase`` were sent (the floods, for "flood")."""
    if phase == "flood":
        return any(a <= t <= b for a, b in result["flood_windows"])
    records = result[phase]
    return bool(records) and records[0]["pressed"] - 0.2 <= t <= records[-1]["pressed"] + 0.5


def death_rows(rounds: list[dict[str, Any]]) -> list[Row]:
    """The rows of part 2."""
    rows: list[Row] = []
    for label in (CACHED, SLOW):
        mine = [r for r in rounds if r["label"] == label]
        if not mine:
            continue
        finals = Counter(str(r["gates_final"]) for r in mine)
        titled = sum(1 for r in mine if r["title_in_first_paint"])
        rows.append(
            timing_row(
                f"{label}: RecoveryScreen painted",
                [r["painted"] for r in mine],
                DEATH_TARGET_S,
                "≤ 250 ms",
                heading="**2. agent death → recovery screen.** " if label == CACHED else "",
                detail="`gates_final` "
                + ", ".join(f"{k} ×{v}" for k, v in sorted(finals.items()))
                + f"; the title in its first paint {titled}/{len(mine)}; ",
            )
        )
        rows.append(
            timing_row(
                f"{label}, the engine's share: exit → `RecoveryNeeded` reached the App",
                [r["RecoveryNeeded"] for r in mine if "RecoveryNeeded" in r],
                None,
                "",
            )
        )
        rows.append(
            timing_row(
                f"{label}, the TUI's share: `RecoveryNeeded` reached the App → painted",
                [r["painted"] - r["RecoveryNeeded"] for r in mine if "RecoveryNeeded" in r],
                None,
                "",
            )
        )
    return rows


def death_timeline(rounds: list[dict[str, Any]]) -> list[str]:
    """When each step happened after the exit (median ms; a blank: not before the paint)."""
    steps = (
        ("AgentExited", "`AgentExited` reached the App"),
        ("EvaluationStarted", "`EvaluationStarted` (the final tree's snapshot taken)"),
        ("EvaluationFinished", "`EvaluationFinished` (the final tree's gates judged)"),
        ("RecoveryNeeded", "`RecoveryNeeded` reached the App (the facts)"),
        ("pushed", "`push_screen(RecoveryScreen)` called"),
        ("css", "`screens.tcss` parsed and every node restyled (`App._load_screen_css`)"),
        ("painted", "RecoveryScreen painted"),
    )
    lines = [
        "After the agent's exit: when each step happened (median ms after the exit; blank: not "
        "before the paint):",
        "",
        f"| step | {CACHED} | {SLOW} |",
        "|---|---:|---:|",
    ]
    for key, name in steps:
        cells = []
        for label in (CACHED, SLOW):
            values = [r[key] for r in rounds if r["label"] == label and key in r]
            cells.append(f"{statistics.median(values) * 1000:,.1f}" if values else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    took = [r["css_took"] for r in rounds if r.get("css_took")]
    if took:
        lines += [
            "",
            f"The first push of a screen with `CSS_PATH` in an App parses `screens.tcss` and "
            f"restyles every node: {ms(statistics.median(took))} median, {ms(max(took))} max "
            "here (every round is a new App, as a session's first death is).",
        ]
    return lines


# ----------------------------------------------------------------------------------------------
# Part 3, in the parent: the console program in a terminal, sampled from outside

RECENT_BYTES = 256 * 1024


def _take_terminal() -> None:
    """In the child, after ``setsid``: its pseudo-terminal (stdin) becomes its controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TerminalChild:
    """A program on a pseudo-terminal of its own (``SIZE``, its controlling terminal, a session
    of its own), and a thread that drains the master side as a terminal would, counting bytes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                preexec_fn=_take_terminal,  # no thread of ours runs yet (see start_draining)
            )
        finally:
            os.close(slave)
        self.master = master
        self.received = 0
        """Bytes the program wrote to its terminal so far."""
        self._recent = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="terminal-drain", daemon=True)

    def start_draining(self) -> None:
        """Start reading the master side (after every child was forked)."""
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the program and everything holding its terminal ended
                return
            if not chunk:
                return
            with self._lock:
                self.received += len(chunk)
                self._recent += chunk
                del self._recent[:-RECENT_BYTES]

    def send(self, data: bytes) -> None:
        """Type ``data`` into the terminal."""
        os.write(self.master, data)

    def mark(self) -> None:
        """Forget what was drawn so far: :meth:`shows` looks only at what comes next."""
        with self._lock:
            self._recent.clear()

    def text(self) -> str:
        """What was drawn since the mark (the last 256 KiB), without escape sequences."""
        with self._lock:
            raw = bytes(self._recent)
        return _ESCAPES.sub("", raw.decode("utf-8", "replace"))

    def shows(self, needle: str) -> bool:
        """Whether ``needle`` was drawn since the mark."""
        return needle in self.text()

    def close(self) -> None:
        """Once the program ended: the drain thread ends (EIO); close the master side."""
        self._thread.join(5)
        os.close(self.master)


def poll_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every 50 ms for up to ``timeout`` seconds; whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def thread_ticks(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of ``pid``: its ``comm`` and utime + stime (``/proc/<pid>/task/*/stat``,
    clock ticks, in seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[str, float]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                comm = text[text.index("(") + 1 : text.rindex(")")]
                fields = text[text.rindex(")") + 2 :].split()  # from field 3, the state
                found[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tick)
    return found


def tree_cpu(procs: Sequence[psutil.Process]) -> float:
    """User + system CPU seconds of the processes still alive among ``procs``."""
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += process_cpu(proc)
    return total


def python_thread_names(pid: int) -> dict[int, str]:
    """Python's names for the threads of ``pid``, by native id, from ``py-spy dump`` (which pauses
    the process for a moment); empty without py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return {}
    try:
        out = subprocess.run(
            [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {int(m[1]): m[2] for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}


@dataclass
class ThreadCpu:
    """One thread's CPU over the window."""

    tid: int
    name: str
    stat: float
    """utime + stime, seconds (10 ms ticks)."""
    schedstat: float
    """seconds (ns)."""


@dataclass
class IdleResult:
    """What sampling one program on its terminal gave over the window."""

    pid: int
    window: float
    cpu_percent: float
    """psutil ``cpu_times`` (user + system, the process itself) over the window / the window, in %
    of one core: the verdict."""
    schedstat_percent: float
    """The same from the threads' schedstat (ns), as a cross-check."""
    per_second: list[float]
    """CPU % of each 1 s interval (schedstat)."""
    rss: list[int]
    hwm: int
    bytes_per_second: list[float]
    """Bytes written to the terminal in each 1 s interval, per second."""
    bytes_total: int
    threads: list[ThreadCpu] = field(default_factory=list)
    gone_threads: float = 0.0
    """CPU seconds of threads that ended during the window (in the total, not in ``threads``)."""
    children_cpu: float = 0.0
    """CPU seconds of child processes reaped during the window (gates, git)."""
    agent_cpu: float | None = None
    """CPU seconds of the agent's tree over the window (not counted in ``cpu_percent``)."""


def sample_idle(
    kids: dict[str, TerminalChild],
    agents: list[psutil.Process],
    window: float,
    other_agents: dict[str, list[psutil.Process]] | None = None,
) -> dict[str, IdleResult]:
    """Sample every child at the same time for ``window`` seconds (a sample a second);
    ``agents`` are paella's agent tree, ``other_agents`` another child's."""
    trees = {"paella": agents, **(other_agents or {})}
    ps = {name: psutil.Process(kid.proc.pid) for name, kid in kids.items()}
    start_cpu = {n: process_cpu(p) for n, p in ps.items()}
    start_children = {n: children_cpu(p) for n, p in ps.items()}
    start_ticks = {n: thread_ticks(p.pid) for n, p in ps.items()}
    start_sched = {n: thread_schedstat(p.pid) for n, p in ps.items()}
    start_bytes = {n: kid.received for n, kid in kids.items()}
    start_agent = {n: tree_cpu(t) for n, t in trees.items()}
    start_wall = last_wall = time.monotonic()
    last_sched = {n: sum(t.values()) for n, t in start_sched.items()}
    last_bytes = dict(start_bytes)
    per_second: dict[str, list[float]] = {n: [] for n in ps}
    per_bytes: dict[str, list[float]] = {n: [] for n in ps}
    rss: dict[str, list[int]] = {n: [] for n in ps}
    while (now := time.monotonic()) - start_wall < window - 0.01:
        time.sleep(min(1.0, window - (now - start_wall)))
        wall = time.monotonic()
        for name, p in ps.items():
            spent = sum(thread_schedstat(p.pid).values())
            per_second[name].append(max(0.0, spent - last_sched[name]) / (wall - last_wall) * 100)
            last_sched[name] = spent
            got = kids[name].received
            per_bytes[name].append((got - last_bytes[name]) / (wall - last_wall))
            last_bytes[name] = got
            rss[name].append(p.memory_info().rss)
        last_wall = wall
    end_cpu = {n: process_cpu(p) for n, p in ps.items()}
    end_agent = {n: tree_cpu(t) for n, t in trees.items()}
    elapsed = time.monotonic() - start_wall
    results: dict[str, IdleResult] = {}
    for name, p in ps.items():
        ticks, sched = thread_ticks(p.pid), thread_schedstat(p.pid)
        threads = [
            ThreadCpu(
                tid,
                comm,
                spent - start_ticks[name].get(tid, ("", 0.0))[1],
                sched.get(tid, 0.0) - start_sched[name].get(tid, 0.0),
            )
            for tid, (comm, spent) in ticks.items()
        ]
        total = end_cpu[name] - start_cpu[name]
        results[name] = IdleResult(
            pid=p.pid,
            window=elapsed,
            cpu_percent=total / elapsed * 100,
            schedstat_percent=(sum(sched.values()) - sum(start_sched[name].values()))
            / elapsed
            * 100,
            per_second=per_second[name],
            rss=rss[name],
            hwm=vm_status("VmHWM", p.pid),
            bytes_per_second=per_bytes[name],
            bytes_total=kids[name].received - start_bytes[name],
            threads=sorted(threads, key=lambda t: (-t.stat, -t.schedstat)),
            gone_threads=max(0.0, total - sum(t.stat for t in threads)),
            children_cpu=children_cpu(p) - start_children[name],
            agent_cpu=end_agent[name] - start_agent[name] if name in trees else None,
        )
    return results


def wait_for_agent(kid: TerminalChild, timeout: float = 60.0) -> list[psutil.Process]:
    """Until paella runs the agent (``sleep 3600``); the agent's tree. Raises if paella ended."""
    proc = psutil.Process(kid.proc.pid)
    found: list[psutil.Process] = []

    def started() -> bool:
        if kid.proc.poll() is not None:
            return True
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.cmdline() == IDLE_AGENT:
                    found[:] = [child, *child.children(recursive=True)]
                    return True
        return False

    poll_until(started, timeout)
    if not found:
        screen = kid.text()[-2000:]
        raise RuntimeError(f"`paella run` did not start its agent; its terminal showed:\n{screen}")
    return found


def stop_paella(kid: TerminalChild, agents: list[psutil.Process], root: Path) -> str:
    """Quit as a person would (``q``, then ``y`` on the confirmation), else SIGTERM, else kill
    the tree; make sure no ``sleep 3600`` of ours is left. Says how it went."""
    proc = kid.proc
    started = time.monotonic()
    how: list[str] = []
    if proc.poll() is not None:
        how.append(f"it had already ended (status {proc.returncode})")
    else:
        kid.mark()
        kid.send(b"q")
        if poll_until(lambda: kid.shows("Stop and quit") or proc.poll() is not None, 10):
            if proc.poll() is None:
                kid.send(b"y")
            how.append("`q`, then `y` on the confirmation")
        else:
            how.append("`q` (no confirmation was drawn within 10 s)")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(40)
        if proc.poll() is None:
            how.append("SIGTERM")
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(40)
        if proc.poll() is None:
            how.append("then killed with its tree")
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.kill()
            proc.kill()
            proc.wait()
        how.append(f"exit status {proc.returncode} after {time.monotonic() - started:.1f} s")
    _gone, alive = psutil.wait_procs(agents, timeout=10)
    strays = [
        p
        for p in psutil.process_iter(["cmdline", "cwd"])
        if p.info["cmdline"] == IDLE_AGENT
        and f"{p.info['cwd'] or ''}/".startswith(f"{root}/")
        and p not in alive
    ]
    for stray in [*alive, *strays]:
        with contextlib.suppress(psutil.Error):
            stray.kill()
    agent = f"the agent (`{' '.join(IDLE_AGENT)}`, pid {agents[0].pid})" if agents else "the agent"
    if alive or strays:
        left = ", ".join(str(p.pid) for p in [*alive, *strays])
        return "; ".join(how) + f"; **{agent} outlived it** (pid {left}): killed by the benchmark"
    return "; ".join(how) + f"; {agent} ended with it, and no `sleep 3600` of ours is left"


def stop_floor(kid: TerminalChild) -> None:
    """Quit the baseline App (ctrl+q), else SIGTERM, else kill."""
    proc = kid.proc
    for step in (lambda: kid.send(b"\x11"), proc.terminate, proc.kill):
        if proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            step()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def measure_idle(
    root: Path, warmup: float, window: float, before: Path | None = None
) -> tuple[dict[str, IdleResult], str]:
    """Part 3: ``paella run`` and the baseline App, each on a terminal of its own, sampled at
    the same time after the warm-up; then both stopped. With ``before`` (another checkout), a
    third child runs that checkout's ``paella run`` in a workspace of its own alongside.
    Returns the results and how paella stopped."""
    repo = make_workspace(root, "idle", agent=IDLE_AGENT)
    repo_before = make_workspace(root, "idle-before", agent=IDLE_AGENT) if before else None
    env = {
        k: v
        for k, v in clean_env(drop=TMUX_VARS).items()
        if k not in ("COLUMNS", "LINES") and not k.startswith("TEXTUAL")
    } | {"TERM": TERM}
    kids: dict[str, TerminalChild] = {}
    agents: list[psutil.Process] = []
    agents_before: list[psutil.Process] = []
    stopped = "not started"
    try:
        kids["paella"] = TerminalChild([sys.executable, "-m", "paella_tui", "run"], repo, env)
        if before is not None and repo_before is not None:
            kids["before"] = TerminalChild(
                [sys.executable, "-m", "paella_tui", "run"],
                repo_before,
                env | {"PYTHONPATH": str(before)},
            )
        here = str(Path(__file__).resolve())
        kids["floor"] = TerminalChild([sys.executable, here, "--child", "idle-floor"], repo, env)
        for kid in kids.values():
            kid.start_draining()
        paella = psutil.Process(kids["paella"].proc.pid)
        command = paella.cmdline()
        if not paella.name().startswith("python") or command[1:4] != ["-m", "paella_tui", "run"]:
            raise RuntimeError(f"the child is not paella's python process: {command}")
        agents = wait_for_agent(kids["paella"])
        if "before" in kids:
            agents_before = wait_for_agent(kids["before"])
        log(
            f"   paella pid {paella.pid} runs the agent (pid {agents[0].pid}); warm-up {warmup:g} s"
        )
        time.sleep(warmup)
        names = {n: python_thread_names(kid.proc.pid) for n, kid in kids.items()}
        log(f"   sampling both for {window:g} s")
        results = sample_idle(kids, agents, window, {"before": agents_before})
        for name, kid in kids.items():
            names[name] |= python_thread_names(kid.proc.pid)  # threads born in the window
            for thread in results[name].threads:
                if thread.tid in names[name]:
                    thread.name = names[name][thread.tid]
                if thread.tid == kid.proc.pid and thread.name != "MainThread":
                    thread.name += " (main thread)"
    finally:
        if "floor" in kids:
            stop_floor(kids["floor"])
        if "paella" in kids:
            stopped = stop_paella(kids["paella"], agents, repo)
        if "before" in kids and repo_before is not None:
            stopped += "; --before: " + stop_paella(kids["before"], agents_before, repo_before)
        for kid in kids.values():
            kid.close()
    return results, stopped


def percent(value: float) -> str:
    """A CPU share for the tables."""
    return f"{value:.2f} %"


FLOOR_LABEL = "baseline: a Textual App showing a static text, same imports"
BEFORE_LABEL = "`--before`: that checkout's `paella run`, same workspace kind, alongside"
PAELLA_LABEL = "`paella run` (agent `sleep 3600`, two gates, watcher, clock)"


def idle_rows(results: dict[str, IdleResult], warmup: float) -> list[Row]:
    """The rows of part 3: each measure for the baseline, then for paella."""
    floor, paella = results["floor"], results["paella"]
    pairs: tuple[tuple[str, IdleResult], ...] = ((FLOOR_LABEL, floor), (PAELLA_LABEL, paella))
    if "before" in results:
        pairs += ((BEFORE_LABEL, results["before"]),)
    window = paella.window
    heading = (
        f"**3. idle in a terminal ({SIZE[0]}x{SIZE[1]}, `{TERM}`), {window:.0f} s after a "
        f"{warmup:g} s warm-up.** "
    )
    rows: list[Row] = []
    for label, result in pairs:
        counts = result is paella
        rows.append(
            Row(
                f"{'' if rows else heading}{label}: CPU over the whole window, % of one core "
                f"(psutil `cpu_times`, the process alone; schedstat "
                f"{percent(result.schedstat_percent)})",
                percent(result.cpu_percent),
                target=f"≤ {IDLE_CPU_TARGET:g} % (whole window)" if counts else "",
                ok=result.cpu_percent <= IDLE_CPU_TARGET if counts else None,
                name="idle `paella run` CPU",
            )
        )
    # The App doing nothing costs Textual's own floor; a floor of 0 (an idle second in 10 ms
    # ticks) would make any ratio infinite, so the finer schedstat figures are compared.
    for label, result in pairs[1:]:
        counts = result is paella
        ratio = (
            result.schedstat_percent / floor.schedstat_percent if floor.schedstat_percent else 0.0
        )
        rows.append(
            Row(
                f"{label} CPU against the baseline App's, over the whole window (schedstat)",
                f"{ratio:.1f} ×",
                target=f"≤ {IDLE_RATIO_TARGET:g} ×" if counts else "",
                ok=bool(floor.schedstat_percent) and ratio <= IDLE_RATIO_TARGET if counts else None,
                name="idle `paella run` CPU against a bare Textual App" if counts else "",
            )
        )
    for label, result in pairs:
        samples = result.per_second
        rows.append(
            Row(
                f"{label}: CPU of each 1 s interval (schedstat, n={len(samples)})",
                percent(statistics.median(samples)),
                percent(p95(samples)),
                percent(max(samples)),
            )
        )
    for label, result in pairs:
        counts = result is paella
        peak = max(result.rss)
        rows.append(
            Row(
                f"{label}: RSS (1 s samples, n={len(result.rss)}; VmHWM {result.hwm / MB:.1f} MB)",
                f"{statistics.median(result.rss) / MB:.1f} MB",
                "",
                f"{peak / MB:.1f} MB",
                "≤ 120 MB (largest sample)" if counts else "",
                peak <= IDLE_RSS_TARGET_MB * MB if counts else None,
                "idle `paella run` RSS",
            )
        )
    for label, result in pairs:
        samples = result.bytes_per_second
        rows.append(
            Row(
                f"{label}: bytes written to the terminal, per 1 s interval "
                f"({result.bytes_total:,} bytes in the window)",
                f"{statistics.median(samples):,.0f} B/s",
                f"{p95(samples):,.0f} B/s",
                f"{max(samples):,.0f} B/s",
            )
        )
    agent_cpu = paella.agent_cpu or 0.0
    rows.append(
        Row(
            "the agent's tree (`sleep 3600`), not counted in paella's CPU: CPU over the window",
            percent(agent_cpu / window * 100),
        )
    )
    rows.append(
        Row(
            "processes `paella run` started and reaped during the window (gates, git): CPU, "
            "not counted in paella's CPU",
            percent(paella.children_cpu / window * 100),
        )
    )
    return rows


def idle_threads(results: dict[str, IdleResult]) -> list[str]:
    """The per-thread table of part 3."""
    window = results["paella"].window
    lines = [
        f"Idle CPU by thread over the {window:.0f} s window (`/proc/<pid>/task/*/stat`, utime + "
        "stime in 10 ms ticks; schedstat in ns alongside; Python's thread names from "
        "`py-spy dump` where it is installed, else the kernel's `comm`):",
        "",
        "| process | thread (tid) | CPU s (stat) | % of one core | % (schedstat) |",
        "|---|---|---:|---:|---:|",
    ]
    for name, label in (
        ("paella", "`paella run`"),
        ("before", "--before"),
        ("floor", "baseline App"),
    ):
        if name not in results:
            continue
        result = results[name]
        for t in result.threads:
            lines.append(
                f"| {label} | {t.name} ({t.tid}) | {t.stat:.2f} | "
                f"{percent(t.stat / window * 100)} | {percent(t.schedstat / window * 100)} |"
            )
        if result.gone_threads >= 0.005:
            lines.append(
                f"| {label} | the rest: threads that ended during the window, tick rounding | "
                f"{result.gone_threads:.2f} | "
                f"{percent(result.gone_threads / window * 100)} |  |"
            )
    return lines


def render(rows: list[Row]) -> list[str]:
    """The table as Markdown lines."""
    lines = ["| measure | p50 | p95 | max | target | verdict |", "|---|---:|---:|---:|---|---|"]
    for row in rows:
        verdict = "" if row.ok is None else ("PASS" if row.ok else "**FAIL**")
        lines.append(
            f"| {row.measure} | {row.p50} | {row.p95} | {row.max} | {row.target} | {verdict} |"
        )
    return lines


def machine(load_before: tuple[float, float, float]) -> list[str]:
    """The machine, as Markdown bullet lines."""
    import textual

    after = os.getloadavg()
    busy = " (over nproc: other work competed)" if max(load_before[0], after[0]) > nproc() else ""
    return [
        cores_line(),
        f"- python: {platform.python_version()}; textual {textual.__version__}; "
        f"kernel {platform.release()}",
        "- load average (1, 5, 15 min): "
        + " / ".join(f"{x:.2f}" for x in load_before)
        + " before, "
        + " / ".join(f"{x:.2f}" for x in after)
        + f" after{busy}",
    ]


def flood_facts(result: dict[str, Any], lines: int) -> dict[str, Any]:
    """Byte-exactness, the floods' durations under the App, and the RSS sampled during them."""
    floods = result["floods"]
    digest, size = sha256_file(Path(result["log"]))
    last = floods[-1]
    windows = [(f["started"], f["ended"]) for f in floods]
    result["flood_windows"] = windows
    in_flood = [s for t, s in result["rss"] if any(a <= t <= b + 0.2 for a, b in windows)]
    return {
        "exact": digest == last["sha256"] and size == last["bytes"],
        "log_bytes": size,
        "walls": [b - a for a, b in windows],
        "lines": lines,
        "keys_in_flood": len(result["flood"]),
        "rss_peak_flood": max(in_flood, default=0),
    }


# py-spy names a file from the first folder up without an __init__.py: ``benchmarks/tui.py``.
# The benchmark's own frames (this script, its shared modules) hold every sample or measure the
# App from outside: they are left out, like the event loop's dispatch.
_GENERIC_FRAMES = re.compile(
    r"\((?:benchmarks/|<frozen |asyncio/|selectors\.py|textual/(?:_callback|message_pump|timer|_context)\.py)"
)


def profile_summary(path: Path, top: int = 12) -> list[str]:
    """Where the App's thread spent its samples, from py-spy's raw (collapsed) output: the
    functions with the largest inclusive share, paella's own and Textual's (dispatch left out)."""
    if not path.exists():
        return [f"(no profile at {path})"]
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit() or not stack.startswith("<module> (benchmarks/tui.py"):
            continue  # another thread (git and gate workers, watchers, the key sender)
        count = int(count_text)
        total += count
        frames = {re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")}
        for frame in frames:
            if not _GENERIC_FRAMES.search(frame):
                inclusive[frame] += count
    ours = [(f, c) for f, c in inclusive.most_common() if "textual/" not in f][:top]
    theirs = [(f, c) for f, c in inclusive.most_common() if "textual/" in f][:top]
    lines = [
        f"`{path}`: {total} samples of the App's thread (py-spy, 250 Hz); inclusive share:",
        "",
    ]
    for title, items in (("paella and Python", ours), ("Textual", theirs)):
        lines.append(f"- {title}: " + "; ".join(f"{f} {c / max(total, 1):.0%}" for f, c in items))
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="15 keys, 4 death rounds of each case, at most 2 floods (default: 42, 10, 6)",
    )
    parser.add_argument(
        "--only",
        choices=PARTS,
        action="append",
        help="run only this part (repeatable): keys, death or idle (default: all three)",
    )
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines the agent floods")
    parser.add_argument(
        "--idle-warmup",
        type=float,
        metavar="SECONDS",
        help="part 3: wait this long after the agent started before sampling (default 70, "
        "--quick 5)",
    )
    parser.add_argument(
        "--idle-window",
        type=float,
        metavar="SECONDS",
        help="part 3: sample this long (default 60, --quick 10)",
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build in DIR (new) and keep it")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="part 3: also run the `paella run` of the checkout in DIR (PYTHONPATH) alongside, "
        "in a workspace of its own, sampled in the same window",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run the children of parts 1 and 2 under py-spy into DIR (not part 3: it would "
        "count py-spy's pauses)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--floods", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts and print the report (exit 0 either way)."""
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    parts = [part for part in PARTS if part in (args.only or PARTS)]
    n_keys, n_death, floods = (15, 4, 2) if args.quick else (42, 10, 6)
    warmup = args.idle_warmup if args.idle_warmup is not None else (5.0 if args.quick else 70.0)
    window = args.idle_window if args.idle_window is not None else (10.0 if args.quick else 60.0)
    load_before = os.getloadavg()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        root = work_folder(stack, args.keep, "paella-bench-tui-")
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
        agent_path = root / "agent.py"
        agent_path.write_text(AGENT)
        agent = [sys.executable, "-S", str(agent_path)]
        rows: list[Row] = []
        about: list[str] = []
        after: list[str] = []
        if "keys" in parts:
            stamps = root / "keys-stamps"
            stamps.mkdir()
            make_workspace(
                root,
                "keys",
                agent=[*agent, "flood", str(stamps / "go"), str(args.lines), str(stamps)],
            )
            log(f"1. keys: {n_keys} presses idle, then during floods of {args.lines:,} lines")
            keys = spawn_child("keys", root, n_keys, args.profile, floods)
            assert isinstance(keys, dict)
            rows += keys_rows(keys, flood_facts(keys, args.lines))
            about.append(f"run state after the flood: {keys.get('board_state')}")
        if "death" in parts:
            death = [*agent, "exit", f"{root}/go-{{run_id}}", f"{root}/death-{{run_id}}.stamp", "1"]
            make_workspace(root, "death-cached", agent=death)
            make_workspace(
                root,
                "death-slow",
                agent=[*death, str(root / "death-slow" / "src" / "work.txt")],
                gate_b=f"if [ -f src/work.txt ]; then sleep {SLOW_GATE_S:g}; fi",
            )
            log(f"2. death → recovery screen: {n_death} rounds of each case")
            rounds = spawn_child("death", root, n_death, args.profile)
            assert isinstance(rounds, list)
            rows += death_rows(rounds)
            after += ["", *death_timeline(rounds)]
        if "idle" in parts:
            log(
                f"3. idle in a terminal: `paella run` and the baseline, {warmup:g} s + {window:g} s"
            )
            idle, stopped = measure_idle(root, warmup, window, args.before)
            rows += idle_rows(idle, warmup)
            about.append(
                f"idle: `python -m paella_tui run` (pid {idle['paella'].pid}, its python process "
                f"checked with psutil) on a {SIZE[0]}x{SIZE[1]} pseudo-terminal, `TERM={TERM}`, "
                "drained by a thread; stopped with " + stopped
            )
            after += ["", *idle_threads(idle)]
            if warmup < FIRST_MINUTE_S:
                after += [
                    "",
                    f"**These idle numbers include the first-minute clock** (warm-up {warmup:g} s"
                    f"{', --quick' if args.quick else ''}): until the gates ran a minute ago, "
                    'their ages ("ran 5s ago") change every second, so the table is redrawn '
                    "more than it is later. Use the default warm-up (70 s) for the verdict.",
                ]
        lines = [
            f"## TUI benchmark ({time.strftime('%Y-%m-%d %H:%M %Z')})",
            "",
            *machine(load_before),
            f"- parts: {', '.join(parts)}; {'--quick' if args.quick else 'full run'}, "
            f"{time.monotonic() - started:.0f} s",
            *(
                [
                    f"- parts 1 and 2: `run_test(size={SIZE})`, notifications on; contract: two "
                    f"tiny gates, settle {SETTLE}"
                ]
                if {"keys", "death"} & set(parts)
                else []
            ),
            *(f"- {line}" for line in about),
            "",
            *render(rows),
            "",
        ]
        missed = [r.name or r.measure for r in rows if r.ok is False]
        if missed:
            lines.append("**Missed:** " + "; ".join(missed) + ".")
        else:
            lines.append("Every SPEC 13 target measured here is met.")
        lines += after
        if args.profile is not None:
            for part in ("keys", "death"):
                if part in parts:
                    lines += ["", *profile_summary(args.profile / f"{part}.txt")]
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
