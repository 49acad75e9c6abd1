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
  a few small reads per command, by content (not by mtime, which a rewrite within a clock tick
  of the same size would not change).

What is left: the check and git's own reading of the files are a git start-up apart (about a
millisecond): an agent that rewrites its configuration again and again could land a new filter
in that window. The agent's own process cage (``agent/process_cage``) is the boundary that
holds then; paella says so in the README's trust section.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
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
    for folder in (root, *root.parents):
        dot = folder / ".git"
        try:
            if dot.is_dir():
                git_dir = dot
            elif dot.is_file():
                text = dot.read_text(errors="surrogateescape").strip()
                if not text.startswith("gitdir:"):
                    return None
                git_dir = folder / text.removeprefix("gitdir:").strip()
            else:
                continue
            common = git_dir
            with_common = git_dir / "commondir"
            if with_common.is_file():
                common = git_dir / with_common.read_text(errors="surrogateescape").strip()
            return git_dir, common
        except OSError:
            return None
    return None


def _global_files() -> list[Path]:
    files: list[Path] = []
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    home = os.environ.get("HOME")
    if named:
        files.append(Path(named))
    elif home:
        files.append(Path(home) / ".gitconfig")
    xdg = os.environ.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else "")
    if xdg and not named:
        files.append(Path(xdg) / "git" / "config")
    system = os.environ.get("GIT_CONFIG_SYSTEM")
    files += [Path(system)] if system else [Path("/etc/gitconfig")]
    return files


def _content(path: Path) -> object:
    """What a file holds now, comparable by ``==``: its bytes, or what else is there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO never blocks paella
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return ("error", err.errno)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ("special", st.st_mode, st.st_ino)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as err:
        return ("error", err.errno)
    finally:
        os.close(fd)


class ConfigWatch:
    """The filter drivers (and ``attr.tree``, and the snapshot's :data:`SETTINGS`) of one work
    tree's configuration, kept current."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._includes: tuple[Path, ...] = ()
        self._seen: tuple[object, ...] | None = None
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
        dirs = git_dirs(self.root)
        files = _global_files()
        if dirs is not None:
            git_dir, common = dirs
            files += [common / "config", git_dir / "config.worktree", git_dir / "HEAD"]
        files += self._includes
        return (dirs, tuple(files), *(_content(f) for f in files))

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

    def _read(self, program: str, env: Mapping[str, str]) -> tuple[Path, ...]:
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
        includes: list[Path] = []
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

    def _include(self, origin: bytes, value: bytes) -> Path:
        """The file an include names, as git resolves it (relative to the including file)."""
        path = os.fsdecode(value)
        if path.startswith("~/"):
            return Path(os.path.expanduser(path))
        source = os.fsdecode(origin.removeprefix(b"file:"))
        return self.root / os.path.dirname(source) / path

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
