"""The Podman engine: a second implementation of the engine contract (engine/docker.py EngineAPI), for hosts with
Podman and no Docker daemon (RHEL, Fedora, HPC nodes).

It runs the `podman` command and reads its `--format json` answers, rather than podman's Docker-compatible API
socket through the docker SDK: that socket is a service someone must start (`podman system service`, or a
systemd socket unit: absent on most HPC nodes and rootless logins), while the command works wherever Podman is
installed, rootless included, and builds with `podman build` anyway (the SDK cannot build with secrets or cache
mounts). What Podman cannot answer as Docker does is said here, once: it has no BuildKit build-cache records
(its cache mounts live in its own storage), and a registry on loopback is plain HTTP only when asked
(`--tls-verify=false`, given here for loopback hosts as Docker treats them). How it builds is said here too
(Podman.builder): `podman build`, the BuildKit options it refuses by name, and buildah's output read into steps.

GPUs: the matrix's run settings are Docker's words (`--gpus`, `--runtime`, `--device`); Podman gives a container
its GPUs by CDI names (`nvidia.com/gpu=all` from `nvidia-ctk cdi generate`, `amd.com/gpu=all` from amd-ctk) where
the host has CDI specs, else by the device nodes themselves. CDI_VENDORS is that translation, as data.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TYPE_CHECKING

from envbuild.engine import docker as engines
from envbuild.core.checks import Check
from envbuild.engine.api import Builder
from envbuild.engine.docker import EngineAPI, EngineError, Exited, Image
from envbuild.core.errors import DockerError
from envbuild.core.imageref import Reference, is_loopback
from envbuild.engine.owner import Container
from envbuild.core.platform import Platform
from envbuild.core.shape import Each, problem
from envbuild.core.text import shown

if TYPE_CHECKING:
    from envbuild.engine.runspec import RunSpec

HOST = "podman://local"  # Podman runs in this process's place: no daemon, this machine's network
# The first contact's deadline, as Docker's engine has it: `podman version` of a hung podman (a stale lock, a
# wedged storage) is given up in seconds.
CONNECT_TIMEOUT, CONNECT_TIMEOUT_ENV = engines.CONNECT_TIMEOUT, engines.CONNECT_TIMEOUT_ENV
INSTALL_HINT = "install Podman (Debian/Ubuntu: `sudo apt-get install podman`; RHEL/Fedora: `sudo dnf install podman`)"
ULIMITS_FIX = ("if every container fails with \"error setting rlimits ... operation not permitted\", Podman's default "
               "ulimits exceed this machine's limits: put `default_ulimits = []` under `[containers]` in "
               "/etc/containers/containers.conf (rootless: ~/.config/containers/containers.conf)")
CDI_DIRS = ("etc/cdi", "var/run/cdi")


@dataclass(frozen=True)
class CdiVendor:
    """One vendor's GPUs under Podman: the CDI name that gives them all, the spec file's kind, and the Docker
    flags (from the matrix) it stands for; without a spec, the device nodes that do."""

    kind: str  # the spec's "kind", e.g. nvidia.com/gpu
    fix: str  # how to write the spec
    nodes: tuple[str, ...]  # the device nodes to pass without CDI (globs under /dev)


CDI_VENDORS = {
    # --gpus / --runtime=nvidia (Docker's NVIDIA runtime)
    "nvidia": CdiVendor("nvidia.com/gpu", "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
                        ("nvidia[0-9]*", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")),
    # --device /dev/kfd --device /dev/dri (ROCm)
    "amd": CdiVendor("amd.com/gpu", "sudo amd-ctk cdi generate --output=/etc/cdi/amd.json", ("kfd", "dri")),
}
_AMD_NODES = {"/dev/kfd", "/dev/dri"}


def executable() -> str | None:
    """The podman command: $ENVBUILD_PODMAN, else the first on PATH; None when it is not there."""
    return shutil.which(os.environ.get("ENVBUILD_PODMAN") or "podman")


CATATONIT = "/usr/libexec/podman/catatonit"  # where Podman looks for its --init binary unless configured


def init_path() -> str | None:
    """An init for `--init` where Podman's own (catatonit) is missing but tini is installed (Debian's podman is
    satisfied by either, Docker's packages bring tini); None: Podman's default (or its containers.conf) holds."""
    if Path(CATATONIT).exists():
        return None
    return shutil.which("catatonit") or shutil.which("tini") or shutil.which("docker-init")


def cdi_kinds(root: Path = Path("/")) -> dict[str, Path]:
    """The CDI device kinds the host's specs declare (e.g. {'nvidia.com/gpu': /etc/cdi/nvidia.yaml}). Specs are
    YAML or JSON; only the top-level `kind:` line is read (no YAML parser needed for one key)."""
    found: dict[str, Path] = {}
    for folder in CDI_DIRS:
        d = root / folder
        try:
            files = sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        except OSError:
            continue
        for spec in files:
            try:
                text = spec.read_text(encoding="utf-8", errors="replace")[:65536]
            except OSError:
                continue
            kind = _spec_kind(text)
            if kind:
                found.setdefault(kind, spec)
    return found


def _spec_kind(text: str) -> str | None:
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        return str(doc.get("kind")) if isinstance(doc, dict) and doc.get("kind") else None
    for line in text.splitlines():
        if line.startswith("kind:"):
            return line.split(":", 1)[1].strip().strip("'\"") or None
    return None


def _nodes(vendor: CdiVendor, root: Path) -> list[str]:
    dev = root / "dev"
    return sorted(f"/dev/{p.name}" for pattern in vendor.nodes for p in dev.glob(pattern))


def device_args(args: list[str], root: Path = Path("/")) -> list[str]:
    """Docker's run flags as Podman takes them: `--gpus=X` and `--runtime=nvidia` become the CDI name
    nvidia.com/gpu=all where the host has NVIDIA's CDI spec, else NVIDIA's device nodes; AMD's /dev/kfd and /dev/dri
    become amd.com/gpu=all where AMD's spec is there; every other flag passes as it is (Podman takes Docker's)."""
    kinds = cdi_kinds(root)
    out: list[str] = []
    nvidia_done = amd_done = False
    it = iter(range(len(args)))
    for i in it:
        arg = args[i]
        if arg.startswith("--gpus") or arg in ("--runtime=nvidia",) or (arg == "--runtime" and args[i + 1:i + 2] == ["nvidia"]):
            if arg in ("--gpus", "--runtime"):
                next(it, None)
            if not nvidia_done:
                vendor = CDI_VENDORS["nvidia"]
                gpus = arg.split("=", 1)[1] if "=" in arg and arg.startswith("--gpus") else "all"
                name = "all" if gpus in ("all", "") or gpus.isdigit() else gpus.removeprefix("device=")
                if vendor.kind in kinds:
                    out += ["--device", f"{vendor.kind}={name}"]
                else:
                    out += [a for node in _nodes(vendor, root) for a in ("--device", node)]
                nvidia_done = True
            continue
        if arg == "--device" and i + 1 < len(args) and args[i + 1].split(":")[0] in _AMD_NODES and CDI_VENDORS["amd"].kind in kinds:
            next(it, None)
            if not amd_done:
                out += ["--device", f"{CDI_VENDORS['amd'].kind}=all"]
                amd_done = True
            continue
        out.append(arg)
    return out


def _run_args(run: RunSpec) -> list[str]:
    """The matrix's run settings as podman run flags (Docker's, with GPUs translated)."""
    return device_args(run.docker_args())


class Podman(EngineAPI):
    """Podman, asked through its command. Every failure becomes a DockerError: EngineError when Podman answered and
    refused (its own words), Unreachable when it is not installed or cannot start."""

    kind = "podman"
    check_name = "podman"
    purposes = {"podman": ("build", "run"), "podman build": ("build",), "podman storage": ("build", "run"),
                "podman rootless": ("build", "run"), "podman ulimits": ("build", "run")}

    def __init__(self, timeout: float | None = None, exe: str | None = None):
        self.host = HOST
        from envbuild.net.netread import seconds_env  # ssl and urllib: paid by a command that asks an engine

        self.timeout = timeout if timeout is not None else seconds_env("ENVBUILD_DOCKER_TIMEOUT", engines.TIMEOUT)
        self.connect_timeout = min(self.timeout, seconds_env(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT))
        self.exe = exe or executable()

    @classmethod
    def connect(cls, timeout: float | None = None) -> "Podman":
        """A Podman that answered, or the DockerError that says what to do."""
        engine = cls(timeout)
        engine.ping()
        return engine

    # -- the command ------------------------------------------------------------------------------------------
    def _argv(self, args: list[str]) -> list[str]:
        if not self.exe:
            raise PodmanMissing(f"no `podman` command on PATH: {INSTALL_HINT}")
        return [self.exe, *args]

    def _run(self, what: str, args: list[str], *, missing_ok: bool = False, stdin: bytes | None = None,
             env: dict[str, str] | None = None, timeout: float | None = None, text: bool = True) -> Any:
        """podman ARGS; its stdout (str, or bytes with text=False); None for a missing thing with missing_ok."""
        seconds = timeout or self.timeout
        try:
            proc = _bounded_run(self._argv(args), stdin, seconds, {**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            raise EngineError(what, f"{shown(self.exe or 'podman', limit=200)} did not answer within {seconds:g} s (a hung "
                                    "Podman: `podman system migrate`, or stop the process holding its lock; "
                                    f"{CONNECT_TIMEOUT_ENV} or ENVBUILD_DOCKER_TIMEOUT sets the wait)") from None
        except OSError as exc:
            raise PodmanMissing(f"cannot run {self.exe}: {exc.strerror}. {INSTALL_HINT}") from None
        if proc.returncode != 0:
            said = proc.stderr.decode("utf-8", "replace").strip()
            said = said.removeprefix("Error: ").strip() or f"exit status {proc.returncode}"
            missing = _missing(said)
            if missing and missing_ok:
                return None
            raise EngineError(what, said[-2000:], not_found=missing)
        return proc.stdout.decode("utf-8", "replace") if text else proc.stdout

    def _json(self, what: str, args: list[str], shape: Any, *, missing_ok: bool = False,
              timeout: float | None = None) -> Any:
        """podman ARGS' JSON answer, checked against `shape` before anything reads it: Podman's answer is data of
        unknown shape (another version, a wrapper script); a wrong one is an EngineError (exit 1) naming the
        command and what it said, escaped and capped."""
        out = self._run(what, args, missing_ok=missing_ok, timeout=timeout)
        if out is None:
            return None
        words = list(itertools.takewhile(lambda a: not a.startswith("-"), args[:2]))  # `podman image inspect`
        return read_answer(what, " ".join(["podman", *words]), out, shape)

    # -- the engine ---------------------------------------------------------------------------------------------
    def ping(self) -> None:
        self.version()

    def version(self) -> dict[str, Any]:
        return version_answer(self._json("asking Podman's version", ["version", "--format", "json"], VERSION_SHAPE,
                                         timeout=self.connect_timeout) or {})

    def info(self) -> dict[str, Any]:
        return info_answer(self._json("asking Podman", ["info", "--format", "json"], INFO_SHAPE) or {})

    def runtimes(self) -> set[str]:
        """The OCI runtime Podman uses (runc, crun), and `nvidia` when NVIDIA's CDI spec stands in for Docker's
        NVIDIA runtime (the GPUs reach a container through it)."""
        found = set(self.info().get("Runtimes") or {})
        if CDI_VENDORS["nvidia"].kind in cdi_kinds():
            found.add("nvidia")
        return found

    def image(self, ref: str) -> Image | None:
        found = self._json(f"cannot inspect image {ref}", ["image", "inspect", "--format", "json", ref], INSPECT_SHAPE,
                           missing_ok=True)
        return image_answer(found[0]) if found else None

    def image_id(self, ref: str) -> str | None:
        image = self.image(ref)
        return image.id if image else None

    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image:
        """A root filesystem tarball as a one-layer image named `ref` (podman import), as Engine.import_image; by its
        full name (docker.io/library/debian:12), which a FROM of the short name finds."""
        changes = [*changes, *(f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items()))]
        self._run(f"cannot import {tar} as {ref}",
                  ["import", *(a for c in changes for a in ("--change", c)), tar, Reference.parse(ref).tagged().full])
        image = self.image(ref)
        if image is None:
            raise EngineError(f"cannot import {tar} as {ref}", "the engine has no such image afterwards")
        return image

    def tag(self, image: str, refs: list[str]) -> None:
        for ref in refs:
            if Reference.parse(ref).tagged().digest:
                raise DockerError(f"cannot tag {image} as {ref}: a tag cannot carry a digest")
            self._run(f"could not tag {image} as {ref}", ["tag", image, ref])

    def untag(self, ref: str) -> None:
        self._run(f"cannot remove {ref}", ["untag", ref, ref], missing_ok=True)

    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False, on_line: Callable[[str], None] | None = None) -> Exited:
        """Run a container to its end with the backend's run settings; removed whatever happens. Environment values
        go by name (never on a command line)."""
        args = ["run", "--name", name, *[a for k, v in labels.items() for a in ("--label", f"{k}={v}")]]
        args += _run_args(run)
        for v in volumes:
            args += ["-v", v]
        env = dict(environment or {})
        for k in env:
            args += ["-e", k]
        if user:
            args += ["--user", user]
        if read_only:  # as clusters run images: the root filesystem read-only, a fresh /tmp that runs code (compile)
            args += ["--read-only", "--tmpfs", "/tmp:exec"]
        args += [image, *command]
        try:
            proc = subprocess.Popen(self._argv(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **env})
            out, err, timed_out = _communicate(
                proc, timeout, on_line, lambda: self._run(f"cannot stop {name}", ["kill", name], missing_ok=True))
            if timed_out:
                return Exited(None, b"", err, timed_out=True)
            if proc.returncode in (125, 126, 127) and _refused(err):
                raise EngineError(f"cannot run {image}", err.decode("utf-8", "replace").strip()[-2000:])
            return Exited(proc.returncode, out, err, False)
        except OSError as exc:
            raise PodmanMissing(f"cannot run {self.exe}: {exc.strerror}. {INSTALL_HINT}") from None
        finally:
            self.remove_container(name)

    @contextlib.contextmanager
    def volume(self, name: str, labels: dict[str, str]) -> Iterator[str]:
        self._run(f"cannot create volume {name}", ["volume", "create", *[a for k, v in labels.items() for a in ("--label", f"{k}={v}")], name])
        try:
            yield name
        finally:
            self._run(f"cannot remove volume {name}", ["volume", "rm", "--force", name], missing_ok=True)

    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None:
        """One regular file of an image, read without running it (a container is created, never started)."""
        cid = self._run(f"cannot read {path} from {image}", ["create", image, "true"]).strip()
        try:
            data = self._run(f"cannot read {path} from {image}", ["cp", f"{cid}:{path}", "-"], missing_ok=True, text=False)
        finally:
            self.remove_container(cid)
        if data is None:
            return None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            if member is not None and member.size > limit:
                raise DockerError(f"{path} in {image} is larger than {limit >> 20} MiB")
            return tar.extractfile(member).read() if member else None

    def start_client(self, argv: list[str], env: dict[str, str]) -> Any:
        """The builder process (`podman build`: image/plan.py makes its argv from builder(), image/builder.py
        reads its output with BuildahReader)."""
        return engines.start_client(argv, env)

    def client_args(self, args: list[str]) -> list[str]:
        """Docker's run flags as podman takes them: GPUs in Podman's words (CDI names or device nodes), and the
        init binary named where Podman's own is missing. `run --dry-run` prints this very line."""
        args = device_args(args)
        if "--init" in args and (init := init_path()):
            args.insert(args.index("--init") + 1, f"--init-path={init}")
        return args

    def client_run(self, args: list[str], env: dict[str, str]) -> tuple[int, str]:
        """`podman run ...` on this terminal (for `envbuild run`), with client_args' flags."""
        return engines.terminal_run(self._argv(self.client_args(args)), env)

    def container_list(self, label: str) -> list[Container]:
        found = self._json("cannot list containers", ["ps", "--all", "--filter", f"label={label}", "--format", "json"],
                           PS_SHAPE) or []
        return containers_answer(found)

    def containers(self, label: str, stopped: bool = False) -> list[str]:
        return [c.name for c in self.container_list(label) if not stopped or c.state in ("created", "exited", "dead", "stopped")]

    def dangling_images(self, label: str) -> list[str]:
        found = self._json("cannot list images", ["images", "--filter", "dangling=true", "--filter", f"label={label}",
                                                  "--format", "json"], IMAGES_SHAPE) or []
        return [_sha(str(i["Id"])) for i in found]

    def remove_image(self, ref: str) -> str | None:
        try:
            self._run(f"cannot remove {ref}", ["rmi", ref], missing_ok=True)
        except EngineError as exc:
            return exc.explanation
        return None

    def build_cache_mounts(self) -> list[dict[str, Any]]:
        """Podman keeps no BuildKit cache records to list: its cache mounts are in its own storage (buildah's), and
        `podman system prune --build` is Podman's own way to empty them."""
        return []

    def prune_build_cache(self, record: str) -> int:
        raise DockerError("Podman keeps no build-cache records to remove one by one: `podman system prune --build` "
                          "empties its build cache mounts (everyone's on this Podman)")

    def remove_container(self, ref: str) -> None:
        self._run(f"cannot remove container {ref}", ["rm", "--force", "--volumes", ref], missing_ok=True)

    # -- registries ---------------------------------------------------------------------------------------------
    def login(self, host: str, username: str, password: str) -> None:
        """Check credentials against a registry; written only to a throw-away auth file, never to the user's."""
        with _authfile(None) as path:
            self._run(f"logging in to {host}", ["login", "--authfile", path, *_tls(host), "--username", username,
                                                "--password-stdin", host], stdin=password.encode())

    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        host = Reference.parse(ref).registry
        with tempfile.TemporaryDirectory(prefix="envbuild-push-") as tmp:
            digestfile = Path(tmp) / "digest"
            with _authfile(auth, host) as authfile:
                yield from self._stream(f"pushing {ref}", ["push", *_tls(host), *(["--authfile", authfile] if authfile else []),
                                                           "--digestfile", str(digestfile), ref, f"docker://{ref}"])
            digest = digestfile.read_text().strip() if digestfile.exists() else ""
            if digest:
                yield {"status": f"{Reference.parse(ref).tagged().tag or 'latest'}: digest: {digest}", "aux": {"Digest": digest}}

    def pull(self, ref: str, auth: dict[str, str] | None, platform: str | None = None) -> Iterator[dict[str, Any]]:
        """Pull what the registry serves for `ref` now, by its digest (asked first over HTTP), then tag it as `ref`:
        the digest reported is the one pulled."""
        r = Reference.parse(ref).tagged()
        digest = r.digest or self._registry_digest(ref)
        by_digest = f"{r.name}@{digest}"
        with _authfile(auth, r.registry) as authfile:
            yield from self._stream(f"pulling {ref}", ["pull", *_tls(r.registry), *(["--authfile", authfile] if authfile else []),
                                                       *(["--platform", platform] if platform else []), by_digest])
        if r.tag and not r.digest:
            self._run(f"could not tag {by_digest} as {ref}", ["tag", by_digest, f"{r.name}:{r.tag}"])
        yield {"status": f"Digest: {digest}"}

    @staticmethod
    def _registry_digest(ref: str) -> str:
        """The digest the registry serves for a reference, asked over HTTP (core/regclient.py): Podman's own
        `manifest inspect` answers the manifest re-encoded, not its digest."""
        from envbuild.core.errors import EnvbuildError
        from envbuild.net.regclient import Registry

        try:
            found = Registry(ref).manifest(ref)
        except EnvbuildError as exc:
            raise EngineError(f"asking the registry about {ref}", str(exc)) from None
        if found is None:
            raise EngineError(f"asking the registry about {ref}", "manifest unknown", not_found=True)
        return found.digest

    def _stream(self, what: str, args: list[str]) -> Iterator[dict[str, Any]]:
        """podman's push or pull output as the engine's stream: each line a step that moved (Podman prints one
        per blob, no byte counts), an error line for a failure."""
        proc = subprocess.Popen(self._argv(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        tail: list[str] = []
        count = itertools.count(1)
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    tail = (tail + [line])[-8:]
                    yield {"status": "Pushed" if "push" in what else "Pull complete", "id": "podman",
                           "progressDetail": {"current": next(count)}}
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if rc != 0:
            said = next((ln.removeprefix("Error: ") for ln in reversed(tail) if ln.startswith("Error")), tail[-1] if tail else f"exit {rc}")
            yield {"error": said, "errorDetail": {"message": said}}

    def host_checks(self) -> list[Check]:
        """What Podman needs of this host (doctor): a usable storage driver, what rootless needs (subordinate
        ids, newuidmap), ulimits it can set, and the CDI specs that give containers their GPUs."""
        try:
            info = self.info()
        except DockerError as exc:
            return [Check("podman storage", False, f"`podman info` failed: {exc}", "run `podman info` to see why; "
                          "a rootless user needs subordinate ids (below) and a storage driver (overlay or fuse-overlayfs)")]
        return storage_checks(info, Path("/")) + [cdi_check(Path("/"))]

    def builder(self) -> Builder:
        """`podman build` (buildah), which reads the same Dockerfile features: secrets, cache mounts."""
        exe = executable()
        if not exe:
            raise DockerError(f"no `podman` command on PATH: {INSTALL_HINT}")
        return Builder(argv=(exe, "build"), env=(), buildx=False, cannot=CANNOT, loopback_base=("--tls-verify=false",),
                       called="`podman build`", reader=BuildahReader)

    def builder_check(self) -> Check:
        try:
            builder = self.builder()
        except DockerError as exc:
            return Check("podman build", False, str(exc))
        return Check("podman build", True, f"`{builder.describe()}` (buildah, in Podman)")

    def failed_check(self, exc: DockerError, why: str) -> Check:
        if isinstance(exc, engines.Unreachable):
            return Check(self.check_name, False, f"{exc} ({why})", str(exc).split(": ", 1)[-1])
        return Check(self.check_name, False, f"the engine at {self.host} did not answer: {exc} ({why})", None)

    def answer_check(self, version: dict[str, Any], why: str) -> Check:
        return engines.answer_check(self.check_name, self.host, version, why)

    def is_local(self) -> bool:
        """Podman runs here, on this machine's network."""
        return True

    def close(self) -> None:
        pass


def _communicate(proc: subprocess.Popen, timeout: float, on_line: Callable[[str], None] | None,
                 stop: Callable[[], None]) -> tuple[bytes, bytes, bool]:
    """(stdout, stderr, timed out) of a container's client process, with each line of stderr also handed to on_line
    as it comes; at the timeout `stop` ends the container and what it said until then is returned."""
    import threading

    if on_line is None:
        try:
            out, err = proc.communicate(timeout=timeout)
            return out, err, False
        except subprocess.TimeoutExpired:
            stop()
            return b"", proc.communicate()[1], True
    out: list[bytes] = []
    err: list[bytes] = []

    def follow() -> None:
        for line in iter(proc.stderr.readline, b""):
            err.append(line)
            on_line(line.decode("utf-8", "replace").rstrip("\n"))

    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True),
               threading.Thread(target=follow, daemon=True)]
    for r in readers:
        r.start()
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop()
        proc.wait()
        timed_out = True
    for r in readers:
        r.join(timeout=5)
    return (b"" if timed_out else b"".join(out)), b"".join(err), timed_out


