"""Steps: every settled change of a run kept as a snapshot, so a regression can be traced to one.

A step is a snapshot commit like a checkpoint (same private index, untracked files included,
nothing of the user's touched; its parent is the HEAD it sat on, so the agent's commits stay
reachable), kept under ``refs/paella/<run-id>/steps/<n>`` and recorded in the ledger (kind
``step``) with its time, the files it changed since the step before and their line counts, and
the agent's last output lines before it. Step 0 is the tree the run started on.

Steps are cheap because the snapshot they commit is usually taken anyway (the settle that
triggers the gates) and the private index hashes only what changed. They are pruned when their
run has ended and ``[steps] keep`` has passed; checkpoints live under their own refs and are never
pruned with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from paella_tui.supervisor.base.errors import GitError, PaellaError, UsageError
from paella_tui.supervisor.run.events import Event
from paella_tui.supervisor.run.runs import Run, RunStore
from paella_tui.supervisor.store.checkpoints import SnapshotRecord, create_numbered_ref
from paella_tui.supervisor.store.loose_reads import loose_head
from paella_tui.supervisor.store.sequenced import SequencedSnapshotter, take_fresh
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.tree_diff import changes_between, totals

log = logging.getLogger(__name__)

TAIL_LINES = 5
"""The agent's last output lines a step keeps (what it was saying when it made the change)."""
MAX_FILES = 40
"""Files a step record names; the count of the rest is kept (a step that rewrites a tree)."""
CLOSE_WAIT_S = 10.0
"""How long the end of a run waits for the steps still being kept (a snapshot each, at most)."""

FileLines = tuple[str, int | None, int | None]


@dataclass(frozen=True)
class StepRecord:
    """One settled change as the ledger holds it."""

    n: int
    ref: str
    commit: str
    tree: str
    parent_tree: str | None
    """The tree of the step before (None for step 0): what ``files`` are counted against."""
    head: str | None
    branch: str | None
    t: str
    files: tuple[FileLines, ...] = ()
    files_total: int = 0
    """How many files changed (``files`` may name fewer)."""
    added: int = 0
    removed: int = 0
    tail: tuple[str, ...] = ()
    attempt: int = 0

    @property
    def name(self) -> str:
        """How a person names it on the command line: ``step:17``."""
        return f"step:{self.n}"

    def as_target(self) -> SnapshotRecord:
        """The step as a rollback or diff target (the same fields a checkpoint has)."""
        return SnapshotRecord(
            kind="steps",
            n=self.n,
            ref=self.ref,
            commit=self.commit,
            tree=self.tree,
            head=self.head,
            branch=self.branch,
            t=self.t,
            label=f"step {self.n}",
        )

    def to_json(self) -> dict[str, Any]:
        """The ledger's and ``paella steps --json``'s shape."""
        return {
            "n": self.n,
            "ref": self.ref,
            "commit": self.commit,
            "tree": self.tree,
            "parent_tree": self.parent_tree,
            "head": self.head,
            "branch": self.branch,
            "files": [{"path": p, "added": a, "removed": r} for p, a, r in self.files],
            "files_total": self.files_total,
            "added": self.added,
            "removed": self.removed,
            "tail": list(self.tail),
            "attempt": self.attempt,
            "t": self.t,
        }

    @classmethod
    def from_ledger(cls, record: dict[str, Any]) -> StepRecord:
        """Rebuild a step from its ledger line."""
        return cls(
            n=int(record["n"]),
            ref=str(record["ref"]),
            commit=str(record["commit"]),
            tree=str(record["tree"]),
            parent_tree=record.get("parent_tree"),
            head=record.get("head"),
            branch=record.get("branch"),
            t=str(record.get("t", "")),
            files=tuple(
                (str(f.get("path", "")), f.get("added"), f.get("removed"))
                for f in record.get("files") or ()
                if isinstance(f, dict)
            ),
            files_total=int(record.get("files_total") or 0),
            added=int(record.get("added") or 0),
            removed=int(record.get("removed") or 0),
            tail=tuple(str(x) for x in record.get("tail") or ()),
            attempt=int(record.get("attempt") or 0),
        )

    def summary(self) -> str:
        """``src/core.py, tests/x.py, +12 −3`` (the first files and the line counts)."""
        names = ", ".join(p for p, _a, _r in self.files[:3])
        more = self.files_total - min(3, len(self.files))
        if more > 0:
            names += f" and {more} more"
        return f"{names or 'no files'}, +{self.added} −{self.removed}"


@dataclass(frozen=True, kw_only=True)
class StepTaken(Event):
    """A settled change was kept as a step (already in the ledger)."""

    kind: ClassVar[str | None] = None
    record_: StepRecord


def steps_of(records: Iterable[dict[str, Any]]) -> list[StepRecord]:
    """The steps among ledger records, in order (malformed ones skipped)."""
    steps = []
    for record in records:
        if record.get("kind") != "step":
            continue
        with contextlib.suppress(KeyError, TypeError, ValueError):
            steps.append(StepRecord.from_ledger(record))
    return steps


