"""The Docker engine: the SDK for images and containers, a BuildKit-capable CLI for builds.

docker-py cannot drive BuildKit (no secrets, no cache mounts), so builds go through `docker buildx build`
or, with an older client, `DOCKER_BUILDKIT=1 docker build`; everything else goes through the SDK.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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


def _plugin_places() -> list[str]:
    """Where the docker CLI looks for plugins (and its config, which may name more places)."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    return [os.path.join(config, "cli-plugins"), os.path.join(config, "config.json"),
            "/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
            "/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins"]


def _fingerprint(candidates: list[str]) -> list[str]:
    """What the answer of find_builder depends on: the clients themselves and the plugin folders (a plugin
    installed or removed changes its folder's mtime)."""
    parts = [f"ENVBUILD_DOCKER={os.environ.get('ENVBUILD_DOCKER', '')}"]
    for path in [*candidates, *_plugin_places()]:
        try:
            st = os.stat(path)
            parts.append(f"{os.path.realpath(path)} {st.st_ino} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path} absent")
    return parts


def _builder_cache() -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "envbuild", "builder.json")


def _cached_builder(key: list[str]) -> Builder | None:
    import json

    try:
        with open(_builder_cache(), encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("key") == key:
            return Builder(tuple(doc["argv"]), tuple(tuple(kv) for kv in doc["env"]), bool(doc["buildx"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _remember_builder(key: list[str], builder: Builder) -> None:
    import json

    path = _builder_cache()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"key": key, "argv": builder.argv, "env": builder.env, "buildx": builder.buildx}, fh)
        os.replace(tmp, path)
    except OSError:  # a read-only home only costs the next command the same questions
        pass


@lru_cache(maxsize=1)
def find_builder() -> Builder:
    """Prefer `docker buildx build`; else a client older than 23.0, which runs BuildKit itself.

    The answer is remembered (~/.cache/envbuild/builder.json) for as long as the docker clients and the
    plugin folders stay as they are: asking costs a few client start-ups, before every build.
    """
    candidates = _docker_candidates()
    if not candidates:
        raise DockerError(
            "no `docker` client on PATH: install Docker's CLI with the buildx plugin "
            "(docker-ce-cli + docker-buildx-plugin) or Debian's docker.io"
        )
    key = _fingerprint(candidates)
    cached = _cached_builder(key)
    if cached is not None:
        return cached
    builder = _ask_clients(candidates)
    _remember_builder(key, builder)
    return builder


def _ask_clients(candidates: list[str]) -> Builder:
    from packaging.version import InvalidVersion, Version

    # Ask every candidate both questions at once: each answer costs a client start-up (tens of ms).
    from concurrent.futures import ThreadPoolExecutor

    # `docker --version` answers from the client alone (`docker version` also asks the daemon).
    questions = [[exe, "buildx", "version"] for exe in candidates]
    questions += [[exe, "--version"] for exe in candidates]
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        answers = list(pool.map(_run_quiet, questions))
    buildx, versions = answers[: len(candidates)], answers[len(candidates):]
    for exe, (rc, _) in zip(candidates, buildx):
        if rc == 0:
            return Builder(argv=(exe, "buildx", "build", "--load"), env=(), buildx=True)
    for exe, (rc, out) in zip(candidates, versions):
        # "Docker version 20.10.24+dfsg1, build 297e128"
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out) if rc == 0 else None
        try:
            legacy = bool(m) and Version(m.group(1)) < Version("23.0")
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


def local_image_ids(refs: list[str]) -> dict[str, str | None] | None:
    """The local engine's image id for each reference (None: no such image), asked over its unix socket in
    plain HTTP/1.0: a few milliseconds, where importing the SDK (or even http.client) costs more than the
    answer. None when the engine is not a local unix socket or does not answer (the caller then builds)."""
    import json
    import socket
    from urllib.parse import quote

    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None
    ids: dict[str, str | None] = {}
    try:
        for ref in refs:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(host[len("unix://"):])
                sock.sendall(f"GET /images/{quote(ref, safe='/:@')}/json HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
            status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
            if status == b"200":
                ids[ref] = json.loads(body)["Id"]
            elif status == b"404":
                ids[ref] = None
            else:
                return None
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return ids
