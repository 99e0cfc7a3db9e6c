"""The one Docker boundary: every question to the engine, and every container, push and pull, goes through
an Engine; every `docker` client process is found and started here; the Docker config is read here. The rest of
envbuild never imports the docker SDK nor starts a docker client itself. EngineAPI, the contract every engine
declares (Podman's in podman.py), is here too.

The SDK cannot drive BuildKit (no secrets, no cache mounts), so builds run the docker client as a process: which
client builds is Engine.builder (find_builder, below), Engine.start_client starts it, image/builder.py reads its
output; `envbuild run` hands the terminal to one (Engine.client_run). Installing and starting a daemon is not the
engine's: host/engine_setup.py.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping, Protocol
from urllib.parse import quote

from envbuild.core.checks import Check
from envbuild.core.errors import DockerError
from envbuild.core.files import write_atomic
from envbuild.core.imageref import Reference
from envbuild.core.paths import cache_dir, config_dir
from envbuild.engine.api import Builder
from envbuild.engine.owner import Container

if TYPE_CHECKING:
    from envbuild.engine.runspec import RunSpec

DEFAULT_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 600  # seconds for one API call ($ENVBUILD_DOCKER_TIMEOUT): a push of a large layer takes a while
# The first contact (a ping, `podman version`): an engine that does not answer it in seconds is hung (a wedged
# daemon, a stale lock), and every command would otherwise wait the full call timeout for it.
CONNECT_TIMEOUT = 15.0
CONNECT_TIMEOUT_ENV = "ENVBUILD_ENGINE_CONNECT_TIMEOUT"
NO_DAEMON_HINT = (
    "Start the Docker daemon (e.g. `sudo systemctl start docker`, or `sudo dockerd &`), install it if missing "
    "(Debian/Ubuntu: `sudo apt-get install docker.io`), or point DOCKER_HOST at a running engine."
)

# How an unreachable engine reads, in the words of the docker clients 20.10 to 28.x (build output included)
# and of the SDK. Only phrases about the daemon: a failed RUN step's own "No such file or directory" is not one.
_UNREACHABLE = re.compile(
    r"Cannot connect to the Docker daemon"  # clients 20.10 to 28.2 (and 20.10's BuildKit: "failed to dial gRPC: ...")
    r"|failed to connect to the docker API at"  # clients from 28.3
    r"|error during connect"  # clients over tcp/npipe
    r"|Is the docker daemon running\?"
    r"|Error while fetching server API version"  # the SDK's first request
    r"|permission denied while trying to connect to the Docker daemon",
    re.IGNORECASE,
)
_REASONS = (
    ("permission denied", "permission denied"),
    ("no such file", "no daemon socket there"),
    ("connection refused", "connection refused"),
    ("timed out", "timed out"),
    ("timeout", "timed out"),
)


def buildx_selection(environ: Mapping[str, str] | None = None) -> str | None:
    """The builder `docker buildx use` selected (<config>/buildx/current), or None."""
    doc = _read_json(config_dir(environ) / "buildx" / "current")
    return str(doc.get("Name") or "default") if doc else None


def host(environ: Mapping[str, str] | None = None) -> str:
    """Where the engine is, as the docker client finds it: $DOCKER_HOST, else the endpoint of the Docker
    context ($DOCKER_CONTEXT, else the config's currentContext), else Docker's default socket."""
    env = os.environ if environ is None else environ
    if env.get("DOCKER_HOST"):
        return _checked_host(env["DOCKER_HOST"])
    config = config_dir(env)
    name = env.get("DOCKER_CONTEXT") or _read_json(config / "config.json").get("currentContext")
    if name and name != "default":
        meta = _read_json(config / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest() / "meta.json")
        endpoint = ((meta.get("Endpoints") or {}).get("docker") or {}).get("Host")
        if isinstance(endpoint, str) and endpoint:
            return endpoint
    return DEFAULT_HOST


def _checked_host(value: str) -> str:
    """$DOCKER_HOST as the docker client reads it (unix://, tcp://HOST:PORT, ssh://, npipe://), or exit 2 saying so."""
    from urllib.parse import urlsplit

    from envbuild.core.errors import InvalidInput
    from envbuild.core.text import shown

    try:
        url = urlsplit(value)
        url.port  # noqa: B018 (reading it checks it)
        ok = url.scheme in ("unix", "tcp", "http", "https", "ssh", "npipe", "fd") and bool(url.netloc or url.path)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInput(f"DOCKER_HOST={shown(value)}: not a Docker engine address: give unix:///var/run/docker.sock, "
                           "tcp://HOST:PORT or ssh://HOST, or unset it")
    return value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def client_executables(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every `docker` client on PATH (the first may lack buildx while a later one builds fine), or
    $ENVBUILD_DOCKER alone."""
    env = os.environ if environ is None else environ
    if env.get("ENVBUILD_DOCKER"):
        return [env["ENVBUILD_DOCKER"]]
    seen: list[str] = []
    for d in env.get("PATH", "").split(os.pathsep):
        exe = shutil.which("docker", path=d) if d else None
        if exe and os.path.realpath(exe) not in map(os.path.realpath, seen):
            seen.append(exe)
    return seen


def ask_client(argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """A short question to a docker client (`docker --version`): exit status and what it printed."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return proc.returncode, proc.stdout.strip()


def start_client(argv: list[str], env: dict[str, str]) -> Any:
    """A docker client process (a build) with its output (stdout and stderr together) to read line by line."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            errors="replace", stdin=subprocess.DEVNULL)


def terminal_run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run a client (docker or podman) on this terminal: its stdin and stdout are ours, its stderr is copied through
    to ours and its tail kept. SIGTERM and SIGHUP are passed on; Ctrl-C reaches it from the terminal. Returns
    (exit status, stderr tail)."""
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(argv, env={**os.environ, **env}, stderr=subprocess.PIPE)
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to the client too
    tail = b""
    try:
        while chunk := os.read(child.stderr.fileno(), 65536):
            os.write(sys.stderr.fileno(), chunk)
            tail = (tail + chunk)[-8192:]
        status = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return (128 - status if status < 0 else status), tail.decode("utf-8", "replace")


def unreachable(text: str) -> bool:
    """Whether a client's or the SDK's message says that no engine answered."""
    return bool(_UNREACHABLE.search(text))


class Unreachable(DockerError):
    """No engine answered at `where`; `reason` is what the message said (or None)."""

    def __init__(self, where: str, reason: str | None):
        self.where, self.reason = where, reason
        if reason == "permission denied":
            text = (f"permission denied on the Docker socket {where}: add yourself to the docker group "
                    "(`sudo usermod -aG docker $USER`, then log in again) or run as root")
        else:
            text = f"cannot reach the Docker daemon at {where}{f' ({reason})' if reason else ''}. {NO_DAEMON_HINT}"
        super().__init__(text)


def unreachable_error(text: str, where: str | None = None) -> Unreachable:
    """The one error for an engine that does not answer: where, why (when the text says), and what to do."""
    low = text.lower()
    return Unreachable(where or host(), next((why for key, why in _REASONS if key in low), None))


class EngineError(DockerError):
    """The engine answered and refused: `explanation` is its own words, `not_found` a 404."""

    def __init__(self, what: str, explanation: str, not_found: bool = False):
        self.explanation = explanation
        self.not_found = not_found
        super().__init__(f"{what}: {explanation}")


class StreamBroken(DockerError):
    """A push or pull stream broke off before it ended."""


@dataclass(frozen=True)
class Image:
    id: str
    labels: dict[str, str]
    os: str
    architecture: str
    repo_digests: tuple[str, ...]
    size: int
    created: datetime | None = None
    layers: tuple[str, ...] = ()  # the root filesystem's diff ids, bottom first


@dataclass(frozen=True)
class Exited:
    """A container that ran to its end (or was stopped at its timeout)."""

    status: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool


def timestamp(text: str | None) -> datetime | None:
    """Docker's '2026-12-01T15:00:10.123456789Z' (nanoseconds) as a datetime."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$", text or "")
    if not m:
        return None
    zone = "+00:00" if m.group(3) in (None, "Z") else m.group(3)
    return datetime.fromisoformat(m.group(1) + (m.group(2) or "")[:7] + zone)


def _repo_tag(ref: str) -> tuple[str, str]:
    """What the API takes apart: the full repository name and the tag (or digest); no tag means 'latest'."""
    r = Reference.parse(ref).tagged()
    return r.name, r.digest or r.tag or "latest"


def _gpus(value: str) -> Any:
    """As docker run --gpus reads it: all, a count, or device=ID."""
    import docker

    if value.startswith("device="):
        return docker.types.DeviceRequest(device_ids=[value.split("=", 1)[1]], capabilities=[["gpu"]])
    return docker.types.DeviceRequest(count=-1 if value == "all" else int(value), capabilities=[["gpu"]])


# Each kind of run flag (core.runspec.RUN_KINDS) as the SDK's container option: (option, value, is a list).
SDK_OPTIONS: dict[str, tuple[str, Any, bool]] = {
    "gpus": ("device_requests", _gpus, True),
    "runtime": ("runtime", str, False),
    "device": ("devices", lambda d: d if ":" in d else f"{d}:{d}:rwm", True),
    "volume": ("volumes", str, True),
    "group_add": ("group_add", str, True),
    "env": ("environment", lambda kv: tuple(kv.split("=", 1)), True),
    "cap_add": ("cap_add", str, True),
    "security_opt": ("security_opt", str, True),
    "ipc": ("ipc_mode", str, False),
    "network": ("network_mode", str, False),
    "shm_size": ("shm_size", str, False),
    "privileged": ("privileged", lambda _: True, False),
}


def run_options(run: RunSpec) -> dict[str, Any]:
    """The matrix's `docker run` needs, as the SDK's container options: the same flags the CLI is given."""
    kw: dict[str, Any] = {}
    for flag in run.flags():
        option, convert, many = SDK_OPTIONS[flag.kind]
        if many:
            kw.setdefault(option, []).append(convert(flag.value))
        else:
            kw[option] = convert(flag.value)
    if "environment" in kw:
        kw["environment"] = dict(kw["environment"])
    return kw


class EngineAPI(Protocol):
    """What the stages may ask of an engine: Engine answers with the real daemon, tests/support/fakes.FakeEngine in
    memory. Both subclass this, with these parameters exactly (tests/unit/test_engine.py compares them), so no
    caller asks which one it holds and a call with a wrong name fails in the unit tests too."""

    host: str
    kind: str  # its name in select.NAMES (--engine), how it is named to people
    check_name: str  # doctor's check that it answers
    purposes: dict[str, tuple[str, ...]]  # what each of its doctor checks is for: "build", "run"

    def ping(self) -> None: ...
    def version(self) -> dict[str, Any]: ...
    def info(self) -> dict[str, Any]: ...
    def runtimes(self) -> set[str]: ...
    def image(self, ref: str) -> Image | None: ...
    def image_id(self, ref: str) -> str | None: ...
    def tag(self, image: str, refs: list[str]) -> None: ...
    def untag(self, ref: str) -> None: ...
    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image: ...

    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False, on_line: Callable[[str], None] | None = None) -> Exited: ...

    def volume(self, name: str, labels: dict[str, str]) -> ContextManager[str]: ...
    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None: ...
    def start_client(self, argv: list[str], env: dict[str, str]) -> Any: ...
    def client_args(self, args: list[str]) -> list[str]: ...
    def client_run(self, args: list[str], env: dict[str, str]) -> tuple[int, str]: ...
    def container_list(self, label: str) -> list[Container]: ...
    def containers(self, label: str, stopped: bool = False) -> list[str]: ...
    def dangling_images(self, label: str) -> list[str]: ...
    def remove_image(self, ref: str) -> str | None: ...
    def build_cache_mounts(self) -> list[dict[str, Any]]: ...
    def prune_build_cache(self, record: str) -> int: ...
    def remove_container(self, ref: str) -> None: ...
    def login(self, host: str, username: str, password: str) -> None: ...
    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]: ...
    def pull(self, ref: str, auth: dict[str, str] | None, platform: str | None = None) -> Iterator[dict[str, Any]]: ...
    def host_checks(self) -> list[Check]: ...
    def builder(self) -> Builder: ...
    def builder_check(self) -> Check: ...
    def failed_check(self, exc: DockerError, why: str) -> Check: ...
    def answer_check(self, version: dict[str, Any], why: str) -> Check: ...
    def is_local(self) -> bool: ...
    def close(self) -> None: ...


def _follow(container: Any, on_line: Callable[[str], None]) -> Any:
    """A thread that hands each line of a running container's stderr to on_line; it ends with the container.
    What it reads is only shown: the result is read whole once the container exited."""
    import threading

    def follow() -> None:
        pending = b""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=False, stderr=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    on_line(line.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 (a stream cut by the container's removal: nothing more to show)
            return
        if pending:
            on_line(pending.decode("utf-8", "replace"))

    thread = threading.Thread(target=follow, name="envbuild-container-stderr", daemon=True)
    thread.start()
    return thread


class Engine(EngineAPI):
    """A Docker engine, reached through the SDK. Connects on first use; every SDK error becomes a DockerError
    (EngineError when the engine refused, the unreachable message when it did not answer)."""

    kind = "docker"
    check_name = "docker daemon"
    purposes = {"docker daemon": ("build", "run"), "buildkit": ("build",)}

    def __init__(self, timeout: float | None = None, client: Any = None):
        self.host = host()
        from envbuild.net.netread import seconds_env  # ssl and urllib: paid by a command that asks an engine

        self.timeout = timeout if timeout is not None else seconds_env("ENVBUILD_DOCKER_TIMEOUT", TIMEOUT)
        self.connect_timeout = min(self.timeout, seconds_env(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT))
        self._client = client

    @classmethod
    def connect(cls, timeout: float | None = None) -> "Engine":
        """An engine that has answered a ping, or the DockerError that says what to do."""
        engine = cls(timeout)
        engine.ping()
        return engine

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            try:  # from_env reads DOCKER_TLS_VERIFY/DOCKER_CERT_PATH too, for a tcp DOCKER_HOST
                if os.environ.get("DOCKER_HOST"):
                    self._client = docker.from_env(timeout=int(self.timeout))
                else:
                    self._client = docker.DockerClient(base_url=self.host, timeout=int(self.timeout))
            except docker.errors.DockerException as exc:
                raise unreachable_error(str(exc), self.host) from None
        return self._client

    def host_checks(self) -> list[Check]:
        """What this engine needs of the host besides answering (doctor): for Docker, nothing more."""
        return []

    def builder(self) -> Builder:
        return find_builder()

    def builder_check(self) -> Check:
        return builder_check()

    def failed_check(self, exc: DockerError, why: str) -> Check:
        """Doctor's check when the daemon did not answer, with the way to a running one."""
        if isinstance(exc, Unreachable):
            return Check(self.check_name, False, f"cannot reach the Docker daemon at {exc.where}: "
                         f"{exc.reason or 'no answer'}", daemon_fix(exc, exc.where))
        return Check(self.check_name, False, f"the engine at {self.host} did not answer: {exc} ({why})",
                     daemon_fix(exc, self.host))

    def answer_check(self, version: dict[str, Any], why: str) -> Check:
        """Doctor's check of the daemon that answered `version`: a BuildKit one (18.09 or later)."""
        return answer_check(self.check_name, self.host, version, why, MIN_SERVER)

    def is_local(self) -> bool:
        """Whether the daemon shares this machine (and its network): a socket or a named pipe here."""
        return self.host.startswith(("unix://", "npipe://"))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _call(self, what: str, fn: Any, *, missing_ok: bool = False) -> Any:
        """fn(), its SDK errors as envbuild's; with missing_ok, None where the engine answers 404."""
        import docker
        import requests

        try:
            return fn()
        except docker.errors.NotFound as exc:
            if missing_ok:
                return None
            raise EngineError(what, str(exc.explanation or exc), not_found=True) from None
        except docker.errors.APIError as exc:
            raise EngineError(what, str(exc.explanation or exc)) from None
        except requests.exceptions.RequestException as exc:
            raise unreachable_error(str(exc), self.host) from None
        except docker.errors.DockerException as exc:
            if unreachable(str(exc)):
                raise unreachable_error(str(exc), self.host) from None
            raise EngineError(what, str(exc)) from None

    def _local_get(self, what: str, path: str, *, missing_ok: bool = False, timeout: float | None = None) -> Any:
        """GET `path` from an engine on a local socket without the SDK (importing it, with requests, costs about
        0.1 s: a tenth of a second of every no-op build, which asks only this); the JSON answer, None for a 404
        with missing_ok. NotImplemented where the SDK must answer: it is loaded already, or the engine is not
        on a unix socket (TLS, ssh)."""
        if self._client is not None or not self.host.startswith("unix://"):
            return NotImplemented

        where, timeout = self.host[len("unix://"):], timeout or self.timeout

        class Connection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(where)

        conn = Connection("localhost", timeout=timeout)
        try:
            conn.request("GET", quote(path, safe="/:@?=&"))
            answer = conn.getresponse()
            body = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise unreachable_error(str(exc), self.host) from None
        finally:
            conn.close()
        if answer.status == 404 and missing_ok:
            return None
        try:
            doc = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read: its words, as text
            doc = body.decode("utf-8", "replace")[:2000]
        if answer.status >= 400:
            said = doc.get("message") if isinstance(doc, dict) else doc
            raise EngineError(what, str(said or answer.reason), not_found=answer.status == 404)
        return doc

    # -- the daemon ------------------------------------------------------------------------------------
    def ping(self) -> None:
        if self._local_get("ping", "/_ping", timeout=self.connect_timeout) is NotImplemented:
            self._call("ping", lambda: self.client.ping())

    def version(self) -> dict[str, Any]:
        return self._call("asking the daemon's version", lambda: self.client.version())

    def info(self) -> dict[str, Any]:
        return self._call("asking the daemon", lambda: self.client.info())

    def runtimes(self) -> set[str]:
        """The container runtimes registered with the daemon, e.g. {'runc', 'nvidia'}."""
        return set((self.info().get("Runtimes") or {}).keys())

    # -- images -----------------------------------------------------------------------------------------
    def image(self, ref: str) -> Image | None:
        """The local image a reference (or id) names; None when there is none."""
        attrs = self._local_get(f"cannot inspect image {ref}", f"/images/{ref}/json", missing_ok=True)
        if attrs is NotImplemented:
            attrs = self._call(f"cannot inspect image {ref}", lambda: self.client.api.inspect_image(ref), missing_ok=True)
        if attrs is None:
            return None
        config = attrs.get("Config") or {}
        return Image(attrs["Id"], dict(config.get("Labels") or {}), attrs.get("Os") or "linux",
                     attrs.get("Architecture") or "unknown", tuple(attrs.get("RepoDigests") or ()), int(attrs.get("Size") or 0),
                     timestamp(attrs.get("Created")), tuple((attrs.get("RootFS") or {}).get("Layers") or ()))

    def image_id(self, ref: str) -> str | None:
        image = self.image(ref)
        return image.id if image else None

    def tag(self, image: str, refs: list[str]) -> None:
        for ref in refs:
            r = Reference.parse(ref).tagged()
            if r.digest:
                raise DockerError(f"cannot tag {image} as {ref}: a tag cannot carry a digest")
            repo, tag = r.name, r.tag
            if not self._call(f"could not tag {image} as {ref}", lambda: self.client.api.tag(image, repo, tag)):
                raise DockerError(f"could not tag {image} as {ref}")

    def untag(self, ref: str) -> None:
        """Remove one reference by name (the image stays while other tags hold it); an absent one is fine."""
        self._call(f"cannot remove {ref}", lambda: self.client.api.remove_image(ref, noprune=False), missing_ok=True)

    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image:
        """A root filesystem tarball as a one-layer image named `ref` (docker import): its layer's diff id is the
        tarball's sha256. `changes`: Dockerfile instructions for its config (ENV, CMD)."""
        r = Reference.parse(ref).tagged()
        changes = [*changes, *(f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items()))]
        self._call(f"cannot import {tar} as {ref}", lambda: self.client.api.import_image_from_file(
            tar, repository=r.familiar_name, tag=r.tag, changes=changes))
        image = self.image(ref)
        if image is None:
            raise EngineError(f"cannot import {tar} as {ref}", "the engine has no such image afterwards")
        return image

    # -- containers ---------------------------------------------------------------------------------------
    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False, on_line: Callable[[str], None] | None = None) -> Exited:
        """Run a container to its end with the backend's `docker run` needs; it is removed whatever happens
        (success, failure, timeout, KeyboardInterrupt). `on_line` is given each line of its stderr as it comes."""
        import requests

        kw = run_options(run)
        if volumes:
            kw["volumes"] = [*kw.get("volumes", []), *volumes]
        kw["environment"] = {**kw.get("environment", {}), **(environment or {})}
        if user:
            kw["user"] = user
        if read_only:  # as clusters run images: the root filesystem read-only, a fresh /tmp that runs code (compile)
            kw["read_only"], kw["tmpfs"] = True, {"/tmp": "exec"}
        container = None
        follower = None
        try:
            container = self._call(f"cannot run {image}", lambda: self.client.containers.create(
                image, command=command, name=name, labels=labels, detach=True, **kw))
            self._call(f"cannot run {image}", container.start)
            if on_line is not None:
                follower = _follow(container, on_line)
            try:
                status = container.wait(timeout=timeout)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                self._call(f"cannot stop {name}", container.kill)
                return Exited(None, b"", self._logs(container, stderr=True), timed_out=True)
            return Exited(status.get("StatusCode"), self._logs(container, stdout=True), self._logs(container, stderr=True), False)
        finally:
            if follower is not None:
                follower.join(timeout=5)  # the stream ends with the container
            # Interrupted while the daemon created it, the container exists but its id never came back: by name.
            self.remove_container(container.id if container is not None else name)

    @contextlib.contextmanager
    def volume(self, name: str, labels: dict[str, str]) -> Iterator[str]:
        """A named volume for the time of a with-block; removed afterwards, whatever happened."""
        self._call(f"cannot create volume {name}", lambda: self.client.api.create_volume(name, labels=labels))
        try:
            yield name
        finally:
            self._call(f"cannot remove volume {name}", lambda: self.client.api.remove_volume(name, force=True),
                       missing_ok=True)

    def _logs(self, container: Any, stdout: bool = False, stderr: bool = False) -> bytes:
        return self._call("cannot read the container's output", lambda: container.logs(stdout=stdout, stderr=stderr))

    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None:
        """One regular file of an image, read without running it (a container is created, never started, and
        removed); None when the image has no such file."""
        container = self._call(f"cannot read {path} from {image}", lambda: self.client.api.create_container(image, command=["true"]))
        try:
            got = self._call(f"cannot read {path} from {image}", lambda: self.client.api.get_archive(container["Id"], path),
                             missing_ok=True)
            if got is None:
                return None
            stream, stat = got
            if int(stat.get("size") or 0) > limit:
                raise DockerError(f"{path} in {image} is larger than {limit >> 20} MiB")
            data = b"".join(stream)
        finally:
            self.remove_container(container["Id"])
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            return tar.extractfile(member).read() if member else None

    def start_client(self, argv: list[str], env: dict[str, str]) -> Any:
        """A docker client process for this engine (a build: image/builder.py reads its output); the unit tests'
        FakeEngine answers it with a scripted builder."""
        return start_client(argv, env)

    def client_args(self, args: list[str]) -> list[str]:
        """What the client is given for Docker's `run` arguments `args`: Docker's own words, as they are."""
        return list(args)

    def client_run(self, args: list[str], env: dict[str, str]) -> tuple[int, str]:
        """Run the docker client with `args` (for `envbuild run`) on this terminal: its stdin and stdout are ours,
        its stderr is copied through to ours and its tail kept, so that a refusal by the host can be explained.
        SIGTERM and SIGHUP are passed on; Ctrl-C reaches it from the terminal. Returns (exit status, stderr tail)."""
        exe = next(iter(client_executables()), None)
        if not exe:
            raise DockerError("no `docker` client on PATH: install Docker's CLI (Debian/Ubuntu: `apt-get install docker.io`)")
        return terminal_run([exe, *args], env)

    def container_list(self, label: str) -> list[Container]:
        """The containers (running or not) that carry this label: name, state and labels."""
        found = self._call("cannot list containers", lambda: self.client.api.containers(all=True, filters={"label": label}))
        return [Container(c["Names"][0].lstrip("/"), str(c.get("State") or ""), dict(c.get("Labels") or {})) for c in found]

    def containers(self, label: str, stopped: bool = False) -> list[str]:
        """Names of the containers (running or not; with `stopped`, only those not running) that carry this label."""
        return [c.name for c in self.container_list(label) if not stopped or c.state in ("created", "exited", "dead")]

    def dangling_images(self, label: str) -> list[str]:
        """Ids of untagged images that carry this label (build results a newer build replaced)."""
        found = self._call("cannot list images", lambda: self.client.api.images(filters={"dangling": True, "label": label}))
        return [i["Id"] for i in found]

    def remove_image(self, ref: str) -> str | None:
        """Remove an image; None when it is gone, else why it stays (e.g. a container uses it)."""
        try:
            self._call(f"cannot remove {ref}", lambda: self.client.api.remove_image(ref), missing_ok=True)
        except EngineError as exc:
            return exc.explanation
        return None

    def build_cache_mounts(self) -> list[dict[str, Any]]:
        """BuildKit's cache-mount records (`RUN --mount=type=cache`): ID, Description, Size, InUse."""
        found = self._call("cannot list the build cache", lambda: self.client.api.df())
        return [r for r in (found.get("BuildCache") or []) if r.get("Type") == "exec.cachemount"]

    def prune_build_cache(self, record: str) -> int:
        """Remove one build-cache record by id (the engine takes one id per call); the bytes freed."""
        done = self._call(f"cannot remove build cache {record}", lambda: self.client.api.prune_builds(filters={"id": record}))
        return int((done or {}).get("SpaceReclaimed") or 0)

    def remove_container(self, ref: str) -> None:
        # v: with the anonymous volumes the image's VOLUMEs made for it
        self._call(f"cannot remove container {ref}", lambda: self.client.api.remove_container(ref, force=True, v=True),
                   missing_ok=True)

    # -- registries -----------------------------------------------------------------------------------------
    def login(self, host: str, username: str, password: str) -> None:
        """Check credentials against a registry (the daemon's /auth); nothing is written to the Docker config."""
        registry = None if host == "docker.io" else host
        self._call(f"logging in to {host}", lambda: self.client.login(username, password, registry=registry, reauth=True))

    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        repo, tag = _repo_tag(ref)
        lines = self._call(f"pushing {ref}", lambda: self.client.api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth))
        return self._stream(lines, f"pushing {ref}")

    def pull(self, ref: str, auth: dict[str, str] | None, platform: str | None = None) -> Iterator[dict[str, Any]]:
        repo, tag = _repo_tag(ref)  # the engine takes a digest where a tag goes
        kw = {"platform": platform} if platform else {}
        lines = self._call(f"pulling {ref}", lambda: self.client.api.pull(repo, tag=tag, stream=True, decode=True,
                                                                          auth_config=auth, **kw))
        return self._stream(lines, f"pulling {ref}")

    @staticmethod
    def _stream(lines: Iterator[Any], what: str) -> Iterator[dict[str, Any]]:
        import requests

        try:
            for line in lines:
                if isinstance(line, dict):
                    yield line
        except requests.exceptions.RequestException as exc:
            raise StreamBroken(f"{what} broke off ({type(exc).__name__}: {exc})") from None


