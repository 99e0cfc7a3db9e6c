"""npu on a stand-in base: torch-npu from PyPI, without the CANN toolkit (tests/support/standin.py says what a stand-in build proves)."""

from __future__ import annotations

import json

import pytest
from support.constants import TORCH
from support.standin import NPU_PLUGIN, VERSIONS, Standin, build, in_image, overrides, probe, smoke

pytestmark = pytest.mark.docker


# --- npu: torch-npu from PyPI; it loads the CANN toolkit, which only the vendor's base carries ----------------


@pytest.fixture(scope="module")
def npu(standin_base, wheelhouse, ca_bundle, tmp_path_factory) -> Standin:
    return build("npu", overrides("npu", standin_base, f"backends.npu.plugin.version={NPU_PLUGIN}"),
                 tmp_path_factory.mktemp("npu"), "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle))


def test_npu_builds_with_the_real_plugin_and_keeps_its_torch(npu, docker_client):
    out, _ = in_image(docker_client, npu, VERSIONS.replace("{plugin}", "torch-npu"))
    assert json.loads(out) | {"transformers": None} == {"torch": f"{TORCH}+cpu", "torch-npu": NPU_PLUGIN, "transformers": None}


def test_npu_probe_names_the_missing_toolkit_and_sees_no_device(npu, docker_client):
    checks = probe(docker_client, npu)
    # torch autoloads torch_npu, which cannot load without CANN: said as such, not as a traceback
    assert checks["import_torch"]["message"].startswith("torch's autoload of the device plugin torch_npu failed")
    plugin = checks["import_plugin"]["message"]
    assert "torch_npu cannot load lib" in plugin and "neither in this image nor on its library path" in plugin
    assert "the CANN toolkit" in plugin  # the matrix's plugin.needs
    assert checks["device"]["message"].startswith("no npu device visible (its plugin torch_npu did not load")
    assert checks["versions"]["ok"] is True, checks["versions"]


def test_npu_smoke_exits_1_with_no_device_and_leaves_no_container(npu, tmp_path, no_leftover_containers):
    proc, doc = smoke(npu, tmp_path)
    assert proc.returncode == 1
    assert doc["error"].startswith("backend 'npu': no Huawei Ascend NPU can be reached here: `docker run --device` needs /dev/davinci0")
