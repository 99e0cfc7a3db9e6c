"""Which engine a command works on: `--engine docker|podman`, else $ENVBUILD_ENGINE, else auto: Docker when a
Docker daemon answers, else Podman when it is installed, else Docker (whose error, or offer to install it, says
what to do). The one place that picks; every command gets its engine from here (cli `_engine()`, doctor)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from envbuild.engine.docker import DockerError, Engine, EngineAPI
from envbuild.core.errors import InvalidInput
from envbuild.engine.podman import Podman, executable

ENGINES = ("docker", "podman")
ENV = "ENVBUILD_ENGINE"
PROBE_TIMEOUT = 5  # seconds for auto's ping of the Docker daemon


@dataclass(frozen=True)
class Choice:
    engine: EngineAPI
    why: str  # in people's words: "--engine podman", "no Docker daemon answers at ...; Podman is installed"


def wanted(flag: str | None, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The engine asked for (None: auto) and who asked."""
    env = os.environ if environ is None else environ
    if flag:
        name, origin = flag, f"--engine {flag}"
    elif env.get(ENV):
        name, origin = env[ENV], f"{ENV}={env[ENV]}"
    else:
        return None, "auto"
    name = name.strip().lower()
    if name == "auto":
        return None, "auto"
    if name not in ENGINES:
        raise InvalidInput(f"{origin}: not an engine envbuild knows: give docker, podman or auto")
    return name, origin


def choose(flag: str | None = None, environ: Mapping[str, str] | None = None, timeout: float | None = None) -> Choice:
    """The engine for this command, and why it is that one. A named engine is taken without asking Docker."""
    name, origin = wanted(flag, environ)
    if name == "podman":
        return Choice(Podman(timeout), f"{origin} chose Podman")
    if name == "docker":
        return Choice(Engine(timeout), f"{origin} chose Docker")
    docker = Engine(timeout)
    probe = Engine(PROBE_TIMEOUT if timeout is None else min(timeout, PROBE_TIMEOUT))
    try:
        probe.ping()
    except DockerError as exc:
        if executable():
            return Choice(Podman(timeout), f"no Docker daemon answers at {docker.host} ({_short(exc)}) and Podman is "
                                           "installed (set ENVBUILD_ENGINE or --engine to choose)")
        return Choice(docker, f"no Docker daemon answers at {docker.host} and Podman is not installed")
    finally:
        probe.close()
    return Choice(docker, f"a Docker daemon answers at {docker.host} (--engine podman or ENVBUILD_ENGINE=podman "
                          "would use Podman)")


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else str(exc).split(". ")[0][:120]
