"""Shared fixtures: an isolated git environment, real repositories, the real ``paella`` command,
and a byte-for-byte picture of a work tree.

Every test runs git with no system configuration and no global one but ``TEST_GIT_CONFIG`` (no
automatic housekeeping; git's template without its sample hooks), a fixed identity for the tests' own commits, ``NO_COLOR`` set and
``PAELLA_STATE_DIR`` unset, so that a developer's ``~/.gitconfig`` (hooks,
``init.defaultBranch``, signing, ``core.autocrlf``) never changes a result.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from bytecode_cache import cache_bytecode
from cpu_meter import pytest_addoption, pytest_configure
from suite_tmp import use_temp_root

# Before xdist starts its workers: they and every subprocess inherit the temporary folder (in
# memory where the machine has room: suite_tmp.py) and the bytecode cache, which needs to know
# where the temporary folder is.
use_temp_root()
cache_bytecode()

# `--cpu-by-file` (cpu_meter.py): where the suite's CPU goes, per test file.
__all__ = ["pytest_addoption", "pytest_configure"]

TEST_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
}

# Variables that would point git or paella somewhere else, or change how they behave.
_REMOVED = (
    "PAELLA_STATE_DIR",
    "PAELLA_MIRROR",
    "PAELLA_TEST_KILL_AT",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OPTIONAL_LOCKS",
    "GIT_TEMPLATE_DIR",
    "EMAIL",
)


# The tests' only "global" git configuration. Every `git commit` (1,757 in a run, the fixtures'
# own) and `git fetch` otherwise starts `git maintenance run --auto`, a process that looks at
# the repository and finds nothing to do in a test's few objects: ~1,000 processes a run. Auto
# maintenance and `gc --auto` are git's housekeeping, never paella's behaviour: paella writes
# with plumbing (`commit-tree`, `update-ref`), which never runs them, and repacks its mirror
# itself (an explicit `repack`, unaffected); tests that run `git gc` run it explicitly.
TEST_GIT_CONFIG = """\
[maintenance]
\tauto = false
[gc]
\tauto = 0
"""


@pytest.fixture(autouse=True, scope="session")
def isolated_git_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No user or system git config (only ``TEST_GIT_CONFIG``), a test identity, NO_COLOR, no
    PAELLA_STATE_DIR, and a private XDG state dir (where paella keeps its mirrors and run
    locks)."""
    global _REPO_TEMPLATE_HOME
    global_config = tmp_path_factory.mktemp("git-global") / "config"
    template = _git_template(tmp_path_factory.mktemp("git-template"))
    global_config.write_text(f"{TEST_GIT_CONFIG}[init]\n\ttemplateDir = {template}\n")
    _REPO_TEMPLATE_HOME = tmp_path_factory.mktemp("repo-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state-session")))
        for name in _REMOVED:
            mp.delenv(name, raising=False)
        mp.setenv("GIT_CONFIG_GLOBAL", str(global_config))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.setenv("GIT_TERMINAL_PROMPT", "0")
        mp.setenv("GIT_EDITOR", "true")
        mp.setenv("GIT_MERGE_AUTOEDIT", "no")
        mp.setenv("NO_COLOR", "1")
        for name, value in TEST_IDENTITY.items():
            mp.setenv(name, value)
        # Made now, in this clean environment, not by whichever test first needs a repository
        # (it may have set a commit date or another identity for its own commits).
        _repo_template(GitRunner())
        yield


def _git_template(folder: Path) -> Path:
    """git's own template (what ``git init`` and ``clone`` copy into every ``.git``) without
    its sample hooks: ``hooks/*.sample`` are 13 of the ~25 files of a new repository (and of
    each run's mirror), never run (a ``.sample`` is not a hook; paella runs none anyway), each
    written and removed again, ~1 ms of CPU a repository. The hooks folder stays, empty."""
    made = folder / "made"
    env = {name: value for name, value in os.environ.items() if name not in _REMOVED}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git", "init", "-q", str(made)], env=env, check=True)
    template = folder / "template"
    # What the template gave; the rest of a new .git is git's own (HEAD, config, objects, refs).
    shutil.copytree(
        made / ".git",
        template,
        ignore=lambda at, names: (
            ["HEAD", "config", "objects", "refs"] if at == str(made / ".git") else
            [n for n in names if n.endswith(".sample")]
        ),
    )  # fmt: skip
    shutil.rmtree(made)
    return template


