"""A local stand-in for the outside world, for tests and the benchmark: no Docker Hub needed.

- a Debian bookworm base with Debian's Python 3.11 and nothing else, made with debootstrap and cached;
- a real registry (Debian's docker-registry, distribution 2.8) on a free loopback port, serving that base
  so builds address it like any remote image;
- a wheelhouse with torch's CPU wheel, taken from this machine's disk the way pip finds it;
- the host's CA bundle (TLS to PyPI may be intercepted; builds pass it as a BuildKit secret).

Nothing here imports pytest: support/fixtures.py turns `Unavailable` into a skip (or a failure in CI), and
the benchmark (benchmarks/bench.py) uses it too.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .constants import CPU_SET, TORCH

CACHE = Path(os.environ.get("ENVBUILD_TEST_CACHE", Path.home() / ".cache" / "envbuild-tests"))
BASE_TAR = CACHE / "debian-bookworm-python3.tar"
# arm64, made under QEMU (binfmt): 2.5-6 minutes once. With python3-venv, so an arm64 build needs no apt step
# (apt under emulation costs about 90 s).
ARM64_BASE_TAR = CACHE / "debian-bookworm-python3-venv-arm64.tar"
BASE_NAME = "envbuild-test/debian-python3:bookworm"
# the session's cpu image is CPU_REPOSITORY:cpu (another name keeps sessions on one shared engine apart)
CPU_REPOSITORY = os.environ.get("ENVBUILD_TEST_CPU_REPOSITORY", "envbuild-test/envbuild")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"


_QEMU = {"arm64": "aarch64"}


class Unavailable(RuntimeError):
    """A tool the testbed needs is missing (the message says which and how to get it)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    proc: subprocess.Popen
    user: str | None = None
    password: str | None = None
    workdir: Path | None = None

    def kill(self) -> None:
        """SIGKILL, as a crash: no goodbye to clients mid-transfer."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        """Start it again on the same port with the same storage."""
        with open(self.workdir / "registry.log", "ab") as log:
            self.proc = subprocess.Popen([shutil.which("docker-registry"), "serve", str(self.workdir / "config.yml")],
                                         stdout=log, stderr=subprocess.STDOUT)
        _wait_listening(int(self.host.rsplit(":", 1)[1]), self.proc, self.workdir)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_registry(workdir: Path, *, auth: tuple[str, str] | None = None) -> Registry:
    """Debian's docker-registry on a free loopback port; with auth, htpasswd (bcrypt) users."""
    exe = shutil.which("docker-registry")
    if not exe:
        raise Unavailable("docker-registry is not installed (Debian: apt-get install docker-registry; scripts/test installs it)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = [
        "version: 0.1",
        "log: {level: warn}",
        f"storage: {{filesystem: {{rootdirectory: {workdir / 'data'}}}, delete: {{enabled: true}}}}",
        f"http: {{addr: 127.0.0.1:{port}}}",
    ]
    if auth:
        htpasswd = workdir / "htpasswd"
        out = subprocess.run(["htpasswd", "-Bbn", auth[0], auth[1]], capture_output=True, text=True, check=True).stdout
        htpasswd.write_text(out)
        config.append(f"auth: {{htpasswd: {{realm: envbuild-test, path: {htpasswd}}}}}")
    (workdir / "config.yml").write_text("\n".join(config) + "\n")
    with open(workdir / "registry.log", "wb") as log:
        proc = subprocess.Popen([exe, "serve", str(workdir / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    _wait_listening(port, proc, workdir)
    return Registry(f"127.0.0.1:{port}", proc, *(auth or (None, None)), workdir=workdir)


def _wait_listening(port: int, proc: subprocess.Popen, workdir: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"registry exited: {(workdir / 'registry.log').read_text()}") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"registry did not listen on 127.0.0.1:{port} within 30s")


def debootstrap_base(tar: Path = BASE_TAR, arch: str | None = None, include: str = "python3") -> Path:
    """A Debian bookworm rootfs with Debian's python3 and nothing else, as a tarball (cached). With `arch`
    (arm64), a foreign one: debootstrap's second stage runs under QEMU (binfmt), no engine needed."""
    with _held(tar):  # scripts/test may be making it in the background already (tests/support/prefetch.py)
        return _debootstrap(tar, arch, include)


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """One maker of a cached file at a time, across processes: a second waits, then finds it made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _debootstrap(tar: Path, arch: str | None, include: str) -> Path:
    if tar.exists():
        return tar
    if not shutil.which("debootstrap"):
        raise Unavailable("debootstrap is not installed (Debian: apt-get install debootstrap; scripts/test installs it)")
    if arch and not Path(f"/proc/sys/fs/binfmt_misc/qemu-{_QEMU.get(arch, arch)}").exists():
        raise Unavailable(f"no binfmt entry for {arch}: apt-get install qemu-user-static binfmt-support; "
                          f"update-binfmts --enable qemu-{_QEMU.get(arch, arch)} (scripts/test does it)")
    tar.parent.mkdir(parents=True, exist_ok=True)
    rootfs = tar.parent / f"rootfs-{arch or 'native'}.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={include}", *([f"--arch={arch}"] if arch else []), "bookworm",
         str(rootfs), "http://deb.debian.org/debian"],
        check=True, stdout=subprocess.DEVNULL,
    )
    tmp = tar.with_suffix(".part")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tmp), "."], check=True)
    tmp.replace(tar)
    shutil.rmtree(rootfs, ignore_errors=True)
    return tar


def push_base(registry: Registry, docker_client, *, tar: Path | None = None, local: str = BASE_NAME) -> list[str]:
    """Import the Debian base and push it to the registry, also as library/debian:bookworm-slim there
    (so `--mirror docker.io=REGISTRY` can stand in for Docker Hub). Returns both references."""
    tar = tar or debootstrap_base()
    with open(tar, "rb") as fh:
        subprocess.run(["docker", "import", "-", local], stdin=fh, check=True, stdout=subprocess.DEVNULL)
    refs = [f"{registry.host}/{local}", f"{registry.host}/library/debian:bookworm-slim"]
    for ref in refs:
        push_image(docker_client, local, ref)
    return refs


def push_image(docker_client, local: str, ref: str) -> None:
    repo, tag = ref.rsplit(":", 1)
    docker_client.images.get(local).tag(repo, tag)
    for line in docker_client.images.push(repo, tag=tag, stream=True, decode=True):
        if "error" in line:
            raise RuntimeError(f"push {ref}: {line['error']}")


MULTI_NAME = "envbuild-test/debian-python3-multi"  # the two-platform base: an index of amd64 and arm64


def push_rootfs(registry: Registry, tar: Path, ref_path: str, arch: str) -> str:
    """Push a rootfs tarball as a one-layer image of `arch` through the registry's HTTP API (no engine: a
    foreign architecture needs none); returns its manifest digest. The gzipped layer is cached beside the tar."""
    import gzip
    import hashlib
    import json

    import requests

    gz = tar.with_suffix(".tar.gz")
    if not gz.exists():
        part = gz.with_suffix(".part")
        with open(tar, "rb") as src, gzip.open(part, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        part.replace(gz)
    layer = gz.read_bytes()
    h = hashlib.sha256()
    with open(tar, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    config = json.dumps({"architecture": arch, "os": "linux", "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:"
                         "/usr/sbin:/usr/bin:/sbin:/bin"]}, "rootfs": {"type": "layers", "diff_ids": ["sha256:" + h.hexdigest()]},
                         "history": [{"created_by": f"debootstrap --arch={arch} (tests/support/testbed.py)"}]}).encode()
    base = f"http://{registry.host}/v2/{ref_path.rpartition(':')[0]}"

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if requests.head(f"{base}/blobs/{digest}", timeout=30).status_code != 200:
            start = requests.post(f"{base}/blobs/uploads/", timeout=30)
            start.raise_for_status()
            location = start.headers["Location"]
            location = location if location.startswith("http") else f"http://{registry.host}{location}"
            sep = "&" if "?" in location else "?"
            requests.put(f"{location}{sep}digest={digest}", data=data, timeout=600,
                         headers={"Content-Type": "application/octet-stream"}).raise_for_status()
        return {"digest": digest, "size": len(data)}

    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **blob(config)},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **blob(layer)}]}).encode()
    resp = requests.put(f"{base}/manifests/{ref_path.rpartition(':')[2]}", data=manifest, timeout=60,
                        headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})
    resp.raise_for_status()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def arm64_base() -> Path:
    return debootstrap_base(ARM64_BASE_TAR, arch="arm64", include="python3,python3-venv")


def multiplatform_base(registry: Registry, docker_client, amd64_ref: str) -> str:
    """Debian bookworm with Python and venv for linux/amd64 and linux/arm64 as one tag naming an index (manifest
    list), like python:3.11-slim-bookworm on Docker Hub: amd64 is `amd64_ref` (the session's stand-in base), arm64
    the debootstrapped one (made once under QEMU, cached). Returns REGISTRY/envbuild-test/debian-python3-multi:bookworm."""
    from envbuild.net.regclient import Registry as Api

    arm64_tar = arm64_base()
    amd64 = f"{registry.host}/{MULTI_NAME}:bookworm-amd64"
    push_image(docker_client, amd64_ref, amd64)
    push_rootfs(registry, arm64_tar, f"{MULTI_NAME}:bookworm-arm64", "arm64")
    api = Api(registry.host)
    children = [("linux/amd64", api.manifest(amd64)), ("linux/arm64", api.manifest(f"{registry.host}/{MULTI_NAME}:bookworm-arm64"))]
    ref = f"{registry.host}/{MULTI_NAME}:bookworm"
    api.put_index(ref, children)
    return ref


def aarch64_torch_wheelhouse(into: Path = CACHE / "wheels-arm64", torch: str = "2.9.1") -> Path:
    """PyPI's aarch64 torch wheel (2.9.1's is a CPU build; 2.13.0's is a CUDA build pulling GBs), cached."""
    with _held(into):
        if list(into.glob(f"torch-{torch}-*aarch64.whl")):
            return into
        into.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--platform",
                        "manylinux_2_28_aarch64", "--python-version", "3.11", f"torch=={torch}", "-d", str(into)], check=True)
    return into


