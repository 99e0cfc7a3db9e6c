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


# --- each stack's fact tables, row by row, each row with its source ------------------------------------------------
# A wrong fact in a table (a driver floor, the release that first builds for an architecture, a product mapped to the
# wrong architecture) must fail here by name. Rows marked UNCONFIRMED keep the code's value: no vendor page for them
# was found; they still pin it, so that a change is a decision.

RELNOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ (Table 3, Linux x86_64, GA)"
CUDA_DRIVER_FLOORS = [
    # (release, the oldest driver, source)
    ("12.0", "525.60.13", RELNOTES),
    ("12.1", "530.30.02", RELNOTES),
    ("12.2", "535.54.03", RELNOTES),
    ("12.3", "545.23.06", RELNOTES),
    ("12.4", "550.54.14", RELNOTES),
    ("12.5", "555.42.02", RELNOTES),
    ("12.6", "560.28.03", RELNOTES),
    ("12.8", "570.26", RELNOTES),
    ("12.9", "575.51.03", RELNOTES),
    ("13.0", "580.65.06", RELNOTES),
    ("13.1", "590.44.01", RELNOTES),
    # UNCONFIRMED against the page itself (its Table 3 text was not at hand); NVIDIA's GA installer carries this
    # driver: cuda_13.2.0_595.45.04_linux.run, cuda_13.3.0_610.43.02_linux.run.
    ("13.2", "595.45.04", RELNOTES),
    ("13.3", "610.43.02", RELNOTES),
]


@pytest.mark.parametrize("release, driver, source", CUDA_DRIVER_FLOORS, ids=[r[0] for r in CUDA_DRIVER_FLOORS])
def test_cuda_driver_floor_per_release(release, driver, source):
    st = cuda.STACK
    assert base.minimum_driver(st, release) == driver, source
    assert base.minimum_driver(st, release + ".1") == driver  # an update of the release needs the same floor
    # the floor itself runs the release; the driver is the newest release it meets
    assert base.newest_supported(st, driver) == release
    # one step below the floor does not run it (the release before, or none)
    major, minor, *rest = driver.split(".")
    below = f"{major}.{int(minor) - 1}" if int(minor) else f"{int(major) - 1}.99"
    assert base.newest_supported(st, below) != release


def test_cuda_driver_floors_hold_exactly_the_cited_rows():
    assert cuda.STACK.minimum == {r: d for r, d, _ in CUDA_DRIVER_FLOORS}
    assert cuda.STACK.confirmed and cuda.STACK.source == "NVIDIA CUDA Toolkit release notes, Table 3"
    assert (cuda.STACK.title, cuda.STACK.driver, cuda.STACK.driver_title) == ("CUDA", "nvidia", "NVIDIA driver")
    # PyTorch's CUDA wheels carry +cuXYZ (its own index) or pull in NVIDIA's runtime wheels (PyPI's: nvidia-cublas-cu12,
    # and cuda-bindings/cuda-toolkit from CUDA 13); torch reports the architectures it was built for
    assert cuda.STACK.gpu_torch == base.GpuTorch("CUDA", ("+cu",), ("nvidia-", "cuda-")) and cuda.STACK.torch_archs


@pytest.mark.parametrize("image, release", [
    ("nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04", "12.6"), ("docker.io/nvidia/cuda:13.2.0-devel-ubuntu24.04", "13.2"),
    ("cuda:12.8.1-base-ubuntu22.04", "12.8"), ("nvidia/cuda:12.6.3", None), ("nvidia/notcuda:12.6.3-base", None),
])
def test_cuda_release_read_from_nvidias_base_image(image, release):
    # the nvidia/cuda images' tags: VERSION-FLAVOUR-OS (hub.docker.com/r/nvidia/cuda)
    assert base.image_release(cuda.STACK, image, "12.6") == release


COMPAT_GUIDE = "https://docs.nvidia.com/deploy/cuda-compatibility/ (Minor Version Compatibility, table 1)"
CUDA_COMPAT_FLOORS = [
    # (major, the oldest driver that runs any release of it without JIT of newer PTX, source)
    ("11", "450.80.02", COMPAT_GUIDE),
    ("12", "525.60.13", COMPAT_GUIDE),
    ("13", "580.65.06", COMPAT_GUIDE),
]


