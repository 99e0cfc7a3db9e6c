"""The registry's HTTP API against a real registry (Debian's docker-registry, no Docker engine needed): a base
of two platforms resolved per platform, an index PUT, skopeo's independent reading of it, and the errors."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest
from support import testbed

from envbuild.errors import PublishError
from envbuild.registry.api import DOCKER_LIST, Registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    try:
        reg = testbed.start_registry(tmp_path_factory.mktemp("registry"))
    except testbed.Unavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield reg
    reg.stop()


def rootfs(path, text: str):
    """A one-file rootfs: enough for a manifest, a config and a layer."""
    data = text.encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/which")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_platform_is_resolved_from_an_index_and_an_index_is_put(registry, tmp_path):
    repo = f"{registry.host}/envbuild-test/tiny"
    amd64 = testbed.push_rootfs(registry, rootfs(tmp_path / "amd64.tar", "amd64"), "envbuild-test/tiny:amd64", "amd64")
    arm64 = testbed.push_rootfs(registry, rootfs(tmp_path / "arm64.tar", "arm64"), "envbuild-test/tiny:arm64", "arm64")
    api = Registry(repo)
    children = [("linux/amd64", api.manifest(f"{repo}:amd64")), ("linux/arm64", api.manifest(f"{repo}:arm64"))]
    digest = api.put_index(f"{repo}:both", children)
    top = api.manifest(f"{repo}:both")
    assert top.is_index and top.digest == digest and top.media_type == DOCKER_LIST
    assert top.platforms() == {"linux/amd64": amd64, "linux/arm64": arm64}
    assert api.platform_digest(f"{repo}:both", "linux/arm64")[0] == arm64
    assert api.platform_digest(f"{repo}@{digest}", "linux/amd64")[0] == amd64
    # a single image answers for its own platform only
    assert api.platform_digest(f"{repo}:arm64", "linux/arm64")[0] == arm64
    with pytest.raises(PublishError, match="is a single image for linux/amd64, not linux/arm64"):
        api.platform_digest(f"{repo}:amd64", "linux/arm64")
    with pytest.raises(PublishError, match="has no image for linux/s390x: its index lists linux/amd64, linux/arm64"):
        api.platform_digest(f"{repo}:both", "linux/s390x")
    assert api.manifest(f"{repo}:absent") is None
    # skopeo, an independent client, reads the same index and picks the same digest per architecture
    skopeo = shutil.which("skopeo")
    if not skopeo:
        pytest.fail("skopeo not found: scripts/test installs it")
    raw = subprocess.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{repo}:both"],
                         capture_output=True, text=True, check=True).stdout
    assert {m["platform"]["architecture"]: m["digest"] for m in json.loads(raw)["manifests"]} == {
        "amd64": amd64, "arm64": arm64}
    picked = subprocess.run([skopeo, "inspect", "--tls-verify=false", "--override-arch", "arm64", f"docker://{repo}:both"],
                            capture_output=True, text=True, check=True).stdout
    # skopeo's Digest is the tag's (the index's); the image it chose is arm64's: its architecture and its layers
    picked = json.loads(picked)
    layers = [layer["digest"] for layer in api.manifest(f"{repo}@{arm64}").doc["layers"]]
    assert picked["Digest"] == digest and picked["Architecture"] == "arm64" and picked["Layers"] == layers
