"""No git command paella runs starts a program the repository's configuration names.

The agent writes anything in the workspace, ``.git`` included, while paella's git runs there
(snapshots, checkpoints, steps, diffs, rollback, the mirror's copy). git starts a program named
by configuration in these ways, for the commands paella runs (git 2.39, git-config(1),
gitattributes(5); each one is planted by ``tests/test_git_programs.py``):

- clean/smudge/process filter drivers, ``filter.<name>.{clean,smudge,process}``, chosen by the
  ``filter`` attribute (``.gitattributes`` at any depth, ``$GIT_DIR/info/attributes``,
  ``core.attributesFile``): run by every command that hashes a work-tree file (``update-index``,
  ``hash-object``, and ``status``/``diff-files``/``update-index --refresh`` for a racy entry)
  or writes one (a checkout; paella never checks out: a rollback writes raw bytes itself);
- ``core.fsmonitor`` (a hook program), run by any command that reads an index;
- ``diff.external`` and ``diff.<driver>.command`` (the ``diff`` attribute) and
  ``diff.<driver>.textconv``: run by ``diff``/``log -p``/``show``;
- ``gpg.program`` (and ``gpg.<format>.program``, ``gpg.ssh.defaultKeyCommand``) through
  ``log.showSignature`` or ``push.gpgSign`` (``commit-tree`` signs only with ``-S``);
- ``remote.<url>.uploadpack``/``receivepack`` for a ``fetch``/``ls-remote``/``push`` to the
  mirror's URL, and ``ext::`` URLs (``protocol.ext.allow``) an ``insteadOf`` may rewrite it to;
- hooks (``core.hooksPath``, ``$GIT_DIR/hooks``): off on every command (gitcli.BASE_OPTIONS);
- any of these from a file ``include.path``/``includeIf.*.path`` names, or from
  ``config.worktree`` (``extensions.worktreeConfig``);
- ``core.pager``/``pager.*`` only with a terminal: paella's git never has one (its output is
  piped), and ``--no-pager`` says so anyway.

What paella does about each, on every command (not once at start):

- fixed options (:data:`FIXED_CONFIG`, :data:`COMMAND_FLAGS`): ``core.fsmonitor=false``,
  ``log.showSignature=false``, ``commit.gpgSign=false``, ``protocol.ext.allow=never``;
  ``--no-ext-diff --no-textconv`` on ``diff``/``log``/``show``; ``--no-signed`` and
  ``--receive-pack=git-receive-pack`` on ``push``; ``--upload-pack=git-upload-pack`` on
  ``fetch``/``ls-remote``/``clone`` (a remote mirror that needs another path for them is not
  supported);
- filter drivers: a driver can start a program only through a ``clean``, ``smudge`` or
  ``process`` key in some configuration file git reads, so every driver name that has one is
  turned into a no-op for the command (``filter.<name>.clean=`` etc., passed with
  ``--config-env``: a name may hold any byte but a newline). The names are read from git's own
  view of the configuration (``git config --show-origin``, includes followed) and read again
  whenever any file git may read its configuration from changed content: the repository's
  ``config`` and ``config.worktree``, the global and system files, every file an include names
  (whether its condition holds or not), and ``HEAD`` (``includeIf "onbranch:"``). The check is
  one ``stat`` per file per command, and a read of its content when the stat changed
  (:class:`_Seen` says why a stat is enough, and when it is not).

What is left: the check and git's own reading of the files are a git start-up apart (about a
millisecond): an agent that rewrites its configuration again and again could land a new filter
in that window. The agent's own process cage (``agent/process_cage``) is the boundary that
holds then; paella says so in the README's trust section.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("log.showSignature", "false"),
    ("commit.gpgSign", "false"),
    ("protocol.ext.allow", "never"),
)
"""Config on every git command paella runs: each key stops a class of programs outright."""

_NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv")
COMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "diff": _NO_DIFF_PROGRAMS,
    "log": (*_NO_DIFF_PROGRAMS, "--no-show-signature"),
    "show": (*_NO_DIFF_PROGRAMS, "--no-show-signature"),
    "push": ("--no-signed", "--receive-pack=git-receive-pack"),
    "fetch": ("--upload-pack=git-upload-pack",),
    "ls-remote": ("--upload-pack=git-upload-pack",),
    "clone": ("--upload-pack=git-upload-pack",),
}
"""Flags right after these subcommands: the command line wins over any configuration."""

EMPTY_ENV = "PAELLA_GIT_EMPTY"
"""An environment variable holding "" that ``--config-env`` points a filter's commands at."""
FALSE_ENV = "PAELLA_GIT_FALSE"
"""An environment variable holding "false" (a filter is never ``required``)."""
GUARD_ENV = {EMPTY_ENV: "", FALSE_ENV: "false"}
"""What the environment of a guarded git command must hold."""

