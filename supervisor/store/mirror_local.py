"""Writing a mirror on this machine directly: objects and refs in, without ``git push``.

A push to a local bare repository runs ``receive-pack`` there, which walks every object the new
refs reach against all the mirror's refs (its connectivity check) and then ``gc --auto``: most of
a checkpoint's time. paella knows what it writes, so it writes it itself, in an order that keeps
the mirror's one promise (every ref it holds reaches only objects it holds, whenever paella is
killed):

1. ``pack-objects --revs`` run in the mirror, with the repository's object folder as a
   temporary alternate (``GIT_ALTERNATE_OBJECT_DIRECTORIES``, for that one process), packs what
   the new commits reach and the mirror's newest refs of the run do not (``^tip``: whatever a
   mirror ref reaches, the mirror holds) into a pack of the mirror's own. A pack becomes
   visible only once whole (git renames it into place, index last);
2. then ``update-ref --stdin`` creates the refs, create-only (a ref the mirror already holds is
   never moved); a kill before this step leaves unreferenced objects, never a ref without them.

The run's ledger and contract go in as objects first, then the state ref moves by
compare-and-swap from the commit the save chained onto (a save that raced another one is refused
and retried). Onto a tip, paella writes the blob, tree and commit as loose objects itself
(:func:`mirror_ledger.state_commit_loose`: the objects ``hash-object``, ``mktree`` and
``commit-tree`` would write, byte for byte), so a save is one ``update-ref``. A run's first save
takes the hash from the mirror's config (none named: sha1) and learns that the state ref does not
exist yet from the ref files (:meth:`LocalMirror.lacks_ref`): one ``update-ref`` too. A mirror
whose config names an object format on a first save, and one with two object formats, use git's
plumbing. ``fast-import`` would write them in one process but took five times as long (it writes
a pack and then loosens it). A checkpoint's copy skips the history walk when HEAD has not moved
since the newest mirrored snapshot (its result is then empty: read from the loose commits).

The mirror's saves take no lock of paella's own: a ``<ref>.lock`` a killed save left would fail
every later save of that ref, so one older than :data:`STALE_REF_LOCK_S` is removed first.

Small packs and loose objects add up (two or three a checkpoint); once there are
:data:`PACKS_BEFORE_REPACK` packs, a geometric repack rolls the small ones (and the loose
objects) into one, leaving the big pack the mirror was cloned with alone. A ``pack-objects`` or
``repack`` killed while writing leaves its temporary files; each copy of refs removes those older than
:data:`STALE_TEMPORARY_S` that no running process holds open.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.git_programs import fixed_options, guarded_args
from paella_tui.supervisor.store.gitcli import PAELLA_IDENTITY, SCRUBBED_ENV, git_program
from paella_tui.supervisor.store.loose_objects import (
    COMPAT_FORMAT,
    commit_parents,
    hash_name,
    is_object_id,
    read_loose,
)
from paella_tui.supervisor.store.mirror_ledger import (
    NewPart,
    StateCopy,
    state_commit,
    state_commit_loose,
)

TIMEOUT_S = 120.0
PACKS_BEFORE_REPACK = 24
STALE_TEMPORARY_S = 600.0
"""A temporary file of git's in the mirror's pack folder untouched this long was left by a writer
that was killed (paella's own give up after :data:`TIMEOUT_S`): removed at the next copy of refs."""
STALE_REF_LOCK_S = TIMEOUT_S
"""A ``<ref>.lock`` this old in the mirror was left by a killed save: a save's ``update-ref``
holds it for milliseconds, and paella gives up on (and kills) one after :data:`TIMEOUT_S`. The
mirror's saves take no lock of paella's own (two savers are safe: refs are created only, the
state ref moves by compare-and-swap), so nothing else would ever remove it, and every later save
of that ref would fail on it."""
_TEMPORARY = ("tmp_", ".tmp-")
"""``tmp_pack_*``, ``tmp_idx_*``, ``tmp_rev_*``... (``pack-objects`` writing) and ``.tmp-<pid>-pack-*``
(a ``repack`` killed before it renamed its pack into place): never read by git."""
_NEGATIVES = 8
"""At most this many of the mirror's refs bound what is packed (more only slow the walk)."""
_NUMBERED = re.compile(r"^(.*)/(\d+)$")
_OBJECT_FORMAT = re.compile(rb"objectformat", re.IGNORECASE)
"""A mirror whose config names any object format leaves a run's first save to git."""
KILL_AT_ENV = "PAELLA_TEST_KILL_AT"
"""A test names a step here to have paella SIGKILL itself there (as rollback's steps)."""


class StateRaced(Exception):
    """Another save moved the state ref first: read it again and retry."""


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git in a mirror: the caller's repository variables scrubbed (a
    mirror is not the workspace), replace refs ignored as in gitcli (a clone copies them),
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_NO_REPLACE_OBJECTS="1", **(extra or {}))
    return env


