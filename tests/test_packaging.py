"""The distribution as users get it: one import name, ``paella_tui``, in the wheel, in the sdist,
in the wheel built from the sdist and in the editable install; metadata that says what it needs
and where it runs; paella-tui next to supervisord's ``supervisor`` package in one environment,
installed in both orders, each uninstalled in turn; and the wheel installed from the package index
and running on every supported Python.

What each test proves, and why it costs what it does (``--cpu-by-file``: 37 s of CPU before
these choices, benchmarks/README.md has the table):

- The builds (the ``dists`` fixture, once per session, by whichever pytest-xdist worker needs
  them first): the sdist, the wheel built from the unpacked sdist (what ``python -m build``
  does) and a wheel built from the tree (what ``pip install .`` from a checkout gets), each by
  the project's own backend, hatchling, fetched from the package index into an isolated build
  environment, every hook in a process of its own, through ``build``'s ``ProjectBuilder`` and
  ``DefaultIsolatedEnv``, the two pieces ``python -m build`` is made of. The three builds share
  one isolated environment: ``python -m build`` makes one per distribution and installs the
  same hatchling into each (1.2 s of CPU a time), and a backend does not write into its
  environment, so a fresh one would hold the same files. The built files are byte for byte
  those the CLI builds (compared once: benchmarks/README.md). The hooks' processes keep their
  bytecode, as they would anywhere but in this suite's temporary folder.
- ``test_the_wheel_installs_one_import_name``, ``..._equals_the_one_built_from_the_tree``,
  ``test_the_sdist_holds_real_files_and_the_license``, ``test_the_metadata_...``: read the
  built files only.
- ``test_the_editable_install_exposes_only_paella_tui``: this suite's own environment.
- ``test_paella_and_supervisord_live_in_one_environment_in_both_orders``: on the newest
  supported Python (3.13), the wheel installed from the index with its dependencies, then
  supervisord; the demo played with both installed; each uninstalled in turn and the other
  order. Environments are compared file by file, as below. Its install and its demo are also
  the proof that the wheel installs and runs on 3.13: a separate 3.13 environment would repeat
  the same install and the same demo (7.5 s of CPU) with one package fewer beside it.
- ``test_the_wheel_runs_on_every_supported_python``: the wheel installed from the index and the
  demo on each other supported Python (3.12), and an import of every module there (the demo
  runs the engine headless; the import reaches the TUI's modules too). 3.11 runs this suite.

pip acts on each test environment from this suite's pip, run under the environment's own
interpreter: what ``pip --python`` does after a first pip process has read the options, without
that first process (0.3 s of CPU a call). The commands run in a test environment compile
only what no earlier session compiled from the same source: the interpreter's standard library
is cached in the suite's own bytecode cache, and the installed modules' code is lent by the
sha256 of each source (``CompiledModules``; 1.3 s of CPU per environment).
"""

from __future__ import annotations

import email
import hashlib
import marshal
import os
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Literal

import pip
import pyproject_hooks
import pytest
from build import ProjectBuilder
from build.env import DefaultIsolatedEnv
from conftest import session_once, session_root

from paella_tui import __version__

ROOT = Path(__file__).resolve().parents[1]
DIST_INFO = f"paella_tui-{__version__}.dist-info"
DATA = f"paella_tui-{__version__}.data"
SHIPPED = (
    "paella_tui/cli.py",
    "paella_tui/supervisor/run/events.py",
    "paella_tui/supervisor/agent/profiles/__init__.py",
    "paella_tui/widgets/gate_table.py",
    "paella_tui/styles/app.tcss",
    "paella_tui/schemas/status.schema.json",
    "paella_tui/schemas/checkpoints.schema.json",
    "paella_tui/schemas/gates.schema.json",
    "paella_tui/demo/agent.py",
)


@dataclass(frozen=True)
class Dists:
    """The built distributions: the sdist, the wheel built from it, and one built from the tree."""

    sdist: Path
    wheel_from_sdist: Path
    wheel_from_tree: Path


