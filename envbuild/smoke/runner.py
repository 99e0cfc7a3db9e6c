"""Image -> smoke result: start a container with the backend's device flags and run the probe in it.

The engine removes the container whatever happens: success, failure, timeout, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .. import owner
from ..errors import DockerError, InvalidInput, SmokeError
from ..owner import OWNED_LABEL
from ..text import shown, unsafe_char
from . import preflight

if TYPE_CHECKING:
    from ..engine import Engine, Exited
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


def result_problem(doc: Any) -> str | None:
    """Why a document is not one result of `envbuild smoke --json` (None: it is), read back by summary and publish:
    the types are checked before anything is printed or recorded from it."""
    if not isinstance(doc, dict):
        return "a result must be a JSON object"
    for key, kinds in (("backend", (str,)), ("ok", (bool,)), ("checks", (list,)), ("image", (str, type(None))),
                       ("error", (str, type(None))), ("seconds", (int, float, type(None))), ("date", (str, type(None)))):
        if key in doc and not isinstance(doc[key], kinds) or key in ("backend", "ok", "checks") and key not in doc:
            return f"\"{key}\" must be {' or '.join('null' if k is type(None) else k.__name__ for k in kinds)}"
    for check in doc["checks"]:
        if not (isinstance(check, dict) and isinstance(check.get("name"), str) and isinstance(check.get("ok"), bool)
                and isinstance(check.get("message", ""), str)):
            return "each of \"checks\" must be an object with a string \"name\", a boolean \"ok\" and a string \"message\""
    return None


def model_args(model: str) -> tuple[list[str], list[str], dict[str, str]]:
    """Probe arguments, volumes and environment for a model given as synthetic, a directory or a hub id."""
    if model == "synthetic":
        return ["--model", "synthetic"], [], {"HF_HUB_OFFLINE": "1"}
    path = Path(model).expanduser()
    if path.is_dir():
        target = f"{MODEL_MOUNT}/{path.resolve().name or 'model'}"
        return ["--model", target], [f"{path.resolve()}:{target}:ro"], {"HF_HUB_OFFLINE": "1"}
    if model.startswith((".", "/", "~")) or unsafe_char(model) is not None or model.startswith("-"):
        raise InvalidInput(f"--model {shown(model)}: no such directory (give a local model directory, a hub id, or 'synthetic')")
    return ["--model", model], [], {}


@contextmanager
def _refusal(backend: Backend) -> Iterator[None]:
    """A container the host would not start as the backend asks: which flag, and why the backend needs it."""
    try:
        yield
    except DockerError as exc:
        why = preflight.refused(backend, str(exc))
        if why is None:
            raise
        raise SmokeError(f"backend '{backend.name}': {why}") from None


def smoke(matrix: Matrix, backend: Backend, engine: Engine, *, image: str | None = None, model: str = "synthetic",
          timeout: float = 600, extra_env: dict[str, str] | None = None,
          echo: Callable[[str], None] = lambda s: None, ignore_host: bool = False,
          root: Path = Path("/")) -> SmokeResult:
    image = image or matrix.tags(backend)[0]
    args, volumes, env = model_args(model)  # the input first, then the host, then the image
    preflight.require(backend, engine, root)  # without the device, no image would help
    if not ignore_host:  # a driver known to be too old: refused before the engine is asked anything more
        from ..host.compat import host_driver, image_arch

        host = host_driver(backend, root)
        preflight.require_host(backend, host, matrix=matrix)
    for name in owner.remove_left_behind(engine):  # what a crashed run left; never a live run's container
        echo(f"[{backend.name}] removed a stopped envbuild container left behind: {name}")
    image_id = engine.image_id(image)
    if image_id is None:
        raise SmokeError(
            f"image {image} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` "
            f"or pull it with `envbuild pull --backend {backend.name}` (or pass --image)"
        )
    if not ignore_host:  # again with the architectures its build measured (read from the image, not started)
        preflight.require_host(backend, host, matrix=matrix, measured_arch=image_arch(engine, image_id), echo=echo)
    echo(f"[{backend.name}] smoke: {image} (model: {model}, timeout: {timeout:g}s)")
    start = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    # A folder of yours is readable by you: the probe runs as your uid (group 0) when one is mounted.
    own_user = f"{os.getuid()}:0" if volumes and backend.user != "root" else None

    def probe(user: str | None, cache: str) -> tuple[Exited, dict[str, Any] | None, str | None]:
        """One run of the probe: what the container did, its report, and why it failed (None: passed)."""
        with _refusal(backend):
            done = engine.run(
                image, ["envbuild-probe", "--backend", backend.name, *args],
                name=f"envbuild-smoke-{backend.name}-{tag}{'-uid' if user and user != own_user else ''}",
                labels={SMOKE_LABEL: "1", **owner.labels(), "dev.envbuild.backend": backend.name},
                run=backend.run, volumes=[*volumes, f"{cache}:/cache"], environment={**env, **(extra_env or {})},
                timeout=max(timeout - (time.monotonic() - start), 1), user=user,
            )
        if done.timed_out:
            return done, None, f"timed out after {timeout:g}s; the container was stopped and removed"
        try:
            doc = json.loads(done.stdout.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            return done, None, f"the probe printed no JSON report (exit code {done.status}); is envbuild-probe in this image?"
        failed = next((f"{ch['name']}: {ch['message']}" for ch in doc.get("checks", []) if not ch.get("ok")), None)
        return done, doc, failed or (None if done.status == 0 else f"exit code {done.status}")

    # One cache for both runs (the second finds the first's compiled kernels), gone with the smoke test.
    with engine.volume(f"envbuild-smoke-{backend.name}-{tag}", owner.labels()) as cache:
        done, doc, why = probe(own_user, cache)
        result = SmokeResult(backend.name, image, False, 0.0, done.status, stderr_tail=_tail(done.stderr), image_id=image_id)
        result.checks, result.probe, result.error = list((doc or {}).get("checks", [])), doc, why
        if why is None and backend.user != "root" and not volumes:
            # Again as an arbitrary user id with group 0, as OpenShift runs images: home, caches and the work
            # folder must work for any uid. (Not with a folder of yours mounted: it is yours to read.)
            uid = f"{random.randint(100000, 999999)}:0"
            step = time.monotonic()
            done, doc, why = probe(uid, cache)
            result.checks.append({"name": "arbitrary_uid", "ok": why is None, "seconds": round(time.monotonic() - step, 3),
                                  "message": f"the probe as user {uid}: " + (why or "every check passed")})
            result.exit_code, result.error = done.status, why and f"arbitrary_uid: as user {uid}: {why}"
            result.stderr_tail = result.stderr_tail if why is None else _tail(done.stderr)
    result.seconds = time.monotonic() - start
    result.ok = result.error is None
    return result


def leftover_containers(engine: Engine) -> list[str]:
    """Containers envbuild started (smoke, run) and did not remove (for tests and `doctor`)."""
    return engine.containers(OWNED_LABEL)


def _tail(data: bytes, lines: int = 15) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