@pytest.mark.parametrize("major, driver, source", CUDA_COMPAT_FLOORS)
def test_cuda_minor_version_compatibility_floor_per_major(major, driver, source):
    assert base.compat_driver(cuda.STACK, f"{major}.4") == driver, source
    assert base.require_floor(cuda.STACK, f"{major}.4") == f"cuda>={major}.0"


def test_cuda_compat_floors_hold_exactly_the_cited_rows():
    assert cuda.STACK.compat_floor == {m: d for m, d, _ in CUDA_COMPAT_FLOORS}
    assert base.compat_driver(cuda.STACK, "10.2") is None and base.require_floor(cuda.STACK, "10.2") is None
    assert base.compat_driver(cuda.STACK, "") is None


CUDA_ARCH_FIRST = [
    # (architecture, the first CUDA release that builds for it, the release before it, source)
    ("sm_100", "12.8", "12.6", "CUDA 12.8 release notes / Blackwell Compatibility Guide: first with Blackwell"),
    ("sm_101", "12.8", "12.6", "CUDA 12.8 release notes: Thor as sm_101 (renamed sm_110 in 13.0)"),
    ("sm_120", "12.8", "12.6", "CUDA 12.8 release notes / Blackwell Compatibility Guide"),
    ("sm_103", "12.9", "12.8", "https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/ (adds sm_103, sm_121)"),
    ("sm_121", "12.9", "12.8", "https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/ (adds sm_103, sm_121)"),
    ("sm_110", "13.0", "12.9", "PTX ISA 9.0 (CUDA 13.0) adds sm_110, Thor's sm_101 renamed (cuRANDDx/nvCOMPDx notes)"),
]


@pytest.mark.parametrize("arch, first, before, source", CUDA_ARCH_FIRST, ids=[r[0] for r in CUDA_ARCH_FIRST])
def test_cuda_first_release_per_architecture(arch, first, before, source):
    st = cuda.STACK
    assert base.arch_first(st, arch) == first, source
    for spelling in (arch, arch.replace("sm_", "compute_"), arch + "a", arch + "f"):
        assert base.arch_beyond(st, first, spelling) is None
        assert base.arch_beyond(st, first + ".2", spelling) is None
        assert base.arch_beyond(st, before, spelling) == f"CUDA {first} is the first release that builds for it"


def test_cuda_arch_first_holds_exactly_the_cited_rows():
    assert cuda.STACK.arch_first == {a: f for a, f, _, _ in CUDA_ARCH_FIRST}
    assert base.arch_first(cuda.STACK, "sm_90") is None and base.arch_beyond(cuda.STACK, "12.0", "sm_90") is None


CUDA_ARCH_FLOOR = [
    # (release, the oldest architecture it builds for, the newest one it no longer builds for, source)
    ("12.0", "sm_50", "sm_37", "CUDA 12.0 release notes: Kepler (sm_35, sm_37) dropped"),
    ("12.9", "sm_50", "sm_37", "CUDA 12.x builds from Maxwell"),
    ("13.0", "sm_75", "sm_72", "CUDA 13.0 release notes: Maxwell, Pascal and Volta (sm_50 to sm_72) dropped"),
    ("13.3", "sm_75", "sm_70", "CUDA 13.0 release notes"),
]


@pytest.mark.parametrize("release, floor, dropped, source", CUDA_ARCH_FLOOR, ids=[r[0] for r in CUDA_ARCH_FLOOR])
def test_cuda_oldest_architecture_per_release(release, floor, dropped, source):
    st = cuda.STACK
    assert base.arch_floor(st, release) == floor, source
    assert base.arch_beyond(st, release, floor) is None
    assert base.arch_beyond(st, release, dropped) == f"CUDA {release} builds for {floor} and newer only"


def test_cuda_arch_floor_rows_and_a_release_older_than_all():
    assert cuda.STACK.arch_floor == (("12.0", "sm_50"), ("13.0", "sm_75"))
    assert base.arch_floor(cuda.STACK, "11.8") is None and base.arch_floor(cuda.STACK, None) is None
    assert base.arch_beyond(cuda.STACK, "11.8", "sm_35") is None