def last_step(records_: Sequence[dict[str, Any]]) -> StepRecord | None:
    """The newest step among ledger records (only it is parsed: a run may hold thousands)."""
    for record in reversed(records_):
        if record.get("kind") == "step":
            with contextlib.suppress(KeyError, TypeError, ValueError):
                return StepRecord.from_ledger(record)
    return None


def records(run: Run) -> list[StepRecord]:
    """The run's steps, in order."""
    return steps_of(run.ledger.read().records)


def find(run: Run, name: str, steps: Sequence[StepRecord] | None = None) -> StepRecord:
    """The step a person names: ``step:N``; a UsageError naming the steps there are otherwise."""
    text = name.strip().removeprefix("step:")
    if not text.isdigit():
        raise UsageError(f"{name!r} names no step", hint="use step:N, e.g. step:17")
    steps = records(run) if steps is None else steps
    wanted = int(text)
    for step in steps:
        if step.n == wanted:
            return step
    have = f"step:0 to step:{steps[-1].n}" if steps else "none"
    raise UsageError(
        f"run {run.run_id} has no step {wanted}", hint=f"it has {have} (see `paella steps`)"
    )


def take_step(
    run: Run,
    tree: str,
    *,
    previous: StepRecord | None,
    tail: Sequence[str] = (),
    attempt: int = 0,
) -> StepRecord | None:
    """Keep ``tree`` as the run's next step (None when it equals the step before: no change).

    The ref is written before the ledger record, as for a checkpoint: a crash in between leaves
    a harmless extra ref, never a record pointing at nothing.
    """
    if previous is not None and previous.tree == tree:
        return None
    git = run.workspace.git
    head_commit, branch = _head(run)
    n = previous.n + 1 if previous is not None else 0
    parents = ["-p", head_commit] if head_commit else []
    body = f"step {n} of run {run.run_id}\n".encode()
    commit = git.out(["commit-tree", tree, *parents], input=body)
    ref, n = create_numbered_ref(run, "steps", n, commit)
    parent_tree = previous.tree if previous is not None else None
    try:
        changes = changes_between(run.workspace, parent_tree, tree) if parent_tree else []
    except GitError:
        if parent_tree is None or git.rev_parse(f"{parent_tree}^{{tree}}") is not None:
            raise
        # The step before is gone (an agent deleted paella's refs and ran `git gc --prune=now`):
        # this step starts the line again, as the first does, so the steps after it are kept.
        parent_tree, changes = None, []
    added, removed = totals(changes)
    step = StepRecord(
        n=n,
        ref=ref,
        commit=commit,
        tree=tree,
        parent_tree=parent_tree,
        head=head_commit,
        branch=branch,
        t="",
        files=tuple((c.path, c.added, c.removed) for c in changes[:MAX_FILES]),
        files_total=len(changes),
        added=added,
        removed=removed,
        tail=tuple(line[:300] for line in tail[-TAIL_LINES:]),
        attempt=attempt,
    )
    data = step.to_json()
    data.pop("t")
    written = run.ledger.append("step", **data)
    return StepRecord.from_ledger(written)


def _head(run: Run) -> tuple[str | None, str | None]:
    """HEAD's commit and branch: from the files when they show it plainly
    (:func:`loose_reads.loose_head`), else in one git call (a step is taken at every settle)."""
    loose = loose_head(run.workspace.git_dir, run.workspace.common_dir)
    if loose is not None:
        commit, full = loose
        return commit, full.removeprefix("refs/heads/") if full is not None else None
    proc = run.workspace.git.run(["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"], check=False)
    lines = proc.stdout.decode(errors="surrogateescape").split()
    if proc.returncode != 0 or len(lines) != 2:
        head = run.workspace.head()  # an unborn branch: ask the long way
        return head.commit, head.branch
    branch = lines[1].removeprefix("refs/heads/") if lines[1].startswith("refs/heads/") else None
    return lines[0], branch