MIN_SERVER = "18.09"  # the first engine with BuildKit (RUN --mount, secrets)


def answer_check(name: str, host: str, version: dict[str, Any], why: str, minimum: str | None = None) -> Check:
    """Doctor's check of an engine that answered `version` (where, which, and why this one), failed where it cannot
    build envbuild's images: a Docker older than `minimum`, containers that are not Linux's."""
    from packaging.version import InvalidVersion, Version

    server = str(version.get("Version", "unknown"))
    product = (version.get("Platform") or {}).get("Name") or "Docker"
    detail = (f"reachable at {host}: {product} {server} (API {version.get('ApiVersion', '?')}), "
              f"{version.get('Os', '?')}/{version.get('Arch', '?')}; {why}")
    try:
        too_old = bool(minimum) and product == "Docker" and Version(server.split("+")[0].split("-")[0]) < Version(minimum)
    except InvalidVersion:
        too_old = False
    if too_old:
        return Check(name, False, detail + f"; BuildKit needs Docker {minimum} or later",
                     "upgrade Docker (Debian/Ubuntu: `sudo apt-get install docker.io`)")
    if version.get("Os") not in (None, "linux"):
        return Check(name, False, detail + "; envbuild's images are Linux images", "switch the engine to Linux containers")
    return Check(name, True, detail)


