"""Publish and pull against a real registry: Debian's docker-registry with htpasswd authentication on a
loopback port, driven through the CLI the way CI and users drive it.

The session's cpu image (support/fixtures.py, cpu_image) is published under a tag of its own, so that deleting
and pulling never moves the session's tags; every tag these tests create is removed by name at the end.
Docker login state lives in a temporary DOCKER_CONFIG: root's ~/.docker/config.json is never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.constants import MATRIX as MATRIX_PATH
from support.constants import TORCH
from support.fixtures import AUTH_USER

from envbuild.matrix import load

pytestmark = pytest.mark.docker
MATRIX = str(MATRIX_PATH)
PINS = load(MATRIX_PATH)  # the shared pins of the product matrix
USER = AUTH_USER  # of the session's auth_registry (support/fixtures.py), shared with test_signing


@dataclass
class Published:
    registry: Any  # support.testbed.Registry: host, password
    repo: str  # 127.0.0.1:PORT/envbuild-<id>
    source: str  # the local copy of the cpu image that was published
    manifest: Path
    proc: subprocess.CompletedProcess
    env: dict[str, str]  # DOCKER_CONFIG only, no credentials
    creds: dict[str, str]
    overrides: list[str]
    created: list[str]  # every local tag this module made (removed at the end)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def exists(docker_client, ref: str) -> bool:
    import docker

    try:
        docker_client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def untag(docker_client, *refs: str) -> None:
    """Remove tags by name only (never by id, never forced): the image stays while other tags hold it."""
    import docker

    for ref in refs:
        try:
            docker_client.images.remove(ref, noprune=False)
        except docker.errors.ImageNotFound:
            pass


@pytest.fixture(scope="module")
def published(auth_registry, cpu_image, cpu_smoke, docker_client, tmp_path_factory):
    work = tmp_path_factory.mktemp("publish")
    (work / "docker-config").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVBUILD_REGISTRY_", "GITHUB_"))}
    env["DOCKER_CONFIG"] = str(work / "docker-config")
    creds = {"ENVBUILD_REGISTRY_USER": USER, "ENVBUILD_REGISTRY_PASSWORD": auth_registry.password}
    uid = uuid.uuid4().hex[:10]
    source = f"envbuild-test/publish-src-{uid}:cpu"
    repo = f"{auth_registry.host}/envbuild-{uid}"
    # by id: another session may move the shared envbuild-test/envbuild:cpu tag meanwhile
    docker_client.images.get(cpu_image.image_id).tag(*source.split(":"))
    created = [source]
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--image", source,
                "--registry", repo, "--smoke-json", str(cpu_smoke), "--summary", str(work / "summary.md")],
               {**env, **creds}, cwd=work)
    doc = json.loads((work / "envbuild-manifest.json").read_text()) if (work / "envbuild-manifest.json").exists() else {}
    created += doc.get("images", {}).get("cpu", {}).get("tags", [])
    p = Published(auth_registry, repo, source, work / "envbuild-manifest.json", proc, env, creds, list(cpu_image.overrides), created)
    yield p
    untag(docker_client, *p.created)


def test_publish_pushes_the_matrix_tags_and_records_the_digest(published, cpu_image):
    proc = published.proc
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(published.manifest.read_text())
    assert doc["schema"] == 1 and list(doc["images"]) == ["cpu"]
    entry = doc["images"]["cpu"]
    assert entry["tags"] == [f"{published.repo}:cpu", f"{published.repo}:cpu-torch{TORCH}-transformers{PINS.transformers}"]
    assert entry["digest"].startswith("sha256:") and len(entry["digest"]) == 71
    assert entry["image_id"] == cpu_image.image_id
    assert entry["versions"] == {"torch": TORCH, "plugin": None, "transformers": PINS.transformers, "accelerate": PINS.accelerate}
    assert len(entry["git_revision"]) == 40 and entry["date"].endswith("Z")
    assert entry["smoke"]["ok"] is True and entry["smoke"]["passed"] == 11 and entry["smoke"]["failed"] == 0
    assert entry["digest"] in proc.stdout
    assert entry["digest"] in (published.manifest.parent / "summary.md").read_text()
    # the image's SBOM, beside the manifest, recorded by its digest
    sbom = published.manifest.parent / entry["sbom"]["file"]
    assert entry["sbom"]["file"] == "envbuild-sbom-cpu.cdx.json"
    assert hashlib.sha256(sbom.read_bytes()).hexdigest() == entry["sbom"]["sha256"]
    components = {c["name"]: c.get("version") for c in json.loads(sbom.read_text())["components"]}
    assert components["torch"].startswith(TORCH) and components["transformers"] == PINS.transformers


def test_an_unchanged_cell_moves_its_tags_uploads_nothing_and_is_not_a_changed_job(published, cpu_image, wheelhouse,
                                                                                     tmp_path):
    """Content-addressed publishing: the image carries its content key (dev.envbuild.content) and the registry gets
    it as a tag; publishing the same content again only moves the tags there, and `matrix --changed` drops it."""
    assert published.proc.returncode == 0
    first = json.loads(published.manifest.read_text())["images"]["cpu"]
    key = first["content"]
    assert len(key) == 64 and first["content_tag"] == f"{published.repo}:cpu-in-{key[:16]}"
    env = {**published.env, **published.creds}
    started = time.monotonic()
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", published.source,
                "--registry", published.repo, "--manifest", str(published.manifest)], env)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "unchanged since" in proc.stderr and "pushing" not in proc.stderr, proc.stderr
    again = json.loads(published.manifest.read_text())["images"]["cpu"]
    assert again["digest"] == first["digest"] and again["unchanged_since"] and again["content"] == key
    print(f"\nsecond publish of an unchanged cpu cell: {took:.1f} s")
    assert took < 30  # the cell's bound is 5 s of registry work; the CLI start and the SBOM come on top
    # --rebuild pushes it again (the registry answers with the same digest: nothing new lands)
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", published.source,
                "--registry", published.repo, "--manifest", str(published.manifest), "--rebuild"], env)
    assert proc.returncode == 0 and "pushing" in proc.stderr and "unchanged since" not in proc.stderr
    # the CI job list: the cell is not a job while its content is there; another pin makes it one
    cpu_image.copy_locks(tmp_path)
    ask = ["matrix", "--format", "json", "--backend", "cpu", "--changed", "--registry", published.repo, "--matrix", MATRIX,
           *published.overrides, "--wheelhouse", str(wheelhouse)]
    proc = run(ask, env, cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["include"] == [], proc.stderr
    assert f"cpu linux/amd64: unchanged ({first['content_tag']})" in proc.stderr
    proc = run([*ask, "--set", "backends.cpu.apt=[less]"], env, cwd=tmp_path)
    assert [j["backend"] for j in json.loads(proc.stdout)["include"]] == ["cpu"], proc.stderr


def test_the_password_is_never_shown_or_stored(published):
    password = published.creds["ENVBUILD_REGISTRY_PASSWORD"]
    assert password not in published.proc.stdout + published.proc.stderr
    assert password not in published.manifest.read_text()
    assert password not in (published.manifest.parent / "summary.md").read_text()
    config = Path(published.env["DOCKER_CONFIG"])
    assert all(password not in f.read_text(errors="replace") for f in config.rglob("*") if f.is_file())


def test_deleted_locally_pulled_by_backend_then_smoked(published, docker_client, no_leftover_containers):
    """The user's path: nothing local, `envbuild pull --backend cpu`, then `envbuild smoke --backend cpu`."""
    assert published.proc.returncode == 0
    entry = json.loads(published.manifest.read_text())["images"]["cpu"]
    untag(docker_client, published.source, *entry["tags"])
    assert not any(exists(docker_client, r) for r in [published.source, *entry["tags"]])
    # a repository of its own for the matrix tag, so the session's envbuild-test/envbuild:cpu never moves
    local_repo = f"envbuild-test/pulled-{uuid.uuid4().hex[:10]}"
    published.created += [f"{local_repo}:cpu"]
    matrix_args = ["--matrix", MATRIX, *published.overrides, "--set", f"image.repository={local_repo}"]
    proc = run(["pull", "--backend", "cpu", *matrix_args, "--registry", published.repo, "--manifest", str(published.manifest)],
               {**published.env, **published.creds})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert published.creds["ENVBUILD_REGISTRY_PASSWORD"] not in proc.stdout + proc.stderr
    pinned = entry["tags"][1]
    assert f"cpu: pulled {pinned} ({entry['digest']}, verified against {published.manifest})" in proc.stdout
    assert f"docker run --rm {pinned} envbuild-probe" in proc.stdout
    pulled = docker_client.images.get(f"{local_repo}:cpu")
    assert f"{published.repo}@{entry['digest']}" in pulled.attrs["RepoDigests"]
    smoke = run(["smoke", "--backend", "cpu", *matrix_args], published.env)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "cpu: smoke passed" in smoke.stdout and f"({local_repo}:cpu on linux/amd64)" in smoke.stdout


