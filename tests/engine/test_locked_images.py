"""Locks on the real engine, against a real package index served over HTTP on loopback (support/pyindex.py):
resolved in the image's base, installed hash-checked, stable while the index moves, refreshed only when
asked, refused when stale or tampered with; extras per backend, two backends built at once (--jobs); an image that
guards its torch; its SBOM."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from support import testbed
from support.constants import MATRIX, TORCH
from support.pyindex import SimpleIndex

from envbuild.image import lockfile

pytestmark = pytest.mark.docker
TAG = "envbuild-test/locked"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    idx = SimpleIndex(tmp_path_factory.mktemp("index"))
    idx.add("envbuild-testdep", "1.0.0")
    idx.add("envbuild-wants-torch", "1.0.0", ("torch==2.12.0",))
    with idx:
        yield idx


@pytest.fixture(scope="module")
def args(index, cpu_image, wheelhouse, ca_bundle) -> list[str]:
    """The session's cpu setup, with the test index beside PyPI and an extra from it (RUN steps on the host's
    network: the index listens on loopback)."""
    return ["--matrix", str(MATRIX), *cpu_image.overrides, "--set", f"index.extra_urls=[{index.url}]",
            "--set", 'backends.cpu.packages=["envbuild-testdep"]', "--wheelhouse", str(wheelhouse),
            "--ca-bundle", str(ca_bundle), "--network", "host"]


def envbuild(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def installed(docker_client, image: str, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    status, out, err = testbed.docker_run(docker_client, image, ["python", "-c", code])
    if status != 0:
        raise RuntimeError(err.decode(errors="replace"))
    return out.decode().strip()


@pytest.fixture(scope="module")
def locked(args, tmp_path_factory, docker_client):
    """A project folder whose lock took envbuild-testdep 1.0.0, and the image built from it after 1.1.0
    appeared on the index."""
    cwd = tmp_path_factory.mktemp("locked")
    proc = envbuild("lock", "--backend", "cpu", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield cwd
    for tag in (f"{TAG}:a", f"{TAG}:b", f"{TAG}:tampered"):
        try:
            docker_client.images.remove(tag)
        except Exception:  # not made by a failing test: only tidiness
            pass


def test_the_lock_pins_and_hashes_every_distribution(locked, cpu_image):
    lock = lockfile.parse((locked / "locks" / "cpu" / "linux-amd64.txt").read_text(), "cpu.txt")
    pins = lock.pins()
    assert pins["envbuild-testdep"] == "1.0.0" and [p.name for p in lock.layer("extras")] == ["envbuild-testdep"]
    assert pins["torch"].startswith(TORCH) and pins["transformers"] and pins["huggingface-hub"]
    assert all(len(p.sha256) == 1 and len(p.sha256[0]) == 64 for p in lock.packages)
    assert lock.inputs["requirements"][-1] == "envbuild-testdep" and lock.resolved["platform"] == "linux/amd64"


def test_a_locked_image_keeps_its_versions_when_the_index_moves(locked, index, args, docker_client):
    before = (locked / "locks" / "cpu" / "linux-amd64.txt").read_text()
    index.add("envbuild-testdep", "1.1.0")
    check = envbuild("lock", "--check", *args, cwd=locked)
    assert check.returncode == 0 and "linux-amd64.txt up to date" in check.stdout, check.stdout + check.stderr
    again = envbuild("lock", "--backend", "cpu", *args, cwd=locked)  # inputs unchanged: nothing resolved
    assert "up to date" in again.stdout and (locked / "locks" / "cpu" / "linux-amd64.txt").read_text() == before
    built = envbuild("build", "--backend", "cpu", "--locked", "--image", f"{TAG}:a", *args, cwd=locked)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "resolving" not in built.stderr
    assert installed(docker_client, f"{TAG}:a", "envbuild-testdep") == "1.0.0"
    # Asked to, the lock takes the new release of that one distribution, and keeps every other version.
    up = envbuild("lock", "--backend", "cpu", "--upgrade-package", "envbuild-testdep", *args, cwd=locked)
    assert up.returncode == 0, up.stdout + up.stderr
    old, new = lockfile.parse(before, "old").pins(), lockfile.parse((locked / "locks" / "cpu" / "linux-amd64.txt").read_text(), "new").pins()
    assert new.pop("envbuild-testdep") == "1.1.0" and old.pop("envbuild-testdep") == "1.0.0" and new == old
    built = envbuild("build", "--backend", "cpu", "--locked", "--image", f"{TAG}:b", *args, cwd=locked)
    assert built.returncode == 0, built.stdout + built.stderr
    assert installed(docker_client, f"{TAG}:b", "envbuild-testdep") == "1.1.0"


def test_a_tampered_hash_fails_the_build_and_keeps_the_tag(locked, args, docker_client, tmp_path):
    shutil.copytree(locked / "locks", tmp_path / "locks")
    lock = (tmp_path / "locks" / "cpu" / "linux-amd64.txt").read_text()
    digest = next(p.sha256[0] for p in lockfile.parse(lock, "cpu.txt").packages if p.name == "envbuild-testdep")
    (tmp_path / "locks" / "cpu" / "linux-amd64.txt").write_text(lock.replace(digest, "0" * 64))
    docker_client.images.get(f"{TAG}:b").tag(TAG, "tampered")
    before = docker_client.images.get(f"{TAG}:tampered").id
    proc = envbuild("build", "--backend", "cpu", "--locked", "--image", f"{TAG}:tampered", *args, cwd=tmp_path)
    assert proc.returncode == 1 and "cpu: build FAILED" in proc.stderr
    assert "hash" in proc.stderr.lower() and "envbuild-testdep" in proc.stderr, proc.stderr
    assert docker_client.images.get(f"{TAG}:tampered").id == before


def test_a_stale_lock_fails_locked_builds_and_the_check(locked, args, tmp_path):
    from envbuild.matrix import load

    shutil.copytree(locked / "locks", tmp_path / "locks")
    pinned = load(MATRIX).transformers  # what the lock was resolved for
    bumped = [*args, "--set", "transformers.version=5.22.0"]
    proc = envbuild("build", "--backend", "cpu", "--locked", *bumped, cwd=tmp_path)
    assert proc.returncode == 1
    assert f"locks/cpu/linux-amd64.txt is stale (requirements: transformers=={pinned} -> transformers==5.22.0)" in proc.stderr
    assert "run `envbuild lock --backend cpu --platform linux/amd64`" in proc.stderr
    check = envbuild("lock", "--check", *bumped, cwd=tmp_path)
    assert check.returncode == 1
    assert f"cpu (linux/amd64): locks/cpu/linux-amd64.txt stale (41 distributions): requirements: transformers=={pinned} -> transformers==5.22.0" in check.stdout


def test_an_extra_that_wants_another_torch_fails_the_lock(args, tmp_path):
    proc = envbuild("lock", "--backend", "cpu", *args, "--set", 'backends.cpu.packages=["envbuild-wants-torch"]', cwd=tmp_path)
    assert proc.returncode == 1
    assert "cpu: cannot lock: the extra 'envbuild-wants-torch' (packages: in the matrix)" in proc.stderr
    assert "torch==2.12.0" in proc.stderr and not (tmp_path / "locks" / "cpu" / "linux-amd64.txt").exists()


def test_two_backends_build_at_once_each_with_its_own_extras(base_image, index, wheelhouse, ca_bundle, tmp_path, docker_client):
    """`build --jobs 2` of two cpu-like backends on the session's base, one with an extra: their shared steps run
    once for both (or come from the cache); each gets its own final stage, tags and extras. Not a terminal: plain
    lines prefixed with the backend, and a summary table (one build for both checks: CI's time budget)."""
    (tmp_path / "matrix.yaml").write_text(testbed.cpu_matrix(
        base_image, "envbuild-test/extras", {"cpu": "    packages: [envbuild-testdep]\n", "plain": ""},
        top=f"index:\n  extra_urls: [{index.url}]\n"))
    proc = envbuild("build", "--backend", "all", "--jobs", "2", "--matrix", tmp_path / "matrix.yaml", "--wheelhouse",
                    wheelhouse, "--ca-bundle", ca_bundle, "--network", "host", "--json-file", tmp_path / "b.json",
                    cwd=tmp_path, timeout=1800)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        # Not a terminal: every line says which backend it is about.
        assert any(ln.startswith("[cpu] ") for ln in proc.stderr.splitlines())
        assert any(ln.startswith("[plain] ") for ln in proc.stderr.splitlines())
        assert "\x1b[" not in proc.stderr
        table = proc.stdout[proc.stdout.index("BACKEND"):]
        assert "plain" in table and "envbuild-test/extras:cpu" in table
        results = json.loads((tmp_path / "b.json").read_text())
        assert [r["backend"] for r in results] == ["cpu", "plain"] and all(r["ok"] for r in results)
        assert installed(docker_client, "envbuild-test/extras:cpu", "envbuild-testdep") in ("1.0.0", "1.1.0")
        with pytest.raises(Exception, match="PackageNotFoundError"):
            installed(docker_client, "envbuild-test/extras:plain", "envbuild-testdep")
        assert "envbuild-testdep" not in (tmp_path / "locks" / "plain" / "linux-amd64.txt").read_text()
    finally:
        for image in docker_client.images.list(name="envbuild-test/extras"):
            for tag in image.tags:
                if tag.startswith("envbuild-test/extras:"):  # only ours: an identical image carries others' tags too
                    docker_client.images.remove(tag)


def test_pip_cannot_replace_the_image_s_torch(locked, docker_client):
    out = subprocess.run(["docker", "run", "--rm", f"{TAG}:a", "python", "-m", "pip", "install", "torch==2.12.0"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    assert f"torch=={TORCH}" in out.stdout + out.stderr  # pip names the image's constraint
    assert installed(docker_client, f"{TAG}:a", "torch").startswith(TORCH)


def test_the_sbom_lists_every_distribution_in_the_image(locked, tmp_path, docker_client):
    out = tmp_path / "sbom.json"
    proc = envbuild("sbom", "--backend", "cpu", "--image", f"{TAG}:a", "-o", out, "--matrix", MATRIX, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    listed = {c["name"]: c.get("version") for c in doc["components"] if c["type"] == "library"}
    pip_list = json.loads(testbed.docker_run(docker_client, f"{TAG}:a", ["python", "-m", "pip", "list", "--format", "json"])[1])
    assert {str(canonicalize_name(d["name"])): d["version"] for d in pip_list} == listed
    testdep = next(c for c in doc["components"] if c["name"] == "envbuild-testdep")
    assert testdep["purl"] == "pkg:pypi/envbuild-testdep@1.0.0" and testdep["hashes"][0]["alg"] == "SHA-256"
    assert any(c["type"] == "container" for c in doc["components"])  # the base image
    again = tmp_path / "again.json"
    envbuild("sbom", "--backend", "cpu", "--image", f"{TAG}:a", "-o", again, "--matrix", MATRIX, cwd=tmp_path)
    assert again.read_bytes() == out.read_bytes()  # the same image, the same document


def _wheel_folder(lock: lockfile.LockFile, torch_wheels: Path, into: Path, uv: str) -> Path:
    """A wheel folder holding every file of `lock`, fetched from the URLs it records (the torch wheel from the
    session's wheelhouse, where the lock took it), and the matrix's uv: what an offline site would carry."""
    import hashlib
    import ssl
    import sys
    import urllib.request

    into.mkdir()
    for wheel in torch_wheels.iterdir():
        shutil.copy2(wheel, into / wheel.name)
    context = ssl.create_default_context(cafile=str(testbed.host_ca_bundle()))
    for p in lock.packages:
        if p.url.startswith(lockfile.WHEELHOUSE):
            continue
        with urllib.request.urlopen(p.url, context=context, timeout=120) as response:
            data = response.read()
        assert hashlib.sha256(data).hexdigest() == p.sha256[0], p.url
        (into / p.filename).write_bytes(data)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"uv=={uv}", "-d", str(into)], check=True)
    return into


def test_a_lock_made_online_installs_with_every_index_unreachable_given_a_wheel_folder(cpu_image, ca_bundle,
                                                                                        wheelhouse, docker_client, tmp_path):
    """The session's lock was resolved with PyPI reachable. Built again with every HTTPS index dead inside the build
    (a proxy that refuses), from a wheel folder holding the lock's files: it installs, asking no index, and the
    image carries the same content key as the one whose files came from PyPI."""
    from envbuild.image.plan import CONTENT_LABEL
    from envbuild.matrix import load

    cpu_image.copy_locks(tmp_path)
    lock = lockfile.parse((tmp_path / "locks" / "cpu" / "linux-amd64.txt").read_text(), "cpu.txt")
    assert [p.name for p in lock.packages if not p.url.startswith(("https://", lockfile.WHEELHOUSE))] == []
    folder = _wheel_folder(lock, wheelhouse, tmp_path / "wheels", load(MATRIX).uv)
    tag = f"{TAG}:offline"
    try:
        proc = envbuild("build", "--backend", "cpu", "--locked", "--matrix", MATRIX, *cpu_image.overrides,
                        "--wheelhouse", folder, "--ca-bundle", ca_bundle, "--image", tag,
                        "--build-arg", "HTTPS_PROXY=http://127.0.0.1:9", "--build-arg", "https_proxy=http://127.0.0.1:9",
                        cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "resolving" not in proc.stderr
        assert installed(docker_client, tag, "transformers") == lock.pins()["transformers"]
        offline, online = docker_client.images.get(tag), docker_client.images.get(cpu_image.image_id)
        assert offline.labels[CONTENT_LABEL] == online.labels[CONTENT_LABEL]
    finally:
        try:
            docker_client.images.remove(tag)
        except Exception:  # not made by a failing build: only tidiness
            pass