# --- the builder: the docker client's BuildKit ---------------------------------------------------------------

def daemon_fix(exc: DockerError, where: str) -> str:
    """The way to a Docker daemon this user can reach, for doctor."""
    if isinstance(exc, Unreachable) and exc.reason == "permission denied":
        return (
            f"this user may not use {where}: `sudo usermod -aG docker $USER` and log in again (or run as root); "
            "rootless Docker: `export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock`"
        )
    parts = []
    if os.environ.get("DOCKER_HOST"):
        parts.append(f"DOCKER_HOST is set to {where}: unset it or point it at a running engine")
    if not shutil.which("dockerd"):
        parts.append("install Docker (Debian/Ubuntu: `sudo apt-get install docker.io`) and start it: "
                     "`sudo systemctl enable --now docker`")
    else:
        parts.append("start the daemon: `sudo systemctl start docker` (without systemd: "
                     "`sudo sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'`)")
    return "; ".join(parts)


# Where Docker's CLI looks for the buildx plugin besides $DOCKER_CONFIG/cli-plugins.
_PLUGIN_DIRS = ("/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins",
                "/usr/libexec/docker/cli-plugins")


def _builder_key(candidates: list[str]) -> list:
    """What the answer of find_builder depends on: each client's file, and the buildx plugin's wherever the
    clients look for it. A client or plugin installed, removed or upgraded changes it."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    files = [*candidates, *(os.path.join(d, "docker-buildx") for d in (os.path.join(config, "cli-plugins"), *_PLUGIN_DIRS))]
    key = []
    for path in files:
        try:
            st = os.stat(path)
            key.append([path, st.st_size, st.st_mtime_ns, st.st_ino])
        except OSError:
            key.append([path, None])
    return key


def _remembered(key: list) -> Builder | None:
    try:
        doc = json.loads(cache_dir("builder.json").read_text(encoding="utf-8"))
        if doc["key"] == key:
            return Builder(tuple(doc["argv"]), tuple(tuple(kv) for kv in doc["env"]), bool(doc["buildx"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _remember(key: list, found: Builder) -> None:
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(cache_dir("builder.json"), json.dumps({"key": key, "argv": found.argv, "env": found.env,
                                                            "buildx": found.buildx}) + "\n")
    except OSError:  # a cache that cannot be written: asked again next time
        pass


@functools.lru_cache(maxsize=1)
def find_builder() -> Builder:
    """Prefer `docker buildx build`; else a client older than 23.0, which runs BuildKit itself.

    Asking costs a start of every client (about 0.1 s of every build, a no-op included): the answer is kept in
    envbuild's cache for as long as the clients and the buildx plugin files stay the same."""
    candidates = client_executables()
    key = _builder_key(candidates)
    found = _remembered(key) if candidates else None
    if found is None:
        found = _ask_builder(candidates)
        _remember(key, found)
    return found


