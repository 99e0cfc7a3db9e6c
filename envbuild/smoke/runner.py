"""Image -> smoke result: start a container with the backend's device flags and run the probe in it.

The engine removes the container whatever happens: success, failure, timeout, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from envbuild.engine import owner
from envbuild.engine.cachemount import CACHE, cache_mount, is_folder
from envbuild.core import heartbeat
from envbuild.core.errors import DockerError, InvalidInput, SmokeError
from envbuild.engine.owner import OWNED_LABEL
from envbuild.core.platform import Platform, can_run, emulation_fix, foreign_arch, host_platform, platform_arch, target
from envbuild.core.text import shown, unsafe_char
from envbuild.smoke import preflight

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend, Matrix

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
    platform: Platform | None = None  # the image's own (os/architecture), which is what ran
    emulated: bool = False  # it ran under QEMU on a host of another architecture

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "image": self.image,
            "image_id": self.image_id,
            "platform": self.platform,
            "emulated": self.emulated,
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
                       ("error", (str, type(None))), ("seconds", (int, float, type(None))), ("date", (str, type(None))),
                       ("image_id", (str, type(None))), ("platform", (str, type(None))), ("emulated", (bool, type(None)))):
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


# What a run under emulation cannot mean anything for, and why: reported as skipped, never dropped silently.
EMULATED_SKIPS = {
    "timings": "skipped: under QEMU emulation the seconds measure the emulator, not the image",
    "compile": "skipped: under QEMU emulation Inductor's C++ build takes many minutes; a native runner checks it",
    "read_only_any_uid": "skipped: under QEMU emulation a second run would double minutes; a native runner checks it",
}
# Who the second run of a smoke runs as: a uid and a group the image does not know, as Apptainer runs images.
CLUSTER_USER = "4242:4242"
QUIET = 10.0  # seconds of silence after which a smoke says what it is waiting for
# The probe's checks in the order it runs them, each with what a person waits for while it runs.
PROBE_STEPS = (("import_torch", "torch to import"), ("import_plugin", "the device plugin to import"),
               ("device", "the device to answer"), ("versions", "the pins to be read"), ("load", "the model to load"),
               ("forward", "the first forward pass"), ("generate", "the model to generate"),
               ("cpu_match", "the CPU reference run"), ("compile", "torch.compile to build a kernel"),
               ("arbitrary_uid", "the folder checks"))
_DONE_LINE = re.compile(r"\[probe\] (\w+): (ok|FAILED) \(([\d.]+)s\)")


class Watch:
    """What a smoke says while a probe runs, so that no minute passes in silence: each check's line as the probe
    prints it (its stderr, streamed), and after QUIET seconds without one, what it is waiting for and how long."""

    def __init__(self, backend: str, echo: Callable[[str], None], what: str = "", quiet: float = QUIET,
                 clock: Callable[[], float] = time.monotonic):
        self.backend, self.echo, self.what, self.quiet, self.clock = backend, echo, what, quiet, clock
        self.done: list[str] = []
        self.since = self.said = clock()
        self.lock = threading.Lock()
        self._beat = heartbeat.beating(self.tick, name="envbuild-smoke-heartbeat")

    def line(self, text: str) -> None:
        """One line of the probe's stderr: a finished check is said; the rest stays in the log."""
        m = _DONE_LINE.match(text.strip())
        if not m:
            return
        with self.lock:
            self.done.append(m.group(1))
            self.since = self.said = self.clock()
            self.echo(f"[{self.backend}] {self.what}{m.group(1)}: {m.group(2)} ({float(m.group(3)):.1f}s)")

    def waiting_for(self) -> str:
        if not self.done:
            return "the container to start and torch to import"
        names = [n for n, _ in PROBE_STEPS]
        last = self.done[-1]
        after = names[names.index(last) + 1:] if last in names else []
        ahead = [w for n, w in PROBE_STEPS if n in after and n not in self.done]
        return f"{ahead[0]} (after {last})" if ahead else f"the probe to finish (after {last})"

    def tick(self) -> None:
        """Say what is being waited for, when nothing was said for `quiet` seconds."""
        with self.lock:
            now = self.clock()
            if now - self.said < self.quiet:
                return
            self.said = now
            self.echo(f"[{self.backend}] {self.what}still waiting for {self.waiting_for()}: {now - self.since:.0f}s")

    def __enter__(self) -> "Watch":
        self._beat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._beat.__exit__(None, None, None)