STANDIN_NAME = "envbuild-test/python3-venv:bookworm"


def standin_base(registry: Registry, docker_client, base_ref: str) -> str:
    """A stand-in for python:3.12-slim-bookworm (Debian bookworm with a Python that has venv): the Debian base
    plus Debian's python3-venv, pushed to the registry. Returns its reference there."""
    dockerfile = (f"FROM {base_ref}\n"
                  "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
                  "python3-venv && rm -rf /var/lib/apt/lists/*\n")
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=STANDIN_NAME, network_mode="host", rm=True)
    ref = f"{registry.host}/{STANDIN_NAME}"
    push_image(docker_client, STANDIN_NAME, ref)
    return ref


KEPT = (BASE_NAME, STANDIN_NAME, f"{CPU_REPOSITORY}:cpu")  # the session's images (tests/support/fixtures.py)


def image_tags(docker_client) -> set[str]:
    return {t for image in docker_client.images.list() for t in image.tags}


def reclaim(docker_client, before: set[str] | None, *, keep_build_cache: int) -> None:
    """Remove the tags made since `before` (untagging: an image another tag names stays; None: what was there is
    unknown, so no tag goes), except those naming the session's images; then dangling images, and the build
    cache beyond `keep_build_cache` bytes (the most recently used stay)."""
    kept = set()
    for name in KEPT:
        try:
            kept.add(docker_client.images.get(name).id)
        except Exception:  # not built (yet) in this session
            pass
    for image in docker_client.images.list() if before is not None else []:
        if image.id in kept:
            continue
        for tag in set(image.tags) - before:
            try:
                docker_client.images.remove(tag)
            except Exception:  # used by a container a test still holds: its own teardown says so
                pass
    docker_client.images.prune(filters={"dangling": True})
    # Build contexts first (a wheelhouse is ~200 MB per build folder, sent again when needed, never a layer): left
    # in, they pushed the session image's own layers out of the kept cache and the next "cached" build ran again.
    docker_client.api.prune_builds(filters={"type": "source.local"}, all=True)
    docker_client.api.prune_builds(keep_storage=keep_build_cache, all=True)


