"""``paella checkpoint``, ``checkpoints``, ``rollback``, ``diff`` and ``prune``."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from paella_tui.commands.context import Context, use_color, warn
from paella_tui.schemas import SCHEMA_VERSION
from paella_tui.supervisor.base.errors import UsageError
from paella_tui.supervisor.run.integrity import ensure_snapshot
from paella_tui.supervisor.run.run_view import RunView
from paella_tui.supervisor.run.runs import Run, save_to_mirror
from paella_tui.supervisor.store import checkpoints as ckpt
from paella_tui.supervisor.store.checkpoints import SnapshotRecord

if TYPE_CHECKING:
    import argparse  # the parser's namespace: `paella checkpoint` may be read without argparse


def _describe_snapshot_extras(record: SnapshotRecord) -> list[str]:
    lines = []
    for skipped in record.skipped_files:
        size = f" ({skipped['size']:,} bytes)" if skipped.get("size") else ""
        lines.append(f"  left out: {skipped['path']}{size}: {skipped['reason']}")
    for path in record.uncovered:
        lines.append(
            f"  not covered inside: {path} (nested repository or submodule, recorded by its commit)"
        )
    return lines


def checkpoint(args: argparse.Namespace) -> int:
    """Take a manual checkpoint of the workspace now."""
    ctx = Context.open()
    ctx.workspace.require_quiet("take a checkpoint")
    run = ctx.run_for_writing("manual checkpoint")
    snapshotter = ctx.snapshotter(run)
    snap = snapshotter.take_locked("a checkpoint")
    # The gates green on exactly this tree, as judged before (the TUI's `c` runs them first;
    # here they are not re-run, so only results on this very tree count).
    green = _green_on(run, snap.tree)
    record = ckpt.take_checkpoint(
        run, snapshotter, episode="manual", label=args.label, gates_green=green, snap=snap
    )
    where = (
        f"{record.branch or 'detached HEAD'} @ {record.head[:7]}"
        if record.head
        else (f"{record.branch or 'HEAD'} (no commit yet)")
    )
    save_to_mirror(run)  # the ledger's copy outside the repository, with this record
    print(f"✓ checkpoint {record.n} of run {run.run_id}: {record.ref}")
    print(f"  commit {record.commit[:12]} (tree {record.tree[:12]}) on {where}")
    for line in _describe_snapshot_extras(record):
        print(line)
    return 0


def _green_on(run: Run, tree: str) -> tuple[str, ...]:
    """The gates whose newest verdict on exactly ``tree`` is green, from the run's state (its
    latest verdicts, and those kept for the newest snapshots' trees)."""
    from paella_tui.supervisor.run.state_store import StateStore

    state = StateStore(run.ledger.path).load().state
    known = {**state.verdicts_at.get(tree, {})}
    known.update({name: g for name, g in state.gates.items() if g.tree == tree})
    return tuple(name for name, g in known.items() if g.green)