# What BuildKit does that `podman build` (buildah) cannot: refused by name, never dropped.
_CANNOT = {
    "--builder": "names a buildx builder; Podman builds with buildah in its own process",
    "--cache-to": "exports a BuildKit cache; Podman keeps its layers in its own storage (push the image and pass "
                  "--cache-from REPOSITORY to reuse them elsewhere)",
}
CANNOT = tuple((option, f"{option} is BuildKit's, and the Podman engine cannot do it: it {why}. "
                        "Leave it out, or build with --engine docker") for option, why in _CANNOT.items())

# buildah's (podman build) plain output: "[1/2] STEP 3/7: RUN ..." (a stage of several), "STEP 3/7: RUN ..." (one),
# "--> Using cache ID" / "--> ID" when a step ends, "Error: building at STEP ..." when one failed.
_PSTEP = re.compile(r"^(?:\[(\d+)/\d+\] )?STEP (\d+/\d+): (.*)$")
_PDONE = re.compile(r"^--> (Using cache )?[0-9a-f]{6,}$")
_PERROR = re.compile(r"^Error: (?:error )?(?:building at STEP|creating build container|while running runtime)")
_PSTAGE = re.compile(r"^FROM \S+ AS ([\w.-]+)", re.IGNORECASE)


class BuildahReader:
    """buildah's output read into the build's steps, as BuildKit's lines: the Progress (image/builder.py) it feeds
    shows them as it shows BuildKit's."""

    def __init__(self, progress: Any):
        self.progress = progress
        self._open: tuple[str, float] | None = None  # the step running now, since when
        self._count = 0
        self._stages: dict[str, str] = {}  # buildah's stage number -> its name (FROM ... AS name)

    def feed(self, line: str) -> bool:
        """One line of buildah's output, read into the same steps; False: not buildah's."""
        step, done = _PSTEP.match(line), _PDONE.match(line)
        if step or done or (self._open and _PERROR.match(line)):
            if self._open:
                number, since = self._open
                how = "CACHED" if done and done.group(1) else ("ERROR" if _PERROR.match(line) else f"DONE {time.monotonic() - since:.1f}s")
                self.progress.step(f"#{number} {how}")
                self._open = None
            if step:
                self._count += 1
                number = str(100000 + self._count)  # apart from BuildKit's numbers
                self._open = (number, time.monotonic())
                named = _PSTAGE.match(step.group(3))
                if named and step.group(1):
                    self._stages[step.group(1)] = named.group(1)
                stage = self._stages.get(step.group(1) or "", "")
                self.progress.step(f"#{number} [{stage + ' ' if stage else ''}{step.group(2)}] {step.group(3)}")
            return True
        if self._open and not line.startswith(("COMMIT ", "Successfully tagged ")):
            self.progress.step_output(self._open[0], line)
            return True
        return False


