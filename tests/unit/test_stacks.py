"""envbuild.matrix.stacks: one module per driver stack, and a registry the rest of envbuild asks. Each stack's
floors as its vendor states them (the numbers below are copied from the sources its module cites), and a stack
added in this file alone (a module, one registration) that the schema accepts and compat, pick and the lock use."""

from __future__ import annotations

import copy
import json
import re
import types

import pytest
from support.constants import MINIMAL
from support.fakes import REPORT

from envbuild.image import lockstate as locks
from envbuild.core.errors import MatrixError
from envbuild.core.hostfacts import HostDriver, module_reader
from envbuild.image import lockfile
from envbuild.matrix import compat, loads, stacks
from envbuild.matrix.stacks import base, cann, cuda, gaudi, neuron, rocm

# --- the five stacks: each module's facts --------------------------------------------------------------------------


def test_the_registry_lists_one_module_per_stack_in_order():
    assert list(stacks.STACKS)[:5] == ["cuda", "rocm", "cann", "gaudi", "neuron"]  # a stack added later comes after
    for module in (cuda, rocm, cann, gaudi, neuron):
        assert stacks.STACKS[module.STACK.name] is module.STACK and module.STACK.source and module.STACK.read_host


def test_cuda_floors_and_minor_version_compatibility():
    st = cuda.STACK
    assert st.confirmed and st.driver == "nvidia"
    # NVIDIA CUDA Toolkit release notes, Table 3
    assert base.minimum_driver(st, "12.0.1") == "525.60.13" and base.minimum_driver(st, "12.6") == "560.28.03"
    assert base.minimum_driver(st, "13.0") == "580.65.06" and base.minimum_driver(st, "13.2.1") == "595.45.04"
    assert base.minimum_driver(st, "12.7") is None  # no such release
    # CUDA Compatibility guide, minor version compatibility: one floor per major
    assert [base.compat_driver(st, v) for v in ("11.8", "12.6", "13.2")] == ["450.80.02", "525.60.13", "580.65.06"]
    assert base.require_floor(st, "12.6") == "cuda>=12.0" and base.require_floor(st, "13.2") == "cuda>=13.0"
    assert base.newest_supported(st, "570.86.10") == "12.8" and base.newest_supported(st, "520.0") is None
    # CUDA 13 drops Maxwell to Volta; 12.8 is the first with Blackwell
    assert base.arch_floor(st, "12.6") == "sm_50" and base.arch_floor(st, "13.0") == "sm_75"
    assert base.arch_beyond(st, "13.2", "sm_70") == "CUDA 13.2 builds for sm_75 and newer only"
    assert base.arch_beyond(st, "12.6", "sm_120") == "CUDA 12.8 is the first release that builds for it"
    assert base.arch_beyond(st, "12.8", "compute_120") is None
    assert st.floor_arch("sm_75") == "compute_75"  # an image without a list: PTX for the floor
    assert base.torch_index(st, "12.6", "https://download.pytorch.org/whl/cu132") == "https://download.pytorch.org/whl/cu126"
    assert st.gpu_torch and st.gpu_torch.labels == ("+cu",)


def test_cuda_architectures():
    assert cuda.cuda_arch_runs(["sm_86"], "sm_89") and not cuda.cuda_arch_runs(["sm_86"], "sm_80")
    assert cuda.cuda_arch_runs(["compute_90"], "sm_100") and not cuda.cuda_arch_runs(["compute_90"], "sm_100", ptx=False)
    assert cuda.cuda_arch_runs(["sm_90a"], "sm_90") and not cuda.cuda_arch_runs(["sm_90a"], "sm_100")
    assert stacks.gpu_arch("8.0") == "sm_80" and stacks.gpu_arch("NVIDIA GeForce RTX 4090") == "sm_89"
    assert stacks.arch_title("sm_70") == "sm_70 (Volta)" and stacks.arch_stack("sm_90a") == "cuda"


def test_rocm_has_no_driver_minimum_and_matches_gfx_exactly():
    st = rocm.STACK
    assert st.minimum == {} and not st.confirmed and st.driver == "amdgpu"
    assert base.minimum_driver(st, "7.0") is None and base.compat_driver(st, "7.0") is None
    assert base.torch_index(st, "7.1", "https://download.pytorch.org/whl/rocm6.4/") == "https://download.pytorch.org/whl/rocm7.1/"
    assert base.image_release(st, "rocm/pytorch:rocm7.0_ubuntu24.04_py3.12", "7.0") == "7.0"
    assert rocm.gfx_runs(["gfx942:xnack-"], "gfx942") and not rocm.gfx_runs(["gfx90a"], "gfx942")
    assert stacks.gpu_arch("AMD Instinct MI300X") == "gfx942" and stacks.arch_stack("gfx942") == "rocm"
    assert stacks.gpu_torch("cuda", "https://download.pytorch.org/whl/rocm7.1") is st.gpu_torch


