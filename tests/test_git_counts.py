"""Which git processes an operation runs, where the number is behaviour (issue 14 item 7, 17).

The set of commands is asserted, never a time. Each test also checks that the answer is what
the longer way gave: the snapshot is the work tree byte for byte, the mirror's state reads back.

- A seed of the private index (a snapshot's first, or the first after a rollback) reads the
  user's index once (``ls-files -v``: readable, hiding bits, paths) and asks ``check-attr``
  about converting attributes; its configuration (split index, sparse checkout,
  ``core.autocrlf``) comes with the filter drivers' read (``git_programs.ConfigWatch``), in no
  process of its own, and a ``Snapshotter`` reads none either. A matrix of user indexes and
  settings: each gives the work tree's exact bytes.
- A run's first save to the local mirror writes the state commit as loose objects and learns
  from the ref files that there is no state yet: one ``update-ref``, no ``cat-file``,
  ``hash-object``, ``mktree`` or ``commit-tree``; the commit is the one git would write.
- A configuration changed mid-run is seen by the next snapshot's read of it (the answer is
  keyed on the files git reads, not kept).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import GitRunner, TreeState, capture_tree, run_paella_in_process

from paella_tui.supervisor.judge.frozen import KEPT_DIFFS, FrozenFiles
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.git_programs import subcommand_at
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.mirror import STATE_REF, Mirror, clone_holds_only_branches
from paella_tui.supervisor.store.raw_restore import tree_changes
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import prune_expired
from paella_tui.supervisor.store.workspace import Workspace


def _subcommand(argv: list[str]) -> str | None:
    """The git subcommand ``argv`` runs (through setpriv and sh too), or None if not git."""
    for i, item in enumerate(argv):
        if os.path.basename(item) == "git":
            rest = argv[i + 1 :]
            words = rest[subcommand_at(rest) :][:2]
            return " ".join(words) if words[:1] == ["config"] else (words[0] if words else "")
    return None


class Started(list[str]):
    """The git subcommands started while recording (``config`` with its first option)."""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[Started]:
    """Records every git process this process starts (``subprocess.Popen``, which
    ``subprocess.run`` and paella's ``Git`` use)."""
    seen = Started()
    original = subprocess.Popen

    class Recording(original):  # type: ignore[misc,valid-type]
        def __init__(self, args: list[str], *rest: object, **kwargs: object) -> None:
            command = _subcommand([os.fsdecode(a) for a in args])
            if command is not None:
                seen.append(command)
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    yield seen


def _snapshot_state(git: GitRunner, repo: Path, tree: str) -> TreeState:
    """A snapshot tree as ``capture_tree`` describes a work tree."""
    state = TreeState()
    for path, (mode, content) in git.tree(repo, tree).items():
        if mode == "120000":
            state[path] = ("link", os.fsdecode(content))  # type: ignore[arg-type]
        else:
            state[path] = ("file", content, mode == "100755")
    return state


def _user_index(kind: str, repo: Path, git: GitRunner) -> None:
    """Set up the user's index (and configuration) a seed copies from."""
    if kind == "skip-worktree":
        git(repo, "update-index", "--skip-worktree", "a.txt")
    elif kind == "assume-unchanged":
        git(repo, "update-index", "--assume-unchanged", "a.txt")
    elif kind == "split-index":
        git(repo, "config", "core.splitIndex", "yes")
        git(repo, "update-index", "--split-index")
    elif kind == "sparse-bare-key":
        with open(repo / ".git" / "config", "a") as config:
            config.write("[core]\n\tsparseCheckout\n")
    elif kind.startswith("autocrlf-"):
        value = kind.removeprefix("autocrlf-")
        if value == "bare-key":
            with open(repo / ".git" / "config", "a") as config:
                config.write("[core]\n\tautocrlf\n")
        else:
            git(repo, "config", "core.autocrlf", value)


# What each seed runs before the full scan. Before (round 8): ``config --get-regexp`` (split
# index, sparse checkout), ``ls-files --stage`` (the copy readable), ``ls-files -v`` (hiding
# bits), ``ls-files -z`` (paths), ``config --get core.autocrlf``, then ``check-attr``. Round 11:
# no ``check-attr`` where no attributes file can reach an entry (AttributeSources.may_apply), and
# the copy's list of its .gitattributes entries spares the full scan after it one too.
_UNHIDE = ["ls-files", "update-index"]
_EVERY_PATH = ["ls-files", "ls-files", "fast-import", "update-index"]  # stored ids, raw blobs
SEEDS = {
    "plain": ["ls-files"],
    "skip-worktree": _UNHIDE,
    "assume-unchanged": _UNHIDE,
    # Not a plain index (a bare key is true to git): HEAD's tree, not a copy.
    "split-index": ["rev-parse", "read-tree"],
    "sparse-bare-key": ["rev-parse", "read-tree"],
    # Every entry may hold converted bytes: each is compared with the disk, none asked about.
    "autocrlf-true": _EVERY_PATH,
    "autocrlf-input": _EVERY_PATH,
    "autocrlf-bare-key": _EVERY_PATH,
}


@pytest.mark.parametrize("kind", SEEDS)
def test_a_seed_reads_the_user_index_once_and_keeps_the_bytes_on_disk(
    repo: Path, git: GitRunner, started: Started, kind: str
) -> None:
    (repo / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    (repo / "b.txt").write_bytes(b"plain\n")
    git(repo, "add", "a.txt", "b.txt")
    git(repo, "commit", "-q", "-m", "files")
    _user_index(kind, repo, git)
    # Changes the hiding bits would hide, and a CRLF file autocrlf would convert.
    (repo / "a.txt").write_bytes(b"changed\r\nbytes\r\n")
    (repo / "c.txt").write_bytes(b"new\r\n")
    ws = Workspace.find(repo)
    started.clear()
    snapper = Snapshotter(ws)
    assert started == [], "a Snapshotter reads its configuration with the filter drivers"
    snap = snapper.take_locked()
    seed = started[: started.index("diff-files")]
    assert seed == SEEDS[kind]
    # The full scan after it: its listings, the hashing, the tree; no configuration read. After
    # a copy it knows the index's .gitattributes entries (none here): no check-attr.
    copied = "read-tree" not in seed
    assert started[len(seed) :] == [
        "diff-files",
        "ls-files",
        "update-index",
        *([] if copied else ["check-attr"]),
        "ls-files",
        "ls-files",
        "write-tree",
    ]
    assert _snapshot_state(git, repo, snap.tree) == capture_tree(repo)


def test_a_new_snapshotter_sees_the_configuration_as_it_is_now(
    repo: Path, git: GitRunner, tmp_path: Path
) -> None:
    ws = Workspace.find(repo)
    Snapshotter(ws).take_locked()
    ignore = tmp_path / "ignore-this"
    ignore.write_text("secret.txt\n")
    (repo / "secret.txt").write_text("s\n")
    git(repo, "config", "core.excludesFile", str(ignore))
    snap = Snapshotter(ws).take_locked()
    assert "secret.txt" not in git.tree(repo, snap.tree)


def test_a_seed_reads_the_configuration_as_it_is_at_the_seed(
    repo: Path, git: GitRunner, started: Started
) -> None:
    """The settings are read when the seed runs, not when the Snapshotter was made: an index
    made split meanwhile (the agent may) is not copied."""
    ws = Workspace.find(repo)
    snapper = Snapshotter(ws)
    snapper.take_locked()
    git(repo, "config", "core.splitIndex", "true")
    git(repo, "update-index", "--split-index")
    (repo / "new.txt").write_text("n\n")
    snapper.discard_index()
    started.clear()
    snap = snapper.take_locked()
    assert started[:3] == ["config -z", "rev-parse", "read-tree"]
    assert _snapshot_state(git, repo, snap.tree) == capture_tree(repo)


def test_a_runs_first_mirror_save_is_one_update_ref(
    repo: Path, git: GitRunner, state_home: Path, started: Started
) -> None:
    ws = Workspace.find(repo)
    mirror = Mirror.for_workspace(ws)
    assert mirror.ensure() is None
    started.clear()
    run = RunStore(ws).create(None, manual=True, reason="a test")
    assert [c for c in started if c != "rev-parse"] == ["update-ref"]
    state = mirror.state(run.run_id)
    assert state is not None and state.ledger_bytes == (run.dir / "events.jsonl").stat().st_size
    # The loose commit is git's own: fsck takes it, and git reads the ledger back.
    assert mirror.local is not None
    fsck = subprocess.run(
        ["git", "--git-dir", str(mirror.local), "fsck", "--strict"], capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stderr
    assert mirror.read_file(run.run_id, "events.jsonl") == (run.dir / "events.jsonl").read_bytes()
    ref = f"{STATE_REF}/{run.run_id}"
    assert git(mirror.local, "rev-parse", ref) == state.commit


def test_a_new_mirror_is_a_clone_and_no_listing_of_its_refs(
    repo: Path, git: GitRunner, state_home: Path, started: Started
) -> None:
    """A bare clone copies branches only: the refs the agent may have made under refs/paella
    (or remotes, tags) never reach the mirror, and no ``for-each-ref`` is needed to know it."""
    head = git(repo, "rev-parse", "HEAD")
    for ref in ("refs/paella/forged/checkpoints/1", "refs/remotes/origin/x", "refs/tags/t"):
        git(repo, "update-ref", ref, head)
    git(repo, "branch", "other")
    ws = Workspace.find(repo)
    mirror = Mirror.for_workspace(ws)
    started.clear()
    assert mirror.ensure() is None
    assert started == ["clone"]
    assert mirror.local is not None
    refs = git(mirror.local, "for-each-ref", "--format=%(refname)").split()
    assert sorted(refs) == sorted(
        git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/").split()
    )
    # No template (the tests' own has no sample hooks, a user's has 13 files): git's own only.
    assert sorted(p.name for p in mirror.local.iterdir()) == [
        "HEAD",
        "config",
        "objects",
        "packed-refs",
        "refs",
    ]


@pytest.mark.parametrize("where", ["loose", "packed"])
@pytest.mark.parametrize("ref", ["refs/paella/x/checkpoints/1", "refs/remotes/origin/x"])
def test_a_clone_holding_refs_to_drop_is_listed_by_git(
    tmp_path: Path, git: GitRunner, ref: str, where: str
) -> None:
    """Were a clone ever to hold such a ref (another git, another way), its files say so and
    the listing by git (which drops them) runs."""
    src = tmp_path / "src"
    git(tmp_path, "init", "-q", str(src))
    git(src, "commit", "-q", "--allow-empty", "-m", "a")
    clone = tmp_path / "m.git"
    git(tmp_path, "clone", "-q", "--bare", "--no-tags", str(src), str(clone))
    assert clone_holds_only_branches(clone)
    git(clone, "update-ref", ref, git(src, "rev-parse", "HEAD"))
    if where == "packed":
        git(clone, "pack-refs", "--all")
        # Only packed-refs names it then (pack-refs leaves the empty folders: gone too).
        folder = clone / "refs" / ref.split("/")[1]
        assert not [f for f in folder.rglob("*") if f.is_file()]
        shutil.rmtree(folder)
    assert not clone_holds_only_branches(clone)


HEADS = {
    "unborn branch": [],
    "a branch": [["commit", "-q", "--allow-empty", "-m", "a"]],
    "a branch a tag shadows": [["commit", "-q", "--allow-empty", "-m", "a"], ["tag", "main"]],
    "detached": [["commit", "-q", "--allow-empty", "-m", "a"], ["checkout", "-q", "--detach"]],
    "an orphan branch": [
        ["commit", "-q", "--allow-empty", "-m", "a"],
        ["checkout", "-q", "--orphan", "new/one"],
    ],
}


@pytest.mark.parametrize("where", list(HEADS))
def test_head_and_its_full_branch_name_in_one_reading(
    tmp_path: Path, git: GitRunner, started: Started, where: str
) -> None:
    """A rollback reads HEAD once: the commit, the short branch name as ``symbolic-ref
    --short`` gives it, and the full one as ``symbolic-ref`` does; from the files, with no git
    process, when the branch's ref and commit are loose and no tag shadows the branch's name."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for args in HEADS[where]:
        git(repo, *args)
    ws = Workspace.find(repo)
    started.clear()
    head, ref = ws.head_and_ref()
    seen = list(started)
    if where in ("a branch", "detached"):
        assert seen == []
    elif git.head(repo) is not None:
        assert seen == ["rev-parse"]
    assert head == ws.head()
    assert head.commit == git.head(repo)
    assert head.branch == (git.branch(repo) or None)
    assert ref == (git.run(repo, "symbolic-ref", "-q", "HEAD").stdout.strip() or None)


def _take(snapper: Snapshotter, git: GitRunner, repo: Path, started: Started) -> str:
    """A snapshot's tree (``started`` holds only its git processes), checked against the work
    tree byte for byte."""
    started.clear()
    tree = snapper.take_locked().tree
    seen = list(started)
    assert _snapshot_state(git, repo, tree) == capture_tree(repo)
    started[:] = seen
    return tree


def _private_write_tree(git: GitRunner, repo: Path, snapper: Snapshotter) -> str:
    """What ``write-tree`` gives on the private index now (the honest answer)."""
    proc = subprocess.run(
        ["git", "write-tree"],
        cwd=repo,
        env={**os.environ, "GIT_INDEX_FILE": str(snapper.index_file)},
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def test_a_snapshot_that_finds_nothing_changed_runs_only_its_two_listings(
    repo: Path, git: GitRunner, started: Started
) -> None:
    """No ``update-index`` with nothing to do, no ``write-tree`` over the index the last
    snapshot wrote: the memo's tree is the same tree; a change brings both back."""
    (repo / "a.txt").write_text("one\n")
    snapper = Snapshotter(Workspace.find(repo))
    first = _take(snapper, git, repo, started)
    assert _take(snapper, git, repo, started) == first
    assert started == ["diff-files", "ls-files"]
    (repo / "a.txt").write_text("two\n")
    changed = _take(snapper, git, repo, started)
    assert changed != first
    assert started == ["diff-files", "ls-files", "update-index", "write-tree"]
    assert _take(snapper, git, repo, started) == changed
    assert started == ["diff-files", "ls-files"]


def test_a_snapshot_whose_tree_object_is_gone_asks_write_tree_again(
    repo: Path, git: GitRunner, started: Started
) -> None:
    (repo / "a.txt").write_text("one\n")
    snapper = Snapshotter(Workspace.find(repo))
    tree = _take(snapper, git, repo, started)
    loose = repo / ".git" / "objects" / tree[:2] / tree[2:]
    loose.unlink()  # as a `git gc --prune=now` of an unnamed tree would
    assert _take(snapper, git, repo, started) == tree
    assert started == ["diff-files", "ls-files", "write-tree"]
    assert loose.is_file()


def test_a_private_index_changed_under_the_same_memo_is_written_as_it_is(
    repo: Path, git: GitRunner, started: Started
) -> None:
    """The memo's tree is taken only for the index whose checksum it kept: an index rewritten
    with other entries (here an ignored file added behind paella's back, which no listing
    shows) under the memo's inode, size and times (a reused inode in one clock tick, forged
    here) gives what ``write-tree`` gives."""
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "kept.log").write_text("ignored\n")
    snapper = Snapshotter(Workspace.find(repo))
    before = snapper.take_locked().tree
    env = {**os.environ, "GIT_INDEX_FILE": str(snapper.index_file)}
    subprocess.run(["git", "update-index", "--add", "kept.log"], cwd=repo, env=env, check=True)
    memo = json.loads(snapper.memo_file.read_text())
    st = os.stat(snapper.index_file)
    memo["index"] = [st.st_ino, st.st_size, st.st_mtime_ns]
    snapper.memo_file.write_text(json.dumps(memo))
    started.clear()
    tree = snapper.take_locked().tree
    assert "write-tree" in started
    assert tree == _private_write_tree(git, repo, snapper) != before
    assert "kept.log" in git.tree(repo, tree)


@pytest.mark.parametrize(
    "forged",
    [
        ".." + "info/../" * 5 + "HEAD",  # objects/../info/../…/HEAD: .git/HEAD, a real file
        "0" * 39,
        "A" * 40,
        "a" * 41,
        "g" * 40,
        40,
        None,
    ],
    ids=["a path", "too short", "upper case", "41 digits", "not hex", "a number", "null"],
)
def test_a_memo_tree_that_is_no_object_name_is_never_used(
    repo: Path, git: GitRunner, started: Started, forged: object
) -> None:
    """The memo lives in the git dir, where the agent writes: a tree that is not an object name
    (40 or 64 lowercase hex digits) is never joined into a path nor taken as the tree; git's
    ``write-tree`` answers instead."""
    (repo / "a.txt").write_text("one\n")
    snapper = Snapshotter(Workspace.find(repo))
    honest = _take(snapper, git, repo, started)
    memo = json.loads(snapper.memo_file.read_text())
    memo["tree"] = forged
    snapper.memo_file.write_text(json.dumps(memo))
    assert _take(snapper, git, repo, started) == honest
    assert started == ["diff-files", "ls-files", "write-tree"]


def test_a_followed_snapshot_after_a_rule_change_lists_the_ignored_entries_once(
    repo: Path, git: GitRunner, started: Started
) -> None:
    """The ignored entries the private index keeps (the watcher cannot see them) are the ones
    the drop of newly ignored entries listed, not a listing of their own; the memo holds what
    that listing would give."""
    (repo / "a.txt").write_text("a\n")
    (repo / "b.log").write_text("b\n")
    (repo / "forced.log").write_text("f\n")
    (repo / ".gitignore").write_text("*.tmp\n")
    git(repo, "add", "a.txt", ".gitignore")
    git(repo, "add", "-f", "forced.log")
    git(repo, "commit", "-q", "-m", "files")
    snapper = Snapshotter(Workspace.find(repo))
    snapper.changes.follow()
    snapper.take_locked(follow_changes=True)  # the first is a full scan
    (repo / ".gitignore").write_text("*.log\n")
    snapper.changes.note([".gitignore"])
    started.clear()
    tree = snapper.take_locked(follow_changes=True).tree
    # The listings, the rule change (the private index's ignored entries, the user's), the
    # newly ignored entry out, the tree; the ignored entries kept are not listed again.
    assert started == [
        "diff-files",
        "ls-files",
        "update-index",
        "ls-files",
        "ls-files",
        "update-index",
        "write-tree",
    ]
    assert set(git.tree(repo, tree)) == {"README.md", "a.txt", ".gitignore", "forced.log"}
    blind = json.loads(snapper.memo_file.read_text())["blind"]
    listed = subprocess.run(
        ["git", "ls-files", "-z", "-c", "-i", "--exclude-standard"],
        cwd=repo,
        env={**os.environ, "GIT_INDEX_FILE": str(snapper.index_file)},
        capture_output=True,
        check=True,
    ).stdout
    assert blind == [p.decode() for p in listed.split(b"\0") if p] == ["forced.log"]


# Where the attribute that made the user's index hold converted bytes (``text``: CRLF stored as
# LF) is when the seed copies that index; whether the seed asks ``check-attr``.
SEED_ATTRIBUTES = {
    "no attributes file": (None, False),
    "on disk and in the index": ("sub/.gitattributes", True),
    "in the index only (gone from disk)": ("sub/.gitattributes", True),
    "in info/attributes": (".git/info/attributes", True),
}


@pytest.mark.parametrize("case", SEED_ATTRIBUTES)
def test_a_seed_asks_check_attr_only_where_an_attributes_file_can_reach_and_keeps_raw_bytes(
    repo: Path, git: GitRunner, started: Started, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(repo.parent / "config"))  # no global file
    rules, asks = SEED_ATTRIBUTES[case]
    (repo / "sub").mkdir()
    if rules is not None:
        (repo / rules).parent.mkdir(parents=True, exist_ok=True)
        (repo / rules).write_text("*.txt text\n")
    (repo / "sub" / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    if case.startswith("in the index only"):
        (repo / "sub" / ".gitattributes").unlink()
    if rules is not None:  # the user's index holds git's conversion, not the bytes on disk
        assert git(repo, "cat-file", "blob", ":sub/a.txt") == "one\ntwo"
    snapper = Snapshotter(Workspace.find(repo))
    started.clear()
    tree = snapper.take_locked().tree
    seed = started[: started.index("diff-files")]
    assert _snapshot_state(git, repo, tree) == capture_tree(repo)
    assert ("check-attr" in seed) == asks


def _rollback_and_status(repo: Path, git: GitRunner, started: Started, *, packed: bool) -> Started:
    """The git processes of ``paella rollback 1 --yes`` and then ``paella status`` after a
    checkpoint (with ``packed``: every ref and object packed by git, as a ``gc`` leaves them),
    each command's answer checked."""
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    assert run_paella_in_process(repo, "checkpoint").returncode == 0
    if packed:
        git(repo, "pack-refs", "--all")
        git(repo, "repack", "-a", "-d", "-q")
        git(repo, "prune-packed")
    (repo / "a.txt").write_text("two\n")
    (repo / "b.txt").write_text("new\n")
    head = git.head(repo)
    started.clear()
    proc = run_paella_in_process(repo, "rollback", "1", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert (repo / "a.txt").read_text() == "one\n" and not (repo / "b.txt").exists()
    status = run_paella_in_process(repo, "status")
    assert status.returncode == 0 and "warning" not in status.stderr, status.stderr
    seen = Started(started)
    assert git.head(repo) == head and git.branch(repo) == "main"
    # The salvage holds what the rollback replaced; its undo brings it back.
    assert run_paella_in_process(repo, "rollback", "salvage:1", "--yes").returncode == 0
    assert (repo / "a.txt").read_text() == "two\n" and (repo / "b.txt").read_text() == "new\n"
    return seen


@pytest.mark.usefixtures("state_home")
@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_rollback_and_status_read_head_refs_and_commits_from_the_files(
    repo: Path, git: GitRunner, started: Started, packed: bool
) -> None:
    """A rollback checks its target commit (``rev-parse --verify``, twice), reads HEAD
    (``rev-parse``), its salvage compares the index's tree with HEAD's (``rev-parse``), the
    rollback and ``status`` check the run's snapshot refs (``for-each-ref`` of the repository)
    and the rollback the trees of the commits they name (``cat-file --batch-check``). Read from
    the loose refs and objects (checked against their ids) when they are plain: no git process
    for any of them, only each command's workspace discovery, the mirror's refs and the
    restore's blobs. Packed (as before this, for every case), git answers them: 7 processes
    more, and the commands do the same. The status finds the workspace as the rollback did
    (nothing discovery reads changed): no second ``rev-parse`` for it."""
    seen = _rollback_and_status(repo, git, started, packed=packed)
    counts = {name: seen.count(name) for name in ("rev-parse", "for-each-ref", "cat-file")}
    if packed:
        # rev-parse: discovery, the target x2, HEAD, HEAD's tree; for-each-ref: the
        # repository's refs x2, the mirror's; cat-file: the commits' trees, the restore's blobs.
        assert counts == {"rev-parse": 5, "for-each-ref": 3, "cat-file": 2}
    else:
        assert counts == {"rev-parse": 1, "for-each-ref": 1, "cat-file": 1}


def test_a_process_finds_its_workspace_again_with_no_git_while_nothing_it_reads_changed(
    repo: Path, git: GitRunner, started: Started, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command opens the workspace (``rev-parse --show-toplevel --git-dir ...``); a
    process that runs several (the TUI, a test through ``cli.main``) asks git once, and again
    whenever the layout, configuration, HEAD or environment it was answered from changed."""
    sub = repo / "sub"
    sub.mkdir()
    started.clear()
    first = Workspace.find(sub)
    assert first.root == repo and started == ["config -z", "rev-parse"]
    started.clear()
    assert Workspace.find(sub) == first
    assert started == []
    # A repository made in between: git is asked, and finds it.
    git(sub, "init", "-q")
    started.clear()
    nested = Workspace.find(sub)
    assert nested.root == sub and nested.git_dir == sub / ".git"
    assert "rev-parse" in started
    started.clear()
    assert Workspace.find(sub) == nested and started == []
    # Its objects folder gone, it is no git dir for git: found above it again.
    shutil.rmtree(sub / ".git" / "objects")
    assert Workspace.find(sub) == first
    # HEAD moved to another branch (the configuration may depend on it): asked again.
    assert Workspace.find(repo) == first
    started.clear()
    assert Workspace.find(repo) == first and started == []
    git(repo, "checkout", "-q", "-b", "other")
    started.clear()
    assert Workspace.find(repo) == first
    assert started == ["config -z", "rev-parse"]
    # Another environment (a variable git reads): asked again.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo.parent))
    started.clear()
    assert Workspace.find(repo) == first and started == ["rev-parse"]


@pytest.mark.usefixtures("state_home")
def test_the_step_pruning_of_a_workspaces_first_run_lists_no_refs(
    repo: Path, started: Started
) -> None:
    """A run's start prunes the expired steps of the other runs (one ``for-each-ref`` over the
    workspace's refs); with no other run folder there is nothing to prune, and no listing."""
    store = RunStore(Workspace.find(repo))
    run = store.create(None, manual=True)
    started.clear()
    assert prune_expired(store, skip=run.run_id) == []
    assert started == []
    other = store.create(None, manual=True)
    started.clear()
    assert prune_expired(store, skip=other.run_id) == []  # the first run has no steps to prune
    assert started == ["for-each-ref"]


def test_the_frozen_files_diff_each_of_the_newest_trees_once(
    repo: Path, git: GitRunner, started: Started
) -> None:
    """A rollback returns to a tree asked about a few trees before: its changes from the frozen
    tree (a function of the two object ids alone) are kept for the newest trees, each diffed
    once; one older than that is asked of git again, with the same answer."""
    workspace = Workspace.find(repo)
    snapper = Snapshotter(workspace)
    start = snapper.take_locked().tree
    trees = []
    for n in range(KEPT_DIFFS + 1):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
        trees.append(snapper.take_locked().tree)
    frozen = FrozenFiles(workspace, ["f0.txt"], start)
    started.clear()
    first = [frozen.changes(tree) for tree in trees[1:]]
    assert started == ["diff-tree"] * KEPT_DIFFS
    started.clear()
    assert [frozen.changes(tree) for tree in reversed(trees[1:])] == first[::-1]
    assert [c.path for c in frozen.differing(trees[-1])] == ["f0.txt"]
    assert started == []
    assert [c.path for c in frozen.changes(trees[0])] == ["f0.txt"]
    assert started == ["diff-tree"]
    assert frozen.changes(trees[1]) == first[0]  # asked since trees[3]: still kept
    assert frozen.known_changes(trees[3]) is None  # the least recently asked: dropped
    assert started == ["diff-tree"]
    assert first[-1] == tree_changes(Git(repo), start, trees[-1])
