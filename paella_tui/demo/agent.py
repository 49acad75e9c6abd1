"""The demo's scripted agent: from outside it looks like a coding agent; inside, it follows a script.

``paella demo`` runs it as ``python agent.py --prompt-file FILE`` (``--handoff-file FILE`` on a
resume), in the demo repository. It needs only the standard library and paella never imports
it. What it does depends on how many times it has been launched in this demo:

1. It completes episodes 1 and 2 properly, then "fixes" episode 3 by turning the ledger into a
   list so the export can number its rows, which silently breaks episode 1's invariant (a
   replayed event is recorded twice). It does not re-run that check, says episode 3 is done,
   starts episode 4 and hits a rate limit (a Claude-like ``API Error: 429``, exit 1).
2. On the governed retry it reads the handoff, notes the regression, starts episode 4 anyway, and
   crashes (a Python traceback, exit 1).
3. On the resume it reads the handoff, names the gates it must keep green and the last good
   state, then finishes episodes 3 and 4 properly from whatever state recovery left it in.

Its memory of which launch it is on lives in a file under ``.git`` (``$PAELLA_DEMO_STATE``),
where a rollback of the work tree cannot erase it. ``PAELLA_DEMO_FAST=1`` makes every pause
about 0.05 s.

The files it writes are in ``edits/`` next to this script, so a reader can see each version.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EDITS = Path(__file__).resolve().parent / "edits"
FAST = os.environ.get("PAELLA_DEMO_FAST") == "1"
COLOR = not os.environ.get("NO_COLOR")
SYNC_TIMEOUT_S = 20.0
"""The longest the agent waits for paella to notice its work before it carries on regardless."""

# The final version of every file the agent writes, in the order it writes them, with the
# episode each one completes (privacy.py and the private ingest.py complete episode 2 together).
FINAL = (
    ("ledger/privacy.py", "privacy.py", 2),
    ("ledger/ingest.py", "ingest_private.py", 2),
    ("ledger/export.py", "export.py", 3),
    ("ledger/report.py", "report.py", 4),
)

CHECKS = ("idempotency", "privacy", "export", "report")
"""The project's checks, by episode."""
EPISODE_NAMES = ("idempotent ingest", "privacy", "export format", "summary report")
WHY = {
    "privacy.py": "mask_email() and redact()",
    "ingest_private.py": "events keyed by id again, so a replay changes nothing; addresses masked",
    "export.py": "number rows with enumerate(): ledger.events() keeps arrival order already",
    "report.py": "summary(): counts by kind, customers and net revenue",
}
"""What each final version of a file is for, as the agent says it when it writes one."""

Record = dict[str, Any]


# --- looking like an agent ------------------------------------------------------------------


def paint(text: str, sgr: str) -> str:
    """``text`` in an ANSI colour (SGR code), unless NO_COLOR is set."""
    return f"\x1b[{sgr}m{text}\x1b[0m" if COLOR else text


def say(text: str, mark: str = "●", sgr: str = "32") -> None:
    """One line of the agent's narration, with its coloured mark."""
    print(f"{paint(mark, sgr)} {text}", flush=True)


def detail(text: str) -> None:
    """An indented result line under the last one."""
    print(f"  {paint('⎿', '2')}  {text}", flush=True)


def pause(seconds: float) -> None:
    """Sleep like an agent waiting on its model: ``seconds`` normally, a blink with --fast."""
    time.sleep(0.05 if FAST else seconds)


def think(seconds: float, until: Callable[[], bool] | None = None) -> None:
    """Show a ``\\r`` progress line for ``seconds`` (scaled), and until ``until()`` holds.

    A real agent takes minutes per step, so paella always judges one episode before the next
    begins; this script is much faster, so it also waits (up to SYNC_TIMEOUT_S) for paella to
    have recorded what it should have seen, to tell the same story every time.
    """
    started = time.monotonic()
    least = 0.05 if FAST else seconds
    frames = "✻✽✶✢·✢✶✽"
    frame = 0
    while True:
        elapsed = time.monotonic() - started
        done = elapsed >= least and (until is None or until())
        if done or elapsed > least + SYNC_TIMEOUT_S:
            break
        glyph = paint(frames[frame % len(frames)], "33")
        print(f"\r{glyph} Thinking… ({int(elapsed)}s · esc to interrupt)", end="", flush=True)
        frame += 1
        time.sleep(0.05 if FAST else 0.25)
    print("\r\x1b[K", end="", flush=True)


def read(path: str) -> None:
    """Read a file of the project, the way an agent looks before it edits."""
    say(f"Reading {path}")
    try:
        lines = Path(path).read_text(encoding="utf-8").count("\n")
    except FileNotFoundError:
        detail("not there yet")
    else:
        detail(f"{lines} lines")
    pause(0.8)