class PodmanMissing(engines.Unreachable):
    """No podman to run."""

    def __init__(self, text: str):
        self.where, self.reason = HOST, "not installed"
        DockerError.__init__(self, text)


# -- Podman's JSON answers, in the contract's (Docker's) shapes -------------------------------------------------------

def _sha(value: str) -> str:
    return value if value.startswith("sha256:") else f"sha256:{value}"


def _missing(said: str) -> bool:
    low = said.lower()
    return any(k in low for k in ("no such", "not known", "not found", "does not exist", "manifest unknown"))


def _refused(err: bytes) -> bool:
    """Whether podman run's exit 125-127 is Podman refusing (no such image, a bad flag), not the command's own."""
    low = err.decode("utf-8", "replace").lower()
    return low.lstrip().startswith("error:") or "oci runtime" in low


def _bounded_run(argv: list[str], stdin: bytes | None, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    """subprocess.run with a deadline that holds: podman in a session of its own, and on timeout (or Ctrl-C) the
    whole session killed. subprocess.run kills only podman, then waits for its pipes, which a child it started
    (a wrapper's `sleep`, a hung helper) holds open: the wait would have no end."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# What envbuild reads of each answer (other keys are Podman's business). A JSON number may be an int or a float.
_STR, _NUM = (str, None), (int, float, None)
_SIDE = ({"Version?": _STR, "APIVersion?": (str, int, None), "OsArch?": _STR, "Os?": _STR}, None)
VERSION_SHAPE = ({"Client?": _SIDE, "Server?": _SIDE}, None)
INFO_SHAPE = ({"host?": ({"ociRuntime?": ({"name?": _STR}, None), "cpus?": _NUM, "memTotal?": _NUM,
                         "security?": ({"rootless?": (bool, None)}, None)}, None),
               "store?": ({"graphRoot?": _STR, "graphDriverName?": _STR}, None),
               "version?": ({"Version?": _STR}, None)}, None)
_LABELS = (Each(str), None)
PS_SHAPE = ([{"Names?": ([str], str, None), "Id?": _STR, "State?": _STR, "Labels?": _LABELS}], None)
IMAGES_SHAPE = ([{"Id": str}], None)
INSPECT_SHAPE = ([{"Id": str, "Config?": ({"Labels?": _LABELS}, None), "Labels?": _LABELS, "RepoDigests?": ([str], None),
                   "Os?": _STR, "Architecture?": _STR, "Size?": _NUM, "Created?": _STR,
                   "RootFS?": ({"Layers?": ([str], None)}, None)}], None)


def read_answer(what: str, program: str, out: str, shape: Any) -> Any:
    """A program's JSON answer checked against `shape`; EngineError naming the program and what it said (escaped,
    capped) when it is not JSON, nests too deep to read, or has another shape."""
    said = shown(" ".join(out.split()), limit=200)
    if not out.strip():
        return None
    try:
        doc = json.loads(out)
    except RecursionError:
        raise EngineError(what, f"`{program}` answered JSON nested too deep to read: {said}") from None
    except ValueError:
        raise EngineError(what, f"`{program}` answered no JSON: {said}") from None
    if (why := problem(doc, shape, "the answer")) is not None:
        raise EngineError(what, f"`{program}` answered JSON of another shape than Podman's ({why}): {said}")
    return doc


def version_answer(doc: dict[str, Any]) -> dict[str, Any]:
    """`podman version --format json` ({"Client": {...}, "Server": {...} when remote}) as Docker's version
    answer: Version, ApiVersion, Os, Arch, and Platform.Name saying it is Podman."""
    side = doc.get("Server") or doc.get("Client") or {}
    found = Platform.normal(str(side.get("OsArch") or ""))  # 'linux/amd64': read by the one parser
    os_, arch = (found.os, found.arch) if found else ("", "")
    return {"Version": str(side.get("Version") or "?"), "ApiVersion": str(side.get("APIVersion") or "?"),
            "Os": side.get("Os") or os_, "Arch": arch, "Platform": {"Name": "Podman"}}


def info_answer(doc: dict[str, Any]) -> dict[str, Any]:
    """`podman info --format json` as the Docker info keys envbuild reads: Runtimes, DockerRootDir (where the
    images are), Driver, NCPU, MemTotal; plus Rootless."""
    host, store = doc.get("host") or {}, doc.get("store") or {}
    runtime = (host.get("ociRuntime") or {}).get("name")
    return {"Runtimes": {runtime: {}} if runtime else {}, "DockerRootDir": store.get("graphRoot") or "",
            "Driver": store.get("graphDriverName") or "", "NCPU": host.get("cpus"), "MemTotal": host.get("memTotal"),
            "Rootless": bool((host.get("security") or {}).get("rootless")), "ServerVersion": (doc.get("version") or {}).get("Version")}


def image_answer(attrs: dict[str, Any]) -> Image:
    """One `podman image inspect` entry as the contract's Image. Podman lists the digest of an image it built as
    a RepoDigest of localhost/NAME: never pushed nor pulled, so not one a registry serves; left out."""
    config = attrs.get("Config") or {}
    digests = tuple(d for d in attrs.get("RepoDigests") or () if not str(d).startswith("localhost/"))
    return Image(_sha(str(attrs["Id"])), dict(config.get("Labels") or attrs.get("Labels") or {}), attrs.get("Os") or "linux",
                 attrs.get("Architecture") or "unknown", digests, int(attrs.get("Size") or 0),
                 engines.timestamp(attrs.get("Created")), tuple((attrs.get("RootFS") or {}).get("Layers") or ()))


def containers_answer(found: list[dict[str, Any]]) -> list[Container]:
    """`podman ps --all --format json` as the contract's Containers (name, state, labels)."""
    def name(c: dict[str, Any]) -> str:
        names = c.get("Names") or [c.get("Id") or ""]
        return str(names if isinstance(names, str) else names[0]).lstrip("/")  # a string is one name, not letters

    return [Container(name(c), str(c.get("State") or "").lower(), dict(c.get("Labels") or {}))
            for c in found if isinstance(c, dict)]