T = TypeVar("T")

# Where the last test marked ``waits`` goes, as a share of the other tests: the end of the run
# is left to tests that use the CPU, so that no worker is still waiting when the others are done.
_WAITS_SPREAD_OVER = 0.85


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first: pytest-xdist hands tests out in collection order, and a
    long test started last keeps one worker busy while the others are idle. Tests marked
    ``waits`` are spread evenly among the others: in file order they came together (the
    watcher's files are last) and kept every worker waiting on timers at once while the cores
    were idle; spread, one worker waits while the others use the CPU. (The order within each
    kind is kept; every worker sorts the same way, as xdist requires.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    items[:] = spread_waiting(items)


def spread_waiting(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the tests marked ``waits`` spread among the others."""
    return spread_among(
        items, lambda item: item.get_closest_marker("waits") is not None, _WAITS_SPREAD_OVER
    )


def spread_among(items: Sequence[T], chosen: Callable[[T], bool], over: float) -> list[T]:
    """``items`` with the ``chosen`` ones at evenly spaced places among the others, within the
    first ``over`` (a share, 0 to 1) of them; each kind keeps its own order."""
    picked = [item for item in items if chosen(item)]
    others = [item for item in items if not chosen(item)]
    if not picked or not others:
        return list(items)
    step = len(others) * over / len(picked)
    spread: list[T] = []
    queue = iter(picked)
    for n, item in enumerate(others):
        # The k-th chosen one goes before the first other at or past (k + 0.5) steps.
        while len(spread) - n < len(picked) and (len(spread) - n + 0.5) * step <= n:
            spread.append(next(queue))
        spread.append(item)
    spread.extend(queue)
    return spread


# --- The tests' temporary folders and the worker's garbage collector ------------------------
#
# A run wrote ~860 MB in ~125k files under /tmp/pytest-of-<user>/pytest-N, and pytest removes
# the fourth newest run's folder when the command exits: 12-19 s on this machine, after the
# last test, in one process. Instead a test that passed has its ``tmp_path`` emptied as soon as
# it is over (during the run, beside the other workers' tests), and a worker whose tests all
# passed removes what is left in its folder (module and session fixtures' worlds, its
# ``XDG_STATE_HOME``) when its session ends; pytest's own clean-up then finds only empty
# folders. A failed test's folder is kept whole, and so is everything of a worker that had a
# failure (its state home holds the failed test's mirror). ``tmp_path`` itself is kept, empty:
# pytest numbers a test's folder after the ones that exist (``test_x0``, ``test_x1``), so
# removing it would give its path to the next test of that name, and paella keys state by the
# workspace's path (its mirror and seals in the worker's state home, the process's ledger
# writers): that next test would continue the first one's mirror (``tmp_path_retention_policy
# = "failed"`` did exactly that). A path is never used by two tests of a session, as before.

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[pytest.TestReport]:
    """Note a test whose set-up, call or tear-down failed: its folder is kept."""
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Once every fixture of a test that passed is torn down (its processes stopped, its
    mirror saved), empty its ``tmp_path``."""
    folder = (getattr(item, "funcargs", None) or {}).get("tmp_path")
    result = yield  # a tear-down that raises failed the test: its folder is kept
    if isinstance(folder, Path) and not item.stash.get(_FAILED, False):
        empty_folder(folder)
    return result


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A process that ran tests, all passed, leaves its temporary folder empty (after its
    session fixtures' tear-down)."""
    config = session.config
    runs_tests = hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", 0)
    if runs_tests and exitstatus == 0 and not session.testsfailed:
        empty_folder(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]


def empty_folder(folder: Path) -> None:
    """Remove everything in ``folder`` but the folder itself, as far as possible (a process a
    test left behind may still write there: what it writes stays)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
            if os.path.lexists(entry.path):  # a folder a test made unwritable
                with contextlib.suppress(OSError):
                    _make_removable(Path(entry.path))
                shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Freeze what start-up made (pytest, its plugins, their imports: ~60k objects) out of the
    garbage collector's view (in pytest-xdist's controlling process, which collects no tests,
    this is all there is to freeze). And fewer collector passes for the whole session: a
    Textual App allocates tens of thousands of container objects per start and per frame, most
    freed at once by reference counting; with the default thresholds (a young pass every 700
    net allocations, an older one every ten of those) the collector made about 70 young and 6
    middle passes per App and a full one every other App, each walking the App's live DOM (a
    120x36 main screen: 557 ms of CPU per App with the defaults, 381 ms with these; the Pilot
    files' own CPU 25-30 % less, the engine's files no different). Nothing a test asserts
    depends on when a cycle is freed: processes and files are closed explicitly."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)


GC_YOUNG_THRESHOLD = 50_000
"""Net container allocations between two young-generation passes (Python's default: 700)."""
GC_OLDER_THRESHOLDS = (20, 20)
"""Young passes per middle pass, middle passes per full pass (the defaults: 10 and 10)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made (the test modules and what they import, the test items:
    ~90k objects in a worker, none ever garbage) out of the collector's view: every full
    collection during the run walked them all again, and so did pytest's five at the session's
    end (a worker's full collections took about half the CPU with them frozen). And the Apps
    this process starts share Textual's parsed CSS (``css_parse_cache``: ~10 % of an App's
    start), once the collected test modules have imported Textual; and the commands run in this
    process share one argument parser (``cli_parser_cache``)."""
    if "textual.css.stylesheet" in sys.modules:
        import css_parse_cache

        css_parse_cache.install()
    import cli_parser_cache

    cli_parser_cache.install()
    gc.freeze()


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every process of this pytest session shares: under pytest-xdist each worker has
    its own base temp, and their common parent is the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def session_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path | None]:
    """Build something expensive and read-only once per session, whichever worker gets there
    first: yields the empty folder ``<session>/<name>`` to fill, or None when another worker
    already filled it (the others wait on a lock meanwhile). The folder is kept only if the
    build finished."""
    root = session_root(tmp_path_factory)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            yield None
            return
        shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
        folder.mkdir()
        yield folder
        done.touch()


@pytest.fixture(autouse=True)
def mirror_saves_finish() -> Iterator[None]:
    """A checkpoint's ledger reaches the mirror from a background thread: let it land before
    the next test (which may reuse a fixed state folder)."""
    yield
    from paella_tui.supervisor.run.runs import wait_for_mirror

    wait_for_mirror()


@pytest.fixture(autouse=True)
def reap_zombie_children() -> Iterator[None]:
    """The engine makes its process a child subreaper, so in the test session orphans of one
    test's agents are re-parented to pytest; reap those that died, so that the next test's
    process checks see only live processes (and never a leftover zombie)."""
    yield
    reap_dead_children()


def reap_dead_children() -> None:
    """Reap every child of this process that has died (a zombie), and no live one. ``waitpid``
    with ``WNOHANG`` returns at once: no scan of ``/proc`` (psutil's ``children()`` read every
    process's stat file, 3 ms of CPU a test at 140 processes, more while the suite runs)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children at all
            return
        if pid == 0:  # children, none dead
            return


@pytest.fixture(autouse=True)
def state_home_kept() -> Iterator[None]:
    """Every test leaves the session's private ``XDG_STATE_HOME`` in place: one that removed it
    sent every later test of its worker (their mirrors, seals and run locks) to the real
    ``~/.local/state/paella``, shared with the other workers and the user."""
    home = os.environ.get("XDG_STATE_HOME")
    yield
    if os.environ.get("XDG_STATE_HOME") != home:
        found = os.environ.get("XDG_STATE_HOME")
        if home is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = home
        pytest.fail(f"the test changed XDG_STATE_HOME ({home!r} -> {found!r}) and left it so")


@pytest.fixture(autouse=True)
def keep_no_color() -> Iterator[None]:
    """Textual deletes ``NO_COLOR`` from the environment when an App starts; put it back, so
    tests after a TUI test (and the subprocesses they start) still run without colour."""
    yield
    os.environ["NO_COLOR"] = "1"


class GitRunner:
    """``git(repo, *args)`` runs git in ``repo`` and returns its stdout (checked, text)."""

    def __call__(self, repo: Path, *args: str, input: str | bytes | None = None) -> str:
        proc = self.run(repo, *args, input=input)
        if proc.returncode != 0:
            raise AssertionError(
                f"git {' '.join(args)} failed in {repo} (exit {proc.returncode}):\n{proc.stderr}"
            )
        return proc.stdout.rstrip("\n")

    def run(
        self, repo: Path, *args: str, input: str | bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run git without checking the exit status (for commands expected to fail)."""
        if isinstance(input, bytes):
            input = input.decode("utf-8", errors="surrogateescape")
        return subprocess.run(
            ["git", *args],
            cwd=repo,
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            check=False,
        )

    def head(self, repo: Path) -> str | None:
        """The commit HEAD resolves to, or None on an unborn branch."""
        proc = self.run(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}")
        return proc.stdout.strip() or None

    def branch(self, repo: Path) -> str | None:
        """The branch HEAD is attached to, or None when detached."""
        return self.run(repo, "symbolic-ref", "-q", "--short", "HEAD").stdout.strip() or None

    def tree(self, repo: Path, treeish: str) -> dict[str, tuple[str, bytes | str]]:
        """Every entry of ``treeish``, recursively: path -> (mode, blob bytes), or for a gitlink
        (mode ``160000``) path -> (mode, commit id). Paths keep any byte (surrogateescape)."""
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "-z", "--full-tree", treeish],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
        entries: dict[str, tuple[str, str, str]] = {}
        for item in listing.split(b"\0"):
            if item:
                meta, raw_path = item.split(b"\t", 1)
                mode, kind, oid = meta.decode().split()
                entries[raw_path.decode("utf-8", errors="surrogateescape")] = (mode, kind, oid)
        blobs = [oid for _, kind, oid in entries.values() if kind == "blob"]
        contents: dict[str, bytes] = {}
        if blobs:
            out = subprocess.run(
                ["git", "cat-file", "--batch"],
                cwd=repo,
                capture_output=True,
                check=True,
                input="".join(f"{oid}\n" for oid in blobs).encode(),
            ).stdout
            pos = 0
            while pos < len(out):
                header_end = out.index(b"\n", pos)
                oid, _, size = out[pos:header_end].decode().split()
                start = header_end + 1
                contents[oid] = out[start : start + int(size)]
                pos = start + int(size) + 1
        return {
            path: (mode, contents[oid] if kind == "blob" else oid)
            for path, (mode, kind, oid) in entries.items()
        }


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG state folder for one test (paella's mirrors and run locks live there)."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def git() -> GitRunner:
    """The git helper: ``git(repo, *args) -> stdout``, ``git.run(...)``, ``git.head(repo)``."""
    return GitRunner()


# Where this process keeps the repository make_repo copies (set by isolated_git_environment).
_REPO_TEMPLATE_HOME: Path | None = None


def _init_repo(path: Path, g: GitRunner) -> None:
    g(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    g(path, "add", "README.md")
    g(path, "commit", "-q", "-m", "initial")


def make_repo(path: Path, git_runner: GitRunner | None = None) -> Path:
    """A real repository at ``path`` on branch ``main`` with one commit (``README.md``).

    ``git init``, ``add`` and ``commit`` run once per test process, in a template; each
    repository after that is a copy of the template's ``.git``, ``README.md`` written again, and
    the template's index with that file's own stat data (times, device, inode, owner, size) in
    its entry and its checksum made again (``index_of_copy``; the other files' bytes and modes
    are read once per process, ``copy_git_dir``): the same files as init, add and
    commit leave (the index byte for byte as git would write it for this ``README.md``, cache
    tree included; no reflog entry or ORIG_HEAD more), and no git process at all (``git
    read-tree --reset -u HEAD`` did the index before: ~1,500 processes a suite run). Only the
    commit's id and time are shared by the process's repositories."""
    g = git_runner or GitRunner()
    path.mkdir(parents=True, exist_ok=True)
    template = _repo_template(g)
    if template is None or (path / ".git").exists():
        _init_repo(path, g)
        return path.resolve()
    copy_git_dir(template, path / ".git")
    (path / "README.md").write_text("hello\n")
    # Written after README.md, as git writes it: the index is never older than its files.
    (path / ".git" / "index").write_bytes(index_of_copy(template / "index", path))
    return path.resolve()


# The template's folders and files (but its index), read once: (path relative to ``.git``,
# mode, bytes; None for a folder), parents first.
_TEMPLATE_ENTRIES: dict[Path, list[tuple[str, int, bytes | None]]] = {}


def copy_git_dir(template: Path, dest: Path) -> None:
    """``template`` (a ``.git`` with no symlink) copied to ``dest``, every folder and file with
    its mode, but the index: what ``shutil.copytree`` made, from bytes read once per process
    (copytree's stat, times and extended attributes per file were ~3 ms a repository; the
    files' times are now, as git's own would be)."""
    entries = _TEMPLATE_ENTRIES.get(template)
    if entries is None:
        entries = []
        for folder, dirnames, filenames in os.walk(template):
            dirnames.sort()
            rel = os.path.relpath(folder, template)
            entries.append((rel, stat.S_IMODE(os.stat(folder).st_mode), None))
            for name in sorted(filenames):
                if rel == "." and name == "index":
                    continue
                file = os.path.join(folder, name)
                entries.append(
                    (os.path.join(rel, name), stat.S_IMODE(os.lstat(file).st_mode),
                     Path(file).read_bytes())
                )  # fmt: skip
        _TEMPLATE_ENTRIES[template] = entries
    for rel, mode, data in entries:
        target = os.path.normpath(os.path.join(dest, rel))
        if data is None:
            os.mkdir(target)
            os.chmod(target, mode)
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


# Git's index, version 2 (SHA-1): a header ("DIRC", version, number of entries); then each entry:
# its stat data as ten 32-bit big-endian fields (ctime s, ns; mtime s, ns; dev; ino; mode; uid;
# gid; size), the object id (20 bytes), 16 bits of flags (the low 12 the name's length), the
# name, NULs to a multiple of 8 bytes; then the extensions (the cache tree) and a SHA-1 of
# everything before it.
_INDEX_HEADER = struct.Struct(">4sII")
_STAT_FIELDS = struct.Struct(">10I")
_ENTRY_FIXED = _STAT_FIELDS.size + 20 + 2
_GITLINK = 0o160000


def index_of_copy(index_file: Path, root: Path) -> bytes:
    """The index in ``index_file`` (version 2) with the stat data of each file under ``root``
    in its entry, as git stores it (each field cut to 32 bits; the mode kept: git's, not the
    file's), its checksum made again: the bytes git writes when it refreshes that index against
    those files. An entry whose file's bytes are not its blob's (or a gitlink's) is kept as it
    was, so git still looks at that file (its stat data is another file's) as it would have."""
    data = index_file.read_bytes()
    signature, version, count = _INDEX_HEADER.unpack_from(data)
    if (signature, version) != (b"DIRC", 2) or hashlib.sha1(data[:-20]).digest() != data[-20:]:
        raise AssertionError(f"{index_file} is not a version-2 index git wrote")
    body = bytearray(data[:-20])
    pos = _INDEX_HEADER.size
    for _ in range(count):
        mode = _STAT_FIELDS.unpack_from(body, pos)[6]
        (flags,) = struct.unpack_from(">H", body, pos + _STAT_FIELDS.size + 20)
        end = body.index(b"\0", pos + _ENTRY_FIXED)
        name = bytes(body[pos + _ENTRY_FIXED : end])
        oid = bytes(body[pos + _STAT_FIELDS.size : pos + _STAT_FIELDS.size + 20])
        path = os.path.join(root, os.fsdecode(name))
        if flags & 0x3000 == 0 and mode & 0o170000 != _GITLINK and _blob_id(path) == oid:
            st = os.lstat(path)
            fields = (
                *divmod(st.st_ctime_ns, 1_000_000_000),
                *divmod(st.st_mtime_ns, 1_000_000_000),
                st.st_dev, st.st_ino, mode, st.st_uid, st.st_gid, st.st_size,
            )  # fmt: skip
            _STAT_FIELDS.pack_into(body, pos, *(field & 0xFFFFFFFF for field in fields))
        pos += (_ENTRY_FIXED + len(name) + 8) // 8 * 8
    return bytes(body) + hashlib.sha1(body).digest()


def _blob_id(path: str) -> bytes | None:
    """The id git gives the bytes at ``path`` as a blob (a symlink's: its target), without
    filters; None when nothing is there."""
    try:
        data = os.fsencode(os.readlink(path)) if os.path.islink(path) else Path(path).read_bytes()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()


def _repo_template(g: GitRunner) -> Path | None:
    """The ``.git`` of a repository made by ``_init_repo`` once in this process (None outside
    a test session)."""
    if _REPO_TEMPLATE_HOME is None:
        return None
    repo = _REPO_TEMPLATE_HOME / "repo"
    if not (repo / ".git" / "index").exists():
        shutil.rmtree(repo, ignore_errors=True)
        _TEMPLATE_ENTRIES.pop(repo / ".git", None)
        repo.mkdir()
        _init_repo(repo, g)
    return repo / ".git"


@pytest.fixture
def repo(tmp_path: Path, git: GitRunner) -> Path:
    """A fresh repository (``git init -b main`` and one commit) in ``tmp_path/repo``."""
    return make_repo(tmp_path / "repo", git)


class SavedFolder:
    """A folder a module builds once (a repository with a finished run, its state, its mirror)
    and puts back byte for byte, at the same path, before each test that uses it: every test
    starts from the world it would have built itself, and may change it freely. (Paths inside
    the folder, in the ledger or in git's config, stay true because the path does not change.)"""

    def __init__(self, folder: Path, name: str = "saved") -> None:
        self.folder = folder
        # ``name`` tells apart several moments of one folder, each kept beside it.
        self._saved = folder.with_name(f"{folder.name}.{name}")

    def save(self) -> None:
        """Keep the folder as it is now (call once it is built and nothing runs in it)."""
        shutil.rmtree(self._saved, ignore_errors=True)
        shutil.copytree(self.folder, self._saved, symlinks=True)

    def restore(self) -> None:
        """Put the folder back as it was saved, whatever the last test did to it."""
        _make_removable(self.folder)
        shutil.rmtree(self.folder)
        shutil.copytree(self._saved, self.folder, symlinks=True)


def _make_removable(folder: Path) -> None:
    """Give back write permission a test took away, so that the folder can be removed."""
    os.chmod(folder, os.stat(folder).st_mode | stat.S_IRWXU)
    for dirpath, dirnames, _ in os.walk(folder):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU)


def run_paella(
    cwd: Path,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the real console script (``python -m paella_tui``) in ``cwd``.

    ``env`` is laid over the test environment; a value of None removes that variable. Without
    ``input`` stdin is /dev/null, never a terminal.
    """
    full_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    return subprocess.run(
        [sys.executable, "-m", "paella_tui", *args],
        cwd=cwd,
        env=full_env,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
        check=False,
    )


def run_paella_in_process(
    cwd: Path,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``paella ARGS`` as ``run_paella`` runs it, but through ``paella_tui.cli.main`` in this
    process: the same parser, handlers, messages and exit statuses, on file descriptors 0, 1
    and 2 redirected as a subprocess's would be (stdin /dev/null or ``input``, stdout and stderr
    to files, so not a terminal), in ``cwd``, with ``env`` laid over the environment, all put
    back afterwards. It skips only the interpreter's start-up and imports (about 0.2 s of CPU
    a command): for tests of what a command does, not of how the process starts or ends
    (signals, a hang, ``umask``: those keep ``run_paella``). What this process remembers of a
    run's fold (``state_store``'s memo, by the ledger's size, time and inode) is forgotten
    first, as a new process has none: the command reads the kept state, its seal and the ledger
    from disk and keeps them again where they are stale, as ``paella`` does (with the memo, a
    second command skipped that when the ledger had not grown, whatever a test did to the kept
    files). ``timeout`` is accepted for the same signature and not enforced. The commands
    share one parser (``cli_parser_cache``, installed after collection), as a process builds
    it once."""
    from paella_tui.cli import main

    _as_a_new_process()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (env or {}).items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        mp.chdir(cwd)
        with _stdio_in_files(input) as (out, err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse: --help, --version, a usage error
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            finally:
                _as_at_exit()
    return subprocess.CompletedProcess(["paella", *args], code, out.text, err.text)


def _as_a_new_process() -> None:
    """Forget what this process folded (a new ``paella`` process starts with nothing)."""
    state_store = sys.modules.get("paella_tui.supervisor.run.state_store")
    if state_store is not None:
        state_store._MEMO.clear()


def _as_at_exit() -> None:
    """What the interpreter's exit does for a command (paella's atexit hooks): every ledger
    record handed to the writer thread reaches the disk."""
    ledger = sys.modules.get("paella_tui.supervisor.run.ledger")
    if ledger is not None:
        ledger.flush_all()


class _Captured:
    """What a command wrote to one stream (read once the command is over)."""

    text = ""


@contextlib.contextmanager
def _stdio_in_files(input: str | None) -> Iterator[tuple[_Captured, _Captured]]:
    """File descriptors 0-2 and ``sys.stdin``/``stdout``/``stderr`` on temporary files (stdin
    on /dev/null without ``input``), as a subprocess run with pipes would have them."""
    import tempfile

    out, err = _Captured(), _Captured()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        if input is None:
            in_fd = os.open(os.devnull, os.O_RDONLY)
        else:
            with tempfile.TemporaryFile() as in_file:
                in_file.write(input.encode())
                in_file.seek(0)
                in_fd = os.dup(in_file.fileno())
        try:
            os.dup2(in_fd, 0)
            os.dup2(out_file.fileno(), 1)
            os.dup2(err_file.fileno(), 2)
            sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(  # noqa: SIM115
                2, "w", encoding="utf-8", errors="backslashreplace", closefd=False
            )
            yield out, err
        finally:
            for stream in (sys.stdin, sys.stdout, sys.stderr):
                if stream not in saved_streams:
                    with contextlib.suppress(OSError, ValueError):
                        stream.close()  # flushes; the descriptor stays (closefd=False)
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            for fd, saved in zip((0, 1, 2), saved_fds, strict=True):
                os.dup2(saved, fd)
                os.close(saved)
            os.close(in_fd)
            for captured, file in ((out, out_file), (err, err_file)):
                file.seek(0)
                captured.text = file.read().decode("utf-8", errors="replace")


@pytest.fixture(scope="session")
def paella() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``paella(repo, *args, env=None, input=None)`` -> CompletedProcess (text) of the real command."""
    return run_paella


class TreeState(dict[str, tuple[object, ...]]):
    """A work tree byte for byte: relative path -> ``("file", bytes, executable)``,
    ``("link", target)`` or ``("dir",)`` for an empty directory."""

    def differences(self, other: Mapping[str, tuple[object, ...]]) -> list[str]:
        """Readable lines naming every path that differs (for assertion messages)."""
        lines = []
        for path in sorted(set(self) | set(other)):
            mine, theirs = self.get(path), other.get(path)
            if mine != theirs:
                lines.append(f"{path!r}: {_short(mine)} != {_short(theirs)}")
        return lines

    def without(self, *prefixes: str) -> TreeState:
        """A copy without the given paths and everything under them."""
        return TreeState(
            (p, v) for p, v in self.items() if not any(_under(p, prefix) for prefix in prefixes)
        )

    def only(self, *prefixes: str) -> TreeState:
        """A copy holding only the given paths and everything under them."""
        return TreeState(
            (p, v) for p, v in self.items() if any(_under(p, prefix) for prefix in prefixes)
        )


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _short(entry: tuple[object, ...] | None) -> str:
    if entry is None:
        return "absent"
    if entry[0] == "file":
        data = entry[1]
        assert isinstance(data, bytes)
        shown = data[:40] + (b"..." if len(data) > 40 else b"")
        return f"file({len(data)} bytes{', +x' if entry[2] else ''}: {shown!r})"
    return repr(entry)


def capture_tree(root: Path, *, exclude: tuple[str, ...] = (".git",)) -> TreeState:
    """Every path under ``root`` except the top-level ``exclude`` names (ignored files included,
    symlinks not followed): file bytes and executable bit, symlink targets, empty directories."""
    state = TreeState()
    root_s = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root_s)
        rel_dir = "" if rel_dir == "." else rel_dir
        if not rel_dir:
            dirnames[:] = [d for d in dirnames if d not in exclude]
            filenames = [f for f in filenames if f not in exclude]
        entries = 0
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            rel = os.path.join(rel_dir, name) if rel_dir else name
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    state[rel] = ("file", handle.read(), bool(st.st_mode & stat.S_IXUSR))
            entries += 1
        if not entries and rel_dir:
            state[rel_dir] = ("dir",)
    return state


@pytest.fixture(scope="session")
def tree_state() -> Callable[..., TreeState]:
    """``tree_state(root)`` -> TreeState of the work tree, byte for byte (see capture_tree)."""
    return capture_tree
