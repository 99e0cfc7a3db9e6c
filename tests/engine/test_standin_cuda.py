"""A cuda variant on a stand-in base: PyPI's CUDA build of torch, which is CUDA 13.0's, so the cuda-cu130 cell (the
others are tested by render, lock and `pick`; tests/support/standin.py says what a stand-in build proves)."""

from __future__ import annotations

import json

import pytest
from support.constants import TORCH
from support.standin import build, in_image, overrides, probe, smoke

pytestmark = pytest.mark.docker


# --- cuda: PyPI's torch for Linux is the CUDA build, and brings the CUDA runtime as wheels -------------------


@pytest.fixture(scope="module")
def cuda(standin_base, ca_bundle, tmp_path_factory):
    # No wheelhouse: it holds torch's CPU build, which would win over PyPI's CUDA one. The image (about 5 GB) goes
    # when this module ends, and the build cache is cut to 3 GB (support/fixtures.py: reclaim_disk).
    # The matrix declares what its torch (2.15.0) carries, compute_120 (PTX) included as PyTorch's build matrix says;
    # torch 2.13.0's cu130 wheel from PyPI carries no PTX (its build's torch-check said so): declared as it is.
    arch = "backends.cuda-cu130.host.arch=[sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]"
    return build("cuda-cu130", overrides("cuda-cu130", standin_base, arch), tmp_path_factory.mktemp("cuda"),
                 "--ca-bundle", str(ca_bundle))


def test_cuda_builds_from_pypi_with_the_cuda_runtime(cuda, docker_client):
    out, err = in_image(docker_client, cuda, "import importlib.metadata as m, json, torch; print(json.dumps("
                                             "[m.version('torch'), torch.version.cuda, torch.cuda.get_arch_list()]))")
    dist, cuda_version, arches = json.loads(out or "null") or (None, None, None)
    assert dist == TORCH, err  # PyPI's build (no +cpu label): its torch says e.g. 2.13.0+cu130
    assert cuda_version and int(cuda_version.split(".")[0]) >= 12
    assert "sm_75" in arches and any(a.startswith("sm_12") for a in arches)


def test_cuda_probe_reports_no_cuda_device(cuda, docker_client):
    checks = probe(docker_client, cuda)
    assert checks["versions"]["ok"] is True, checks["versions"]
    device = checks["device"]["message"]
    assert device.startswith("no cuda device visible (torch.accelerator: current_accelerator() = cuda"), device
    assert device.endswith("--gpus=all --ipc=host")


def test_cuda_smoke_exits_1_naming_what_the_host_lacks(cuda, tmp_path, no_leftover_containers):
    proc, doc = smoke(cuda, tmp_path)
    assert proc.returncode == 1
    assert doc["error"].startswith("backend 'cuda-cu130': no NVIDIA GPU (CUDA 13.0) can be reached here: `--gpus=all` needs the Docker "
                                   "runtime 'nvidia'")
