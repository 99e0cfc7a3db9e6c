"""One family of user-facing errors; the CLI turns each into a one-line message and an exit code."""

from __future__ import annotations

from dataclasses import dataclass


class EnvbuildError(Exception):
    """An error the user can fix; printed without a traceback."""

    exit_code = 1


@dataclass(frozen=True)
class Problem:
    """One located problem in a matrix: `file:line: message`."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.message}"


class MatrixError(EnvbuildError):
    """The matrix (file or --set overrides) is invalid; carries every problem found."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class UnknownBackendError(EnvbuildError):
    exit_code = 2

    def __init__(self, name: str, valid: list[str]):
        self.name = name
        self.valid = valid
        super().__init__(f"unknown backend '{name}'; valid backends: {', '.join(valid)}")


class NotContainerizableError(EnvbuildError):
    exit_code = 2


class DockerError(EnvbuildError):
    """The engine is unreachable, or a build, run or push failed."""


class StaleError(EnvbuildError):
    """`render --check` found differences."""