class StepKeeper:
    """Takes the run's steps as the workspace settles, one at a time, off the event loop.

    ``request()`` (a settle) snapshots the workspace and keeps the tree if it changed;
    ``note(tree)`` keeps a tree already snapshotted (an evaluation's). Requests that arrive while
    a step is being taken are folded into one more, so a burst never queues a backlog.
    """

    def __init__(
        self,
        run: Run,
        snapshotter: Snapshotter,
        *,
        emit: Callable[[Event], None],
        tail: Callable[[], Sequence[str]],
        attempt: Callable[[], int],
        newest: Mapping[str, Any] | None = None,
    ) -> None:
        """``newest`` is the run's newest step record as its state keeps it (None: no step yet;
        one this version cannot read: the ledger is read for the newest it can)."""
        self._run = run
        self._snapshotter = snapshotter
        self._emit = emit
        self._tail = tail
        self._attempt = attempt
        self.last: StepRecord | None = None
        """The newest step (None before step 0)."""
        if newest is not None:
            try:
                self.last = StepRecord.from_ledger(dict(newest))
            except (KeyError, TypeError, ValueError):
                self.last = last_step(run.ledger.read().records)
        self._trees: list[str | None] = []
        """Pending work: a tree to keep, or None for "snapshot first"."""
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._kept_number = 0
        """The snapshot number of the newest step kept (0: unknown)."""
        self._settled_at = float("-inf")
        """When the newest settle asked for a step (``time.monotonic()``)."""

    def request(self) -> None:
        """The workspace settled: snapshot it and keep the tree as a step if it changed."""
        self._settled_at = time.monotonic()
        self._enqueue(None)

    def note(self, tree: str) -> None:
        """Keep ``tree`` (snapshotted by someone else) as a step if it is not the newest one."""
        self._enqueue(tree)

    def _enqueue(self, tree: str | None) -> None:
        if self._closed:
            return
        # One pending snapshot covers any number of settles; a known tree keeps its place.
        if tree is not None or None not in self._trees:
            self._trees.append(tree)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work(), name="paella-steps")

    async def idle(self) -> None:
        """Return once every requested step is kept."""
        while self._worker is not None and not self._worker.done():
            await asyncio.wait([self._worker])

    async def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Keep what was requested (for ``wait_s`` at most), then take and record no more: the
        run's verdict is recorded after this, and nothing is recorded after the verdict."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle(), wait_s)
        self._closed = True
        if self._worker is not None and not self._worker.done():
            # A snapshot slower than the wait: its step is dropped (its thread finishes alone).
            log.warning("a step still being kept after %.0f s was dropped", wait_s)
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    async def _work(self) -> None:
        while self._trees:
            tree = self._trees.pop(0)
            try:
                step = await asyncio.to_thread(self._keep, tree)
            except PaellaError as exc:
                # A step is a convenience: a failure is said once and the run goes on.
                log.warning("could not keep a step: %s", exc)
                continue
            if step is not None and not self._closed:
                self.last = step
                self._emit(StepTaken(record_=step))

    def _keep(self, tree: str | None) -> StepRecord | None:
        if tree is None:
            # Any full scan begun after the newest settle holds what settled (a gate's end
            # check often took one a moment ago): it is the step, with no snapshot of its own.
            tree = take_fresh(self._snapshotter, self._settled_at, "a step").tree
        number = (
            self._snapshotter.number(tree)
            if isinstance(self._snapshotter, SequencedSnapshotter)
            else None
        )
        if number is not None:
            if number <= self._kept_number and tree != (self.last.tree if self.last else None):
                return None  # an older state, heard of after a newer one was kept
            self._kept_number = max(self._kept_number, number)
        return take_step(
            self._run,
            tree,
            previous=self.last,
            tail=list(self._tail()),
            attempt=self._attempt(),
        )


# --- retention ------------------------------------------------------------------------------


def prune_expired(
    store: RunStore, *, now: datetime | None = None, skip: str | None = None
) -> list[tuple[str, int]]:
    """Delete the step refs of runs that ended more than their ``[steps] keep`` ago.

    A run counts as ended when its folded state says so (a trusted ``run-done``, or a
    ``run-stopped``, with no resume or attempt after it); its own frozen contract says how long
    its steps are kept. Checkpoint and salvage refs are never touched. One ``for-each-ref``
    lists every run's steps, and a run's state is its kept fold caught up (the new records
    only): a start of paella never reads whole ledgers of old runs. Returns ``(run id, refs
    deleted)`` for each run pruned.
    """
    from paella_tui.supervisor.contract.model import DEFAULT_STEPS_KEEP
    from paella_tui.supervisor.contract.problems import ContractError
    from paella_tui.supervisor.run.state_store import StateStore

    now = now or datetime.now(UTC)
    known = set(store.run_ids())
    if not known - {skip}:
        return []  # no other run (a workspace's first): nothing to list the refs of
    git = store.workspace.git
    namespace = f"{store.workspace.ref_namespace}/"
    by_run: dict[str, list[str]] = {}
    for ref in git.out(["for-each-ref", "--format=%(refname)", namespace]).splitlines():
        run_id, sep, rest = ref[len(namespace) :].partition("/")
        if sep and rest.startswith("steps/") and run_id != skip:
            by_run.setdefault(run_id, []).append(ref)
    pruned: list[tuple[str, int]] = []
    for run_id, refs in sorted(by_run.items()):
        if run_id not in known:
            continue  # refs of a run whose folder is gone: nothing says when it ended
        run = store.get(run_id)
        ended_at = StateStore(run.ledger.path).load(save=False).state.ended_at
        if ended_at is None:
            continue
        try:
            contract = run.load_contract()
        except ContractError:
            contract = None
        keep = contract.steps.keep if contract is not None else DEFAULT_STEPS_KEEP
        if now.timestamp() - ended_at < keep:
            continue
        git.run(["update-ref", "--stdin"], input="".join(f"delete {r}\n" for r in refs).encode())
        run.ledger.append("steps-pruned", refs=len(refs), kept_s=keep)
        pruned.append((run_id, len(refs)))
    return pruned


def pruned(records_: Iterable[dict[str, Any]]) -> bool:
    """Whether the run's step refs were pruned (its steps are listed but no longer restorable)."""
    return any(r.get("kind") == "steps-pruned" for r in records_)