def build_distributions(into: Path) -> None:
    """The sdist from the tree and the wheel from the unpacked sdist (``python -m build``), and a
    wheel from the tree (``python -m build --wheel``, as ``pip install .`` builds it), in one
    isolated build environment: the steps ``python -m build`` takes for each, in its order."""
    with DefaultIsolatedEnv() as env:
        installed: set[str] = set()
        # The hooks' processes keep the bytecode they compile, as they would anywhere but here
        # (the suite leaves the temporary folder, where the environment is, uncached): the
        # backend is compiled by the first hook, not by all six.
        bytecode = bytecode_folder(into / "build-bytecode", probe(env.python_executable))

        def runner(
            cmd: Sequence[str], cwd: str | None = None, extra: Mapping[str, str] | None = None
        ) -> None:
            environ = {**(extra or {}), "PYTHONPYCACHEPREFIX": str(bytecode)}
            pyproject_hooks.default_subprocess_runner(cmd, cwd, environ)

        def need(requirements: set[str]) -> None:
            # What the environment already holds is not installed twice.
            env.install(requirements - installed)
            installed.update(requirements)

        def build(source: Path, distribution: Literal["sdist", "wheel"], outdir: Path) -> Path:
            builder = ProjectBuilder.from_isolated_env(env, source, runner)
            need(builder.build_system_requires)  # the backend, from the index
            need(builder.get_requires_for_build(distribution))  # what it asks for besides
            return Path(builder.build(distribution, outdir))

        sdist = build(ROOT, "sdist", into / "via-sdist")
        unpacked = into / "unpacked-sdist"
        with tarfile.open(sdist) as tar:
            (top,) = {name.split("/")[0] for name in tar.getnames()}
            # As python -m build extracts it: through PEP 706's data filter where Python has it.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(unpacked, filter="data")
            else:
                tar.extractall(unpacked)
        build(unpacked / top, "wheel", into / "via-sdist")
        build(ROOT, "wheel", into / "from-tree")
    shutil.rmtree(unpacked)
    shutil.rmtree(bytecode)


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """The distributions, built once per session (they are only read)."""
    with session_once(tmp_path_factory, "dist") as build_into:
        if build_into is not None:
            build_distributions(build_into)
    out = session_root(tmp_path_factory) / "dist"
    (sdist,) = (out / "via-sdist").glob("*.tar.gz")
    (wheel_from_sdist,) = (out / "via-sdist").glob("*.whl")
    (wheel_from_tree,) = (out / "from-tree").glob("*.whl")
    return Dists(sdist, wheel_from_sdist, wheel_from_tree)


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        return email.message_from_bytes(zf.read(f"{DIST_INFO}/METADATA"))


@pytest.mark.parametrize("which", ["wheel_from_sdist", "wheel_from_tree"])
def test_the_wheel_installs_one_import_name(dists: Dists, which: str) -> None:
    names = wheel_names(getattr(dists, which))

    assert {name.split("/")[0] for name in names} == {"paella_tui", DIST_INFO, DATA}
    # The command is the project's own script (no `import re` before main: issue 17), its first
    # line left for the installer to point at the environment's Python, executable.
    assert [n for n in names if n.startswith(f"{DATA}/")] == [f"{DATA}/scripts/paella"]
    with zipfile.ZipFile(getattr(dists, which)) as zf:
        script = zf.read(f"{DATA}/scripts/paella")
        mode = zf.getinfo(f"{DATA}/scripts/paella").external_attr >> 16
    assert script.startswith(b"#!python\n") and b"import re" not in script
    assert mode & stat.S_IXUSR, oct(mode)
    for path in SHIPPED:
        assert path in names, path
    assert f"{DIST_INFO}/licenses/LICENSE" in names
    # The engine and the widgets are real files in the wheel, under paella_tui only.
    assert not any(n.startswith(("supervisor/", "widgets/")) for n in names)


