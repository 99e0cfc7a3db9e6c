"""Backends proven as far as a machine without their device allows: their real Dockerfile and their real vendor
plugin from PyPI, built on a stand-in base (the local Debian base with Python's venv, for python:3.12-slim or the
vendor's base), with the torch version overridden to one whose wheel these machines have.

What is asserted is what can be without the device: the image builds; the plugin is installed under the
constraints and torch is not replaced; the pins check passes; the plugin imports where its runtime needs no
vendor stack, and where it does, the probe names what is missing; the probe and smoke say "no <device> device"
rather than a raw error; smoke leaves no container. Only hardware can prove the rest (README, the backend table).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import testbed
from support.constants import MATRIX, TORCH

pytestmark = pytest.mark.docker

REPOSITORY = "envbuild-test/standin"
NPU_PLUGIN = TORCH  # torch-npu X.Y.Z pairs with torch X.Y.Z (pairing: same-release)


@dataclass
class Standin:
    backend: str
    tag: str
    overrides: list[str]
    output: str


@pytest.fixture(scope="module")
def standin_base(registry, base_image, docker_client) -> str:
    return testbed.standin_base(registry, docker_client, base_image)


def overrides(backend: str, base: str, *extra: str) -> list[str]:
    """The backend's real matrix entry with only its base and torch version changed (and PyPI standing in for
    PyTorch's index, which these machines cannot reach)."""
    sets = [f"backends.{backend}.base_image={base}", f"backends.{backend}.torch.version={TORCH}",
            f"backends.{backend}.torch.index_url=https://pypi.org/simple", f"image.repository={REPOSITORY}", *extra]
    return [arg for s in sets for arg in ("--set", s)]


def build(backend: str, sets: list[str], cwd: Path, *extra: str) -> Standin:
    proc = subprocess.run(["envbuild", "build", "--backend", backend, "--matrix", str(MATRIX), *sets, *extra],
                          capture_output=True, text=True, cwd=cwd, timeout=1800)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return Standin(backend, f"{REPOSITORY}:{backend}", sets, output)


def in_image(docker_client, image: Standin, script: str) -> tuple[str, str]:
    """Run python in the image (no device flags, as on a machine without the device): (stdout, stderr)."""
    _, out, err = testbed.docker_run(docker_client, image.tag, ["python", "-c", script], timeout=300)
    return out.decode(), err.decode()


def probe(docker_client, image: Standin) -> dict:
    status, out, _ = testbed.docker_run(docker_client, image.tag, ["envbuild-probe"], timeout=300,
                                        environment={"HF_HUB_OFFLINE": "1"})
    doc = json.loads(out)
    assert status == 1 and doc["ok"] is False
    return {c["name"]: c for c in doc["checks"]}


def smoke(image: Standin, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(["envbuild", "smoke", "--backend", image.backend, "--matrix", str(MATRIX), *image.overrides,
                           "--json", "smoke.json"], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads((cwd / "smoke.json").read_text())


VERSIONS = ("import importlib.metadata as m, json; "
            "print(json.dumps({d: m.version(d) for d in ('torch', '{plugin}', 'transformers')}))")


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
    assert doc["error"].startswith("backend 'npu': no npu device can be reached here: `docker run --device` needs /dev/davinci0")


# --- cuda: PyPI's torch for Linux is the CUDA build, and brings the CUDA runtime as wheels -------------------


@pytest.fixture(scope="module")
def cuda(standin_base, ca_bundle, docker_client, tmp_path_factory):
    # No wheelhouse: it holds torch's CPU build, which would win over PyPI's CUDA one.
    image = build("cuda", overrides("cuda", standin_base), tmp_path_factory.mktemp("cuda"), "--ca-bundle", str(ca_bundle))
    yield image
    try:  # about 5 GB: not kept past these tests
        docker_client.images.remove(docker_client.images.get(image.tag).id, force=True)
    except Exception:  # already gone: only tidiness
        pass


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
    assert doc["error"].startswith("backend 'cuda': no cuda device can be reached here: `--gpus=all` needs the Docker "
                                   "runtime 'nvidia'")