def checkpoints(args: argparse.Namespace) -> int:
    """List the newest run's checkpoints and salvage snapshots."""
    ctx = Context.open()
    run = ctx.current_run(required=not args.json)
    if run is None:
        print(
            json.dumps(
                {"schema_version": SCHEMA_VERSION, "checkpoints": [], "salvage": []}, indent=2
            )
        )
        return 0
    view = RunView.load(run)
    if args.json:
        print(
            json.dumps(
                {
                    "schema_version": SCHEMA_VERSION,
                    "checkpoints": [c.to_json() for c in view.checkpoints],
                    "salvage": [s.to_json() for s in view.salvage],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    if view.checkpoints:
        # Each one is checked with the mirror below: all at once, first, so that the base comes
        # from the same answer (its quick check of the newest alone would ask git again).
        view.rollback_target_ok(view.checkpoints[-1])
    base = view.last_green_checkpoint
    print(f"run {run.run_id}")
    if not view.checkpoints and not view.salvage:
        print("  no checkpoints yet (take one with `paella checkpoint`)")
    for c in view.checkpoints:
        mark = "●" if base is not None and c.n == base.n else " "
        episode = f"episode {c.episode}" if isinstance(c.episode, int) else "manual"
        gates = ", ".join(c.gates_green) or "-"
        extra = f"  ⚠ {len(c.skipped_files)} left out" if c.skipped_files else ""
        if not view.rollback_target_ok(c):
            extra += "  ⚠ not confirmed by the mirror: never a rollback target"
        print(
            f" {mark} {c.n:>3}  {c.t[:19].replace('T', ' ')}  {c.commit[:10]}  {episode:<10} "
            f"{c.label}  [green: {gates}]{extra}"
        )
    for s in view.salvage:
        print(f"   salvage:{s.n:<3} {s.t[:19].replace('T', ' ')}  {s.commit[:10]}  {s.reason}")
    if base is not None:
        print(f"\n● last green checkpoint: {base.n}")
    return 0


def _default_target(view: RunView, purpose: str) -> SnapshotRecord:
    base = view.last_green_checkpoint
    if base is not None:
        return base
    names = ", ".join(c.name for c in view.checkpoints) or "none yet"
    raise UsageError(
        f"run {view.run.run_id} has no green checkpoint to {purpose}",
        hint=f"name one: checkpoints are {names} (see `paella checkpoints`).",
    )


def _named_target(run: Run, name: str) -> SnapshotRecord:
    """A checkpoint, ``salvage:N``, ``step:N`` or ``before-break``, as a person names it."""
    from paella_tui.commands.step_commands import resolve_target

    return resolve_target(run, name) or ckpt.find(run, name)


def _shortstat(run: Run, from_tree: str, to_tree: str) -> str:
    out = run.workspace.git.out(["diff", "--shortstat", "--no-renames", from_tree, to_tree])
    return out.strip() or "no changes"


def rollback(args: argparse.Namespace) -> int:
    """Restore a checkpoint (default: the last green one), salvaging the current state first."""
    # Here, not at the top: `paella checkpoint` shares this module and restores nothing.
    from paella_tui.supervisor.store.left_locks import clear_left_locks
    from paella_tui.supervisor.store.rollback import rollback as do_rollback

    ctx = Context.open()
    # A lock a killed paella's own git child left (HEAD.lock, index.lock) would fail the undo.
    for line in clear_left_locks(ctx.workspace):
        print(f"  ⚠ {line}")
    ctx.workspace.require_quiet("roll back", needs_index=True)
    run = ctx.current_run(restore=True)
    assert run is not None
    view = RunView.load(run)
    target = (
        _named_target(run, args.target) if args.target else _default_target(view, "roll back to")
    )
    if target.kind in ("checkpoints", "salvage") and not view.rollback_target_ok(target):
        raise UsageError(
            f"{target.name} is not a trusted snapshot: the mirror does not confirm its ref, "
            "commit and tree, so its ledger record may have been forged",
            hint="`paella checkpoints` lists the snapshots; `paella log` shows where the ledger "
            "breaks. Nothing was changed.",
        )
    # A snapshot deleted or pruned in the repository is fetched back from the mirror.
    ensure_snapshot(run, target.ref, target.commit)
    agent = view.agent()
    snapshotter = ctx.snapshotter(run)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(
                f"rollback to {target.name} changes your work tree and there is no terminal to confirm on",
                hint=f"run `paella rollback {target.name} --yes` to confirm. Nothing was changed.",
            )
        now = snapshotter.take_locked().tree
        print(f"Roll back to {target.name} ({target.label or target.reason}, {target.t[:19]}):")
        print(f"  {_shortstat(run, now, target.tree)} between now and then")
        print("  the current state is saved as a salvage snapshot first, so this can be undone.")
        if input("Roll back? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing was changed.")
            return 1
    result = do_rollback(run, target, snapshotter=snapshotter, agent_running=bool(agent["alive"]))
    save_to_mirror(run)
    salvage = result.salvage
    print(
        f"✓ rolled back to {target.name}: {result.changed} path(s) restored, "
        f"HEAD {target.branch or 'detached'} @ {(target.head or 'no commit')[:10]}"
    )
    print(f"  the state before is {salvage.name} ({salvage.ref})")
    print(f"  undo with: paella rollback {salvage.name} --yes")
    for line in _describe_snapshot_extras(salvage):
        print(line)
    for note in result.notes:
        print(f"  ⚠ {note}")
    return 0


def diff(args: argparse.Namespace) -> int:
    """Print the diff from a checkpoint (default: the last green one) to the work tree."""
    ctx = Context.open()
    run = ctx.current_run()
    assert run is not None
    view = RunView.load(run)
    if args.target and args.target.strip().startswith("step:"):
        from paella_tui.commands.step_commands import step_diff

        return step_diff(run, args.target, stat=args.stat)
    if args.target:
        target = _named_target(run, args.target)
    elif view.last_green_checkpoint is not None:
        target = view.last_green_checkpoint
    elif view.checkpoints:
        target = view.checkpoints[-1]
        warn(f"no green checkpoint yet: showing the diff from the newest checkpoint, {target.name}")
    else:
        raise UsageError(
            "no checkpoint to diff against yet", hint="take one with `paella checkpoint`."
        )
    now = ctx.snapshotter(run).take_locked().tree
    git = run.workspace.git
    options = ["--stat"] if args.stat else []
    color = ["--color=always"] if use_color() else ["--no-color"]
    output = git.run(["diff", *color, *options, "--no-renames", target.tree, now]).stdout
    if not output:
        print(f"no changes since {target.name}")
        return 0
    sys.stdout.flush()
    sys.stdout.buffer.write(output)
    return 0


def prune(args: argparse.Namespace) -> int:
    """Delete the named runs' refs and state folders."""
    ctx = Context.open()
    runs = [ctx.store.get(run_id) for run_id in args.run_ids]
    for run in runs:
        if RunView.load(run).agent()["alive"]:
            raise UsageError(
                f"run {run.run_id} has a live agent", hint="stop it first; nothing was pruned."
            )
    git = ctx.workspace.git
    for run in runs:
        refs = git.out(["for-each-ref", "--format=%(refname)", f"{run.ref_prefix}/"]).splitlines()
        if refs:
            git.run(
                ["update-ref", "--stdin"], input="".join(f"delete {r}\n" for r in refs).encode()
            )
        ctx.store.delete(run)
        print(f"✓ pruned run {run.run_id}: {len(refs)} ref(s) and its state deleted")
    return 0