def smoke(matrix: Matrix, backend: Backend, engine: EngineAPI, *, image: str | None = None, model: str = "synthetic",
          timeout: float = 600, extra_env: dict[str, str] | None = None,
          echo: Callable[[str], None] = lambda s: None, ignore_host: bool = False,
          root: Path = Path("/"), cache: str | None = None, platform: str | Platform | None = None) -> SmokeResult:
    """Run the probe once, in one container (default image: the backend's tag for `platform`, REPO:BACKEND-ARCH when
    that is not this host's). An image of another architecture runs under QEMU: the result says so."""
    if platform:
        platform = backend.listed(platform)
    or_image = "" if image else " (or pass --image)"  # a way out only where the image was not named already
    image = image or matrix.tags(backend, foreign_arch(platform))[0]
    args, volumes, env = model_args(model)  # the input first, then the host, then the image
    mounted_cache = cache_source(cache) if cache is not None else None
    preflight.require(backend, engine, root)  # without the device, no image would help
    if not ignore_host:  # a driver known to be too old: refused before the engine is asked anything more
        from envbuild.matrix.compat import host_driver, image_arch

        host = host_driver(backend, root)
        preflight.require_host(backend, host, matrix=matrix)
    for name in owner.remove_left_behind(engine):  # what a crashed run left; never a live run's container
        echo(f"[{backend.name}] removed a stopped envbuild container left behind: {name}")
    image_id = engine.image_id(image)
    if image_id is None:
        raise SmokeError(
            f"image {image} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` "
            f"or pull it with `envbuild pull --backend {backend.name}`{or_image}"
        )
    if not ignore_host:  # again with the architectures its build measured (read from the image, not started)
        preflight.require_host(backend, host, matrix=matrix, measured_arch=image_arch(engine, image_id), echo=echo)
    found = engine.image(image)
    ran = Platform(found.os, platform_arch(found.architecture)) if found else target(platform)
    if platform and ran != platform:
        raise SmokeError(f"image {image} is {ran}, not {platform}: build it with `envbuild build --backend {backend.name} "
                         f"--platform {platform}`{or_image}")
    runs, emulated, how = can_run(ran, str(root))
    if not runs:
        raise SmokeError(f"image {image} is {ran}, which this host ({host_platform()}) cannot run: {how}. Set up "
                         f"emulation: {emulation_fix(ran)}")
    args = [*args, "--no-compile"] if emulated else args
    echo(f"[{backend.name}] smoke: {image} on {ran}{' under QEMU emulation' if emulated else ''} "
         f"(model: {model}, timeout: {timeout:g}s)")
    start = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    user = probe_user(backend, mounted=bool(volumes) or (cache is not None and is_folder(cache)))
    check_uid = user is not None and not user.startswith("0:")
    if check_uid:  # the probe checks that this user can write its home, the work folder and the caches
        env["ENVBUILD_ARBITRARY_UID"] = "1"

    def run_probe(suffix: str, volumes: list[str], environment: dict[str, str], user: str | None,
                  read_only: bool = False, what: str = "") -> tuple[Any, dict | None, list[dict], str | None]:
        """One container running the probe, said as it goes: how it exited, its report (None: it printed none), the
        report's checks and the first that failed, in words."""
        with _refusal(backend), Watch(backend.name, echo, what) as watch:
            done = engine.run(
                image, ["envbuild-probe", "--backend", backend.name, *args],
                name=f"envbuild-smoke-{backend.name}-{tag}{suffix}",
                labels={SMOKE_LABEL: "1", **owner.labels(), "dev.envbuild.backend": backend.name},
                run=backend.run, volumes=volumes, environment={**environment, **(extra_env or {})},
                timeout=timeout, user=user, read_only=read_only, on_line=watch.line,
            )
        try:
            doc = None if done.timed_out else json.loads(done.stdout.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            doc = None
        doc = doc if isinstance(doc, dict) else None
        checks = [c for c in (doc or {}).get("checks") or [] if isinstance(c, dict)]
        failed = next((f"{c.get('name')}: {c.get('message')}" for c in checks if not c.get("ok")), None)
        return done, doc, checks, failed

    def probe(cache: str) -> SmokeResult:
        """The one run of the probe: every check, in one container."""
        done, doc, checks, failed = run_probe("", [*volumes, f"{cache}:{CACHE}"], env, user)
        result = SmokeResult(backend.name, image, False, 0.0, done.status, stderr_tail=_tail(done.stderr), image_id=image_id)
        if done.timed_out:
            result.error = f"timed out after {timeout:g}s; the container was stopped and removed"
            return result
        if doc is None:
            result.error = f"the probe printed no JSON report (exit code {done.status}); is envbuild-probe in this image?"
            return result
        result.probe, result.checks = doc, checks
        if check_uid and result.checks and not any(c.get("name") == "arbitrary_uid" for c in result.checks):
            # A probe older than this envbuild: the run still proves that every check passed as this user.
            result.checks.append({"name": "arbitrary_uid", "ok": True, "seconds": 0.0,
                                  "message": f"every check ran as user {user} (this image's probe does not check "
                                             "its folders: rebuild the image for that)"})
        result.error = failed or (None if done.status == 0 else f"exit code {done.status}")
        return result

    def as_clusters_run_it() -> dict:
        """A second run as clusters run images (Apptainer, `docker run --user`): the root filesystem read-only, a
        uid:gid the image does not know (not group 0), HOME elsewhere, no /cache volume. The model still loads and
        runs, and compiles (what users run), with the caches moved by the image's entrypoint."""
        started = time.monotonic()
        echo(f"[{backend.name}] read-only run as {CLUSTER_USER}:")
        done, doc, checks, failed = run_probe("-ro", list(volumes), {**env, "ENVBUILD_ARBITRARY_UID": "1", "HOME": "/tmp"},
                                              CLUSTER_USER, read_only=True, what="read-only ")
        how = f"read-only, as {CLUSTER_USER} with HOME=/tmp (as Apptainer and `docker run --user` run images)"
        check = {"name": "read_only_any_uid", "ok": False, "seconds": round(time.monotonic() - started, 3)}
        if done.timed_out:
            failed = f"timed out after {timeout:g}s"
        elif not checks:
            failed = f"the probe printed no JSON report (exit code {done.status}): {_tail(done.stderr)}"
        elif failed is None and done.status != 0:
            failed = f"exit code {done.status}"
        moved = next((c.get("message") for c in checks if c.get("name") == "arbitrary_uid"), "")
        check["ok"] = failed is None
        check["message"] = f"{how}: {failed}" if failed else f"{how}: the model loaded and ran; {moved}"
        return check

    if mounted_cache is not None:  # the user's: what the probe downloads and compiles stays for the next run
        result = probe(mounted_cache)
    else:  # a cache of its own, gone with the smoke test
        with engine.volume(f"envbuild-smoke-{backend.name}-{tag}", owner.labels()) as volume:
            result = probe(volume)
    if check_uid and result.error is None and result.probe is not None:
        if emulated:  # said, never silently dropped
            result.checks.append({"name": "read_only_any_uid", "ok": True, "skipped": True, "seconds": 0.0,
                                  "message": EMULATED_SKIPS["read_only_any_uid"]})
        else:
            check = as_clusters_run_it()
            result.checks.append(check)
            if not check["ok"]:
                result.error = f"read_only_any_uid: {check['message']}"
    result.platform, result.emulated = ran, emulated
    if emulated and result.probe is not None:  # said, never silently dropped
        for name, message in EMULATED_SKIPS.items():
            if name == "timings" or (name == "compile" and backend.compile.check):
                result.checks.append({"name": name, "ok": True, "skipped": True, "seconds": 0.0, "message": message})
        result.probe["timings"] = {k: None for k in result.probe.get("timings") or {}}
    result.seconds = time.monotonic() - start
    result.ok = result.error is None
    return result


def probe_user(backend: Backend, *, mounted: bool) -> str | None:
    """Who the probe runs as: a uid the image does not know, with group 0, as OpenShift runs images (which
    also proves the image works without root); with a folder of yours mounted (a model, a cache), your uid
    with group 0, which can read and write what you made there (safetensors writes its files 0600), root
    included. None (the image's user) for a backend whose image runs as root."""
    if backend.user == "root":
        return None
    if mounted:
        return f"{os.getuid()}:0"
    return f"{random.randint(100000, 999999)}:0"


def cache_source(cache: str) -> str:
    """--cache as a mount source: a folder (with a '/', made when absent) or a volume name."""
    if is_folder(cache):
        Path(cache).expanduser().mkdir(parents=True, exist_ok=True)  # the probe runs as you: yours to write
    return cache_mount(cache).rsplit(":", 1)[0]


def leftover_containers(engine: EngineAPI) -> list[str]:
    """Containers envbuild started (smoke, run) and did not remove (for tests and `doctor`)."""
    return engine.containers(OWNED_LABEL)


def _tail(data: bytes, lines: int = 15) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