def make_wheelhouse(into: Path, torch: str = TORCH) -> Path:
    """torch's CPU wheel, taken from this machine's disk the way pip finds it."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"torch=={torch}", "-d", str(into)],
        check=True,
    )
    if not list(into.glob("torch-*.whl")):
        raise RuntimeError(f"pip download put no torch wheel into {into}")
    return into


def host_ca_bundle() -> Path:
    """The bundle the host trusts: $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE, $PIP_CERT, else Debian's."""
    from envbuild.image.plan import default_ca_bundle

    return default_ca_bundle() or Path(HOST_CA)


def cpu_overrides(base_image: str, repository: str = CPU_REPOSITORY) -> list[str]:
    """The --set arguments that build the cpu image from the local base and the wheelhouse."""
    # The test bed's base exists for linux/amd64 alone (tests/engine/test_arm64.py adds arm64 with a base of both).
    return ["--set", f"backends.cpu.base_image={base_image}", *CPU_SET, "--set", f"image.repository={repository}",
            "--set", "backends.cpu.platforms=[linux/amd64]"]


def cpu_matrix(base_image: str, repository: str, backends: dict[str, str], top: str = "") -> str:
    """A matrix of cpu-like backends on the test base (each name -> extra YAML lines of that backend), with
    the product matrix's shared pins; `top` adds top-level YAML (e.g. an index)."""
    from envbuild.matrix import load

    from .constants import MATRIX

    pins = load(MATRIX)
    backend = (f"\n    description: CPU\n    device: cpu\n    base_image: {base_image}\n    platforms: [linux/amd64]\n"
               f"    python:\n      apt: [python3, python3-venv]\n    torch:\n      version: \"{TORCH}\"\n"
               "      index_url: https://pypi.org/simple\n    ci:\n      runs_on: [ubuntu-latest]\n")
    return (f"image:\n  repository: {repository}\n  source: https://github.com/envbuild/envbuild\n"
            f'transformers:\n  version: "{pins.transformers}"\naccelerate:\n  version: "{pins.accelerate}"\n'
            f'uv:\n  version: "{pins.uv}"\n{top}'
            "backends:\n" + "".join(f"  {name}:{backend}{extra}" for name, extra in backends.items()))



