"""Image -> smoke result: start a container with the backend's device flags and run the probe in it.

The container is always removed: on success, failure, timeout, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from . import engine
from .errors import DockerError, EnvbuildError
from .matrix import Backend, Matrix, RunSpec

SMOKE_LABEL = "dev.envbuild.smoke"
MODEL_MOUNT = "/models"


class SmokeError(EnvbuildError):
    pass


@dataclass
class SmokeResult:
    backend: str
    image: str
    ok: bool
    seconds: float
    exit_code: int | None
    checks: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    error: str | None = None
    stderr_tail: str = ""
    image_id: str | None = None  # what was tested, so `publish --smoke-json` can tell it is the same image
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "image": self.image,
            "image_id": self.image_id,
            "date": self.date,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "exit_code": self.exit_code,
            "error": self.error,
            "checks": self.checks,
            "probe": self.probe,
        }


def run_kwargs(run: RunSpec) -> dict[str, Any]:
    """The matrix's `docker run` needs, as docker SDK arguments."""
    import docker

    kw: dict[str, Any] = {}
    if run.gpus:
        count = -1 if run.gpus == "all" else int(run.gpus)
        kw["device_requests"] = [docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]
    if run.runtime:
        kw["runtime"] = run.runtime
    if run.devices:
        kw["devices"] = [d if ":" in d else f"{d}:{d}:rwm" for d in run.devices]
    if run.volumes:
        kw["volumes"] = list(run.volumes)
    if run.group_add:
        kw["group_add"] = list(run.group_add)
    if run.env:
        kw["environment"] = dict(run.env)
    if run.cap_add:
        kw["cap_add"] = list(run.cap_add)
    if run.security_opt:
        kw["security_opt"] = list(run.security_opt)
    if run.ipc:
        kw["ipc_mode"] = run.ipc
    if run.network:
        kw["network_mode"] = run.network
    if run.shm_size:
        kw["shm_size"] = run.shm_size
    if run.privileged:
        kw["privileged"] = True
    return kw


def preflight(docker_client: Any, backend: Backend, *, root: str = "/") -> None:
    """Refuse early, with the fix, when the host cannot expose the device the way the matrix says."""
    run = backend.run
    runtimes: set[str] = set()
    if run.gpus or run.runtime:
        try:
            runtimes = set((docker_client.info().get("Runtimes") or {}).keys())
        except Exception as exc:  # the SDK raises several types here; all mean "could not ask"
            raise DockerError(f"cannot ask the Docker daemon for its runtimes: {exc}") from None
    if run.gpus and "nvidia" not in runtimes and not Path(root, "etc/cdi").is_dir():
        raise SmokeError(
            f"backend '{backend.name}' needs `--gpus {run.gpus}`, but the Docker daemon has no NVIDIA runtime "
            f"(runtimes: {', '.join(sorted(runtimes)) or 'none'}). Install the NVIDIA driver and the NVIDIA Container "
            "Toolkit, then run `sudo nvidia-ctk runtime configure --runtime=docker` and restart Docker."
        )
    if run.runtime and run.runtime not in runtimes:
        raise SmokeError(
            f"backend '{backend.name}' needs `--runtime={run.runtime}`, which the Docker daemon does not know "
            f"(runtimes: {', '.join(sorted(runtimes)) or 'none'}). Install the vendor's container runtime and "
            f"register it under \"runtimes\" in /etc/docker/daemon.json, then restart Docker."
        )
    missing = [d.split(":")[0] for d in run.devices if not Path(root, d.split(":")[0].lstrip("/")).exists()]
    if missing:
        raise SmokeError(
            f"backend '{backend.name}' needs the device node(s) {', '.join(missing)}, which this host does not have: "
            f"is this a {backend.description} host, with its driver loaded? (`envbuild detect` shows what this host has)"
        )


def _model_args(model: str) -> tuple[list[str], dict[str, dict[str, str]], dict[str, str]]:
    """Probe arguments, volumes and environment for a model given as synthetic, a directory or a hub id."""
    if model == "synthetic":
        return ["--model", "synthetic"], {}, {"HF_HUB_OFFLINE": "1"}
    path = Path(model).expanduser()
    if path.is_dir():
        target = f"{MODEL_MOUNT}/{path.resolve().name or 'model'}"
        return ["--model", target], {str(path.resolve()): {"bind": target, "mode": "ro"}}, {"HF_HUB_OFFLINE": "1"}
    if model.startswith((".", "/", "~")):
        raise SmokeError(f"--model {model}: no such directory (give a local model directory, a hub id, or 'synthetic')")
    return ["--model", model], {}, {}


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """CI cancels with SIGTERM: turn it into KeyboardInterrupt so cleanup runs."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def smoke(
    matrix: Matrix,
    backend: Backend,
    *,
    image: str | None = None,
    model: str = "synthetic",
    timeout: float = 600,
    extra_env: dict[str, str] | None = None,
    echo: Callable[[str], None] = lambda s: None,
    docker_client: Any = None,
) -> SmokeResult:
    import docker
    import requests

    image = image or matrix.tags(backend)[0]
    c = docker_client or engine.client()
    preflight(c, backend)  # first: without the device, no image would help
    image_id = engine.image_id(c, image)
    if image_id is None:
        raise SmokeError(
            f"image {image} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` "
            f"or pull it with `envbuild pull --backend {backend.name}` (or pass --image)"
        )
    args, volumes, env = _model_args(model)
    kwargs = run_kwargs(backend.run)
    if volumes:
        kwargs["volumes"] = [*kwargs.get("volumes", []), *(f"{h}:{v['bind']}:{v['mode']}" for h, v in volumes.items())]
    kwargs["environment"] = {**kwargs.get("environment", {}), **env, **(extra_env or {})}
    name = f"envbuild-smoke-{backend.name}-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    container = None
    echo(f"[{backend.name}] smoke: {image} (model: {model}, timeout: {timeout:g}s)")
    try:
        with _sigterm_as_interrupt():
            container = c.containers.create(
                image,
                command=["envbuild-probe", "--backend", backend.name, *args],
                name=name,
                labels={SMOKE_LABEL: "1", "dev.envbuild.backend": backend.name},
                detach=True,
                **kwargs,
            )
            container.start()
            try:
                status = container.wait(timeout=timeout)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                container.kill()
                return SmokeResult(
                    backend.name, image, False, time.monotonic() - start, None,
                    error=f"timed out after {timeout:g}s; the container was stopped and removed",
                    stderr_tail=_tail(container.logs(stdout=False, stderr=True)), image_id=image_id,
                )
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True)
    except docker.errors.APIError as exc:
        raise DockerError(f"cannot run {image}: {exc.explanation or exc}") from None
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
    seconds = time.monotonic() - start
    code = status.get("StatusCode")
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        return SmokeResult(
            backend.name, image, False, seconds, code,
            error=f"the probe printed no JSON report (exit code {code}); is envbuild-probe in this image?",
            stderr_tail=_tail(stderr), image_id=image_id,
        )
    checks = doc.get("checks", [])
    ok = bool(doc.get("ok")) and code == 0
    error = None if ok else next((f"{ch['name']}: {ch['message']}" for ch in checks if not ch.get("ok")), f"exit code {code}")
    return SmokeResult(backend.name, image, ok, seconds, code, checks, doc, error, _tail(stderr), image_id=image_id)


def leftover_containers(docker_client: Any) -> list[str]:
    """Containers envbuild started and did not remove (for tests and `doctor`)."""
    return [c.name for c in docker_client.containers.list(all=True, filters={"label": SMOKE_LABEL})]


def _tail(data: bytes, lines: int = 15) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