def edit(path: str, version: str, why: str) -> bool:
    """Write ``edits/<version>`` to ``path``; say so with a line count. False when already so."""
    target = Path(path)
    new = (EDITS / version).read_text(encoding="utf-8")
    old = target.read_text(encoding="utf-8") if target.exists() else ""
    if new == old:
        return False
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0))
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    say(f"Editing {path}" + ("" if old else " (new file)"), mark="✎", sgr="33")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(new, encoding="utf-8")
    detail(f"{paint(f'+{added}', '32')} {paint(f'-{removed}', '31')}  {why}")
    pause(1.5)
    return True


def check(name: str) -> bool:
    """Run one of the project's checks, as an agent runs the tests; True when it passes."""
    script = f"tests/check_{name}.py"
    say(f"Running python {script}")
    proc = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=60, check=False
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    detail(lines[-1] if lines else f"exit {proc.returncode}")
    pause(0.6)
    return proc.returncode == 0


# --- what paella has seen -------------------------------------------------------------------


def ledger_path() -> Path:
    """paella's ledger of this run (the agent reads it only to keep pace with paella)."""
    state = os.environ.get("PAELLA_STATE_DIR") or ".git/paella"
    return Path(state) / "runs" / os.environ.get("PAELLA_RUN_ID", "") / "events.jsonl"


def ledger_size() -> int:
    """The ledger's size now: what is appended after it is new."""
    try:
        return ledger_path().stat().st_size
    except OSError:
        return 0


def paella_recorded(since: int, wanted: Callable[[Record], bool]) -> Callable[[], bool]:
    """A test: has paella appended a record that ``wanted`` accepts, after byte ``since``?"""

    def test() -> bool:
        try:
            with ledger_path().open("rb") as handle:
                handle.seek(since)
                lines = handle.read().splitlines()
        except OSError:
            return False
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if isinstance(record, dict) and wanted(record):
                return True
        return False

    return test


def checkpoint_for(episode: int) -> Callable[[Record], bool]:
    """Accepts a green checkpoint that completes ``episode`` or a later one."""
    return lambda r: (
        r.get("kind") == "checkpoint"
        and isinstance(r.get("episode"), int)
        and r["episode"] >= episode
    )


def regression(record: Record) -> bool:
    """Accepts a regression drift warning."""
    return record.get("kind") == "drift" and record.get("drift") == "regression"


# --- memory that survives a rollback ---------------------------------------------------------


def state_path() -> Path:
    """Where the agent remembers its launches: under .git, out of a rollback's reach."""
    return Path(os.environ.get("PAELLA_DEMO_STATE") or ".git/paella-demo-agent.json")


def load_state() -> Record:
    """The agent's memory (empty on its first launch)."""
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(state: Record) -> None:
    """Remember ``state`` (written whole, then renamed, so a kill never leaves half of it)."""
    path = state_path()
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(state), encoding="utf-8")
    temp.replace(path)


# --- the handoff -----------------------------------------------------------------------------