def _tls(host: str) -> list[str]:
    """A registry on loopback is plain HTTP, as Docker treats it; every other registry is verified TLS."""
    return ["--tls-verify=false"] if is_loopback(host) else []


@contextlib.contextmanager
def _authfile(auth: dict[str, str] | None, host: str = "") -> Iterator[str | None]:
    """A throw-away auth file (mode 0600, removed afterwards) holding `auth` for `host`; None without auth: Podman
    then reads the user's own login (`podman login`). Credentials never go on a command line."""
    import base64

    with tempfile.TemporaryDirectory(prefix="envbuild-auth-") as tmp:
        path = Path(tmp) / "auth.json"
        if auth is None and host:
            yield None
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            doc = {"auths": {}}
            if auth:
                token = base64.b64encode(f"{auth.get('username', '')}:{auth.get('password', '')}".encode()).decode()
                doc["auths"][host] = {"auth": token}
            json.dump(doc, fh)
        yield str(path)


# -- what doctor checks (Podman.host_checks) --------------------------------------------------------------------

PODMAN_NOFILE = 1048576  # the open-files limit Podman gives containers unless containers.conf says otherwise


def _conf_sets_ulimits(root: Path) -> bool:
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    for conf in (root / "etc/containers/containers.conf", root / "usr/share/containers/containers.conf",
                 home / "containers/containers.conf", *sorted((root / "etc/containers/containers.conf.d").glob("*.conf"))):
        try:
            if any(line.strip().startswith("default_ulimits") for line in conf.read_text(encoding="utf-8").splitlines()):
                return True
        except OSError:
            continue
    return False


