"""Where paella talks to a mirror from: a git directory of its own over the work tree's objects.

git reads the configuration of the repository a command runs in, and a command that talks to
another repository is the one that configuration can send elsewhere or turn into a program:
``url.<base>.insteadOf`` and ``pushInsteadOf`` rewrite the mirror's address (the saves, and the
reads that check the ledger against the mirror, would go to a place of the agent's choosing, a
local path as well as a URL), ``core.sshCommand``, ``core.gitProxy`` and ``credential.helper`` run
programs, ``protocol.<name>.allow`` refuses the transfer. The agent can write ``.git/config``.

So no ``push``, ``fetch`` or ``ls-remote`` paella runs for a mirror runs in the work tree. They
run in ``<state home>/paella/<repository key>/link-<hash of the address>.git``: a bare repository
paella made (its configuration and refs are paella's), whose object store is the work tree's own
for that one process (``GIT_OBJECT_DIRECTORY``): a push finds every object the refs reach, a
fetch writes what it brings where the repository's refs can point to it, and the state commits
paella builds for a mirror elsewhere land there as before. Only the user's global and system
configuration apply, as to any git command the user runs outside a repository: that is where
their credentials and ssh settings live.

A fetch tells the mirror what the repository already has from the work tree's ``HEAD``
(``--negotiation-tip``), so only the missing history travels.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from paella_tui.supervisor.base.errors import GitError
from paella_tui.supervisor.store.gitcli import PAELLA_IDENTITY
from paella_tui.supervisor.store.mirror_local import run_git
from paella_tui.supervisor.store.workspace import Workspace

FETCHED_REFS = "refs/fetched/"
"""Where a fetch puts what it brought, one ref per process (deleted once read)."""


def link_path(folder: Path, url: str) -> Path:
    """The link for the mirror at ``url`` in a repository's paella state ``folder``."""
    digest = hashlib.sha256(url.encode(errors="surrogateescape")).hexdigest()[:12]
    return folder / f"link-{digest}.git"


class MirrorLink:
    """Runs the mirror's network commands in paella's own git directory over ``workspace``'s
    objects (see the module docstring)."""

    def __init__(self, workspace: Workspace, path: Path) -> None:
        self.workspace = workspace
        self.path = path
        self.objects = workspace.common_dir / "objects"

    def run(
        self, args: list[str], *, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """``git ARGS`` in the link (made first if it is not there), never raising on a status."""
        self._ensure()
        return run_git(
            ["--git-dir", str(self.path), *args],
            cwd=self.path,
            input=input,
            # paella's name on the state commits it builds here (the link has no user.name).
            env={"GIT_OBJECT_DIRECTORY": str(self.objects), **PAELLA_IDENTITY},
        )

    def out(self, args: list[str], *, input: bytes | None = None) -> bytes:
        """``git ARGS`` in the link; raises :class:`GitError` on a non-zero status."""
        proc = self.run(args, input=input)
        if proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def text(self, args: list[str], input: bytes | None = None) -> str:
        """:meth:`out` as text without the trailing newline (plumbing's object ids)."""
        return self.out(args, input=input).decode(errors="surrogateescape").rstrip("\n")

    def fetch(self, url: str, ref: str) -> str | None:
        """The commit ``ref`` names in the mirror at ``url``, fetched (objects into the
        repository's store), or None when it could not be fetched.

        The fetch goes into a ref of this process, read and deleted at once: the link keeps no
        ref between commands, since a ``gc`` in the repository may prune what one reached (a
        fetch refuses to run beside a ref to a missing object). One a killed paella left is
        removed on the first fetch that fails for it."""
        into = f"{FETCHED_REFS}{os.getpid()}"
        head = self.workspace.git.rev_parse("HEAD")
        # What the repository has starts at its HEAD: only the missing history travels.
        tip = [f"--negotiation-tip={head}"] if head is not None else []
        args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", *tip, url]
        proc = self.run([*args, f"+{ref}:{into}"])
        if proc.returncode != 0 and self._drop_refs():
            proc = self.run([*args, f"+{ref}:{into}"])
        if proc.returncode != 0:
            return None
        got = self.run(["rev-parse", "--verify", "-q", f"{into}^{{commit}}"])
        self.run(["update-ref", "-d", into])
        commit = got.stdout.decode(errors="replace").strip()
        return commit if got.returncode == 0 and commit else None

    def _drop_refs(self) -> bool:
        """Delete every ref the link holds (left by a killed paella); True if there was one."""
        listed = self.run(["for-each-ref", "--format=%(refname)"])
        refs = listed.stdout.decode(errors="surrogateescape").split()
        if not refs:
            return False
        self.run(["update-ref", "--stdin"], input="".join(f"delete {r}\n" for r in refs).encode())
        return True

    def _ensure(self) -> None:
        """Make the link (a bare repository of the work tree's object format) once."""
        if (self.path / "HEAD").is_file():
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        object_format = self.workspace.git.out(["rev-parse", "--show-object-format"]).strip()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        proc = run_git(
            ["init", "--bare", "-q", f"--object-format={object_format or 'sha1'}", str(tmp)],
            cwd=self.path.parent,
        )
        if proc.returncode != 0:
            raise GitError(
                ["init", "--bare"], proc.returncode, proc.stderr.decode(errors="replace")
            )
        try:
            os.rename(tmp, self.path)
        except OSError:
            if not (self.path / "HEAD").is_file():
                raise
            # Another paella made it first.
            shutil.rmtree(tmp, ignore_errors=True)
