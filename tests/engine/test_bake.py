"""A bake target builds the image `envbuild build` builds: buildx is not installable here, so the cpu target of
`envbuild matrix --format bake` is built by plain `docker build` (BuildKit) from exactly the target's fields, and
its labels, the content key among them, are compared with the session's cpu image (support/fixtures.py cpu_image:
the same base, wheelhouse and lock, so BuildKit's cache makes this build cheap)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.constants import MATRIX

from envbuild.engine.docker import find_builder
from envbuild.image.plan import CONTENT_LABEL

pytestmark = pytest.mark.docker


def docker_build_argv(client: str, target: dict, iidfile: Path) -> list[str]:
    """`docker build` from a bake target's fields, as buildx bake hands them to BuildKit. The tags are left out:
    they are the session's cpu image's own, which other tests hold to its id (they are compared instead)."""
    context = target["context"]
    argv = [client, "build", "--progress=plain", "-f", str(Path(context) / target["dockerfile"]), "--iidfile", str(iidfile)]
    for key, value in target.get("args", {}).items():
        argv += ["--build-arg", f"{key}={value}"]
    for key, value in target.get("labels", {}).items():
        argv += ["--label", f"{key}={value}"]
    for platform in target.get("platforms", []):
        argv += ["--platform", platform]
    for secret in target.get("secret", []):
        argv += ["--secret", secret]
    return [*argv, context]


def test_a_bake_target_built_by_docker_build_is_the_image_envbuild_build_builds(cpu_image, wheelhouse, ca_bundle,
                                                                                  docker_client, tmp_path):
    cpu_image.copy_locks(tmp_path)
    proc = subprocess.run(["envbuild", "matrix", "--format", "bake", "--output", "bake", "--backend", "cpu",
                           "--matrix", str(MATRIX), *cpu_image.overrides, "--wheelhouse", str(wheelhouse),
                           "--ca-bundle", str(ca_bundle)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "bake" / "docker-bake.json").read_text())
    assert list(doc["target"]) == ["cpu-linux-amd64"]
    target = doc["target"]["cpu-linux-amd64"]
    assert target["secret"] == [f"id=ca_bundle,src={ca_bundle}"]
    assert sorted(p.name for p in (Path(target["context"]) / "wheelhouse").iterdir()) == sorted(
        p.name for p in wheelhouse.iterdir() if p.is_file())

    iidfile = tmp_path / "iid"
    client = find_builder().argv[0]  # Debian's docker.io here; its `build` runs BuildKit
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    built = subprocess.run(docker_build_argv(client, target, iidfile), capture_output=True, text=True, env=env,
                           timeout=1800)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    baked = docker_client.images.get(iidfile.read_text().strip())
    ours = docker_client.images.get(cpu_image.image_id)
    assert baked.labels[CONTENT_LABEL] == ours.labels[CONTENT_LABEL] == target["labels"][CONTENT_LABEL]
    assert baked.labels == ours.labels
    assert target["tags"] and set(target["tags"]) <= set(ours.tags)  # other tests may add tags of their own
    assert baked.attrs["Os"] == "linux" and baked.attrs["Architecture"] == "amd64"
