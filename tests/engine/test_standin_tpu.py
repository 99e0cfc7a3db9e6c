"""tpu on a stand-in base: torch-tpu and libtpu from PyPI (tests/support/standin.py says what a stand-in build proves)."""

from __future__ import annotations

import json

import pytest
from support.constants import TORCH
from support.standin import VERSIONS, Standin, build, in_image, overrides, probe, smoke

pytestmark = pytest.mark.docker


# --- tpu: torch-tpu 0.2.0 and libtpu from PyPI; its runtime needs no vendor stack to import -------------------


@pytest.fixture(scope="module")
def tpu(standin_base, wheelhouse, ca_bundle, tmp_path_factory) -> Standin:
    return build("tpu", overrides("tpu", standin_base), tmp_path_factory.mktemp("tpu"),
                 "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle))


def test_tpu_builds_with_the_real_plugin_and_keeps_its_torch(tpu, docker_client):
    out, _ = in_image(docker_client, tpu, VERSIONS.replace("{plugin}", "torch-tpu"))
    versions = json.loads(out)
    assert versions["torch"] == f"{TORCH}+cpu"  # the CPU wheel asked for, not replaced by the plugin's resolution
    assert versions["torch-tpu"] == "0.2.0"


def test_tpu_plugin_imports_and_nothing_it_asks_for_is_missing(tpu, docker_client):
    out, err = in_image(docker_client, tpu, "import torch, torch_tpu; print(torch.accelerator.is_available())")
    assert out.strip() == "False", err
    # TorchTPU warns at import when tcmalloc is not preloaded; the matrix answers it (apt + LD_PRELOAD).
    assert "tcmalloc" not in err.lower() and "Warning" not in err, err


def test_tpu_probe_reports_no_tpu_rather_than_an_internal_api_error(tpu, docker_client):
    checks = probe(docker_client, tpu)
    assert checks["import_plugin"]["ok"] is True and checks["import_plugin"]["message"].startswith("torch_tpu 0.2.0")
    assert checks["versions"]["ok"] is True, checks["versions"]  # every locked pin, the plugin's among them
    device = checks["device"]["message"]
    assert device.startswith("no tpu device visible (torch.accelerator: "), device
    assert "internal to TorchTPU" not in device
    assert device.endswith("start the container with the flags that expose it: --net=host --privileged")


def test_tpu_smoke_exits_1_with_no_device_and_leaves_no_container(tpu, tmp_path, no_leftover_containers):
    proc, doc = smoke(tpu, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert doc["error"].startswith("device: no tpu device visible"), doc["error"]
    assert "no tpu device visible" in proc.stdout + proc.stderr
