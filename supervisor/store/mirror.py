"""The mirror: the state that lets a run recover, kept where the agent's work tree and ``.git`` are not.

By default a private bare repository under ``$XDG_STATE_HOME/paella/<repository key>/mirror.git``
(``~/.local/state`` when unset); ``PAELLA_MIRROR`` may name any git remote instead. It is
written with git itself, after each checkpoint and salvage snapshot:

- ``refs/paella/<run-id>/...`` as paella created them, pushed create-only (a ref the agent moved
  in the repository never overwrites the mirror's), so a deleted ref or a ``git gc`` in the
  repository never loses a snapshot;
- ``refs/paella-state/<run-id>``: a chain of commits holding the run's ledger as append-only
  parts and its frozen contract (``contract.toml``), each with sizes and sha256 in its message,
  so a save costs the new records and a reader can tell whether the repository's copies still
  extend what the mirror holds from the newest part alone (:mod:`mirror_ledger`).

The local mirror starts as a hard-linked ``git clone --bare`` of the repository (objects shared
cheaply, branches kept so that each save copies only new objects); the ``refs/paella`` a clone
copies are dropped, since only what paella wrote itself is trusted. paella writes a local mirror
with plumbing, not ``git push`` (:mod:`mirror_local`: no ``receive-pack`` walk over every ref, no
``gc --auto`` per checkpoint); a mirror elsewhere (``PAELLA_MIRROR=ssh://...``) is pushed to.
Every command that talks to a mirror (a push, a fetch, ``ls-remote``: a remote mirror's, and a
ref brought back from either) runs in paella's own git directory over the repository's objects
(:mod:`mirror_link`), never in the work tree, whose configuration the agent can write.

Nothing here raises on a mirror that is unreachable: a failure is returned as text for a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.base.state_seal import state_home
from paella_tui.supervisor.store.mirror_ledger import (
    CONTRACT_NAME,
    PART_NAME,
    WHOLE_NAME,
    NewPart,
    StateCopy,
    assemble,
    new_part,
    state_commit,
)
from paella_tui.supervisor.store.mirror_local import LocalMirror, StateRaced, run_git
from paella_tui.supervisor.store.workspace import Workspace

if TYPE_CHECKING:
    from paella_tui.supervisor.store.mirror_link import MirrorLink

MIRROR_ENV = "PAELLA_MIRROR"
STATE_REF = "refs/paella-state"
LEDGER_NAME = WHOLE_NAME
"""The run's ledger file (``read_file`` gives it back whole, from the parts)."""
_RACES = 5
"""Saves that lost the race for the state ref are retried this many times."""
_TIPS: dict[tuple[str, str], StateCopy] = {}
"""The newest state commit this process read or wrote, per mirror and run."""

__all__ = [
    "CONTRACT_NAME",
    "LEDGER_NAME",
    "MIRROR_ENV",
    "STATE_REF",
    "Mirror",
    "StateCopy",
    "state_home",
]


def repository_key(workspace: Workspace) -> str:
    """A folder name for the repository's paella state: its name and a hash of where that
    state lives (so ``PAELLA_STATE_DIR`` and each worktree's state have their own mirror)."""
    where = os.path.realpath(workspace.state_dir)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", workspace.root.name)[:40] or "repo"
    return f"{name}-{hashlib.sha256(where.encode(errors='surrogateescape')).hexdigest()[:12]}"