def _kill_point(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def run_git(
    args: list[str],
    *,
    cwd: Path,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run git in a mirror's environment (:func:`git_env`), starting no program a
    configuration names (:mod:`git_programs`: a ``fetch``, ``ls-remote`` or ``push`` of a remote
    mirror runs in the work tree, with its configuration)."""
    full_env = git_env(env)
    try:
        return subprocess.run(
            [git_program(full_env.get("PATH")), *fixed_options(), *guarded_args(args)],
            cwd=cwd,
            env=full_env,
            input=input,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise GitError(args, -1, f"no answer within {TIMEOUT_S:.0f}s") from err


class LocalMirror:
    """A bare mirror repository on this machine, written with plumbing."""

    def __init__(self, path: Path, objects: Path) -> None:
        self.path = path
        self.objects = objects
        """The repository's object folder, where new objects are read from."""

    def git(
        self, args: list[str], *, input: bytes | None = None, env: Mapping[str, str] | None = None
    ) -> bytes:
        """Run git in the mirror; its stdout, or a GitError."""
        proc = run_git(["--git-dir", str(self.path), *args], cwd=self.path, input=input, env=env)
        if proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def refs(self, *prefixes: str) -> dict[str, str]:
        """The mirror's refs under ``prefixes`` (ref -> object id)."""
        out = self.git(["for-each-ref", "--format=%(objectname) %(refname)", *prefixes])
        found = {}
        for line in out.decode(errors="surrogateescape").splitlines():
            oid, _, ref = line.partition(" ")
            if ref:
                found[ref] = oid
        return found

    def copy_refs(self, new_refs: Mapping[str, str]) -> None:
        """Create ``new_refs`` (ref -> commit) in the mirror, with every object they reach;
        refs the mirror already holds are left as they are."""
        todo = dict(new_refs)
        bounds = self._newest_loose(todo)
        try:
            if not bounds:
                raise GitError(["pack-objects"], 0, "no bound read from the ref files")
            self._pack(todo, bounds)
        except GitError:
            # No run refs yet (the run's first save), or the ref files said something git did
            # not take: ask git for the refs, the branches the mirror was cloned with too.
            have = self.refs(*sorted({_run_prefix(r) + "/" for r in todo}), "refs/heads/")
            todo = {ref: commit for ref, commit in todo.items() if ref not in have}
            if not todo:
                return
            self._pack(todo, _bounds(have))
        _kill_point("mirror-objects")
        # Create-only: the zero old value refuses a ref that exists (another paella raced us).
        batch = "".join(f"create {ref} {commit}\n" for ref, commit in sorted(todo.items()))
        self.clear_stale_locks(list(todo))
        try:
            self.git(["update-ref", "--stdin"], input=batch.encode())
        except GitError:
            # One ref of the batch exists already: create the others one by one.
            for ref, commit in sorted(todo.items()):
                try:
                    self.git(["update-ref", ref, commit, ""])
                except GitError:
                    if ref not in self.refs(ref):
                        raise
        self.maintain()

    def _pack(self, todo: Mapping[str, str], bounds: list[str]) -> None:
        """Pack into the mirror what ``todo``'s commits reach and ``bounds`` (mirror refs) do
        not, read through the repository's objects as an alternate for these processes only.

        The set is computed, not walked: a checkpoint's tree differs from the newest mirrored
        snapshot's by the paths changed since (``diff-tree -t``: the blobs and the trees above
        them), and its parents' history from the bounds' parents by the commits made since
        (``rev-list --objects``, whose edges are those parents). ``pack-objects --revs`` with
        ``^bound`` would repack every file the bound holds and HEAD does not (the untracked
        files of every checkpoint): git marks only an edge parent's tree as already there."""
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.objects)}
        commits = list(dict.fromkeys(todo.values()))
        wanted = list(commits)
        if bounds:
            pairs = "".join(f"{commit} {bounds[0]}\n" for commit in commits)
            diff = self.git(
                ["diff-tree", "--stdin", "-r", "-t", "-z", "--no-renames", "--format=%T"],
                input=pairs.encode(),
                env=env,
            )
            wanted += _diff_objects(diff)
        negatives = [*bounds, *(f"{oid}^@" for oid in bounds)]
        parents = [f"{c}^@" for c in commits]
        if not (bounds and self._history_known(commits, bounds)):
            history = self.git(
                ["rev-list", "--objects", "--no-object-names", *parents, "--not", *negatives],
                env=env,
            )
            wanted += history.decode().split()
        if not bounds:
            # Nothing to diff against (a mirror of a repository without branches): what the
            # commits reach beyond their parents, which the line above brought whole.
            wanted += (
                self.git(
                    ["rev-list", "--objects", "--no-object-names", *commits, "--not", *parents],
                    env=env,
                )
                .decode()
                .split()
            )
        # No delta search and light compression: the mirror is a local safety copy, written on
        # every checkpoint and salvage (a salvage of 5,000 changed files spent 2.3 s of a 6.4 s
        # rollback searching deltas); its periodic repack may pack tighter later.
        self.git(
            [
                "pack-objects",
                "-q",
                "--window=0",
                "--compression=1",
                str(self.path / "objects" / "pack" / "pack"),
            ],
            input="".join(f"{oid}\n" for oid in dict.fromkeys(wanted)).encode(),
            env=env,
        )

    def _history_known(self, commits: list[str], bounds: list[str]) -> bool:
        """Whether the history walk would name nothing: every parent of ``commits`` is a bound
        or a bound's parent (the usual checkpoint, HEAD unmoved since the newest mirrored
        one), read from the loose commits paella wrote, with no git process. False when a
        commit is not loose (then git walks)."""
        known = set(bounds)
        for bound in bounds:
            parents = self._loose_parents(bound)
            if parents is None:
                return False
            known.update(parents)
        for commit in commits:
            parents = self._loose_parents(commit)
            if parents is None or not known.issuperset(parents):
                return False
        return True

    def _loose_parents(self, commit: str) -> list[str] | None:
        """A commit's parents, read from its loose object in the repository or the mirror."""
        for objects in (self.objects, self.path / "objects"):
            found = read_loose(objects, commit)
            if found is not None and found[0] == "commit":
                return commit_parents(found[1])
        return None

    def _newest_loose(self, todo: Mapping[str, str]) -> list[str]:
        """The newest ref of each kind of the runs of ``todo``, read from the mirror's ref files
        (``refs/paella/<run>/<kind>/<n>``, which paella writes one a file): no git process.
        Empty when there are none or one does not read as an object id; :meth:`copy_refs` then
        asks git."""
        found = []
        for prefix in sorted({_run_prefix(ref) for ref in todo}):
            try:
                # By name: checkpoints first, whose trees are the nearest to a new snapshot's.
                kinds = sorted(
                    (e for e in os.scandir(self.path / prefix) if e.is_dir()), key=lambda e: e.name
                )
                for kind in kinds:
                    numbers = [int(e.name) for e in os.scandir(kind.path) if e.name.isdigit()]
                    if numbers:
                        with open(os.path.join(kind.path, str(max(numbers))), "rb") as handle:
                            found.append(handle.read(100).decode("ascii").strip())
            except (OSError, ValueError):
                return []
        if not all(is_object_id(oid) for oid in found):
            return []
        return found[:_NEGATIVES]

    def loose_commit(self, ref: str) -> tuple[str, bytes] | None:
        """``ref``'s commit and its raw content, read from the ref file and the loose object paella's
        ``commit-tree`` wrote, with no git process (every command reads the run's state tip); None
        when either is not a plain file (a packed ref or object, a symbolic ref): ask git then.
        The content is checked against its object id, so a damaged file is never believed."""
        try:
            with open(self.path / ref, "rb") as handle:
                oid = handle.read(100).decode("ascii").strip()
        except (OSError, ValueError):
            return None
        found = read_loose(self.path / "objects", oid)
        if found is None or found[0] != "commit":
            return None
        return oid, found[1]

    def delete_refs(self, refs: list[str]) -> None:
        """Delete ``refs`` from the mirror (those that exist)."""
        if refs:
            batch = "".join(f"delete {ref}\n" for ref in refs)
            self.git(["update-ref", "--stdin"], input=batch.encode())

    def write_state(self, ref: str, run_id: str, tip: StateCopy | None, part: NewPart) -> StateCopy:
        """Add ``part`` as the next state commit on ``ref``, moved only from ``tip`` (an exact
        compare-and-swap), and return it; :class:`StateRaced` when another save moved it first."""
        hash_algo = self._loose_hash(tip)
        if hash_algo is not None:
            # No git process for the objects: the blob, tree and commit state_commit's four
            # processes would write, byte for byte (tests/test_mirror_folds.py).
            copy = state_commit_loose(self.path / "objects", hash_algo, run_id, tip, part)
        else:
            copy = state_commit(
                lambda args, data: self.out(args, data, env=PAELLA_IDENTITY), run_id, tip, part
            )
        commit = copy.commit
        _kill_point("mirror-state")
        old = tip.commit if tip is not None else ""  # empty: the ref must not exist yet
        self.clear_stale_locks([ref])
        try:
            self.git(["update-ref", ref, commit, old])
        except GitError as err:
            now = self.refs(ref).get(ref)
            if now != old and (now or old):
                raise StateRaced(str(err)) from err
            raise
        return copy

    def out(
        self, args: list[str], input: bytes | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """Run git in the mirror; its stdout as text, without the trailing newline."""
        return self.git(args, input=input, env=env).decode(errors="surrogateescape").rstrip("\n")

    def _loose_hash(self, tip: StateCopy | None) -> str | None:
        """The hash a state commit after ``tip`` is written under as loose objects by paella
        itself, or None to leave it to git: the tip's id says it (a run's first save: the
        mirror's config names no object format, so sha1), the mirror writes objects under one
        hash, and no date was set for git in the environment (commit-tree would take it)."""
        if any(os.environ.get(k) for k in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE")):
            return None
        try:
            config = (self.path / "config").read_bytes()
        except OSError:
            return None
        if COMPAT_FORMAT.search(config) is not None:
            return None  # objects written twice, under two hashes: git's job
        if tip is not None:
            return hash_name(tip.commit)
        return None if _OBJECT_FORMAT.search(config) else "sha1"

    def lacks_ref(self, ref: str) -> bool:
        """Whether the mirror surely holds no ``ref``, read from its files as git reads them
        (no loose ref file, none in ``packed-refs``, no reftable): a run's first save then
        needs no git process to learn it. False when in doubt."""
        if (self.path / "reftable").exists():
            return False
        try:
            os.lstat(self.path / ref)
            return False
        except FileNotFoundError:
            pass
        except OSError:
            return False
        try:
            packed = (self.path / "packed-refs").read_bytes()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return b" " + ref.encode(errors="surrogateescape") + b"\n" not in packed

    def clear_stale_locks(self, refs: list[str]) -> None:
        """Remove the lock files of ``refs`` that killed saves left (older than
        :data:`STALE_REF_LOCK_S`, held open by no process); a recent one stays (its save may be
        at work: the update fails as before, and the next save after the threshold goes)."""
        too_old = time.time() - STALE_REF_LOCK_S
        stale = []
        for ref in refs:
            lock = self.path / f"{ref}.lock"
            try:
                if lock.stat().st_mtime < too_old:
                    stale.append(str(lock))
            except OSError:
                continue  # none (the usual case)
        if stale:
            _remove_unless_open(stale)

    def maintain(self) -> None:
        """Roll the small packs and loose objects into one once there are many, and remove what
        killed writers left (best effort)."""
        packs = 0
        stale: list[str] = []
        too_old = time.time() - STALE_TEMPORARY_S
        try:
            with os.scandir(self.path / "objects" / "pack") as folder:
                for entry in folder:
                    if entry.name.endswith(".pack") and entry.name.startswith("pack-"):
                        packs += 1
                    elif entry.name.startswith(_TEMPORARY) and _older(entry, too_old):
                        stale.append(entry.path)
        except OSError:
            return
        if stale:
            _remove_unless_open(stale)
        if packs >= PACKS_BEFORE_REPACK:
            run_git(
                ["--git-dir", str(self.path), "repack", "--geometric=2", "-d", "-q"],
                cwd=self.path,
            )


def _older(entry: os.DirEntry[str], than: float) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_mtime < than
    except OSError:
        return False


def _remove_unless_open(paths: list[str]) -> None:
    """Delete ``paths``, except those a running process holds open (a writer that is slow, not
    dead: its file's time may lag while it compresses a big object). Processes we may not look
    into (another user's) are not seen; the age alone then speaks."""
    wanted = {os.path.realpath(path): path for path in paths}
    held: set[str] = set()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return  # no way to tell a live writer: leave them all
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                held.add(target)
    for real, path in wanted.items():
        if real not in held:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _diff_objects(out: bytes) -> list[str]:
    """The objects ``diff-tree --stdin -r -t -z --format=%T`` names on the new side: each
    commit's root tree (its header) and every added or changed blob and tree (no gitlinks: a
    submodule's commit is not an object of this repository)."""
    found = []
    tokens = iter(out.split(b"\0"))
    for token in tokens:
        item = token.lstrip(b"\n")
        if item.startswith(b":"):
            next(tokens, None)  # the path
            _, mode, _, oid, _ = item[1:].split(b" ", 4)
            if mode != b"160000" and oid.strip(b"0"):
                found.append(oid.decode())
        elif item:
            found.append(item.decode())  # a commit's root tree
    return found


def _run_prefix(ref: str) -> str:
    """``refs/paella/<run>`` of ``refs/paella/<run>/<kind>/<n>`` (the folder of the run's refs)."""
    return ref.rsplit("/", 2)[0]


def _bounds(have: Mapping[str, str]) -> list[str]:
    """The mirror refs that bound a pack: the newest (highest numbered) of each kind of the run,
    else the branches it was cloned with. Any mirror ref would be correct; near ones are cheap."""
    newest: dict[str, tuple[int, str]] = {}
    branches = []
    for ref, oid in have.items():
        match = _NUMBERED.match(ref)
        if ref.startswith("refs/heads/"):
            branches.append(oid)
        elif match is not None:
            kind, n = match.group(1), int(match.group(2))
            if kind not in newest or newest[kind][0] < n:
                newest[kind] = (n, oid)
    chosen = [oid for _, oid in newest.values()] + branches
    return list(dict.fromkeys(chosen))[:_NEGATIVES]