def _ask_builder(candidates: list[str]) -> Builder:
    from concurrent.futures import ThreadPoolExecutor

    from packaging.version import InvalidVersion, Version

    if not candidates:
        raise DockerError(
            "no `docker` client on PATH: install Docker's CLI with the buildx plugin "
            "(docker-ce-cli + docker-buildx-plugin) or Debian's docker.io"
        )
    # Both questions to every candidate at once: each answer costs a client start-up. `docker --version`
    # answers from the client alone (`docker version` would also ask the daemon).
    questions = [[exe, "buildx", "version"] for exe in candidates] + [[exe, "--version"] for exe in candidates]
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        answers = list(pool.map(ask_client, questions))
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


def builder_check() -> Check:
    """Doctor's check of Docker's builder: which client builds, and how."""
    try:
        builder = find_builder()
    except DockerError as exc:
        return Check(
            "buildkit", False, str(exc).split(":")[0],
            "install the buildx plugin (Debian/Ubuntu: `sudo apt-get install docker-buildx`; Docker's repository: "
            "docker-buildx-plugin), or set ENVBUILD_DOCKER=/usr/bin/docker (Debian's docker.io 20.10 client "
            "builds with BuildKit itself)",
        )
    how = "the buildx plugin" if builder.buildx else "a client older than 23.0, which builds with BuildKit itself"
    return Check("buildkit", True, f"`{builder.describe()}` ({how})")
