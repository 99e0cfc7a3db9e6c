"""The shapes an engine answers in that are not the daemon's: how it builds (Builder). Each engine makes its own
(engine/docker.py: BuildKit through the docker client; engine/podman.py: buildah through `podman build`); the
stages only read them, so none asks which engine it holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Builder:
    """How an engine builds: the builder process's argv prefix and extra environment, and what the build stage
    must know of it."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    buildx: bool  # a buildx builder: --builder, --cache-to and every --cache-from type
    # BuildKit options it refuses, each with the sentence that says why: refused by name, never dropped
    cannot: tuple[tuple[str, str], ...] = ()
    loopback_base: tuple[str, ...] = ()  # options a base image on a loopback (plain HTTP) registry needs
    called: str = "the legacy `docker build`"  # the builder in people's words, where it reads only registry caches
    # A reader of its output into BuildKit's steps (made with the build's Progress, whose steps it feeds);
    # None: the output is BuildKit's plain progress already.
    reader: Callable[[Any], Any] | None = None

    def describe(self) -> str:
        prefix = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{prefix} {' '.join(self.argv)}".strip()

    def refusal(self, option: str) -> str | None:
        """Why this builder cannot do `option`, or None when it can."""
        return dict(self.cannot).get(option)
