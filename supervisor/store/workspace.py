"""The workspace: the git work tree paella supervises, where its state lives, and whether git is busy.

Every command starts here. Opening a workspace never changes it; the checks say in plain words
what is wrong (not a repository, a rebase half done, a held ``index.lock``) and what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from paella_tui.supervisor.base.errors import WorkspaceError
from paella_tui.supervisor.store import early_reads
from paella_tui.supervisor.store.early_reads import WORKSPACE_ARGS
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.loose_reads import loose_head

STATE_DIR_ENV = "PAELLA_STATE_DIR"

# Marker files of a git operation that is half done, with the command that finishes or aborts it.
_OPERATIONS = (
    ("MERGE_HEAD", "a merge", "git merge --continue  or  git merge --abort"),
    ("rebase-merge", "a rebase", "git rebase --continue  or  git rebase --abort"),
    ("rebase-apply", "a rebase or git am", "git rebase --continue  or  git rebase --abort"),
    (
        "CHERRY_PICK_HEAD",
        "a cherry-pick",
        "git cherry-pick --continue  or  git cherry-pick --abort",
    ),
    ("REVERT_HEAD", "a revert", "git revert --continue  or  git revert --abort"),
    ("BISECT_LOG", "a bisect", "git bisect reset"),
)


@dataclass(frozen=True)
class HeadState:
    """Where HEAD points: a branch (possibly unborn) or a detached commit."""

    commit: str | None
    """The commit HEAD resolves to; None on an unborn branch (a repository with no commit yet)."""
    branch: str | None
    """The branch name HEAD is attached to; None when HEAD is detached."""

    @property
    def detached(self) -> bool:
        """HEAD names a commit directly rather than a branch."""
        return self.branch is None

    def describe(self) -> str:
        """A short human description: ``main @ 1a2b3c4``, ``detached @ 1a2b3c4``, ``main (no commit yet)``."""
        where = self.branch if self.branch else "detached"
        return f"{where} @ {self.commit[:7]}" if self.commit else f"{where} (no commit yet)"


@dataclass(frozen=True)
class Workspace:
    """A git work tree and the paths paella uses in it."""

    root: Path
    """The top of the work tree (where ``paella.toml`` lives)."""
    git_dir: Path
    """This work tree's git dir (per worktree: index, HEAD, operation markers)."""
    common_dir: Path
    """The repository's common git dir (objects, refs, and paella's state)."""

    @classmethod
    def find(cls, start: Path | None = None) -> Workspace:
        """The workspace containing ``start`` (default: the current folder), or a WorkspaceError."""
        start = (start or Path.cwd()).resolve()
        if not start.exists():
            raise WorkspaceError(f"{start} does not exist")
        git = Git(start)
        # Asked already while `paella checkpoint` imported, or by an earlier command of this
        # process (early_reads checks it still holds).
        proc = early_reads.take(git, WORKSPACE_ARGS) or early_reads.recall(git, WORKSPACE_ARGS)
        if proc is None:
            proc = early_reads.ask(git, WORKSPACE_ARGS)
        if proc.returncode != 0:
            raise WorkspaceError(
                f"not a git repository: {start}",
                hint="paella works inside a git work tree: run it in your project, "
                "or `git init` there first.",
            )
        lines = proc.stdout.decode(errors="surrogateescape").splitlines()
        if len(lines) < 4 or lines[3] == "true" or not lines[0]:
            raise WorkspaceError(
                f"{start} is a bare repository or inside a git dir, not a work tree",
                hint="run paella in a checkout of the repository.",
            )
        return cls(root=Path(lines[0]), git_dir=Path(lines[1]), common_dir=Path(lines[2]))

    @property
    def git(self) -> Git:
        """A git runner for this work tree against the repository's own index."""
        return Git(self.root)

    @property
    def linked_worktree(self) -> bool:
        """This work tree was added with ``git worktree add`` (its git dir is not the common dir)."""
        return self.git_dir.resolve() != self.common_dir.resolve()

    @property
    def worktree_id(self) -> str | None:
        """The linked worktree's name under ``<common dir>/worktrees/``; None for the main one."""
        return self.git_dir.name if self.linked_worktree else None

    @property
    def state_dir(self) -> Path:
        """Where paella keeps runs, its lock and private index: ``<git dir>/paella``.

        The git dir is this work tree's own (``.git`` of the main work tree, ``.git/worktrees/<id>``
        of a linked one), so each worktree is its own workspace. ``PAELLA_STATE_DIR`` overrides it.
        """
        override = os.environ.get(STATE_DIR_ENV)
        return Path(override).resolve() if override else self.git_dir / "paella"

    @property
    def ref_namespace(self) -> str:
        """Where this work tree's snapshot refs live: ``refs/paella`` for the main work tree,
        ``refs/paella/wt/<id>`` for a linked worktree (refs are shared by all worktrees)."""
        wt = self.worktree_id
        return "refs/paella" if wt is None else f"refs/paella/wt/{wt}"

    def branch_checked_out_elsewhere(self, branch: str) -> Path | None:
        """The other work tree that has ``branch`` checked out, or None."""
        proc = self.git.run(["worktree", "list", "--porcelain", "-z"], check=False)
        data = proc.stdout
        if proc.returncode != 0:  # git before 2.36 has no -z: paths end at the newline
            data = self.git.run(["worktree", "list", "--porcelain"], check=False).stdout
            data = data.replace(b"\n", b"\0")
        here = self.root.resolve()
        path: Path | None = None
        for field in data.split(b"\0"):
            if field.startswith(b"worktree "):
                path = Path(field[9:].decode(errors="surrogateescape"))
            elif (
                field == f"branch refs/heads/{branch}".encode(errors="surrogateescape")
                and path is not None
                and path.resolve() != here
            ):
                return path
        return None

    @property
    def index_lock(self) -> Path:
        """The lock file git holds while it writes this work tree's index."""
        return self.git_dir / "index.lock"

    def head(self) -> HeadState:
        """Read HEAD without changing anything."""
        return self.head_and_ref()[0]

    def head_and_ref(self) -> tuple[HeadState, str | None]:
        """HEAD as :meth:`head` reads it, and the full name of its branch (``refs/heads/...``;
        None when detached): from the files when they show it plainly (a loose branch ref and
        commit: :func:`loose_reads.loose_head`, no git process; a run reads HEAD at every step
        and checkpoint), else one git process when HEAD has a commit."""
        loose = loose_head(self.git_dir, self.common_dir)
        if loose is not None:
            commit, ref = loose
            short = ref.removeprefix("refs/heads/") if ref is not None else None
            return HeadState(commit=commit, branch=short), ref
        git = self.git
        # One process for all (a checkpoint's every git process is start-up it pays): the
        # commit, the branch's full name ("HEAD" when detached), then the branch as
        # `symbolic-ref --short` names it (the flags add up: --abbrev-ref comes last).
        proc = git.run(
            ["rev-parse", "HEAD^{commit}", "--symbolic-full-name", "HEAD", "--abbrev-ref", "HEAD"],
            check=False,
        )
        lines = proc.stdout.decode(errors="surrogateescape").splitlines()
        if proc.returncode == 0 and len(lines) == 3 and all(lines):
            head = HeadState(commit=lines[0], branch=None if lines[2] == "HEAD" else lines[2])
            return head, None if lines[1] == "HEAD" else lines[1]
        # No commit yet (an unborn branch): the branch alone, the long way.
        branch_proc = git.run(["symbolic-ref", "-q", "--short", "HEAD"], check=False)
        branch = branch_proc.stdout.decode(errors="surrogateescape").strip() or None
        head = HeadState(commit=git.rev_parse("HEAD^{commit}"), branch=branch)
        if branch is None:
            return head, None
        full = git.run(["symbolic-ref", "-q", "HEAD"], check=False)
        return head, full.stdout.decode(errors="surrogateescape").strip() or None

    def operation_in_progress(self) -> tuple[str, str] | None:
        """The git operation left half done in this work tree, as (what, how to finish), or None."""
        for marker, what, fix in _OPERATIONS:
            if (self.git_dir / marker).exists():
                return what, fix
        return None

    def require_quiet(self, action: str, *, needs_index: bool = False) -> None:
        """Refuse ``action`` (exit 3, nothing changed) while git is in the middle of something."""
        busy = self.operation_in_progress()
        if busy is not None:
            what, fix = busy
            raise WorkspaceError(
                f"cannot {action}: {what} is in progress in {self.root}",
                hint=f"finish or abort it first ({fix}), then run paella again. Nothing was changed.",
            )
        if needs_index and self.index_lock.exists():
            raise WorkspaceError(
                f"cannot {action}: {self.index_lock} exists, so another git process holds the index",
                hint="wait for it to finish; if no git process is running, the lock is stale: "
                f"remove it (rm {self.index_lock}) and run paella again. Nothing was changed.",
            )
