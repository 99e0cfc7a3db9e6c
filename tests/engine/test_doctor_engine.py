"""`envbuild doctor` against the real engine, where `doctor --backend cpu` must pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.constants import MATRIX

pytestmark = pytest.mark.docker


def roomy(docker_client) -> bool:
    """Whether Docker's data root has the 10 GiB doctor asks of a cpu build: a fact of the host, not of envbuild
    (where it lacks them, the disk check must fail and say so)."""
    from envbuild.host.doctor import DISK_GIB

    return shutil.disk_usage(docker_client.info()["DockerRootDir"]).free >= DISK_GIB["cpu"] * 2**30


def test_cli_cpu_passes_where_docker_runs(invoke, docker_client):
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)
    assert "ok    docker daemon" in result.stdout and f"Docker {docker_client.version()['Version']}" in result.stdout
    assert "ok    buildkit" in result.stdout
    if not roomy(docker_client):
        assert result.exit_code == 1 and "FAIL  disk" in result.stdout and "docker builder prune" in result.stdout
        return
    assert result.exit_code == 0, result.output
    assert "ok    disk" in result.stdout
    assert [line.split(" (")[0].rstrip(".") for line in result.stdout.splitlines()[-2:]] == ["Can build cpu here", "Can run cpu here"]


def test_cli_auto_json_where_docker_runs(invoke, docker_client):
    if any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dri", "/dev/accel")):
        pytest.skip("this host has accelerator device nodes")
    result = invoke("doctor", "--json", "--matrix", MATRIX)
    assert result.stderr.startswith("auto: chose cpu (no accelerator detected)")
    data = json.loads(result.stdout)
    assert data["backend"] == "cpu"
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["docker daemon"] == statuses["buildkit"] == "ok"
    assert statuses["disk"] == ("ok" if roomy(docker_client) else "FAIL")
    assert data["ok"] is roomy(docker_client)


def test_cli_cuda_on_this_engine_names_the_toolkit(invoke, docker_client):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    result = invoke("doctor", "--backend", "cuda", "--matrix", MATRIX)
    assert result.exit_code == 1
    assert "FAIL  runtime" in result.stdout and "nvidia-ctk runtime configure --runtime=docker" in result.stdout
