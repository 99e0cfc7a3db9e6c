"""Which engine a command works on: `--engine docker|podman`, else $ENVBUILD_ENGINE, else auto: Docker when a
Docker daemon answers, else Podman when it is installed, else Docker (whose error, or offer to install it, says
what to do). The one place that picks; every command gets its engine from here (cli `_engine()`, doctor), and the one
list of engines (ENGINES: --engine's choices)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from envbuild.core.errors import InvalidInput

if TYPE_CHECKING:
    from envbuild.core.checks import Check
    from envbuild.engine.api import Builder
    from envbuild.engine.docker import EngineAPI

# Every engine by its name (--engine NAME, ENVBUILD_ENGINE=NAME): its class ("module:Class", made with its timeout)
# and what it is called in messages. Auto asks Docker first, then Podman. Classes are imported when one is made:
# --engine's choices (NAMES) cost no engine module.
ENGINES: dict[str, tuple[str, str]] = {"docker": ("envbuild.engine.docker:Engine", "Docker"),
                                       "podman": ("envbuild.engine.podman:Podman", "Podman")}
NAMES = tuple(ENGINES)
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
        raise InvalidInput(f"{origin}: not an engine envbuild knows: give {', '.join(NAMES)} or auto")
    return name, origin


def choose(flag: str | None = None, environ: Mapping[str, str] | None = None, timeout: float | None = None) -> Choice:
    """The engine for this command, and why it is that one. A named engine is taken without asking Docker."""
    name, origin = wanted(flag, environ)
    if name is not None:
        return Choice(engine_class(name)(timeout), f"{origin} chose {ENGINES[name][1]}")
    from envbuild.engine.docker import DockerError, Engine
    from envbuild.engine.podman import Podman, executable

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


def daemon(timeout: float | None = None) -> EngineAPI:
    """The Docker daemon's engine, whatever --engine says: for what only a daemon registers (its runtimes, which
    `detect` takes as evidence)."""
    return engine_class("docker")(timeout)


def engine_class(name: str) -> type[EngineAPI]:
    """The class of the engine called `name` (one of NAMES)."""
    module, _, cls = ENGINES[name][0].partition(":")
    return getattr(importlib.import_module(module), cls)


def builder(engine: EngineAPI | None) -> Builder:
    """The builder of `engine`; without one (a lock planned offline), Docker's, which auto asks first."""
    from envbuild.engine import docker

    return engine.builder() if engine is not None else docker.find_builder()


def builder_check(engine: EngineAPI | None) -> Check:
    """Doctor's check of the builder of `engine`; without one (no engine answered), Docker's."""
    from envbuild.engine import docker

    return engine.builder_check() if engine is not None else docker.builder_check()


def purposes() -> dict[str, tuple[str, ...]]:
    """What each engine's doctor checks are for, by check name."""
    return {check: why for name in NAMES for check, why in engine_class(name).purposes.items()}
