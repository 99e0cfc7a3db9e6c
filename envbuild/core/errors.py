"""One family of user-facing errors; the CLI turns each into 'Error: ...' and its exit code, in one place.

exit 1: the input was fine and the world was not (a build, a smoke test, a push failed);
exit 2: the input was invalid (the matrix, a backend name, an option).
"""

from __future__ import annotations

from dataclasses import dataclass

from envbuild.core.text import shown


class EnvbuildError(Exception):
    """An error the user can fix; printed without a traceback."""

    exit_code = 1


class InvalidInput(EnvbuildError):
    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One located problem in a matrix: `file:line: message`."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:  # one line, whatever the source or the message quote
        where = f"{shown(self.source)}:{self.line}" if self.line else shown(self.source)
        return f"{where}: {shown(self.message)}"


MAX_PROBLEMS = 40


class MatrixError(InvalidInput):
    """The matrix (file or --set overrides) is invalid; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        shown_ = problems[:MAX_PROBLEMS]  # 300,000 duplicate keys are not 300,000 lines
        more = [f"... and {len(problems) - MAX_PROBLEMS} more problems"] if len(problems) > MAX_PROBLEMS else []
        super().__init__("\n".join([*(str(p) for p in shown_), *more]))


class UnknownBackendError(InvalidInput):
    def __init__(self, name: str, valid: list[str], hint: str = ""):
        self.name = name
        self.valid = valid
        super().__init__(f"unknown backend '{name}'{f' ({hint})' if hint else ''}; valid backends: {', '.join(valid)}")


class NotContainerizableError(InvalidInput):
    pass


class NoVariantFitsError(EnvbuildError):
    """Every image of a backend's family needs more of this host (a newer driver, another device): exit 1 before any
    pull or start, naming the driver and the upgrade. `data`: the same as JSON, for `pick --json`."""

    def __init__(self, message: str, data: dict | None = None):
        super().__init__(message)
        self.data = data


# --- the stages -----------------------------------------------------------------------------------------


class DockerError(EnvbuildError):
    """The engine is unreachable, or refused a request."""


class BuildError(EnvbuildError):
    pass


class SmokeError(EnvbuildError):
    """The smoke test could not run (the host lacks what the backend needs, the image is missing)."""


class HostMismatch(SmokeError):
    """The host's driver or device architecture is known not to run the image (smoke, run and pull refuse)."""


class PublishError(EnvbuildError):
    """A push or pull did not complete; nothing was recorded or tagged for it."""


class NetDeadline(EnvbuildError):
    """A server (registry, token service, package index) did not finish an answer within the deadline
    (core/netread.py): exit 1, naming the host and the deadline."""

    def __init__(self, message: str, host: str = "", seconds: float = 0.0):
        super().__init__(message)
        self.host, self.seconds = host, seconds


class RegistryError(EnvbuildError):
    """Any failure of a registry: unreachable, refused, or an unusable answer, whether the one registry client
    (core/regclient.py) met it or the engine reported it while pushing or pulling (ship/session.py). Not a
    PublishError: `lock` and `outdated` ask registries too, and each step says a registry's failure in its own words."""


class RegistryAnswerError(RegistryError):
    """The registry answered, but not usably (an error status, the wrong shape, the wrong digest, too large)."""


class RegistryAuthError(RegistryError):
    pass


class RegistryUnreachableError(RegistryError):
    pass


class RegistryDeadlineError(RegistryUnreachableError):
    """The registry (or its token service) did not finish an answer within the deadline."""


class DigestMismatchError(PublishError):
    pass


class ManifestError(EnvbuildError):
    pass


class EnvError(EnvbuildError):
    """Creating a native environment failed; nothing was left at DIR."""


class NativeEnvRefused(InvalidInput):
    """This backend has no native environment on this host (or at all)."""


class LockError(EnvbuildError):
    """A lock could not be resolved, read or used; `log` is the resolver's full output, when it ran."""

    def __init__(self, message: str, log: object = None):
        super().__init__(message)
        self.log = log


class StaleLock(LockError):
    """`--locked` (or `lock --check`) found a lock missing or not made from the current inputs."""


class PlatformError(EnvbuildError):
    """A platform this host can neither run nor emulate (exit 1: the fix is on the host, named in the message)."""


class UnreachableError(LockError):
    """A package index or registry a step needs does not answer (envbuild/net/netprobe.py): said before the step
    waits on it, with the ways out."""
