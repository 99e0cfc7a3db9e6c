"""CUDA on the NVIDIA driver: driver floors, minor version compatibility, compute capabilities, the host's driver
(/proc, /sys, nvidia-smi) and PyTorch's cuXYZ indexes. Each fact with its source."""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.core.hostfacts import HostDriver, Runner, first_file, tool
from envbuild.matrix.stacks.base import GpuTorch, Stack

# --- the host's driver ---------------------------------------------------------------------------------------------

_NVIDIA_VERSION = re.compile(r"(?:Kernel Module(?: for \S+)?[ \t]+|^)([0-9]{1,5}\.[0-9]{1,5}(?:\.[0-9]{1,5})?)(?![0-9.])",
                             re.MULTILINE | re.ASCII)
_COMPUTE_CAP = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}", re.ASCII)


def nvidia_version(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's NVRM line ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
    535.104.05  Sat Aug 19 ...", open and proprietary modules alike) or /sys/module/nvidia/version's bare version."""
    m = _NVIDIA_VERSION.search(text)
    return m.group(1) if m else None


def compute_caps(text: str) -> list[str]:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`: one "9.0" a line -> ["sm_90", ...]."""
    return ["sm_" + c.replace(".", "") for c in (ln.strip() for ln in text.splitlines()) if _COMPUTE_CAP.fullmatch(c)]


def read_nvidia(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("nvidia")
    # /proc's line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." (open and
    # proprietary modules alike); /sys/module/nvidia/version holds the bare version.
    found.version = first_file(root, ["/proc/driver/nvidia/version", "/sys/module/nvidia/version"], _NVIDIA_VERSION, found)
    # No file says the compute capability; nvidia-smi does (compute_cap, driver 510 and later).
    out = tool("nvidia-smi", ["--query-gpu=compute_cap", "--format=csv,noheader"], path_env, runner, found, root)
    caps = compute_caps(out or "")
    if caps:
        found.archs = caps
    return found


# --- architectures -------------------------------------------------------------------------------------------------


def capability(arch: str) -> tuple[int, int] | None:
    """'sm_86', 'compute_90', 'sm_90a' -> (8, 6), (9, 0), (9, 0); None for anything else."""
    m = re.fullmatch(r"(?:sm|compute)_([0-9]+?)([0-9])[af]?", arch)
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_arch_runs(image_archs: list[str], device: str, ptx: bool = True) -> bool:
    """Can a torch built for `image_archs` ('sm_86', 'compute_90') run on a device of compute capability `device`
    ('sm_89')? Source: CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility": a cubin for
    X.y runs on X.z with z >= y; PTX for X.y is compiled by the driver for any capability >= X.y. Arch-specific
    targets ('sm_90a') run only on that exact capability. Without `ptx` (a driver older than the build's CUDA, under
    minor version compatibility, cannot JIT the build's PTX) only the compiled kernels count."""
    dev = capability(device)
    if dev is None:
        return True  # unknown: never a refusal
    for arch in image_archs:
        got = capability(arch)
        if got is None:
            continue
        if arch.endswith(("a", "f")):
            if got == dev:
                return True
        elif arch.startswith("sm_") and got[0] == dev[0] and got[1] <= dev[1]:
            return True
        elif ptx and arch.startswith("compute_") and got <= dev:
            return True
    return False


def canonical(arch: str) -> str:
    """'compute_100', 'sm_100a' -> 'sm_100': the arch_first table's key."""
    return re.sub(r"^(?:sm|compute)_(\d+)[af]?$", r"sm_\1", arch)


def floor_arch(arch: str) -> str:
    """A release's floor taken as what an image without its own list carries: PTX for it ('sm_75' -> 'compute_75'),
    which the driver compiles for any newer device."""
    return arch.replace("sm_", "compute_")


def gpu_name(said: str) -> str | None:
    """`--gpu 8.0`, `sm_80`, `compute_80` -> 'sm_80'."""
    if m := re.fullmatch(r"([0-9]{1,2})\.([0-9])", said):
        return f"sm_{int(m.group(1))}{m.group(2)}"
    if m := re.fullmatch(r"(?:sm|compute)_([0-9]{2,3})", said.lower()):
        return f"sm_{m.group(1)}"
    return None


# NVIDIA compute capability (major, minor) -> family name (CUDA C++ Programming Guide, "Compute Capabilities").
CUDA_FAMILIES = {(5, 0): "Maxwell", (5, 2): "Maxwell", (5, 3): "Maxwell", (6, 0): "Pascal", (6, 1): "Pascal",
                 (6, 2): "Pascal", (7, 0): "Volta", (7, 2): "Volta", (7, 5): "Turing", (8, 0): "Ampere",
                 (8, 6): "Ampere", (8, 7): "Ampere", (8, 9): "Ada", (9, 0): "Hopper", (10, 0): "Blackwell",
                 (10, 3): "Blackwell", (11, 0): "Blackwell (Thor)", (12, 0): "Blackwell", (12, 1): "Blackwell"}


def family(arch: str) -> str | None:
    cc = capability(arch)
    return CUDA_FAMILIES.get(cc) if cc else None


# Product -> architecture, for `pick --gpu A100` (NVIDIA's product pages; a product with several variants of one
# name maps to its data-center part). Any other name is refused with the list: give the architecture instead.
PRODUCTS = {
    "P100": "sm_60", "P40": "sm_61", "P4": "sm_61", "GTX1080": "sm_61", "V100": "sm_70", "TITANV": "sm_70",
    "T4": "sm_75", "RTX2080": "sm_75", "A100": "sm_80", "A30": "sm_80", "A10": "sm_86", "A40": "sm_86",
    "A10G": "sm_86", "RTX3090": "sm_86", "RTXA6000": "sm_86", "L4": "sm_89", "L40": "sm_89", "L40S": "sm_89",
    "RTX4090": "sm_89", "RTX6000ADA": "sm_89", "H100": "sm_90", "H200": "sm_90", "H800": "sm_90", "H20": "sm_90",
    "GH200": "sm_90", "B200": "sm_100", "GB200": "sm_100", "B300": "sm_103", "GB300": "sm_103",
    "RTX5090": "sm_120", "RTXPRO6000": "sm_120", "DGXSPARK": "sm_121", "GB10": "sm_121",
}


# --- the stack -----------------------------------------------------------------------------------------------------

STACK = Stack(
    "cuda", "CUDA", "nvidia", "NVIDIA driver",
    # Source: NVIDIA CUDA Toolkit release notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions"
    # (docs.nvidia.com/cuda/cuda-toolkit-release-notes), Linux x86_64 column, GA rows; read from copies of that
    # table in public repositories (2026), which agree with one another. The nvidia/cuda base images refuse an
    # older driver at start ("unsatisfied condition: cuda>=X.Y", their NVIDIA_REQUIRE_CUDA).
    {
        "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
        "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
        "13.1": "590.44.01", "13.2": "595.45.04", "13.3": "610.43.02",
    }, confirmed=True, source="NVIDIA CUDA Toolkit release notes, Table 3",
    image_version=r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)-", torch_index=(r"cu\d+", "cu{major}{minor}"),
    # CUDA 13.0 release notes: offline compilation and library support for Maxwell, Pascal and Volta
    # (sm_50 to sm_72) removed; Turing (sm_75) is the oldest. CUDA 12.x builds from sm_50.
    arch_floor=(("12.0", "sm_50"), ("13.0", "sm_75")),
    # CUDA Compatibility guide, "Minor Version Compatibility", table 1: any 11.x application (11.1 on) runs on a
    # driver >= 450.80.02, any 12.x on >= 525.60.13 and any 13.x on >= 580.65.06 (uv's --torch-backend auto uses the
    # same numbers), without JIT of PTX newer than the driver: only the kernels compiled for the GPU (SASS) run.
    compat_floor={"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"},
    minor_gives_up="no JIT of PTX newer than the driver: only kernels compiled for the GPU itself run, and "
                   "features of the newer CUDA that need a newer driver fail",
    # CUDA 12.8 release notes: first with Blackwell (sm_100, sm_120); 12.9: sm_103, sm_121; 13.0 renamed
    # Thor's sm_101 to sm_110.
    arch_first={"sm_100": "12.8", "sm_120": "12.8", "sm_101": "12.8", "sm_103": "12.9", "sm_121": "12.9",
                "sm_110": "13.0"},
    # The NVIDIA Container Toolkit reads NVIDIA_REQUIRE_CUDA: the major's first release lets a driver that runs the
    # build under minor version compatibility start it.
    require="cuda>={major}.0",
    read_host=read_nvidia, arch_runs=cuda_arch_runs, torch_archs=True, arch_key=capability, canonical=canonical,
    floor_arch=floor_arch,
    arch_pattern=r"(?:sm|compute)_\d+[af]?", gpu_name=gpu_name, family=family, products=PRODUCTS,
    brands=("NVIDIA", "TESLA", "GEFORCE"),
    # A CUDA build of torch carries a +cuXYZ label (PyTorch's index) or pulls in the CUDA runtime wheels (PyPI's).
    gpu_torch=GpuTorch("CUDA", ("+cu",), ("nvidia-", "cuda-")),
)
