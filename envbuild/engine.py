"""The Docker engine: the SDK for images and containers, a BuildKit-capable CLI for builds.

docker-py cannot drive BuildKit (no secrets, no cache mounts), so builds go through `docker buildx build`
or, with an older client, `DOCKER_BUILDKIT=1 docker build`; everything else goes through the SDK.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from packaging.version import InvalidVersion, Version

from .errors import DockerError

NO_DAEMON_HINT = (
    "Start the Docker daemon (e.g. `sudo systemctl start docker`, or `sudo dockerd &`), install it if missing "
    "(Debian/Ubuntu: `sudo apt-get install docker.io`), or point DOCKER_HOST at a running engine."
)


def client() -> Any:
    """A docker SDK client that has answered a ping, or a DockerError saying what to do."""
    import docker  # heavy: only for commands that talk to the engine

    try:
        c = docker.from_env(timeout=int(os.environ.get("ENVBUILD_DOCKER_TIMEOUT", "600")))
        c.ping()
        return c
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        text = str(exc)
        if "Permission denied" in text:
            raise DockerError(
                f"permission denied on the Docker socket {where}: add yourself to the docker group "
                "(`sudo usermod -aG docker $USER`, then log in again) or run as root"
            ) from None
        reason = next(
            (why for key, why in (("No such file", "no daemon socket there"), ("Connection refused", "connection refused"),
                                  ("timed out", "timed out")) if key in text),
            text.split("(")[0].strip().rstrip(":") or type(exc).__name__,
        )
        raise DockerError(f"cannot reach the Docker daemon at {where} ({reason}). {NO_DAEMON_HINT}") from None


@dataclass(frozen=True)
class Builder:
    """How to run a BuildKit build: the argv prefix and extra environment."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    buildx: bool

    def describe(self) -> str:
        prefix = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{prefix} {' '.join(self.argv)}".strip()


def _docker_candidates() -> list[str]:
    """Every `docker` on PATH (the first may lack buildx while a later one builds fine), or ENVBUILD_DOCKER."""
    forced = os.environ.get("ENVBUILD_DOCKER")
    if forced:
        return [forced]
    seen: list[str] = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        exe = shutil.which("docker", path=d) if d else None
        if exe and os.path.realpath(exe) not in map(os.path.realpath, seen):
            seen.append(exe)
    return seen


def _run_quiet(argv: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return proc.returncode, proc.stdout.strip()


@lru_cache(maxsize=1)
def find_builder() -> Builder:
    """Prefer `docker buildx build`; else a client older than 23.0, which runs BuildKit itself."""
    candidates = _docker_candidates()
    if not candidates:
        raise DockerError(
            "no `docker` client on PATH: install Docker's CLI with the buildx plugin "
            "(docker-ce-cli + docker-buildx-plugin) or Debian's docker.io"
        )
    for exe in candidates:
        rc, _ = _run_quiet([exe, "buildx", "version"])
        if rc == 0:
            return Builder(argv=(exe, "buildx", "build", "--load"), env=(), buildx=True)
    for exe in candidates:
        rc, out = _run_quiet([exe, "version", "--format", "{{.Client.Version}}"])
        try:
            legacy = Version(out.split("+")[0].split("-")[0]) < Version("23.0")
        except InvalidVersion:
            legacy = False
        if legacy:
            return Builder(argv=(exe, "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)
    raise DockerError(
        f"no BuildKit-capable docker client found (tried: {', '.join(candidates)}). Install the buildx plugin "
        "(Debian/Ubuntu: `apt-get install docker-buildx` or docker-buildx-plugin), or set ENVBUILD_DOCKER to a "
        "client that builds with BuildKit (e.g. Debian's docker.io 20.10 at /usr/bin/docker)."
    )


def image_id(c: Any, ref: str) -> str | None:
    import docker

    try:
        return c.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise DockerError(f"cannot inspect image {ref}: {exc.explanation or exc}") from None


def split_ref(ref: str) -> tuple[str, str]:
    """'host:5000/repo:tag' -> ('host:5000/repo', 'tag'); no tag means 'latest'."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return name, tag


def tag_image(c: Any, image: str, refs: list[str]) -> None:
    for ref in refs:
        repo, tag = split_ref(ref)
        if not c.images.get(image).tag(repo, tag):
            raise DockerError(f"could not tag {image} as {ref}")
