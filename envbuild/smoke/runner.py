"""Image -> smoke result: start a container with the backend's device flags and run the probe in it.

The engine removes the container whatever happens: success, failure, timeout, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import SmokeError
from . import preflight

if TYPE_CHECKING:
    from ..engine import Engine
    from ..matrix import Backend, Matrix

SMOKE_LABEL = "dev.envbuild.smoke"
MODEL_MOUNT = "/models"


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


def model_args(model: str) -> tuple[list[str], list[str], dict[str, str]]:
    """Probe arguments, volumes and environment for a model given as synthetic, a directory or a hub id."""
    if model == "synthetic":
        return ["--model", "synthetic"], [], {"HF_HUB_OFFLINE": "1"}
    path = Path(model).expanduser()
    if path.is_dir():
        target = f"{MODEL_MOUNT}/{path.resolve().name or 'model'}"
        return ["--model", target], [f"{path.resolve()}:{target}:ro"], {"HF_HUB_OFFLINE": "1"}
    if model.startswith((".", "/", "~")):
        raise SmokeError(f"--model {model}: no such directory (give a local model directory, a hub id, or 'synthetic')")
    return ["--model", model], [], {}


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


def smoke(matrix: Matrix, backend: Backend, engine: Engine, *, image: str | None = None, model: str = "synthetic",
          timeout: float = 600, extra_env: dict[str, str] | None = None,
          echo: Callable[[str], None] = lambda s: None) -> SmokeResult:
    image = image or matrix.tags(backend)[0]
    preflight.require(backend, engine)  # first: without the device, no image would help
    image_id = engine.image_id(image)
    if image_id is None:
        raise SmokeError(
            f"image {image} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` "
            f"or pull it with `envbuild pull --backend {backend.name}` (or pass --image)"
        )
    args, volumes, env = model_args(model)
    echo(f"[{backend.name}] smoke: {image} (model: {model}, timeout: {timeout:g}s)")
    start = time.monotonic()
    with _sigterm_as_interrupt():
        done = engine.run(
            image, ["envbuild-probe", "--backend", backend.name, *args],
            name=f"envbuild-smoke-{backend.name}-{uuid.uuid4().hex[:8]}",
            labels={SMOKE_LABEL: "1", "dev.envbuild.backend": backend.name},
            run=backend.run, volumes=volumes, environment={**env, **(extra_env or {})}, timeout=timeout,
        )
    seconds = time.monotonic() - start
    result = SmokeResult(backend.name, image, False, seconds, done.status, stderr_tail=_tail(done.stderr), image_id=image_id)
    if done.timed_out:
        result.error = f"timed out after {timeout:g}s; the container was stopped and removed"
        return result
    try:
        doc = json.loads(done.stdout.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        result.error = f"the probe printed no JSON report (exit code {done.status}); is envbuild-probe in this image?"
        return result
    result.checks = doc.get("checks", [])
    result.probe = doc
    result.ok = bool(doc.get("ok")) and done.status == 0
    if not result.ok:
        result.error = next((f"{ch['name']}: {ch['message']}" for ch in result.checks if not ch.get("ok")),
                            f"exit code {done.status}")
    return result


def leftover_containers(engine: Engine) -> list[str]:
    """Containers envbuild started and did not remove (for tests and `doctor`)."""
    return engine.containers(SMOKE_LABEL)


def _tail(data: bytes, lines: int = 15) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