def test_tampered_manifest_is_refused_and_nothing_is_tagged(published, docker_client, tmp_path):
    assert published.proc.returncode == 0
    doc = json.loads(published.manifest.read_text())
    real = doc["images"]["cpu"]["digest"]
    doc["images"]["cpu"]["digest"] = "sha256:" + "0" * 64
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(doc))
    pinned = doc["images"]["cpu"]["tags"][1]
    untag(docker_client, pinned)
    local_repo = f"envbuild-test/tampered-{uuid.uuid4().hex[:10]}"
    proc = run(["pull", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--set", f"image.repository={local_repo}",
                "--registry", published.repo, "--manifest", str(tampered)], {**published.env, **published.creds})
    assert proc.returncode == 1
    assert f"refusing {pinned}" in proc.stderr and real in proc.stderr and "sha256:" + "0" * 64 in proc.stderr
    assert not exists(docker_client, f"{local_repo}:cpu")
    assert not exists(docker_client, pinned)


def test_wrong_password_fails_clearly_and_leaves_the_manifest(published, cpu_image):
    before = published.manifest.read_bytes()
    wrong = "wrong-" + secrets.token_urlsafe(12)
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", cpu_image.tag,
                "--registry", published.repo, "--manifest", str(published.manifest)],
               {**published.env, "ENVBUILD_REGISTRY_USER": USER, "ENVBUILD_REGISTRY_PASSWORD": wrong})
    assert proc.returncode == 1
    assert f"Error: authentication failed for {published.registry.host}" in proc.stderr
    assert "ENVBUILD_REGISTRY_PASSWORD" in proc.stderr
    assert wrong not in proc.stdout + proc.stderr
    assert published.manifest.read_bytes() == before


