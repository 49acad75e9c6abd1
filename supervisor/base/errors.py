"""The errors paella reports to a person, each with the exit status of SPEC 11 and what to do next."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOT_DONE = 1
EXIT_USAGE = 2
EXIT_WORKSPACE = 3
EXIT_INTERRUPTED = 130


class PaellaError(Exception):
    """An error that ends a command with a message, a hint and an exit status."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  {self.hint}"


class UsageError(PaellaError):
    """The command line or the contract asks for something that cannot be done (exit 2)."""

    exit_code = EXIT_USAGE


class WorkspaceError(PaellaError):
    """The workspace is not in a state paella can act on: no repository, an operation in progress, a held lock (exit 3)."""

    exit_code = EXIT_WORKSPACE


class GitError(WorkspaceError):
    """A git command failed; carries the command and what git said."""

    def __init__(self, args: list[str], returncode: int, stderr: str) -> None:
        said = stderr.strip() or f"exit status {returncode}"
        super().__init__(f"git {' '.join(args)} failed: {said}")
        self.returncode = returncode
        self.stderr = stderr
