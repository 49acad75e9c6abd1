"""No git command paella runs starts a program the workspace's configuration names.

A canary program records every time it runs. Each case plants program-running keys (a
clean/smudge/process filter, fsmonitor, an external diff, a diff driver's command or textconv,
signatures, hooks, a pager), each alone in ``.git/config`` and all at once in each place an
agent can write (``.git/config``, a file it includes, ``config.worktree``; the attribute that
chooses a driver in ``info/attributes`` or a nested ``.gitattributes``), before the run or
after its first checkpoint, then drives the real
engine: snapshots, checkpoints, steps, the bisect's scratch tree, ``paella diff``/``log``/
``status``/``checkpoints``/``steps``, and a rollback with its undo. The canary must never have
run, and every checkpoint must hold the bytes on disk (the filters' canary uppercases).
One real ``paella run --headless`` (through ``cli.main`` in the test process) whose agent
plants everything mid-run closes the module.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import GitRunner, copy_git_dir, index_of_copy, make_repo, run_paella_in_process
from hostile_project import HostileProject, no_traceback

from paella_tui.supervisor.contract.model import Gate
from paella_tui.supervisor.judge.bisect import Bisection
from paella_tui.supervisor.run.runs import RunStore
from paella_tui.supervisor.store.checkpoints import take_checkpoint
from paella_tui.supervisor.store.git_programs import _Seen, _settled, config_watch, guarded_args
from paella_tui.supervisor.store.gitcli import Git
from paella_tui.supervisor.store.index_update import AttributeSources
from paella_tui.supervisor.store.snapshot import Snapshotter
from paella_tui.supervisor.store.steps import records, take_step
from paella_tui.supervisor.store.workspace import Workspace

CANARY = """\
#!/bin/sh
echo "$1" >> "{log}"
case "$1" in clean|smudge|textconv) exec tr a-z A-Z ;; esac
exit 0
"""
HOOKS = (
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-push",
    "pre-receive",
    "post-update",
    "fsmonitor-watchman",
)
FILES = ("sub/deep/a.txt", "sub/deep/b.txt", "sub/deep/c.txt")
"""The files every case changes, under the folder whose ``.gitattributes`` a case may plant."""
FILE = FILES[0]


def config_lines(key: str, canary: str, hooks: Path) -> str:
    """The configuration (git-config syntax) that makes git run the canary through ``key``
    (each driver its own name, so that every key can be planted at once)."""
    return {
        "filter-clean": f'[filter "fclean"]\n\tclean = {canary} clean\n',
        "filter-smudge": f'[filter "fsmudge"]\n\tsmudge = {canary} smudge\n',
        "filter-process": f'[filter "fprocess"]\n\tprocess = {canary} process\n',
        "diff-textconv": f'[diff "dtextconv"]\n\ttextconv = {canary} textconv\n',
        "diff-command": f'[diff "dcommand"]\n\tcommand = {canary} diffcmd\n',
        "diff-external": f"[diff]\n\texternal = {canary} external\n",
        "fsmonitor": f"[core]\n\tfsmonitor = {canary} fsmonitor\n",
        "signatures": (
            f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {canary} gpg\n"
            f"[commit]\n\tgpgSign = true\n[push]\n\tgpgSign = true\n"
        ),
        "hooks": f"[core]\n\thooksPath = {hooks}\n",
        "pager": f"[core]\n\tpager = {canary} pager\n[pager]\n\tdiff = {canary} pager\n",
    }[key]


ATTRIBUTE = {
    "filter-clean": "a.txt filter=fclean",
    "filter-smudge": "b.txt filter=fsmudge",
    "filter-process": "c.txt filter=fprocess",
    "diff-textconv": "a.txt diff=dtextconv",
    "diff-command": "b.txt diff=dcommand",
}
"""The attribute line that chooses each driver (a name with no slash: a file at any depth)."""
KEYS = [*ATTRIBUTE, "diff-external", "fsmonitor", "signatures", "hooks", "pager"]
EVERY_KEY = "every-key"
CONFIG_PLACES = ["config", "include", "worktree"]
ATTRIBUTE_PLACES = ["info-attributes", "nested-gitattributes"]


def cases() -> list[tuple[str, str, str]]:
    """(keys, where, when): each key alone in ``.git/config`` (its attribute in
    ``info/attributes``), and every key at once in each place; before the run and mid-run."""
    out = []
    for when in ("before", "mid-run"):
        out += [(key, "config+info-attributes", when) for key in KEYS]
        for config_place in CONFIG_PLACES:
            for attribute_place in ATTRIBUTE_PLACES:
                out.append((EVERY_KEY, f"{config_place}+{attribute_place}", when))
    return out


class Planter:
    """Plants one key in one place of a repository, as an agent would."""

    def __init__(self, repo: Path, outside: Path, key: str, where: str) -> None:
        self.repo = repo
        self.keys = KEYS if key == EVERY_KEY else [key]
        self.config_place, _, self.attribute_place = where.partition("+")
        self.log = outside / "canary.log"
        canary = outside / "canary.sh"
        canary.write_text(CANARY.format(log=self.log))
        canary.chmod(0o755)
        self.hooks = outside / "hooks"
        self.hooks.mkdir(exist_ok=True)
        for name in HOOKS:
            hook = self.hooks / name
            hook.write_text(f'#!/bin/sh\n"{canary}" hook-{name}\n')
            hook.chmod(0o755)
        self.text = "".join(config_lines(k, str(canary), self.hooks) for k in self.keys)

    def plant(self) -> None:
        """Write the key and (for a driver) the attribute that chooses it."""
        git_dir = self.repo / ".git"
        if self.config_place == "config":
            _append(git_dir / "config", self.text)
        elif self.config_place == "include":
            # A file in the work tree (it is snapshotted too), named relative to .git/config.
            _append(self.repo / "tools" / "team.cfg", self.text)
            _append(git_dir / "config", "[include]\n\tpath = ../tools/team.cfg\n")
        else:
            _append(git_dir / "config", "[extensions]\n\tworktreeConfig = true\n")
            _append(git_dir / "config.worktree", self.text)
        # Every hook in the repository's own hooks folder too (core.hooksPath is not needed).
        for name in HOOKS:
            hook = git_dir / "hooks" / name
            hook.parent.mkdir(exist_ok=True)
            hook.write_text((self.hooks / name).read_text())
            hook.chmod(0o755)
        lines = "".join(f"{ATTRIBUTE[k]}\n" for k in self.keys if k in ATTRIBUTE)
        if self.attribute_place == "info-attributes":
            _append(git_dir / "info" / "attributes", lines)
        else:
            _append(self.repo / "sub" / "deep" / ".gitattributes", lines)

    def ran(self) -> list[str]:
        """What the canary recorded (empty: it never ran)."""
        return self.log.read_text().split() if self.log.exists() else []


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(text)


def blob(repo: Path, commit: str, path: str) -> bytes:
    """The bytes ``commit`` holds at ``path`` (git's own, no filter: ``cat-file blob``)."""
    return subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{path}"], cwd=repo, capture_output=True, check=True
    ).stdout