def test_the_wheel_built_from_the_sdist_equals_the_one_built_from_the_tree(dists: Dists) -> None:
    def digests(wheel: Path) -> dict[str, str]:
        with zipfile.ZipFile(wheel) as zf:
            return {
                n: hashlib.sha256(zf.read(n)).hexdigest()
                for n in zf.namelist()
                if not n.endswith("/RECORD")
            }

    assert digests(dists.wheel_from_sdist) == digests(dists.wheel_from_tree)


def test_the_sdist_holds_real_files_and_the_license(dists: Dists) -> None:
    top = f"paella_tui-{__version__}"
    with tarfile.open(dists.sdist) as tar:
        members = {m.name: m for m in tar.getmembers()}
    for path in (*SHIPPED, "LICENSE", "pyproject.toml", "README.md", "scripts/paella"):
        member = members.get(f"{top}/{path}")
        assert member is not None and member.isfile(), path
    assert not any(m.issym() or m.islnk() for m in members.values()), "a link in the sdist"


def test_the_metadata_says_what_it_needs_and_where_it_runs(dists: Dists) -> None:
    meta = wheel_metadata(dists.wheel_from_sdist)

    assert meta["Version"] == __version__
    assert tuple(int(p) for p in meta["Metadata-Version"].split(".")) >= (2, 4)
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    required = {
        r.split(";")[0].split("<")[0].split(">")[0].strip().lower()
        for r in meta.get_all("Requires-Dist") or []
        if "extra ==" not in r
    }
    assert required == {"textual", "rich", "watchfiles", "psutil", "tomli-w", "pathspec"}
    classifiers = set(meta.get_all("Classifier") or [])
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert "Environment :: Console" in classifiers
    for minor in (11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert meta["Requires-Python"] == ">=3.11"
    assert {u.split(",")[0] for u in meta.get_all("Project-URL") or []} >= {"Homepage", "Source"}


def test_the_editable_install_exposes_only_paella_tui(tmp_path: Path) -> None:
    """In this (editable) environment, from a project that has its own supervisor/ and widgets/."""
    for name in ("supervisor", "widgets"):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("raise ImportError('the project's own package')\n")
    probe = (
        "import importlib.util, sys\n"
        "sys.path.remove('') if '' in sys.path else None\n"
        "print(importlib.util.find_spec('supervisor'), importlib.util.find_spec('widgets'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "None None"
    # `python -m paella_tui` puts the current folder first on sys.path: the project's own
    # supervisor/ must not shadow paella's engine.
    result = subprocess.run(
        [sys.executable, "-m", "paella_tui", "status", "--tmux"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 3 and "not a git repository" in result.stderr, result.stderr


def test_the_command_is_the_projects_script_where_pip_and_pipx_find_it(tmp_path: Path) -> None:
    """In this (editable) environment: ``paella`` is scripts/paella (no generated console
    script), its first line rewritten to this Python, listed in the distribution's RECORD (what
    pip uninstalls, and where pipx looks for the apps it exposes: every installed file in the
    environment's bin; pypa/pipx, venv_inspect.get_resources_from_dist_files), and it runs."""
    from importlib import metadata

    command = Path(sys.executable).with_name("paella")
    ours = (ROOT / "scripts" / "paella").read_text().split("\n", 1)[1]
    first, rest = command.read_text().split("\n", 1)
    assert rest == ours, "the installed command is not scripts/paella: re-run `pip install -e .`"
    assert Path(first.removeprefix("#!")).resolve() == Path(sys.executable).resolve()
    dist = metadata.distribution("paella-tui")
    in_bin = [
        Path(dist.locate_file(f)).resolve()
        for f in dist.files or []
        if Path(dist.locate_file(f)).resolve().parent == command.resolve().parent
    ]
    assert in_bin == [command.resolve()]
    assert not [e for e in dist.entry_points if e.group == "console_scripts"]
    result = subprocess.run(
        [str(command), "status", "--tmux"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 3 and "not a git repository" in result.stderr, result.stderr


# --- installed from the index: next to supervisord, on every supported Python -----------------


@pytest.fixture(scope="session")
def pip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pip cache for the session's venvs: what one install downloaded or built, the next
    one reuses (pip's cache is safe to share between processes), where the index lets pip cache
    its answers (this machine's sends no caching headers: each install downloads again)."""
    with session_once(tmp_path_factory, "pip-cache"):
        pass
    return session_root(tmp_path_factory) / "pip-cache"


# The file ``pip --python PYTHON ...`` runs under PYTHON once it has read its options: this very
# pip, imported by that interpreter (pip 22.3 and later). Running it directly is that second
# process without the first.
PIP_RUNNER = Path(pip.__file__).parent / "__pip-runner__.py"


# What bytecode_folder and CompiledModules need to know of an interpreter.
PROBE = (
    "import os, sys, importlib.util\n"
    "print(os.path.dirname(os.__file__), sys.implementation.cache_tag, sep='\\n')\n"
    "print(importlib.util.MAGIC_NUMBER.hex())\n"
)


@dataclass(frozen=True)
class Interpreter:
    """A Python's standard library folder, bytecode file tag (``cpython-313``) and magic."""

    stdlib: str
    tag: str
    magic: bytes


def probe(python: str) -> Interpreter:
    out = subprocess.run([python, "-S", "-c", PROBE], capture_output=True, text=True, check=True)
    stdlib, tag, magic = out.stdout.splitlines()
    return Interpreter(stdlib, tag, bytes.fromhex(magic))


def bytecode_folder(folder: Path, python: Interpreter) -> Path:
    """``folder``, made to be the bytecode cache (``PYTHONPYCACHEPREFIX``) of processes run by
    ``python``, with the bytecode of that Python's standard library shared with the suite's own
    cache: the standard library never changes, so it is compiled once for every session, not
    once per environment (about 150 modules, 0.6 s of CPU each time; Python still checks every
    cached file against its source). Without a suite cache, ``folder`` starts empty."""
    folder.mkdir()
    shared = os.environ.get("PYTHONPYCACHEPREFIX")
    if shared:
        target = Path(shared) / python.stdlib.lstrip(os.sep)
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError:  # where the suite caches nothing (its own temporary folder)
            return folder
        link = folder / python.stdlib.lstrip(os.sep)
        link.parent.mkdir(parents=True)
        link.symlink_to(target, target_is_directory=True)
    return folder


class CompiledModules:
    """The bytecode an environment's commands compiled for its installed modules, kept from one
    session to the next by the content of each source, and lent to the next environment that
    installs the very same file.

    Each session installs the wheel and its dependencies afresh, so Python found no valid
    bytecode for them (it checks a source's mtime and size) and compiled again the 500 modules
    the demo and the import of every module load: 1.3 s of CPU per environment (textual 0.55,
    paella 0.35), and paella's again after its reinstall. ``keep`` stores, per file of
    site-packages, the sha256 of its source and the code Python compiled from it (the file's
    last version only); ``lend`` writes that code back as the bytecode of an installed file
    whose source has the same sha256, under a header with that file's own mtime and size: the
    code Python compiles from that source (it sets the code's file name as it loads it).
    Anything else Python compiles as before. One file per interpreter beside the suite's own
    cache (one read, not one per module: opening files is dear here); without a suite cache,
    nothing is kept.
    """

    def __init__(self, python: Interpreter, bytecode: Path, site: Path) -> None:
        self.python, self.site = python, site
        self.cached = bytecode / str(site).lstrip(os.sep)
        shared = os.environ.get("PYTHONPYCACHEPREFIX")
        name = f"{python.tag}-{python.magic.hex()}.marshal"
        self.store = Path(shared) / "packaging-modules" / name if shared else None
        self.entries: dict[str, tuple[bytes, bytes]] | None = None  # path: (sha256, code)
        self.valid: dict[Path, int] = {}  # bytecode lent or kept: its file's mtime then

    def _load(self) -> dict[str, tuple[bytes, bytes]]:
        if self.entries is None:
            try:
                entries = marshal.loads(self.store.read_bytes()) if self.store else {}
            except (OSError, ValueError, EOFError, TypeError):
                entries = {}  # none yet, or not ours: Python compiles, and keep rewrites it
            self.entries = entries if isinstance(entries, dict) else {}
        return self.entries

    def _pyc(self, relative: str) -> Path:
        return self.cached / f"{relative.removesuffix('.py')}.{self.python.tag}.pyc"

    def _header(self, source: Path) -> bytes:
        info = source.stat()
        mtime, size = int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF
        return self.python.magic + struct.pack("<III", 0, mtime, size)

    def lend(self) -> None:
        """Bytecode for every installed source whose content was compiled before."""
        for relative, (digest, code) in self._load().items():
            source, pyc = self.site / relative, self._pyc(relative)
            try:
                header = self._header(source)
                if pyc in self.valid and pyc.read_bytes()[:16] == header:
                    continue  # what was lent or kept for it still holds (not reinstalled)
                if hashlib.sha256(source.read_bytes()).digest() != digest:
                    continue
            except FileNotFoundError:
                continue  # not installed
            pyc.parent.mkdir(parents=True, exist_ok=True)
            pyc.write_bytes(header + code)
            self.valid[pyc] = pyc.stat().st_mtime_ns

    def keep(self) -> None:
        """Store what the commands compiled, for the sources installed now."""
        if self.store is None or not self.cached.is_dir():
            return
        entries, added = self._load(), False
        for pyc in self.cached.rglob(f"*.{self.python.tag}.pyc"):
            mtime = pyc.stat().st_mtime_ns
            if self.valid.get(pyc) == mtime:
                continue  # lent or kept already, and Python did not write it again
            relative = str(pyc.relative_to(self.cached)).removesuffix(f".{self.python.tag}.pyc")
            source = self.site / f"{relative}.py"
            compiled = pyc.read_bytes()
            try:
                if compiled[:16] != self._header(source):
                    continue  # not from this source (uninstalled, or written before a change)
            except FileNotFoundError:
                continue
            entries[f"{relative}.py"] = (
                hashlib.sha256(source.read_bytes()).digest(),
                compiled[16:],
            )
            self.valid[pyc] = mtime
            added = True
        if added:
            self.store.parent.mkdir(parents=True, exist_ok=True)
            partial = self.store.with_name(f"{self.store.name}.{os.getpid()}")
            partial.write_bytes(marshal.dumps(entries))
            partial.replace(self.store)


class Venv:
    """A fresh virtual environment and the commands run in it.

    The environment is made without pip of its own, and this suite's pip installs into it,
    running under the environment's interpreter (as ``pip --python`` does: the result is what
    the environment's own pip would install); bootstrapping pip into every environment cost
    three seconds of CPU each. Installs skip compiling bytecode (``--no-compile``): the commands
    compile what they import, and no check here reads a ``.pyc``.

    The commands run in the environment keep that bytecode, in a folder of their own beside it
    (``PYTHONPYCACHEPREFIX``): the suite's own cache leaves everything under the temporary
    folder uncached (see tests/bytecode_cache.py), so each ``python`` of the environment compiled
    textual, rich and paella from source again (an import of every module: 2.2 s of CPU against
    1.0 s cached); the standard library's bytecode is the suite's (``bytecode_folder``).
    Where Python runs files an agent rewrites, nothing is cached, as before: the
    folders named in ``workspaces`` (the demo's) and the temporary folder the commands get
    (``TMPDIR``, where scratch trees go). pip itself runs with the suite's settings, under which
    its own modules are cached.
    """

    def __init__(
        self,
        path: Path,
        pip_cache: Path,
        python: str = sys.executable,
        workspaces: tuple[Path, ...] = (),
    ) -> None:
        subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True)
        self.path = path
        # Commands run beside the venv, never in the repository: its root holds a supervisor/
        # folder that `python -c` would import first.
        self.cwd = path.parent
        self.bin = path / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        self.env["PATH"] = f"{self.bin}{os.pathsep}{os.environ['PATH']}"
        self.env["PIP_CACHE_DIR"] = str(pip_cache)
        self.pip_env = dict(self.env)
        temporary = path.parent / f"{path.name}-tmp"
        temporary.mkdir()
        interpreter = probe(python)
        bytecode = bytecode_folder(path.parent / f"{path.name}-bytecode", interpreter)
        (site,) = path.glob("lib/python*/site-packages")
        self.compiled = CompiledModules(interpreter, bytecode, site)
        for folder in (temporary, *workspaces):
            # A plain file where the folder's cache would go: Python cannot make it, and skips.
            blocked = bytecode / str(folder.resolve()).lstrip(os.sep)
            blocked.parent.mkdir(parents=True, exist_ok=True)
            blocked.touch()
        self.env["TMPDIR"] = str(temporary)
        self.env["PYTHONPYCACHEPREFIX"] = str(bytecode)
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=cwd or self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )

    def ok(self, *argv: str, cwd: Path | None = None) -> str:
        result = self.run(*argv, cwd=cwd)
        assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        return result.stdout + result.stderr

    def pip_argv(self, *args: str) -> list[str]:
        """The pip command line that acts on this environment."""
        python = str(self.bin / "python")
        options = ["--disable-pip-version-check", "-q"]
        if PIP_RUNNER.is_file():
            return [python, str(PIP_RUNNER), *options, *args]
        return [sys.executable, "-m", "pip", "--python", python, *options, *args]

    def pip(self, *args: str) -> str:
        """Run pip on the environment; around it, bytecode is kept and lent (CompiledModules)."""
        self.compiled.keep()
        if args[0] == "install":
            args = ("install", "--no-compile", *args[1:])
        result = subprocess.run(
            self.pip_argv(*args),
            cwd=self.cwd,
            env=self.pip_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert result.returncode == 0, f"pip {args}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        if args[0] == "install":
            self.compiled.lend()
        return result.stdout + result.stderr

    def site_packages(self) -> Path:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        return Path(self.ok("python", "-c", code).strip())


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (bytecode caches aside) with its permission bits and sha256,
    and every link with its target: two equal digests are the same files, run the same way."""
    digest = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if "__pycache__" in path.parts:
            continue
        if path.is_symlink():
            digest[name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            mode = stat.S_IMODE(path.stat().st_mode)
            digest[name] = f"{mode:o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return digest


# Imports every module of paella_tui (``__main__`` runs the command, so it is left out): a file
# missing or broken, or a dependency gone, fails here.
IMPORT_EVERY_MODULE = """\
import importlib, pkgutil, paella_tui
names = [m.name for m in pkgutil.walk_packages(paella_tui.__path__, "paella_tui.")]
for name in names:
    if name != "paella_tui.__main__":
        importlib.import_module(name)
print(len(names))
"""


def imports_every_module(venv: Venv) -> None:
    """Every module of the installed package imports (the TUI's too, which a headless demo
    never loads)."""
    count = venv.ok("python", "-c", IMPORT_EVERY_MODULE).strip()
    assert int(count) > 120, count


def find_python(minor: int) -> str | None:
    """A working ``python3.MINOR``: among pyenv's installed versions, or on PATH (pyenv's own
    binary first: its shim on PATH costs a bash process, 0.15 s of CPU, at every start)."""
    candidates: list[str | None] = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(
            str(p) for p in Path(root).glob(f"versions/3.{minor}.*/bin/python3.{minor}")
        )
    candidates.append(shutil.which(f"python3.{minor}"))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "--version"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.startswith(f"Python 3.{minor}."):
            return candidate
    return None


# The newest supported Python: the supervisord test runs there, and is also the proof that the
# wheel installs and runs on it. test_the_wheel_runs_on_every_supported_python covers the
# others but 3.11, the one this suite runs on.
NEWEST = 13


@pytest.mark.slow
def test_paella_and_supervisord_live_in_one_environment_in_both_orders(
    dists: Dists, pip_cache: Path, tmp_path: Path
) -> None:
    """On Python 3.13: the wheel from the index with its dependencies, supervisord beside it, the
    demo played once with both installed. After each later install or uninstall the
    environment is compared file by file (permission bits, sha256, link targets; bytecode
    caches aside) with one where paella already ran: byte for byte the same files run the same
    way, so replaying the demo (4 s of CPU each) would check nothing more. Where the files
    differ from any environment paella ran in, ``paella status --tmux`` and an import of every
    module show the installed command and package really run."""
    python = find_python(NEWEST)
    if python is None:
        # Coexistence is checked all the same, on the suite's Python; only the 3.13 claim is not.
        ran_on = sys.version.split()[0]
        warnings.warn(f"Python 3.{NEWEST} is not installed: checked on {ran_on}", stacklevel=1)
    demo = tmp_path / "demo"
    venv = Venv(tmp_path / "venv", pip_cache, python or sys.executable, workspaces=(demo,))
    wheel = str(dists.wheel_from_sdist)

    def paella_runs() -> None:
        status = venv.ok("paella", "-C", str(demo), "status", "--tmux")
        assert status.startswith("paella ✓ done"), status
        imports_every_module(venv)

    def supervisord_works() -> None:
        assert venv.ok("supervisord", "--version").strip() == "4.3.0"
        venv.ok("python", "-c", "import supervisor.supervisord, supervisor.events")

    # paella-tui first (with its dependencies, from the index), then supervisord.
    venv.pip("install", wheel)
    paella_alone = tree_digest(venv.path)
    venv.pip("install", "supervisor==4.3.0")
    both = tree_digest(venv.path)
    # Installing supervisord changed no file of paella-tui or of its dependencies.
    assert {p: both.get(p) for p in paella_alone} == paella_alone
    theirs = venv.site_packages() / "supervisor"
    untouched = tree_digest(theirs)
    out = venv.ok("paella", "demo", "--headless", "--fast", "--dir", str(demo), cwd=tmp_path)
    assert "done" in out
    version = venv.ok("python", "-c", "import sys; print(sys.version_info[:2])").strip()
    assert version == (f"(3, {NEWEST})" if python else str(sys.version_info[:2]))
    paella_runs()
    supervisord_works()
    venv.pip("check")

    # Uninstalling paella-tui leaves every file of supervisord's package in place.
    venv.pip("uninstall", "-y", "paella-tui")
    assert tree_digest(theirs) == untouched
    supervisord_works()
    assert not (venv.bin / "paella").exists()
    assert venv.run("python", "-c", "import paella_tui").returncode != 0

    # supervisord first, then paella-tui (its dependencies are still installed): the very
    # environment the demo, paella_runs and supervisord_works ran in, file for file.
    venv.pip("install", "--no-deps", wheel)
    assert tree_digest(theirs) == untouched
    assert tree_digest(venv.path) == both

    # Uninstalling supervisord leaves paella-tui whole: the environment before supervisord came,
    # where paella has not run yet.
    venv.pip("uninstall", "-y", "supervisor")
    assert not theirs.exists()
    assert tree_digest(venv.path) == paella_alone
    paella_runs()
    venv.compiled.keep()  # for the next session's environment


@pytest.mark.slow
@pytest.mark.parametrize("minor", [m for m in (12, 13) if m != NEWEST])
def test_the_wheel_runs_on_every_supported_python(
    dists: Dists, pip_cache: Path, tmp_path: Path, minor: int
) -> None:
    """The classifiers say 3.11 to 3.13: 3.11 runs this suite, 3.13 the supervisord test; here
    the others install the wheel from the index, play the demo and import every module."""
    python = find_python(minor)
    if python is None:
        pytest.skip(f"Python 3.{minor} is not installed on this machine")
    where = tmp_path / "demo"
    venv = Venv(tmp_path / "venv", pip_cache, python, workspaces=(where,))
    venv.pip("install", str(dists.wheel_from_sdist))
    out = venv.ok("paella", "demo", "--headless", "--fast", "--dir", str(where))
    assert "done" in out
    version = venv.ok("python", "-c", "import sys; print(sys.version_info[:2])").strip()
    assert version == f"(3, {minor})"
    imports_every_module(venv)
    venv.compiled.keep()  # for the next session's environment
