"""What each command reads of a run's history (issue 17): the commands a person runs again and
again read the state kept beside the ledger and the records written since, never the whole
ledger, so their cost follows what is new, not how long the run has been going.

One real finished run (a headless ``paella run`` in a subprocess, a checkpoint, then the agent
failed); each command then runs through ``cli.main`` in this process, with ``Ledger.read`` (the
whole-ledger read) counted around the real method.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import GitRunner, SavedFolder
from hostile_project import FINISHED_GROUP, HostileProject, finished_project, no_traceback

from paella_tui.supervisor.run.ledger import Ledger, LedgerRead

# One worker for every test of the finished run (hostile_project.FINISHED_GROUP): made once.
pytestmark = pytest.mark.xdist_group(FINISHED_GROUP)


@pytest.fixture(scope="module")
def finished_run(
    tmp_path_factory: pytest.TempPathFactory, git: GitRunner
) -> Iterator[tuple[HostileProject, SavedFolder]]:
    """A project with one finished run, its state and its mirror in one saved folder."""
    with finished_project(tmp_path_factory, git) as made:
        yield made


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("status",), 0),
        (("status", "--json"), 0),
        (("status", "--tmux"), 0),
        (("checkpoints",), 0),
        (("checkpoints", "--json"), 0),
        (("checkpoint", "--label", "by hand"), 0),
        (("gates",), 0),
        (("gates", "--json"), 0),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_a_command_a_person_repeats_never_reads_the_whole_ledger(
    finished_run: tuple[HostileProject, SavedFolder],
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    code: int,
) -> None:
    p, saved = finished_run
    saved.restore()
    reads: list[str] = []
    real_read = Ledger.read

    def counted(self: Ledger) -> LedgerRead:
        reads.append(str(self.path))
        return real_read(self)

    monkeypatch.setattr(Ledger, "read", counted)
    proc = p.read(*args)
    no_traceback(proc)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert reads == [], f"paella {' '.join(args)} read the whole ledger {len(reads)} times"
