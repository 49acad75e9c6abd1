"""The distribution as users get it: one import name, ``paella_tui``, in the wheel, in the sdist,
in the wheel built from the sdist and in the editable install; metadata that says what it needs
and where it runs; and paella-tui next to supervisord's ``supervisor`` package in one
environment, installed in both orders, each uninstalled in turn.

The wheel and the sdist are built once per session with ``python -m build`` (build isolation
fetches hatchling from the package index, as any user's build does), by whichever pytest-xdist
worker needs them first; the slow install tests then run side by side on different workers and
share one pip cache.
"""

from __future__ import annotations

import email
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest
from conftest import session_once, session_root

from paella_tui import __version__

ROOT = Path(__file__).resolve().parents[1]
DIST_INFO = f"paella_tui-{__version__}.dist-info"
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


def _build(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "build", *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """``python -m build`` (sdist, then the wheel from the sdist) and a wheel straight from the
    tree, built once per session (the distributions are only read)."""
    with session_once(tmp_path_factory, "dist") as build_into:
        if build_into is not None:
            _build("--outdir", str(build_into / "via-sdist"), str(ROOT))
            _build("--wheel", "--outdir", str(build_into / "from-tree"), str(ROOT))
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

    assert {name.split("/")[0] for name in names} == {"paella_tui", DIST_INFO}
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
    for path in (*SHIPPED, "LICENSE", "pyproject.toml", "README.md"):
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


# --- next to supervisord ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def pip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pip cache for the session's venvs: what one install downloaded or built, the next
    one reuses (pip's cache is safe to share between processes)."""
    with session_once(tmp_path_factory, "pip-cache"):
        pass
    return session_root(tmp_path_factory) / "pip-cache"


class Venv:
    """A fresh virtual environment and the commands run in it.

    The environment is made without pip of its own, and this suite's pip installs into it
    (``pip --python``: pip runs under the environment's interpreter, so the result is what the
    environment's own pip would install); bootstrapping pip into every environment cost three
    seconds of CPU each. Installs skip compiling bytecode (``--no-compile``): the commands
    compile what they import, and no check here reads a ``.pyc``.

    The commands run in the environment keep that bytecode, in a folder of their own beside it
    (``PYTHONPYCACHEPREFIX``): the suite's own cache leaves everything under the temporary
    folder uncached (see ``bytecode_cache``), so each ``python`` of the environment compiled
    textual, rich and paella from source again (an import of every module: 2.2 s of CPU against
    1.0 s cached). Where Python runs files an agent rewrites, nothing is cached, as before: the
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
        bytecode = path.parent / f"{path.name}-bytecode"
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
        options = ["--disable-pip-version-check", "-q", "--python", str(self.bin / "python")]
        return [sys.executable, "-m", "pip", *options, *args]

    def pip(self, *args: str) -> str:
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
        return result.stdout + result.stderr

    def site_packages(self) -> Path:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        return Path(self.ok("python", "-c", code).strip())


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (bytecode caches aside) and its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


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


@pytest.mark.slow
def test_paella_and_supervisord_live_in_one_environment_in_both_orders(
    dists: Dists, pip_cache: Path, tmp_path: Path
) -> None:
    """The demo is played once, with both packages installed. After each later install or
    uninstall the environment is compared file by file (sha256, bytecode caches aside) with
    the one the demo ran in: byte for byte the same files run the same way, so replaying the
    demo (4 s of CPU each) would check nothing more. ``paella status --tmux`` and an import of
    every module then show the installed command and package really run."""
    demo = tmp_path / "demo"
    venv = Venv(tmp_path / "venv", pip_cache, workspaces=(demo,))
    wheel = str(dists.wheel_from_sdist)

    def paella_works() -> None:
        out = venv.ok("paella", "demo", "--headless", "--fast", "--dir", str(demo), cwd=tmp_path)
        assert "done" in out
        paella_runs()

    def paella_runs() -> None:
        status = venv.ok("paella", "-C", str(demo), "status", "--tmux")
        assert status.startswith("paella ✓ done"), status
        count = venv.ok("python", "-c", IMPORT_EVERY_MODULE).strip()
        assert int(count) > 120, count

    def supervisord_works() -> None:
        assert venv.ok("supervisord", "--version").strip() == "4.3.0"
        venv.ok("python", "-c", "import supervisor.supervisord, supervisor.events")

    # paella-tui first (with its dependencies), then supervisord.
    venv.pip("install", wheel)
    paella_alone = tree_digest(venv.path)
    venv.pip("install", "supervisor==4.3.0")
    both = tree_digest(venv.path)
    # Installing supervisord changed no file of paella-tui or of its dependencies.
    assert {p: both.get(p) for p in paella_alone} == paella_alone
    theirs = venv.site_packages() / "supervisor"
    untouched = tree_digest(theirs)
    paella_works()
    supervisord_works()
    venv.pip("check")

    # Uninstalling paella-tui leaves every file of supervisord's package in place.
    venv.pip("uninstall", "-y", "paella-tui")
    assert tree_digest(theirs) == untouched
    supervisord_works()
    assert not (venv.bin / "paella").exists()
    assert venv.run("python", "-c", "import paella_tui").returncode != 0

    # supervisord first, then paella-tui (its dependencies are still installed): the very
    # environment the demo ran in.
    venv.pip("install", "--no-deps", wheel)
    assert tree_digest(theirs) == untouched
    assert tree_digest(venv.path) == both
    paella_runs()
    supervisord_works()

    # Uninstalling supervisord leaves paella-tui whole: the environment before supervisord came.
    venv.pip("uninstall", "-y", "supervisor")
    assert not theirs.exists()
    assert tree_digest(venv.path) == paella_alone
    paella_runs()


def find_python(minor: int) -> str | None:
    """A working ``python3.MINOR``: on PATH, or among pyenv's installed versions."""
    candidates = [shutil.which(f"python3.{minor}")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(
            str(p) for p in Path(root).glob(f"versions/3.{minor}.*/bin/python3.{minor}")
        )
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "--version"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.startswith(f"Python 3.{minor}."):
            return candidate
    return None


@pytest.mark.slow
@pytest.mark.parametrize("minor", [12, 13])
def test_the_wheel_runs_on_every_supported_python(
    dists: Dists, pip_cache: Path, tmp_path: Path, minor: int
) -> None:
    """The classifiers say 3.11 to 3.13: 3.11 runs this suite; the others install and play the demo."""
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