CC_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/ (Compute Capabilities) and NVIDIA's product pages"
CUDA_PRODUCTS = [
    # (what `--gpu` is given, its architecture, source)
    ("P100", "sm_60", CC_GUIDE), ("P40", "sm_61", CC_GUIDE), ("P4", "sm_61", CC_GUIDE),
    ("GTX1080", "sm_61", CC_GUIDE), ("V100", "sm_70", CC_GUIDE), ("TITANV", "sm_70", CC_GUIDE),
    ("T4", "sm_75", CC_GUIDE), ("RTX2080", "sm_75", CC_GUIDE), ("A100", "sm_80", CC_GUIDE),
    ("A30", "sm_80", CC_GUIDE), ("A10", "sm_86", CC_GUIDE), ("A40", "sm_86", CC_GUIDE),
    ("A10G", "sm_86", CC_GUIDE), ("RTX3090", "sm_86", CC_GUIDE), ("RTXA6000", "sm_86", CC_GUIDE),
    ("L4", "sm_89", CC_GUIDE), ("L40", "sm_89", CC_GUIDE), ("L40S", "sm_89", CC_GUIDE),
    ("RTX4090", "sm_89", CC_GUIDE), ("RTX6000ADA", "sm_89", CC_GUIDE), ("H100", "sm_90", CC_GUIDE),
    ("H200", "sm_90", CC_GUIDE), ("H800", "sm_90", CC_GUIDE), ("H20", "sm_90", CC_GUIDE),
    ("GH200", "sm_90", CC_GUIDE), ("B200", "sm_100", CC_GUIDE), ("GB200", "sm_100", CC_GUIDE),
    ("B300", "sm_103", CC_GUIDE), ("GB300", "sm_103", CC_GUIDE),  # 10.3 (CUDA 12.9 adds sm_103)
    ("RTX5090", "sm_120", CC_GUIDE), ("RTXPRO6000", "sm_120", CC_GUIDE),
    ("DGXSPARK", "sm_121", CC_GUIDE), ("GB10", "sm_121", CC_GUIDE),  # 12.1 (CUDA 12.9 adds sm_121)
]


@pytest.mark.parametrize("product, arch, source", CUDA_PRODUCTS, ids=[r[0] for r in CUDA_PRODUCTS])
def test_cuda_product_to_architecture(product, arch, source):
    assert stacks.gpu_arch(product) == arch, source
    assert stacks.gpu_arch(f"NVIDIA {product.lower()}") == arch  # the brand and case as nvidia-smi may say them


def test_cuda_products_hold_exactly_the_cited_rows():
    assert cuda.PRODUCTS == {p: a for p, a, _ in CUDA_PRODUCTS}
    assert stacks.gpu_arch("Tesla V100-SXM2") is None  # a variant suffix is not guessed
    assert stacks.gpu_arch("Tesla-V100") == "sm_70" and stacks.gpu_arch("GeForce RTX 4090") == "sm_89"


CUDA_FAMILY_ROWS = [
    # (compute capability, family, source): CUDA C++ Programming Guide, "Compute Capabilities"
    ((5, 0), "Maxwell"), ((5, 2), "Maxwell"), ((5, 3), "Maxwell"), ((6, 0), "Pascal"), ((6, 1), "Pascal"),
    ((6, 2), "Pascal"), ((7, 0), "Volta"), ((7, 2), "Volta"), ((7, 5), "Turing"), ((8, 0), "Ampere"),
    ((8, 6), "Ampere"), ((8, 7), "Ampere"), ((8, 9), "Ada"), ((9, 0), "Hopper"), ((10, 0), "Blackwell"),
    ((10, 3), "Blackwell"), ((11, 0), "Blackwell (Thor)"), ((12, 0), "Blackwell"), ((12, 1), "Blackwell"),
]


@pytest.mark.parametrize("cc, name", CUDA_FAMILY_ROWS, ids=[f"sm_{a}{b}" for (a, b), _ in CUDA_FAMILY_ROWS])
def test_cuda_family_per_compute_capability(cc, name):
    arch = f"sm_{cc[0]}{cc[1]}"
    assert cuda.capability(arch) == cc and cuda.family(arch) == name, CC_GUIDE
    assert stacks.arch_title(arch) == f"{arch} ({name})"


def test_cuda_families_hold_exactly_the_cited_rows():
    assert cuda.CUDA_FAMILIES == dict(CUDA_FAMILY_ROWS)
    assert cuda.family("sm_35") is None and cuda.family("gfx942") is None


