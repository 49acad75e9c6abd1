"""The mirror: the state that lets a run recover, kept where the agent's work tree and ``.git`` are not.

By default a private bare repository under ``$XDG_STATE_HOME/paella/<repository key>/mirror.git``
(``~/.local/state`` when unset); ``PAELLA_MIRROR`` may name any git remote instead. It is
written with git itself, after each checkpoint and salvage snapshot:

- ``refs/paella/<run-id>/...`` as paella created them, pushed create-only (a ref the agent moved
  in the repository never overwrites the mirror's), so a deleted ref or a ``git gc`` in the
  repository never loses a snapshot;
- ``refs/paella-state/<run-id>``: a commit whose tree holds the run's ledger (``events.jsonl``)
  and frozen contract (``contract.toml``), with their sizes and sha256 in its message, so a
  reader can tell whether the repository's copies still extend what the mirror holds without
  reading them.

The local mirror starts as a hard-linked ``git clone --bare`` of the repository (objects shared
cheaply, branches kept so that each push sends only new objects); the ``refs/paella`` a clone
copies are dropped, since only what paella pushed itself is trusted.

Nothing here raises on a mirror that is unreachable: a failure is returned as text for a warning.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.workspace import Workspace

MIRROR_ENV = "PAELLA_MIRROR"
STATE_REF = "refs/paella-state"
LEDGER_NAME = "events.jsonl"
CONTRACT_NAME = "contract.toml"
_TIMEOUT_S = 120.0
_MESSAGE_FIELD = re.compile(r"^([a-z0-9-]+): (\S+)$", re.MULTILINE)


def state_home() -> Path:
    """``$XDG_STATE_HOME`` (an absolute path), else ``~/.local/state``."""
    value = os.environ.get("XDG_STATE_HOME", "")
    return Path(value) if os.path.isabs(value) else Path.home() / ".local" / "state"


def repository_key(workspace: Workspace) -> str:
    """A folder name for the repository's paella state: its name and a hash of where that
    state lives (so ``PAELLA_STATE_DIR`` and each worktree's state have their own mirror)."""
    where = os.path.realpath(workspace.state_dir)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", workspace.root.name)[:40] or "repo"
    return f"{name}-{hashlib.sha256(where.encode(errors='surrogateescape')).hexdigest()[:12]}"


@dataclass(frozen=True)
class StateCopy:
    """What the mirror holds of one run's files: sizes and sha256 of its ledger and contract."""

    commit: str
    ledger_bytes: int
    ledger_sha256: str
    contract_sha256: str | None


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

    def describe(self) -> str:
        """Where the mirror is, for messages."""
        return self.url

    def ensure(self) -> str | None:
        """Create the local mirror if it does not exist yet; a description of a failure, or None."""
        if self.local is None or (self.local / "HEAD").is_file():
            return None
        try:
            self.local.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.local.with_name(f".{self.local.name}.{os.getpid()}.tmp")
            # No --local: git hard-links the objects where it can and copies where it cannot.
            self._git(
                [
                    "clone",
                    "--bare",
                    "--quiet",
                    "--no-tags",
                    str(self.workspace.common_dir),
                    str(tmp),
                ],
                cwd=self.local.parent,
            )
            stale = self._git(["--git-dir", str(tmp), "for-each-ref", "--format=%(refname)"])
            drops = [r for r in stale.splitlines() if r.startswith(("refs/paella", "refs/remotes"))]
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
        """Push ``new_refs`` (ref -> commit, create-only) and, with ``state``, the run's ledger
        and contract."""
        problem = self.ensure()
        if problem:
            return problem
        git = self.workspace.git
        try:
            refspecs = []
            refused = self._refuse_state(run_id, run_dir) if state else None
            if state and refused is None:
                commit = self._state_commit(git, run_id, run_dir)
                refspecs.append(f"+{commit}:{STATE_REF}/{run_id}")
            leases = []
            for ref, commit in sorted((new_refs or {}).items()):
                refspecs.append(f"{commit}:{ref}")
                # An empty expected value: the push creates the ref and never moves an existing one.
                leases.append(f"--force-with-lease={ref}:")
            if refspecs:
                self._push(git, leases, refspecs)
        except (OSError, GitError) as err:
            return f"could not update the mirror {self.url}: {err}"
        return refused

    def _refuse_state(self, run_id: str, run_dir: Path) -> str | None:
        """Why the run's files must not replace the mirror's copy: the ledger no longer extends
        it, or the frozen contract differs from it (the mirror keeps the last good copy)."""
        copy = self.state(run_id)
        if copy is None:
            return None
        try:
            ledger = run_dir / LEDGER_NAME
            if not ledger.is_file():
                return "the run's ledger is not a file: the mirror keeps its copy"
            with ledger.open("rb") as handle:
                prefix = handle.read(copy.ledger_bytes)
            contract_path = run_dir / CONTRACT_NAME
            contract = (
                contract_path.read_bytes()
                if copy.contract_sha256 and contract_path.is_file()
                else b""
            )
        except OSError:
            return f"the run's state in {run_dir} is unreadable: the mirror keeps its copy"
        if len(prefix) != copy.ledger_bytes or hashlib.sha256(prefix).hexdigest() != (
            copy.ledger_sha256
        ):
            return "the ledger no longer extends the mirror's copy: the mirror keeps its copy"
        if copy.contract_sha256 and hashlib.sha256(contract).hexdigest() != copy.contract_sha256:
            return "the frozen contract differs from the mirror's copy: the mirror keeps its copy"
        return None

    def _state_commit(self, git: Git, run_id: str, run_dir: Path) -> str:
        entries = []
        lines = [f"paella state {run_id}", ""]
        for name in (LEDGER_NAME, CONTRACT_NAME):
            path = run_dir / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            blob = git.out(["hash-object", "-w", "--stdin"], input=data)
            entries.append(f"100644 blob {blob}\t{name}")
            key = "ledger" if name == LEDGER_NAME else "contract"
            lines.append(f"{key}-bytes: {len(data)}")
            lines.append(f"{key}-sha256: {hashlib.sha256(data).hexdigest()}")
        tree = git.out(["mktree"], input=("\n".join(entries) + "\n").encode())
        return git.out(["commit-tree", tree], input=("\n".join(lines) + "\n").encode())

    def _push(self, git: Git, leases: list[str], refspecs: list[str]) -> None:
        args = ["push", "--quiet", "--no-verify", *leases, self.url, *refspecs]
        proc = git.run(args, check=False)
        if proc.returncode != 0:
            said = proc.stderr.decode(errors="replace")
            if "stale info" in said:
                # A ref the mirror already holds is never replaced; git pushed the others.
                return
            raise GitError(args, proc.returncode, said)

    def refs(self, run_id: str) -> dict[str, str] | None:
        """The mirror's refs of a run (ref -> commit), or None when the mirror cannot be read."""
        if self.local is not None and not (self.local / "HEAD").is_file():
            return {}
        try:
            out = self._git(["ls-remote", self.url, f"refs/paella/{run_id}/*"])
        except (OSError, GitError):
            return None
        found = {}
        for line in out.splitlines():
            commit, _, ref = line.partition("\t")
            found[ref] = commit
        return found

    def state(self, run_id: str) -> StateCopy | None:
        """What the mirror holds of the run's ledger and contract, or None if nothing."""
        commit = self._resolve(f"{STATE_REF}/{run_id}")
        if commit is None:
            return None
        try:
            message = self._read(["cat-file", "commit", commit]).decode(errors="replace")
        except (OSError, GitError):
            return None
        fields = dict(_MESSAGE_FIELD.findall(message))
        try:
            size = int(fields.get("ledger-bytes", "0"))
        except ValueError:
            size = 0
        return StateCopy(
            commit, size, fields.get("ledger-sha256", ""), fields.get("contract-sha256")
        )

    def read_file(self, run_id: str, name: str) -> bytes | None:
        """The mirror's copy of a run's ``events.jsonl`` or ``contract.toml``, or None."""
        copy = self.state(run_id)
        if copy is None:
            return None
        try:
            return self._read(["cat-file", "blob", f"{copy.commit}:{name}"])
        except (OSError, GitError):
            return None

    def run_ids(self) -> list[str]:
        """The runs the mirror holds state for, oldest first."""
        try:
            out = self._git(["ls-remote", self.url, f"{STATE_REF}/*"])
        except (OSError, GitError):
            return []
        return sorted(line.rpartition("/")[2] for line in out.splitlines() if "\t" in line)

    def forget(self, run_id: str) -> None:
        """Delete a run's refs and state from the mirror (``paella prune``), best effort."""
        refs = [*(self.refs(run_id) or {}), f"{STATE_REF}/{run_id}"]
        self.workspace.git.run(
            ["push", "--quiet", "--no-verify", self.url, *(f":{ref}" for ref in refs)], check=False
        )

    def restore_ref(self, ref: str) -> bool:
        """Fetch ``ref`` from the mirror into the repository (objects and all); True if it worked."""
        proc = self.workspace.git.run(
            ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.url, f"+{ref}:{ref}"],
            check=False,
        )
        return proc.returncode == 0

    def _resolve(self, ref: str) -> str | None:
        if self.local is not None:
            if not (self.local / "HEAD").is_file():
                return None
            proc = self._run(["--git-dir", str(self.local), "rev-parse", "--verify", "-q", ref])
            return proc.stdout.decode().strip() or None if proc.returncode == 0 else None
        # A remote mirror: bring the state commit into the repository to read it.
        git = self.workspace.git
        fetched = f"refs/paella-mirror/{ref.removeprefix('refs/')}"
        proc = git.run(
            [
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                self.url,
                f"+{ref}:{fetched}",
            ],
            check=False,
        )
        return git.rev_parse(fetched) if proc.returncode == 0 else None

    def _read(self, args: list[str]) -> bytes:
        if self.local is not None:
            proc = self._run(["--git-dir", str(self.local), *args])
            if proc.returncode != 0:
                raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
            return proc.stdout
        return self.workspace.git.run(args).stdout

    def _git(self, args: list[str], *, input: str | None = None, cwd: Path | None = None) -> str:
        proc = self._run(args, input=input.encode() if input else None, cwd=cwd)
        if proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout.decode(errors="surrogateescape")

    def _run(
        self, args: list[str], *, input: bytes | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_DIR")}
        env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        try:
            return subprocess.run(
                ["git", *args],
                cwd=cwd or self.workspace.root,
                env=env,
                input=input,
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise GitError(args, -1, f"no answer within {_TIMEOUT_S:.0f}s") from err