def test_cann_gaudi_neuron_floors_are_unconfirmed():
    assert cann.STACK.minimum == {} and base.image_release(cann.STACK, "quay.io/ascend/cann:9.2.0-910b", "9.2.0") == "9.2.0"
    assert cann.soc_runs(["910B"], "910b") and not cann.soc_runs(["910b"], "310p")
    # docs.habana.ai support matrix; the Neuron runtime and driver compatibility reference: warnings only
    assert base.minimum_driver(gaudi.STACK, "1.24.1") == "1.24.0" and not gaudi.STACK.confirmed
    assert base.minimum_driver(neuron.STACK, "2.33") == "2.31" and not neuron.STACK.confirmed
    for st in (cann.STACK, gaudi.STACK, neuron.STACK):
        assert st.gpu_torch is None and not st.torch_archs and not st.require


# --- a stack added by a module and one registration line ------------------------------------------------------------

FAKE = types.ModuleType("fakeaccel")  # what envbuild/matrix/stacks/fakeaccel.py would hold
FAKE.STACK = base.Stack(
    "fakeaccel", "FakeAccel", "fakedrv", "FakeAccel driver", {"3.1": "310.5"}, confirmed=True,
    source="a test's own table", read_host=module_reader("fakedrv"),
    arch_runs=lambda archs, device, ptx=True: device in archs, arch_pattern=r"fk\d+",
    gpu_name=lambda said: said.lower() if re.fullmatch(r"fk\d+", said.lower()) else None,
    family=lambda arch: {"fk900": "Nine"}.get(arch), products={"FAKE9000": "fk900"}, brands=("FAKECORP",),
    gpu_torch=base.GpuTorch("FakeAccel", ("+fk",), ("fake-runtime",)),
)

BACKEND = """
  fakeaccel:
    description: FakeAccel card
    device: fakeaccel
    base_image: debian:bookworm-slim
    platforms: [linux/amd64]
    python:
      apt: [python3, python3-venv]
    torch:
      version: "2.15.0"
      index_url: https://download.pytorch.org/whl/cpu
    host:
      stack: fakeaccel
      version: "3.1"
      arch: [fk900]
    ci:
      runs_on: [self-hosted, fakeaccel]
"""


def _matrix_text() -> str:
    text = MINIMAL.read_text(encoding="utf-8")
    return text.replace("backends:\n", "backends:" + BACKEND, 1)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(stacks.STACKS, FAKE.STACK.name, FAKE.STACK)  # what its line in the table does
    return FAKE.STACK


def test_an_unregistered_stack_is_refused_by_the_schema():
    with pytest.raises(MatrixError, match="'fakeaccel' is not one of: cuda, rocm, cann, gaudi, neuron"):
        loads(_matrix_text())


def test_a_registered_stack_is_accepted_and_checked_against_its_floors(registered, tmp_path):
    m = loads(_matrix_text())
    b = m.backend("fakeaccel")
    n = stacks.needs(b)
    assert (n.stack, n.min_driver, n.driver_label) == (registered, "310.5", "fakedrv>=310.5")
    assert compat.check(b, HostDriver("fakedrv", "310.5", ["fk900"])).ok
    below = compat.check(b, HostDriver("fakedrv", "310.4", ["fk900"]))
    assert below.blocking and "upgrade the FakeAccel driver to 310.5 or later" in below.fix
    wrong = compat.check(b, HostDriver("fakedrv", "310.5", ["fk800"]))
    assert wrong.blocking and "this host's devices are fk800" in wrong.detail
    # the host is read by the stack's own reader
    (tmp_path / "sys/module/fakedrv").mkdir(parents=True)
    (tmp_path / "sys/module/fakedrv/version").write_text("311.0\n")
    assert compat.host_driver(b, tmp_path).version == "311.0"


def test_pick_chooses_a_registered_stacks_image_for_its_gpus(registered, invoke, tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(_matrix_text(), encoding="utf-8")
    ok = invoke("pick", "--matrix", path, "--driver", "310.5", "--gpu", "FakeCorp Fake9000", "--json")
    doc = json.loads(ok.stdout)
    assert ok.exit_code == 0 and doc["backend"] == "fakeaccel" and doc["ok"], ok.output
    refused = invoke("pick", "--matrix", path, "--driver", "310.4", "--gpu", "fk900")
    assert refused.exit_code == 1 and "FakeAccel driver" in refused.stderr and "310.5" in refused.stderr


def test_the_lock_checks_torch_against_a_registered_stacks_build(registered):
    b = loads(_matrix_text()).backend("fakeaccel")
    report = copy.deepcopy(REPORT)
    plain = lockfile.from_report("fakeaccel", report, {}, ["torch==2.15.0"], [], {"platform": "linux/amd64"})
    why = locks.torch_problem(b, plain)
    assert why and "fakeaccel (FakeAccel) on linux/amd64" in why and "none of fake-runtime*" in why
    next(i for i in report["install"] if i["metadata"]["name"] == "torch")["metadata"]["version"] = "2.15.0+fk31"
    assert locks.torch_problem(b, lockfile.from_report("fakeaccel", report, {}, ["torch==2.15.0"], [], {})) is None