PTX_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/ (Binary Compatibility, PTX Compatibility)"
CUDA_RUNS = [
    # (the image's architectures, the device, PTX JIT allowed, runs?, the rule)
    (["compute_90"], "sm_90", True, True, "PTX for the GPU's own capability runs"),
    (["compute_80"], "sm_86", True, True, "PTX for a lower capability is compiled for the GPU"),
    (["compute_90"], "sm_120", True, True, "PTX runs across majors"),
    (["compute_90"], "sm_89", True, False, "PTX for a higher capability does not"),
    (["compute_86"], "sm_80", True, False, "nor for a higher minor of the same major"),
    (["compute_90"], "sm_90", False, False, "without JIT (minor version compatibility) PTX does not count"),
    (["sm_80"], "sm_80", True, True, "a cubin runs on its own capability"),
    (["sm_80"], "sm_86", True, True, "and on a higher minor of the same major"),
    (["sm_80"], "sm_86", False, True, "without JIT too"),
    (["sm_86"], "sm_80", True, False, "not on a lower minor"),
    (["sm_80"], "sm_90", True, False, "not on another major"),
    (["sm_100"], "sm_90", True, False, "nor on a lower major"),
    (["sm_90a"], "sm_90", True, True, "an arch-specific cubin runs on exactly its capability"),
    (["sm_90a"], "sm_100", True, False, "and nowhere else"),
    (["sm_100a"], "sm_103", True, False, "not even on a later minor of its major"),
    (["sm_100f"], "sm_100", True, True, "a family-specific one on its own capability"),
    # UNCONFIRMED: NVIDIA's family-specific targets (CUDA 12.9) are described as running on later minors of the
    # family too (sm_100f on a 10.3); the code treats them as exact, which refuses such a build, never wrongly
    # accepts one. Kept as the code has it.
    (["sm_100f"], "sm_103", True, False, "a family-specific one, as exact (UNCONFIRMED, see above)"),
    (["sm_80", "sm_90"], "sm_90", True, True, "any one of the image's architectures will do"),
    (["gfx942", "sm_80"], "sm_86", True, True, "a name that is not CUDA's is passed over"),
    ([], "sm_90", True, False, "an empty list runs nowhere"),
    (["sm_90"], "gfx942", True, True, "an unknown device is never refused"),
]


@pytest.mark.parametrize("archs, device, ptx, runs, rule", CUDA_RUNS, ids=[r[4] for r in CUDA_RUNS])
def test_cuda_which_build_runs_on_which_device(archs, device, ptx, runs, rule):
    assert cuda.cuda_arch_runs(archs, device, ptx=ptx) is runs, f"{rule} ({PTX_GUIDE})"
    assert cuda.STACK.arch_runs(archs, device, ptx) is runs


def test_cuda_architecture_spellings():
    assert [cuda.capability(a) for a in ("sm_86", "compute_90", "sm_90a", "sm_100f", "sm_121", "sm_9", "gfx90a")] == [
        (8, 6), (9, 0), (9, 0), (10, 0), (12, 1), None, None]
    assert [cuda.canonical(a) for a in ("compute_100", "sm_100a", "sm_90f", "sm_86")] == ["sm_100", "sm_100", "sm_90", "sm_86"]
    assert [cuda.gpu_name(s) for s in ("8.0", "12.1", "SM_90", "compute_100", "9", "sm_9", "8.0.1", "A100")] == [
        "sm_80", "sm_121", "sm_90", "sm_100", None, None, None, None]
    assert cuda.floor_arch("sm_50") == "compute_50"
    assert [stacks.arch_stack(a) for a in ("sm_90", "compute_90", "sm_100f", "sm90")] == ["cuda", "cuda", "cuda", None]


NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
NVRM_OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n"


def test_cuda_reads_the_driver_version_and_compute_capabilities():
    assert cuda.nvidia_version(NVRM) == "535.104.05" and cuda.nvidia_version(NVRM_OPEN) == "570.86.15"
    assert cuda.nvidia_version("580.65.06\n") == "580.65.06" and cuda.nvidia_version("GCC version: 12.2.0\n") is None
    assert cuda.nvidia_version("535.104.05.1\n") is None and cuda.nvidia_version("") is None
    assert cuda.nvidia_version("no version here\n580.65.06\n") == "580.65.06"  # a bare version on any line
    assert cuda.compute_caps("9.0\n 8.6 \n[N/A]\n10.0\n1.2.3\n") == ["sm_90", "sm_86", "sm_100"]