SETTINGS = (
    "core.excludesfile",
    "core.attributesfile",
    "core.autocrlf",
    "core.splitindex",
    "core.sparsecheckout",
    "index.sparse",
)
"""Settings the snapshot reads (exclude and attributes files, whether the user's index can be
copied, ``core.autocrlf``): read in the same process as the filter drivers (:meth:`ConfigWatch.settings`)."""
_REGEX = (
    r"^(filter\..+\.(clean|smudge|process)|include\.path|includeif\..+\.path|attr\.tree"
    r"|core\.(excludesfile|attributesfile|autocrlf|splitindex|sparsecheckout)|index\.sparse)$"
)
_GLOBAL_OPTIONS_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_MAX_ROUNDS = 4


def subcommand_at(args: Sequence[str]) -> int:
    """Where the subcommand is in git's ``args``: after the leading global options (``-c K=V``,
    ``--git-dir X``, ``--no-pager``...); ``len(args)`` when there is none."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_OPTIONS_WITH_VALUE else 1
    return min(i, len(args))


def guarded_args(args: Sequence[str]) -> list[str]:
    """``args`` with :data:`COMMAND_FLAGS` put right after the subcommand (leading global
    options such as ``--git-dir X`` are skipped to find it)."""
    out = list(args)
    i = subcommand_at(out)
    if i < len(out) and out[i] in COMMAND_FLAGS:
        out[i + 1 : i + 1] = COMMAND_FLAGS[out[i]]
    return out


def fixed_options() -> list[str]:
    """The ``-c`` options of :data:`FIXED_CONFIG`, and no pager."""
    options = ["--no-pager"]
    for key, value in FIXED_CONFIG:
        options += ["-c", f"{key}={value}"]
    return options


def git_dirs(root: Path) -> tuple[Path, Path] | None:
    """The git dir and common dir of the work tree at (or above) ``root``, read from the disk
    as git discovers them (a ``.git`` folder, or a ``gitdir:`` file and its ``commondir``)."""
    found = _git_dir_names(str(root))
    return None if found is None else _as_paths(*found)


@functools.lru_cache(maxsize=64)
def _as_paths(git_dir: str, common: str) -> tuple[Path, Path]:
    return Path(git_dir), Path(common)


# What Path.is_dir() and is_file() take for "not there" (any other error: no answer).
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _git_dir_names(root: str) -> tuple[str, str] | None:
    """:func:`git_dirs` with plain strings and ``os`` calls (it runs before every git command:
    pathlib's objects cost more than the stat calls)."""
    folder = root
    while True:
        dot = os.path.join(folder, ".git")
        try:
            mode = _mode(dot)
            if stat.S_ISDIR(mode):
                git_dir = dot
            elif stat.S_ISREG(mode):
                with open(dot, "rb") as handle:
                    text = os.fsdecode(handle.read()).strip()
                if not text.startswith("gitdir:"):
                    return None
                git_dir = os.path.join(folder, text.removeprefix("gitdir:").strip())
            else:
                parent = os.path.dirname(folder) or "."
                if parent == folder:
                    return None
                folder = parent
                continue
            common = git_dir
            with_common = os.path.join(git_dir, "commondir")
            if stat.S_ISREG(_mode(with_common)):
                with open(with_common, "rb") as handle:
                    common = os.path.join(git_dir, os.fsdecode(handle.read()).strip())
            return git_dir, common
        except OSError:
            return None


def _mode(path: str) -> int:
    """The mode of what ``path`` names (symlinks followed); 0 when nothing is there."""
    try:
        return os.stat(path).st_mode
    except OSError as err:
        if err.errno in _ABSENT:
            return 0
        raise


def _global_files() -> tuple[str, ...]:
    return _global_files_for(
        os.environ.get("GIT_CONFIG_GLOBAL"),
        os.environ.get("HOME"),
        os.environ.get("XDG_CONFIG_HOME"),
        os.environ.get("GIT_CONFIG_SYSTEM"),
    )


@functools.lru_cache(maxsize=8)
def _global_files_for(
    named: str | None, home: str | None, xdg_home: str | None, system: str | None
) -> tuple[str, ...]:
    files: list[str] = []
    if named:
        files.append(named)
    elif home:
        files.append(os.path.join(home, ".gitconfig"))
    xdg = xdg_home or (f"{home}/.config" if home else "")
    if xdg and not named:
        files.append(os.path.join(xdg, "git", "config"))
    files.append(system if system else "/etc/gitconfig")
    return tuple(files)


def _content(path: str) -> tuple[object, tuple[int, ...] | None]:
    """What a file holds now, comparable by ``==`` (its bytes, or what else is there), and the
    :func:`_signature` of the regular file read (None for anything else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO never blocks paella
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as err:
        return ("error", err.errno), None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ("special", st.st_mode, st.st_ino), None
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks), _signature(st)
    except OSError as err:
        return ("error", err.errno), None
    finally:
        os.close(fd)


def _signature(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# How long after its last change a file's stat is trusted to tell a later change (_Seen).
_SETTLED_NS = 50_000_000
_SETTLED_COARSE_NS = 3_000_000_000


class _Seen:
    """The files of one configuration as last read, each with its stat, to read again only
    those whose stat changed.

    Why a stat may stand for the content. The key is git's own for its index (``ino``, size,
    ``mtime``, ``ctime``, with the device and mode). The agent can write any file git reads
    its configuration from and set its ``mtime`` (``touch -d``), and a rewrite in place keeps
    the inode and may keep the size. What it cannot set is ``ctime``: the kernel sets it to its
    own clock on every write, ``chmod``, ``utime`` and rename, and only root can set that clock
    (a file renamed into place is a new inode, with a new ``ctime``). So a file whose stat is
    unchanged was not written since, with one exception, git's "racily clean" entry: timestamps
    come from a clock that ticks in steps (a jiffy, 1-10 ms; whole seconds, two on FAT, on some
    file systems), and a second write in the same step as the read leaves the same stat. So
    the stat stands for the content only when the file's ``ctime`` is older than the read of
    its content by more than a step: 50 ms when the ``ctime`` shows sub-millisecond digits
    (a fine-grained file system), 3 s otherwise. A file changed later than that is read by
    content on every command, as before. This trusts that the kernel's clock and the file
    system's agree, as git does for a local repository. And only a file whose size is the
    number of bytes read is kept, an empty one never: a file of ``/proc`` or ``/sys`` (which a
    symlink can name, and whose content a process can change, its ``cmdline``) says size 0 or
    4096 whatever it holds, and keeps its times.

    What this adds to the window the module docstring names: a write caught mid-copy (its
    ``ctime`` set, its bytes not all there yet, stalled by the agent for longer than the step)
    leaves content that may still change with no new ``ctime``. Landing a filter that way is the
    same kind of race against paella's check, for which the agent's process cage is the boundary.
    """

    def __init__(self) -> None:
        self._files: dict[str, tuple[tuple[int, ...], object]] = {}
        self.reads = 0
        """How many times a file's content was read (a test counts them)."""

    def content(self, path: str) -> object:
        """What ``path`` holds now, as :func:`_content` reads it (the bytes kept from an earlier
        read when its stat says it was not written since)."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._files.pop(path, None)
            return None
        except OSError as err:
            return ("error", err.errno)
        kept = self._files.get(path)
        if kept is not None and kept[0] == _signature(st):
            return kept[1]
        read_at = time.time_ns()
        self.reads += 1
        content, signature = _content(path)
        if (
            signature is not None
            and isinstance(content, bytes)
            and len(content) == signature[3] > 0  # st_size: the whole file, and a real one
            and _settled(signature[-1], read_at)
        ):
            self._files[path] = (signature, content)
        else:
            self._files.pop(path, None)
        return content


def _settled(ctime_ns: int, read_at: int) -> bool:
    """Whether a write after ``read_at`` must give a ``ctime`` other than ``ctime_ns``."""
    fine = ctime_ns % 1_000_000 != 0
    return ctime_ns + (_SETTLED_NS if fine else _SETTLED_COARSE_NS) < read_at


class ConfigWatch:
    """The filter drivers (and ``attr.tree``, and the snapshot's :data:`SETTINGS`) of one work
    tree's configuration, kept current."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._includes: tuple[str, ...] = ()
        self._seen: tuple[object, ...] | None = None
        self.files = _Seen()
        """The files it comes from, as last read."""
        self.filters: tuple[str, ...] = ()
        """Names of the filter drivers that have a clean, smudge or process command."""
        self.attr_tree = False
        """``attr.tree`` is set: on git 2.42 and later attributes may come from a tree."""
        self._settings = b""
        self.reads = 0
        """How many times the configuration was read with git (a test counts them)."""

    def key(self) -> tuple[object, ...]:
        """Every file git reads its configuration from here, and what each holds now (with the
        git dirs as found on disk): equal keys, the same configuration."""
        dirs = _git_dir_names(str(self.root))
        files = _global_files()
        if dirs is not None:
            git_dir, common = dirs
            files += (
                os.path.join(common, "config"),
                os.path.join(git_dir, "config.worktree"),
                os.path.join(git_dir, "HEAD"),
            )
        files += self._includes
        return (dirs, files, *(self.files.content(f) for f in files))

    def refresh(self, program: str, env: Mapping[str, str]) -> None:
        """Read the configuration again if any file it comes from changed since last time."""
        with self._lock:
            for _ in range(_MAX_ROUNDS):
                key = self.key()
                if key == self._seen:
                    return
                includes = self._read(program, env)
                self._seen = key
                if includes == self._includes:
                    return
                # A new include: its content is part of what must be watched, read once more.
                self._includes = includes
            self._seen = None  # never settled: read again on the next command

    def _read(self, program: str, env: Mapping[str, str]) -> tuple[str, ...]:
        self.reads += 1
        proc = subprocess.run(
            [program, "config", "-z", "--show-origin", "--get-regexp", _REGEX],
            cwd=self.root,
            env=env,
            capture_output=True,
            check=False,
        )
        items = proc.stdout.split(b"\0")
        names: set[str] = set(self.filters) if proc.returncode not in (0, 1) else set()
        includes: list[str] = []
        attr_tree = False
        settings: list[bytes] = []
        for origin, entry in zip(items[0::2], items[1::2], strict=False):
            key, _, value = entry.partition(b"\n")
            name = key.decode(errors="surrogateescape")
            if name.startswith("filter."):
                names.add(name[len("filter.") : name.rindex(".")])
            elif name == "attr.tree":
                attr_tree = True
            elif name in SETTINGS:
                settings.append(entry + b"\0")
            elif value:
                includes.append(self._include(origin, value))
        self.filters = tuple(sorted(names))
        self.attr_tree = attr_tree or (self.attr_tree and proc.returncode not in (0, 1))
        if proc.returncode in (0, 1):  # else git could not read it: the last answer stands
            self._settings = b"".join(settings)
        return tuple(dict.fromkeys(includes))

    def settings(self) -> bytes:
        """The :data:`SETTINGS` as configured, as ``git config -z --get-regexp`` prints them
        (``key\\nvalue\\0``, in git's order: the last of a key wins), current as of the last
        :meth:`refresh`."""
        return self._settings

    def _include(self, origin: bytes, value: bytes) -> str:
        """The file an include names, as git resolves it (relative to the including file)."""
        path = os.fsdecode(value)
        if path.startswith("~/"):
            return os.path.expanduser(path)
        source = os.fsdecode(origin.removeprefix(b"file:"))
        return str(self.root / os.path.dirname(source) / path)

    def options(self) -> list[str]:
        """``--config-env`` options that make every known filter driver a no-op."""
        options: list[str] = []
        for name in self.filters:
            for key in ("clean", "smudge", "process"):
                options.append(f"--config-env=filter.{name}.{key}={EMPTY_ENV}")
            options.append(f"--config-env=filter.{name}.required={FALSE_ENV}")
        return options


_WATCHES: dict[Path, ConfigWatch] = {}
_WATCHES_LOCK = threading.Lock()


def config_watch(root: Path) -> ConfigWatch:
    """The one :class:`ConfigWatch` of this process for the work tree at ``root``."""
    with _WATCHES_LOCK:
        watch = _WATCHES.get(root)
        if watch is None:
            watch = _WATCHES[root] = ConfigWatch(root)
        return watch


def config_settings(root: Path, program: str, env: Mapping[str, str]) -> bytes:
    """The :data:`SETTINGS` of the configuration git would read now in ``root`` (no git
    process when no file it reads them from changed since the last command)."""
    watch = config_watch(root)
    watch.refresh(program, env)
    return watch.settings()


def filter_options(root: Path, program: str, env: Mapping[str, str]) -> list[str]:
    """The options that neutralise every filter driver git would see now in ``root``."""
    watch = config_watch(root)
    watch.refresh(program, env)
    return watch.options()