def _subids(path: Path, user: str, uid: int) -> int:
    """How many subordinate ids /etc/subuid (or subgid) gives the user (by name or uid)."""
    from envbuild.core.files import read_host  # bounded, a FIFO or bytes not UTF-8 no crash

    total = 0
    for line in (read_host(path) or "").splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in (user, str(uid)) and parts[2].isascii() and parts[2].isdigit():
            total += int(parts[2])
    return total


def storage_checks(info: dict[str, Any], root: Path, uid: int | None = None, user: str | None = None) -> list[Check]:
    """The storage driver, rootless needs (when not root) and ulimits, from `podman info` and the host's files."""
    import pwd
    import resource

    uid = os.geteuid() if uid is None else uid
    checks = []
    driver = str(info.get("Driver") or "")
    if driver in ("overlay", "btrfs", "zfs"):
        checks.append(Check("podman storage", True, f"storage driver {driver} at {info.get('DockerRootDir') or '?'}"))
    else:
        checks.append(Check("podman storage", False, f"storage driver {driver or 'unknown'}: every layer is a full copy "
                            "(slow, and an image takes its size once per layer)",
                            "use overlay: rootless needs a kernel >= 5.13 or fuse-overlayfs (`sudo apt-get install "
                            "fuse-overlayfs`), and `driver = \"overlay\"` in ~/.config/containers/storage.conf; then "
                            "`podman system reset`", blocking=False))
    if uid == 0:
        checks.append(Check("podman rootless", True, "rootful (running as root): no subordinate ids needed"))
    else:
        try:
            user = user or pwd.getpwuid(uid).pw_name
        except KeyError:
            user = user or str(uid)
        missing = []
        for what, name in (("subuid", "etc/subuid"), ("subgid", "etc/subgid")):
            if _subids(root / name, user, uid) < 65536:
                missing.append(f"no range of 65536 {what}s for {user} in /{name}")
        for tool in ("newuidmap", "newgidmap"):
            if not shutil.which(tool):
                missing.append(f"no {tool} on PATH")
        tun = root / "dev/net/tun"
        if not os.access(tun, os.R_OK | os.W_OK):
            missing.append(f"no access to {'/dev/net/tun' if root == Path('/') else tun} (slirp4netns gives rootless containers "
                           "their network through it; without it only --network=none works)")
        if missing:
            checks.append(Check("podman rootless", False, "rootless Podman needs: " + "; ".join(missing),
                                f"`sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}` and "
                                "`sudo apt-get install uidmap` (RHEL/Fedora: shadow-utils), then `podman system migrate`; "
                                "in a container, the host must pass /dev/net/tun (and /dev/fuse for fuse-overlayfs)"))
        else:
            checks.append(Check("podman rootless", True, f"rootless as {user}: subordinate uids and gids, newuidmap and "
                                "newgidmap are there"))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < PODMAN_NOFILE and not _conf_sets_ulimits(root):
        checks.append(Check("podman ulimits", False, f"this machine's open-files limit ({hard}) is below what Podman gives "
                            f"containers ({PODMAN_NOFILE}): every container may fail with \"error setting rlimits\"",
                            ULIMITS_FIX, blocking=False))
    return checks


def cdi_check(root: Path) -> Check:
    """The CDI specs that give Podman's containers their GPUs (nvidia.com/gpu=all, amd.com/gpu=all)."""
    kinds = cdi_kinds(root)
    if kinds:
        return Check("cdi specs", True, "GPUs by CDI name: " + ", ".join(f"{k}=all ({p})" for k, p in sorted(kinds.items())))
    gpus = [v for v in CDI_VENDORS.values() if _nodes(v, root)]
    if not gpus:
        return Check("cdi specs", True, "no CDI specs in /etc/cdi or /var/run/cdi, and no GPU device nodes: none needed "
                     f"(with GPUs: `{CDI_VENDORS['nvidia'].fix}`)")
    return Check("cdi specs", False, "no CDI specs in /etc/cdi or /var/run/cdi: Podman gives GPUs by their device nodes "
                 "instead (no driver libraries mounted)", f"NVIDIA: `{CDI_VENDORS['nvidia'].fix}`; AMD: "
                 f"`{CDI_VENDORS['amd'].fix}`", blocking=False)