def test_no_credentials_fails_clearly(published, cpu_image, docker_client):
    before = published.manifest.read_bytes()
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", cpu_image.tag,
                "--registry", f"{published.repo}-nocreds", "--manifest", str(published.manifest)], published.env)
    assert proc.returncode == 1
    assert f"authentication failed for {published.registry.host}" in proc.stderr and "no basic auth credentials" in proc.stderr
    assert published.manifest.read_bytes() == before
    assert not exists(docker_client, f"{published.repo}-nocreds:cpu")  # the tag made for the push went with it


def test_unreachable_registry_fails_clearly(published, cpu_image, docker_client):
    before = published.manifest.read_bytes()
    dead = f"127.0.0.1:{closed_port()}/envbuild"
    for env in (published.env, {**published.env, **published.creds}):  # through a push, and through a login
        proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", cpu_image.tag,
                    "--registry", dead, "--manifest", str(published.manifest)], env)
        assert proc.returncode == 1
        assert f"Error: registry {dead.split('/')[0]} unreachable" in proc.stderr
        assert proc.stderr.count("Error:") == 1
    assert published.manifest.read_bytes() == before
    assert not exists(docker_client, f"{dead}:cpu")


def test_failed_smoke_result_refuses_publish(published, cpu_image, tmp_path):
    before = published.manifest.read_bytes()
    failed = {"backend": "cpu", "image": cpu_image.tag, "ok": False, "error": "load: broken", "checks": [{"name": "load", "ok": False}]}
    (tmp_path / "failed.json").write_text(json.dumps(failed))
    proc = run(["publish", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--image", cpu_image.tag,
                "--registry", published.repo, "--manifest", str(published.manifest), "--smoke-json", str(tmp_path / "failed.json")],
               {**published.env, **published.creds})
    assert proc.returncode == 1
    assert "its smoke test failed (load: broken)" in proc.stderr and "--force" in proc.stderr
    assert published.manifest.read_bytes() == before


def test_pull_without_credentials_fails_clearly(published, docker_client):
    local_repo = f"envbuild-test/nocreds-{uuid.uuid4().hex[:10]}"
    proc = run(["pull", "--backend", "cpu", "--matrix", MATRIX, *published.overrides, "--set", f"image.repository={local_repo}",
                "--registry", published.repo], published.env)
    assert proc.returncode == 1
    # asked before a layer moves: the registry wants credentials, and the error says how to give them
    assert f"Error: registry {published.registry.host} asks for credentials" in proc.stderr
    assert "ENVBUILD_REGISTRY_USER" in proc.stderr and f"docker login {published.registry.host}" in proc.stderr
    assert not exists(docker_client, f"{local_repo}:cpu")