def test_cuda_reads_the_host_from_proc_then_sys_and_nvidia_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.65.06\n")
    asked = []
    found = cuda.read_nvidia(root, None, lambda argv: asked.append(argv[1:]) or "12.0\n")
    assert (found.driver, found.version, found.archs) == ("nvidia", "580.65.06", ["sm_120"])
    assert asked == [["--query-gpu=compute_cap", "--format=csv,noheader"]]
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(NVRM)
    found = cuda.read_nvidia(root, None, lambda argv: "")
    assert found.version == "535.104.05" and found.archs is None and found.evidence[0] == "/proc/driver/nvidia/version"


# ROCm: https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html (AMD's GPU architecture table) and the
# LLVM AMDGPU processor table (https://llvm.org/docs/AMDGPUUsage.html#processors).
ROCM_SPECS = "https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html"
ROCM_PRODUCTS = [
    ("MI100", "gfx908"), ("MI210", "gfx90a"), ("MI250", "gfx90a"), ("MI250X", "gfx90a"), ("MI300A", "gfx942"),
    ("MI300X", "gfx942"), ("MI325X", "gfx942"), ("MI350X", "gfx950"), ("MI355X", "gfx950"),
    ("RX6900XT", "gfx1030"), ("W6800", "gfx1030"), ("RX7900XTX", "gfx1100"), ("W7900", "gfx1100"),
    ("RX9070XT", "gfx1201"),
]


@pytest.mark.parametrize("product, arch", ROCM_PRODUCTS, ids=[r[0] for r in ROCM_PRODUCTS])
def test_rocm_product_to_gfx_target(product, arch):
    assert stacks.gpu_arch(product) == arch and stacks.gpu_arch(f"AMD Radeon {product}") == arch, ROCM_SPECS


def test_rocm_tables_hold_exactly_the_cited_rows():
    assert rocm.PRODUCTS == dict(ROCM_PRODUCTS)
    assert rocm.GFX_FAMILIES == {
        "gfx803": "GCN 3 (Polaris/Fiji)", "gfx900": "Vega", "gfx906": "Vega 20", "gfx908": "CDNA (MI100)",
        "gfx90a": "CDNA 2 (MI200)", "gfx942": "CDNA 3 (MI300)", "gfx950": "CDNA 4 (MI350)", "gfx1030": "RDNA 2",
        "gfx1100": "RDNA 3", "gfx1101": "RDNA 3", "gfx1102": "RDNA 3", "gfx1200": "RDNA 4", "gfx1201": "RDNA 4"}
    assert rocm.family("gfx90a:xnack+") == "CDNA 2 (MI200)" and rocm.family("gfx1150") is None


# KFD's gfx_target_version = major*10000 + minor*100 + stepping (kfd_topology.c), minor and stepping in hex.
GFX_TARGETS = [(90402, "gfx942"), (90010, "gfx90a"), (90008, "gfx908"), (110000, "gfx1100"), (100300, "gfx1030"),
               (120001, "gfx1201"), (90500, "gfx950"), (0, None), (-1, None)]


@pytest.mark.parametrize("version, name", GFX_TARGETS)
def test_rocm_kfd_target_version_to_gfx_name(version, name):
    assert rocm.gfx_name(version) == name


def test_rocm_gpu_names():
    assert [rocm.gpu_name(s) for s in ("gfx942", "GFX90A", "gfx1201", "gfx94", "gfx12011", "sm_90")] == [
        "gfx942", "gfx90a", "gfx1201", None, None, None]


# Ascend: Huawei's PCI device ids (vendor 0x19e5); d803 for the A3 generation is UNCONFIRMED (the code's value).
ASCEND_ROWS = [("0xd802", "910b"), ("0xd500", "310p"), ("0xd803", "a3")]


def test_cann_pci_ids_and_the_host_reader(tmp_path):
    assert cann.ASCEND_SOCS == dict(ASCEND_ROWS)
    for i, (dev, soc) in enumerate([*ASCEND_ROWS, ("0xd801", None)]):
        d = tmp_path / f"sys/bus/pci/devices/0000:0{i}:00.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x19e5\n")
        (d / "device").write_text(dev.upper().replace("X", "x") + "\n")
    other = tmp_path / "sys/bus/pci/devices/0000:09:00.0"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x10de\n")
    (other / "device").write_text("0xd802\n")
    (tmp_path / "usr/local/Ascend/driver").mkdir(parents=True)
    (tmp_path / "usr/local/Ascend/driver/version.info").write_text("Version=24.1.rc2\n")
    found = cann.read_ascend(tmp_path, None, lambda argv: None)
    assert (found.version, found.archs) == ("24.1.rc2", ["910b", "310p", "a3"])