def handoff_section(text: str, title: str) -> str:
    """The body of the ``## title`` section of the handoff (empty when there is none)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def read_handoff(path: str | None) -> tuple[list[str], list[str]]:
    """Say what the handoff asks; return (the gates to keep green, the gates that regressed)."""
    path = path or os.environ.get("PAELLA_HANDOFF_FILE")
    if not path or not Path(path).exists():
        say("No handoff was given: starting from the task", mark="⚠", sgr="33")
        return [], []
    text = Path(path).read_text(encoding="utf-8")
    keep_section = handoff_section(text, "Gates that must stay green").split("To finish")[0]
    keep = re.findall(r"^- `([^`]+)`", keep_section, re.M)
    regressed = re.findall(r"^- `([^`]+)`.*REGRESSED", text, re.M)
    base = re.search(r"^Checkpoint (\d+):", handoff_section(text, "Last green checkpoint"), re.M)
    say(f"Reading the handoff: gates to keep green: {', '.join(keep) or 'none yet'}")
    if regressed:
        detail(paint(f"regressed: {', '.join(dict.fromkeys(regressed))}", "31"))
    if base:
        detail(f"last good state: checkpoint {base.group(1)}")
    pause(1.5)
    return keep, list(dict.fromkeys(regressed))


# --- the script --------------------------------------------------------------------------------


def first_launch(prompt_file: str | None) -> int:
    """Episodes 1 and 2 well, episode 3 with a regression, then a rate limit."""
    if prompt_file and Path(prompt_file).exists():
        task = Path(prompt_file).read_text(encoding="utf-8").strip().splitlines()
        say("Reading the task")
        detail(task[0] if task else "(empty)")
        pause(1.0)
    read("README.md")
    read("ledger/ingest.py")
    check("idempotency")
    think(2.0)

    say("Episode 1: idempotent ingest", mark="◆", sgr="36")
    mark = ledger_size()
    edit(
        "ledger/ingest.py",
        "ingest_idempotent.py",
        "key events by id, so a replayed event finds its id taken",
    )
    check("idempotency")
    think(2.5, until=paella_recorded(mark, checkpoint_for(1)))

    say("Episode 2: privacy", mark="◆", sgr="36")
    read("tests/check_privacy.py")
    mark = ledger_size()
    edit("ledger/privacy.py", "privacy.py", "mask_email() and redact()")
    edit("ledger/ingest.py", "ingest_private.py", "log masked addresses only")
    check("privacy")
    think(2.5, until=paella_recorded(mark, checkpoint_for(2)))

    say("Episode 3: export format", mark="◆", sgr="36")
    read("tests/check_export.py")
    mark = ledger_size()
    # The drift: a plausible refactor for the new requirement that drops an old invariant.
    edit(
        "ledger/ingest.py",
        "ingest_drifted.py",
        "keep events in a list, so the export can number rows in arrival order",
    )
    edit("ledger/export.py", "export.py", "to_csv(): a header, then one numbered row per event")
    check("export")
    say("Episode 3 done: the export check passes")
    think(2.5, until=paella_recorded(mark, regression))

    say("Episode 4: summary report", mark="◆", sgr="36")
    read("tests/check_report.py")
    think(1.5)
    print(
        paint(
            "API Error: 429 "
            '{"type":"error","error":{"type":"rate_limit_error","message":"This request would '
            "exceed the rate limit for your organization of 40,000 input tokens per minute. "
            'Please wait a moment and try again."}}',
            "31",
        ),
        flush=True,
    )
    return 1


def _tool_result(response: dict[str, list[dict[str, str]]]) -> str:
    """The text of a tool call's result (the agent's own bug: it assumes there is one)."""
    return response["content"][0]["text"]


def second_launch(handoff_file: str | None) -> int:
    """The governed retry: reads the handoff, starts episode 4 anyway, and crashes."""
    read_handoff(handoff_file)
    say("Noted. Finishing episode 4 first: summary report", mark="◆", sgr="36")
    read("ledger/export.py")
    edit("ledger/report.py", "report_unfinished.py", "summary(): events by kind (first part)")
    think(2.0)
    say("Editing ledger/report.py", mark="✎", sgr="33")
    _tool_result({"content": []})  # raises: the crash the demo needs, with a real traceback
    return 0


def third_launch(handoff_file: str | None) -> int:
    """The resume: keeps the green gates green and finishes, from whatever state it finds."""
    keep, regressed = read_handoff(handoff_file)
    if regressed:
        say(f"Fixing what regressed first: {', '.join(regressed)}", mark="◆", sgr="36")
    for episode in sorted({n for _, _, n in FINAL}):
        files = [(path, version) for path, version, n in FINAL if n == episode]
        wrong = [
            (path, version)
            for path, version in files
            if not Path(path).exists()
            or Path(path).read_text(encoding="utf-8") != (EDITS / version).read_text("utf-8")
        ]
        if not wrong:
            paths = ", ".join(path for path, _ in files)
            say(f"Episode {episode} holds: {paths} already right; leaving it as it is")
            pause(0.8)
            continue
        say(f"Episode {episode}: {EPISODE_NAMES[episode - 1]}", mark="◆", sgr="36")
        mark = ledger_size()
        for path, version in wrong:
            read(path)
            edit(path, version, WHY[version])
        for name in dict.fromkeys([*keep, *CHECKS[:episode]]):
            check(name)
        say(f"Episode {episode} done")
        think(2.0, until=paella_recorded(mark, checkpoint_for(episode)))
    say("All four episodes are done: every check passes.", mark="✓", sgr="32")
    return 0


def main() -> int:
    """Run the part of the script this launch is for; the exit status is the agent's."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-file")
    parser.add_argument("--handoff-file")
    args = parser.parse_args()
    state = load_state()
    state["launches"] = int(state.get("launches", 0)) + 1
    attempt = os.environ.get("PAELLA_ATTEMPT", "?")
    print(paint(f"✻ demo agent (scripted, offline) · attempt {attempt}", "1;35"), flush=True)
    pause(0.5)
    if not state.get("rate_limited"):
        state["rate_limited"] = True
        save_state(state)
        return first_launch(args.prompt_file)
    if not state.get("crashed"):
        state["crashed"] = True
        save_state(state)
        return second_launch(args.handoff_file)
    save_state(state)
    return third_launch(args.handoff_file)


if __name__ == "__main__":
    sys.exit(main())
