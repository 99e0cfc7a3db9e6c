"""`envbuild doctor` against the real engine, where `doctor --backend cpu` must pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.constants import MATRIX

pytestmark = pytest.mark.docker


def test_cli_cpu_passes_where_docker_runs(invoke, docker_client):
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)
    assert result.exit_code == 0, result.output
    assert "ok    docker daemon" in result.stdout and f"Docker {docker_client.version()['Version']}" in result.stdout
    assert "ok    buildkit" in result.stdout and "ok    disk" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("Ready for cpu")


def test_cli_auto_json_where_docker_runs(invoke, docker_client):
    if any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dri", "/dev/accel")):
        pytest.skip("this host has accelerator device nodes")
    result = invoke("doctor", "--json", "--matrix", MATRIX)
    assert result.stderr.startswith("auto: chose cpu (no accelerator detected)")
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["backend"] == "cpu"
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["docker daemon"] == statuses["buildkit"] == statuses["disk"] == "ok"


def test_cli_cuda_on_this_engine_names_the_toolkit(invoke, docker_client):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    result = invoke("doctor", "--backend", "cuda", "--matrix", MATRIX)
    assert result.exit_code == 1
    assert "FAIL  runtime" in result.stdout and "nvidia-ctk runtime configure --runtime=docker" in result.stdout