class Mirror:
    """The out-of-repository copy of one repository's paella refs, ledgers and frozen contracts."""

    def __init__(self, workspace: Workspace, url: str, local: Path | None) -> None:
        self.workspace = workspace
        self.url = url
        """Where git pushes: a path or any git remote URL."""
        self.local = local
        """The bare repository's folder when the mirror is on this machine."""

    @classmethod
    def for_workspace(cls, workspace: Workspace) -> Mirror:
        """The mirror ``PAELLA_MIRROR`` names, else the private default one for this repository."""
        named = os.environ.get(MIRROR_ENV, "").strip()
        if named:
            local = Path(named) if os.path.isabs(named) else None
            return cls(workspace, named, local)
        path = state_home() / "paella" / repository_key(workspace) / "mirror.git"
        return cls(workspace, str(path), path)

    @property
    def link(self) -> MirrorLink:
        """Where the network commands for this mirror run (:mod:`mirror_link`)."""
        # Imported here: a local mirror's saves (every checkpoint) never need it.
        from paella_tui.supervisor.store.mirror_link import MirrorLink, link_path

        folder = state_home() / "paella" / repository_key(self.workspace)
        return MirrorLink(self.workspace, link_path(folder, self.url))

    def describe(self) -> str:
        """Where the mirror is, for messages."""
        return self.url

    @property
    def _store(self) -> LocalMirror | None:
        """The local mirror's writer, when the mirror is on this machine and exists."""
        if self.local is None or not (self.local / "HEAD").is_file():
            return None
        return LocalMirror(self.local, self.workspace.common_dir / "objects")

    def ensure(self) -> str | None:
        """Create the local mirror if it does not exist yet; a description of a failure, or None."""
        if self.local is None or (self.local / "HEAD").is_file():
            return None
        try:
            self.local.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.local.with_name(f".{self.local.name}.{os.getpid()}.tmp")
            # No --local: git hard-links the objects where it can and copies where it cannot.
            # No template: its sample hooks, description and info/exclude (13 files on git 2.39)
            # are never read in a mirror (paella's git runs no hook; nothing checks out there).
            self._git(
                [
                    "clone",
                    "--bare",
                    "--quiet",
                    "--no-tags",
                    "--template=",
                    str(self.workspace.common_dir),
                    str(tmp),
                ],
                cwd=self.local.parent,
            )
            drops = []
            if not clone_holds_only_branches(tmp):
                stale = self._git(["--git-dir", str(tmp), "for-each-ref", "--format=%(refname)"])
                drops = [r for r in stale.splitlines() if r.startswith(_DROPPED)]
            if drops:
                self._git(
                    ["--git-dir", str(tmp), "update-ref", "--stdin"],
                    input="".join(f"delete {r}\n" for r in drops),
                )
            os.rename(tmp, self.local)
        except FileExistsError:
            return None  # another paella made it first
        except (OSError, GitError) as err:
            return f"cannot create the mirror {self.local}: {err}"
        return None

    def save(
        self,
        run_id: str,
        run_dir: Path,
        new_refs: dict[str, str] | None = None,
        *,
        state: bool = True,
    ) -> str | None:
        """Copy ``new_refs`` (ref -> commit, create-only) and, with ``state``, what the run's
        ledger and contract add to the mirror's copy."""
        problem = self.ensure()
        if problem:
            return problem
        try:
            if new_refs:
                store = self._store
                if store is not None:
                    store.copy_refs(new_refs)
                else:
                    self._push_refs(new_refs)
            if state:
                return self._save_state(run_id, run_dir)
        except (OSError, GitError) as err:
            return f"could not update the mirror {self.url}: {err}"
        return None

    def _save_state(self, run_id: str, run_dir: Path) -> str | None:
        """Append the ledger's new bytes to the mirror's copy; why not, when it must not be."""
        ref = f"{STATE_REF}/{run_id}"
        # The tip this process read or wrote last: the ref moves by compare-and-swap from it, so
        # a tip another paella moved since only costs a retry (and a read) here.
        tip = _TIPS.get((self.url, run_id)) or self.state(run_id)
        for _ in range(_RACES):
            part = new_part(tip, run_dir / LEDGER_NAME, run_dir / CONTRACT_NAME)
            if isinstance(part, str):
                return part
            if tip is not None and tip.parts and not part.data:
                return None  # nothing new since the last save
            store = self._store
            try:
                if store is not None:
                    tip = store.write_state(ref, run_id, tip, part)
                else:
                    tip = self._push_state(ref, run_id, tip, part)
                _TIPS[(self.url, run_id)] = tip
                return None
            except StateRaced:
                # Another paella saved first: what it saved is part of the next tip.
                tip = self.state(run_id)
        return None

    def _push_refs(self, new_refs: dict[str, str]) -> None:
        refspecs, leases = [], []
        for ref, commit in sorted(new_refs.items()):
            refspecs.append(f"{commit}:{ref}")
            # An empty expected value: the push creates the ref and never moves an existing one.
            leases.append(f"--force-with-lease={ref}:")
        self._push(leases, refspecs)

    def _push_state(self, ref: str, run_id: str, tip: StateCopy | None, part: NewPart) -> StateCopy:
        """The state commit built in the repository, pushed to a remote mirror (moved only from
        ``tip``); the new tip."""
        copy = state_commit(self.link.text, run_id, tip, part)
        lease = f"--force-with-lease={ref}:{tip.commit if tip is not None else ''}"
        try:
            self._push([lease], [f"+{copy.commit}:{ref}"])
        except GitError as err:
            if "stale info" in err.stderr or "rejected" in err.stderr:
                raise StateRaced(err.stderr) from err
            raise
        return copy

    def _push(self, leases: list[str], refspecs: list[str]) -> None:
        args = ["push", "--quiet", "--no-verify", *leases, self.url, *refspecs]
        proc = self.link.run(args)
        if proc.returncode != 0:
            said = proc.stderr.decode(errors="replace")
            if "stale info" in said and not any(r.startswith("+") for r in refspecs):
                # A ref the mirror already holds is never replaced; git pushed the others.
                return
            raise GitError(args, proc.returncode, said)

    def refs(self, run_id: str) -> dict[str, str] | None:
        """The mirror's refs of a run (ref -> commit), or None when the mirror cannot be read."""
        if self.local is not None and not (self.local / "HEAD").is_file():
            return {}
        try:
            store = self._store
            prefix = f"{self.workspace.ref_namespace}/{run_id}/"
            if store is not None:
                return store.refs(prefix)
            out = self.link.text(["ls-remote", self.url, f"{prefix}*"])
        except (OSError, GitError):
            return None
        found = {}
        for line in out.splitlines():
            commit, _, ref = line.partition("\t")
            found[ref] = commit
        return found

    def state(self, run_id: str) -> StateCopy | None:
        """What the mirror holds of the run's ledger and contract (its newest state commit), or
        None if nothing."""
        ref = f"{STATE_REF}/{run_id}"
        if self.local is None:
            # A remote mirror's state, brought into the link to read it: its commit.
            try:
                fetched = self.link.fetch(self.url, ref)
            except (OSError, GitError):
                return None
            if fetched is None:
                return None
            ref = fetched
        elif not (self.local / "HEAD").is_file():
            return None
        else:
            store = self._store
            loose = store.loose_commit(ref) if store is not None else None
            if loose is not None:
                # The usual case, and no git process: the tip as its files hold it.
                copy = _TIPS[(self.url, run_id)] = StateCopy.parse(*loose)
                return copy
            if store is not None and store.lacks_ref(ref):
                # A run's first save: no state yet, as the ref files say (no git process).
                _TIPS.pop((self.url, run_id), None)
                return None
        try:
            found = self._objects([ref])
        except (OSError, GitError):
            return None
        if not found or found[0] is None:
            _TIPS.pop((self.url, run_id), None)
            return None
        oid, kind, data = found[0]
        if kind != "commit":
            return None
        copy = _TIPS[(self.url, run_id)] = StateCopy.parse(oid, data)
        return copy

    def read_file(self, run_id: str, name: str) -> bytes | None:
        """The mirror's copy of a run's ``events.jsonl`` (put together from its parts) or
        ``contract.toml``, or None."""
        copy = self.state(run_id)
        if copy is None:
            return None
        try:
            if name != LEDGER_NAME:
                found = self._objects([f"{copy.commit}:{name}"])
                return found[0][2] if found and found[0] is not None else None
            return self._ledger(copy)
        except (OSError, GitError):
            return None

    def _ledger(self, tip: StateCopy) -> bytes | None:
        """The whole ledger from the state chain that ends at ``tip``."""
        chain = [tip]
        if tip.parts and tip.part_from > 0:
            # Read on a restore only: the chain's commits in one batch, not one by one.
            listed = self._read(["rev-list", "--first-parent", tip.commit]).decode().split()
            found = self._objects(listed)
            if any(f is None for f in found):
                return None
            chain = _until_whole([StateCopy.parse(f[0], f[2]) for f in found if f is not None])
        blobs = [f"{c.commit}:{PART_NAME if c.parts else WHOLE_NAME}" for c in chain]
        found = self._objects(blobs)
        if any(f is None for f in found):
            return None
        return assemble([(c, f[2]) for c, f in zip(chain, found, strict=True) if f is not None])

    def _objects(self, names: list[str]) -> list[tuple[str, str, bytes] | None]:
        """``cat-file --batch`` of ``names`` where the mirror's objects are: (id, type, data)
        of each, None for one that is missing."""
        out = self._read(["cat-file", "--batch"], input="".join(f"{n}\n" for n in names).encode())
        found: list[tuple[str, str, bytes] | None] = []
        pos = 0
        for _ in names:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode(errors="replace").split()
            pos = end + 1
            if len(header) != 3 or header[1] == "missing":
                found.append(None)
                continue
            size = int(header[2])
            found.append((header[0], header[1], out[pos : pos + size]))
            pos += size + 1
        return found

    def run_ids(self) -> list[str]:
        """The runs the mirror holds state for, oldest first."""
        try:
            store = self._store
            if store is not None:
                refs = list(store.refs(f"{STATE_REF}/"))
            elif self.local is not None:
                return []
            else:
                out = self.link.text(["ls-remote", self.url, f"{STATE_REF}/*"])
                refs = [line.partition("\t")[2] for line in out.splitlines()]
        except (OSError, GitError):
            return []
        return sorted(ref.rpartition("/")[2] for ref in refs if ref)

    def forget(self, run_id: str) -> None:
        """Delete a run's refs and state from the mirror (``paella prune``), best effort."""
        refs = [*(self.refs(run_id) or {}), f"{STATE_REF}/{run_id}"]
        store = self._store
        if store is not None:
            with contextlib.suppress(GitError):
                store.delete_refs(refs)
            return
        with contextlib.suppress(OSError, GitError):  # no link can be made: nothing to forget
            self.link.run(
                ["push", "--quiet", "--no-verify", self.url, *(f":{ref}" for ref in refs)]
            )

    def restore_ref(self, ref: str) -> bool:
        """Fetch ``ref`` from the mirror into the repository (objects and all); True if it worked.

        The fetch runs in the link (its objects land in the repository's store), then the ref is
        set in the repository to the commit the mirror holds."""
        try:
            commit = self.link.fetch(self.url, ref)
            if commit is None:
                return False
            self.workspace.git.run(["update-ref", ref, commit])
        except (OSError, GitError):
            return False
        return True

    def _read(self, args: list[str], *, input: bytes | None = None) -> bytes:
        if self.local is not None:
            proc = self._run(["--git-dir", str(self.local), *args], input=input)
            if proc.returncode != 0:
                raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
            return proc.stdout
        return self.link.out(args, input=input)

    def _git(self, args: list[str], *, input: str | None = None, cwd: Path | None = None) -> str:
        proc = self._run(args, input=input.encode() if input else None, cwd=cwd)
        if proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout.decode(errors="surrogateescape")

    def _run(
        self, args: list[str], *, input: bytes | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return run_git(args, cwd=cwd or self.workspace.root, input=input)


_DROPPED = ("refs/paella", "refs/remotes")
"""Refs a fresh clone must not keep: only what paella wrote itself is trusted."""


def clone_holds_only_branches(clone: Path) -> bool:
    """Whether a fresh ``clone --bare --no-tags`` holds none of the :data:`_DROPPED` refs, read
    from its files (git puts a clone's refs in ``packed-refs``: a bare clone copies branches
    only): no git process to list them. False when in doubt (a reftable, a file unread)."""
    if (clone / "reftable").exists():
        return False
    try:
        loose = os.listdir(clone / "refs")
    except OSError:
        return False
    try:
        packed = (clone / "packed-refs").read_bytes()
    except FileNotFoundError:
        packed = b""
    except OSError:
        return False
    names = (f" {prefix}".encode() for prefix in _DROPPED)
    return not any(name in packed for name in names) and not any(
        entry.startswith(("paella", "remotes")) for entry in loose
    )


def _until_whole(chain: list[StateCopy]) -> list[StateCopy]:
    """``chain`` cut after the first copy that starts the ledger (a part from 0, or a whole copy
    from before the parts)."""
    for index, copy in enumerate(chain):
        if not copy.parts or copy.part_from == 0:
            return chain[: index + 1]
    return chain