def docker_run(docker_client, image: str, command: list[str], timeout: int = 600, **kw) -> tuple[int, bytes, bytes]:
    """`docker run --rm`, as the CLI does it: the exit status, stdout and stderr apart, and the container removed with
    the anonymous volumes its image's VOLUMEs made (the SDK's remove=True leaves those behind)."""
    container = docker_client.containers.run(image, command, detach=True, **kw)
    try:
        status = container.wait(timeout=timeout)["StatusCode"]
        return status, container.logs(stdout=True, stderr=False), container.logs(stdout=False, stderr=True)
    finally:
        container.remove(force=True, v=True)


# --- the Docker daemon, killed and started again (tests/faults) ------------------------------------------------

DOCKERD_LOG = Path("/var/log/envbuild/dockerd.log")  # where scripts/test starts it


def dockerd_pid() -> int | None:
    out = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def engine_answers(timeout: float = 10) -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:  # a daemon still starting
        return False


def kill_dockerd() -> None:
    """SIGKILL the daemon, as a crash or the OOM killer would, and wait until it no longer answers."""
    import signal

    pid = dockerd_pid()
    if pid is None:
        raise RuntimeError("no dockerd to kill")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while dockerd_pid() == pid and time.monotonic() < deadline:
        time.sleep(0.2)


def start_dockerd() -> None:
    """Start dockerd as scripts/test does, and wait (up to 90 s) until it answers."""
    proc = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if engine_answers():
            return
        if dockerd_pid() is None and (proc is None or proc.poll() is not None):
            # A killed dockerd leaves its pid file; while its parent has not reaped it, a new one refuses to start.
            Path("/var/run/docker.pid").unlink(missing_ok=True)
            DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
            with open(DOCKERD_LOG, "ab") as log:
                proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        time.sleep(1)
    raise RuntimeError(f"dockerd did not answer within 90s; see {DOCKERD_LOG}")