def blobs(repo: Path, *names: str) -> list[bytes]:
    """The bytes of each ``commit:path`` in ``names``, as ``blob`` reads them (git's own, no
    filter), through one ``cat-file --batch`` rather than a process each."""
    out = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=repo,
        input="".join(f"{name}\n" for name in names).encode(),
        capture_output=True,
        check=True,
    ).stdout
    found, pos = [], 0
    for name in names:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split()
        assert len(header) == 3 and header[1] == "blob", f"{name}: {' '.join(header)}"
        size = int(header[2])
        found.append(out[end + 1 : end + 1 + size])
        pos = end + 1 + size + 1
    return found


def read(repo: Path, *args: str) -> str:
    proc = run_paella_in_process(repo, *args)
    no_traceback(proc)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def _write_files(repo: Path) -> None:
    (repo / "sub" / "deep").mkdir(parents=True)
    for path in FILES:
        (repo / path).write_bytes(b"one\r\n")


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory, git: GitRunner) -> Path:
    """``make_repo``'s repository with ``FILES`` added and committed ("one"), made once per
    module (per worker): each case gets a copy (``committed_copy``)."""
    repo = make_repo(tmp_path_factory.mktemp("committed") / "repo", git)
    _write_files(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    return repo


def committed_copy(committed: Path, repo: Path) -> Path:
    """``committed`` at ``repo``, as ``make_repo`` copies its template: the same ``.git``, the
    work tree's files written again, the index with their own stat data (no git process)."""
    repo.mkdir(parents=True)
    copy_git_dir(committed / ".git", repo / ".git")
    (repo / "README.md").write_text("hello\n")
    _write_files(repo)
    (repo / ".git" / "index").write_bytes(index_of_copy(committed / ".git" / "index", repo))
    return repo.resolve()


@pytest.mark.parametrize(("key", "where", "when"), cases())
def test_no_program_the_configuration_names_ever_runs(
    tmp_path: Path, committed: Path, key: str, where: str, when: str
) -> None:
    repo = committed_copy(committed, tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    agent = Planter(repo, outside, key, where)
    if when == "before":
        agent.plant()

    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = Snapshotter(workspace)
    first = take_checkpoint(run, snapshotter, label="one")
    step0 = take_step(run, first.tree, previous=None, tail=[])
    if when == "mid-run":
        agent.plant()
    # The agent's next change, seen by a snapshot, kept as a step and a checkpoint.
    for path in FILES:
        (repo / path).write_bytes(b"two\r\n")
    (repo / "new.txt").write_bytes(b"new\n")
    step1 = take_step(run, snapshotter.take_locked().tree, previous=step0, tail=[])
    second = take_checkpoint(run, snapshotter, label="two")
    assert step1 is not None

    # The bisect checks out each step in a scratch tree (its gate is paella's own here).
    gate = Gate(
        name="one", argv=("grep", "-q", "one", FILE), cmd="", timeout=20.0, retries=0, paths=()
    )
    found = asyncio.run(Bisection(run=run, gate=gate, steps=records(run), known={}).find())
    assert (found.verdict, found.step) == ("found", 1), found

    # Every reader a person runs on the run.
    for args in (
        ("status",),
        ("checkpoints",),
        ("log",),
        ("diff",),
        ("diff", "1"),
        ("steps",),
        ("diff", "step:1"),
    ):
        read(repo, *args)
    rolled = read(repo, "rollback", "1", "--yes")
    assert "rolled back to 1" in rolled
    assert all((repo / path).read_bytes() == b"one\r\n" for path in FILES)
    undo = read(repo, "rollback", "salvage:1", "--yes")
    assert "rolled back" in undo
    assert all((repo / path).read_bytes() == b"two\r\n" for path in FILES)

    assert agent.ran() == [], f"{key} planted in {where} {when}: the canary ran as {agent.ran()}"
    # Raw bytes in every checkpoint, whatever the filters would have made of them.
    names = [f"{commit}:{path}" for commit in (first.commit, second.commit) for path in FILES]
    assert blobs(repo, *names) == [b"one\r\n"] * len(FILES) + [b"two\r\n"] * len(FILES)


def test_a_filter_named_by_an_include_that_holds_only_on_a_branch_never_runs(
    tmp_path: Path, git: GitRunner
) -> None:
    """``includeIf "onbranch:"``: the included file applies once HEAD moves to the branch, with
    no configuration file changed at all; HEAD is watched too."""
    repo = make_repo(tmp_path / "repo", git)
    outside = tmp_path / "outside"
    outside.mkdir()
    agent = Planter(repo, outside, "filter-clean", "config+info-attributes")
    (repo / ".git" / "team.cfg").write_text(agent.text)
    (repo / ".git" / "info" / "attributes").write_text("* filter=fclean\n")
    with open(repo / ".git" / "config", "a") as handle:
        handle.write('[includeIf "onbranch:evil"]\n\tpath = team.cfg\n')
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = Snapshotter(workspace)
    take_checkpoint(run, snapshotter, label="main")
    git(repo, "checkout", "-q", "-b", "evil")
    agent.log.unlink(missing_ok=True)  # the test's own checkout ran it: the agent's git may
    (repo / "a.txt").write_bytes(b"lower\n")
    second = take_checkpoint(run, snapshotter, label="evil")
    assert agent.ran() == []
    assert blob(repo, second.commit, "a.txt") == b"lower\n"


def test_a_filter_in_a_linked_worktrees_own_config_mid_run_never_runs(
    tmp_path: Path, git: GitRunner
) -> None:
    """A linked worktree reads ``config.worktree`` from its own git dir
    (``.git/worktrees/<name>``) once ``extensions.worktreeConfig`` is on: watched too."""
    repo = make_repo(tmp_path / "repo", git)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    outside = tmp_path / "outside"
    outside.mkdir()
    agent = Planter(linked, outside, "filter-clean", "worktree+info-attributes")
    workspace = Workspace.find(linked)
    run = RunStore(workspace).create(None, manual=True)
    snapshotter = Snapshotter(workspace)
    take_checkpoint(run, snapshotter, label="before")
    _append(workspace.common_dir / "config", "[extensions]\n\tworktreeConfig = true\n")
    _append(workspace.git_dir / "config.worktree", agent.text)
    _append(workspace.common_dir / "info" / "attributes", "*.txt filter=fclean\n")
    (linked / "a.txt").write_bytes(b"lower\r\n")
    record = take_checkpoint(run, snapshotter, label="after")
    read(linked, "diff", "1")
    assert agent.ran() == []
    assert blob(linked, record.commit, "a.txt") == b"lower\r\n"


def test_a_filter_name_with_any_byte_is_neutralised(tmp_path: Path, git: GitRunner) -> None:
    """Driver names are passed with ``--config-env``: a ``=`` or a space in one cannot split
    the option the way ``-c key=value`` would."""
    repo = make_repo(tmp_path / "repo", git)
    outside = tmp_path / "outside"
    outside.mkdir()
    agent = Planter(repo, outside, "filter-clean", "config+info-attributes")
    for name in ("a=b", "with space", "dot.ted", "x=y.clean"):
        text = agent.text.replace('"fclean"', f'"{name}"')
        with open(repo / ".git" / "config", "a") as handle:
            handle.write(text)
        _append(repo / ".git" / "info" / "attributes", f"{name.split()[0]}.txt filter={name}\n")
        (repo / f"{name.split()[0]}.txt").write_bytes(b"lower\n")
    workspace = Workspace.find(repo)
    run = RunStore(workspace).create(None, manual=True)
    record = take_checkpoint(run, Snapshotter(workspace), label="names")
    assert agent.ran() == []
    assert blob(repo, record.commit, "a=b.txt") == b"lower\n"


def test_the_configuration_is_read_again_only_when_a_file_it_comes_from_changed(
    tmp_path: Path, git: GitRunner
) -> None:
    """The watch reads git's configuration once, then again only after a change of content in
    a file git reads it from (an include's included file too)."""
    repo = make_repo(tmp_path / "repo", git)
    runner = Git(repo)
    watch = config_watch(repo)
    for _ in range(3):
        runner.out(["rev-parse", "HEAD"])
    assert watch.reads == 1 and watch.filters == ()
    _append(repo / ".git" / "config", "[include]\n\tpath = more.cfg\n")
    runner.out(["rev-parse", "HEAD"])
    assert watch.reads >= 2
    reads = watch.reads
    runner.out(["rev-parse", "HEAD"])
    assert watch.reads == reads
    # The included file did not exist; it appears with a filter: seen at the next command.
    _append(repo / ".git" / "more.cfg", '[filter "late"]\n\tclean = false\n')
    runner.out(["rev-parse", "HEAD"])
    assert watch.filters == ("late",)
    argv = runner.command(["status"])
    assert "--config-env=filter.late.clean=PAELLA_GIT_EMPTY" in argv


def test_a_rewrite_that_keeps_the_inode_size_and_mtime_is_seen_at_the_next_command(
    tmp_path: Path, git: GitRunner
) -> None:
    """The watch reads a file's content again only when its stat changed; the agent can keep
    the inode, the size and the mtime of ``.git/config`` while it plants a filter, but not the
    ctime: the very next command turns the filter off. A file whose stat is unchanged (and old
    enough to tell) is not read at all."""
    repo = make_repo(tmp_path / "repo", git)
    config = repo / ".git" / "config"
    _append(config, "[x]\n\tpad = " + "p" * 40 + "\n")
    time.sleep(0.1)  # older than the clock's step: the stat then stands for the content
    runner = Git(repo)
    watch = config_watch(repo)
    runner.out(["rev-parse", "HEAD"])
    reads = watch.files.reads
    for _ in range(3):
        runner.out(["rev-parse", "HEAD"])
    assert watch.files.reads == reads and watch.reads == 1
    before = config.stat()
    planted = config.read_bytes().replace(
        b"[x]\n\tpad = " + b"p" * 40, b'[filter "kept"]\n\tclean = false\n#'.ljust(51, b"p")
    )
    assert len(planted) == before.st_size
    with open(config, "r+b") as handle:  # in place: the same inode
        handle.write(planted)
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = config.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert "--config-env=filter.kept.clean=PAELLA_GIT_EMPTY" in runner.command(["status"])
    assert watch.filters == ("kept",)


def test_a_stat_stands_for_the_content_only_once_the_clock_has_moved_past_it() -> None:
    """A file changed within the clock's step of the read may change again with the same stat:
    its content is read again (git's racily clean entry); coarse timestamps wait longer."""
    now = time.time_ns()
    fine = now - now % 1_000_000 + 123
    assert not _settled(fine, fine + 10_000_000)
    assert _settled(fine, fine + 60_000_000)
    whole = now - now % 1_000_000_000
    assert not _settled(whole, whole + 60_000_000)
    assert not _settled(whole, whole + 2_500_000_000)
    assert _settled(whole, whole + 3_100_000_000)


def test_a_file_whose_size_is_not_its_content_is_read_at_every_command(tmp_path: Path) -> None:
    """A ``/proc`` file (a symlink may name one; a process can change its own ``cmdline``)
    keeps its times and says size 0: its stat never stands for its content; nor does an empty
    file's."""
    seen = _Seen()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    os.utime(empty, ns=(0, 0))
    time.sleep(0.1)  # settled: only the size rule keeps them from being kept
    for path in ("/proc/self/cmdline", str(empty)):
        seen.content(path)
        reads = seen.reads
        seen.content(path)
        assert seen.reads == reads + 1, path


def test_diff_log_and_show_never_run_a_diff_program_and_transport_flags_are_pinned() -> None:
    assert guarded_args(["diff", "--stat", "a", "b"])[:3] == [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
    ]
    assert "--no-show-signature" in guarded_args(["log", "-p"])
    assert guarded_args(["--git-dir", "/m", "fetch", "url"])[3] == "--upload-pack=git-upload-pack"
    assert "--receive-pack=git-receive-pack" in guarded_args(["push", "url", "a:b"])
    assert guarded_args(["rev-parse", "HEAD"]) == ["rev-parse", "HEAD"]


@pytest.mark.parametrize("how", ["attr.tree in the config, mid-run", "GIT_ATTR_SOURCE"])
def test_attributes_from_a_tree_mean_attributes_may_apply(
    tmp_path: Path, git: GitRunner, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """git 2.40+ reads attributes from a tree (``GIT_ATTR_SOURCE``; 2.42+: ``attr.tree``): with
    no attributes file on disk, the snapshot must still ask ``check-attr``."""
    repo = make_repo(tmp_path / "repo", git)
    workspace = Workspace.find(repo)
    snapshotter = Snapshotter(workspace)
    snapshotter.take_locked()  # the first snapshot looks (no memo yet of the index's files)
    (repo / "a.txt").write_bytes(b"a\r\n")
    snapshotter.take_locked()
    checks = snapshotter.attribute_checks
    (repo / "a.txt").write_bytes(b"c\r\n")
    snapshotter.take_locked()
    assert snapshotter.attribute_checks == checks  # nothing can apply: no check-attr
    if how == "GIT_ATTR_SOURCE":
        monkeypatch.setenv("GIT_ATTR_SOURCE", "HEAD")
    else:
        git(repo, "config", "attr.tree", "HEAD")
    (repo / "a.txt").write_bytes(b"b\r\n")
    snap = snapshotter.take_locked()
    assert snapshotter.attribute_checks == checks + 1
    assert AttributeSources(workspace, b"").from_tree()
    tree_blob = git(repo, "rev-parse", f"{snap.tree}:a.txt")
    assert tree_blob == git(repo, "hash-object", "--no-filters", str(repo / "a.txt"))


def test_a_real_run_whose_agent_plants_every_program_mid_run(
    tmp_path: Path, git: GitRunner
) -> None:
    """``paella run --headless``: after the first checkpoint the agent configures a filter, an
    fsmonitor, diff programs, signatures and hooks, then changes files; the run's own git (the
    next snapshots, checkpoint, evaluation, mirror copy) and the readers after it run none."""
    outside = tmp_path / "canary"
    outside.mkdir()
    planter = Planter(tmp_path, outside, EVERY_KEY, "config+info-attributes")
    attributes = "ok.txt filter=fclean diff=dtextconv\\nmore.txt filter=fprocess diff=dcommand\\n"
    script = (
        "echo ok > ok.txt\n"
        + _WAIT_FOR_CHECKPOINT
        + f"cat >> .git/config <<'EOF'\n{planter.text}EOF\n"
        + f"printf '{attributes}' >> .git/info/attributes\n"
        + f"for h in {' '.join(HOOKS)}; do cp {planter.hooks}/$h .git/hooks/$h; done\n"
        + "printf 'lower\\r\\n' > ok.txt\nprintf 'more\\n' > more.txt\nsleep 1\nexit 0\n"
    )
    p = HostileProject(tmp_path, git, script)
    proc = p.judged("run", "--headless")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for args in (("status",), ("log",), ("diff",), ("checkpoints",), ("diff", "1")):
        got = p.read(*args)
        no_traceback(got)
        assert got.returncode == 0, (args, got.stderr)
    rolled = p.read("rollback", "1", "--yes")
    assert rolled.returncode == 0, rolled.stderr
    assert (p.repo / "ok.txt").read_bytes() == b"ok\n"
    log = outside / "canary.log"
    assert not log.exists(), log.read_text()
    # The rollback's salvage snapshot holds the agent's last tree, byte for byte.
    refs = git(p.repo, "for-each-ref", "--format=%(refname)", "refs/paella").split()
    salvage = next(r for r in refs if "/salvage/" in r)
    assert blob(p.repo, salvage, "ok.txt") == b"lower\r\n"
    assert blob(p.repo, salvage, "more.txt") == b"more\n"


_WAIT_FOR_CHECKPOINT = """\
i=0
until grep -qs '"kind": *"checkpoint"' .git/paella/runs/*/events.jsonl; do
  i=$((i+1)); [ $i -gt 1200 ] && break; sleep 0.05
done
"""
