"""ROCm on the amdgpu driver: gfx targets, the host's driver (/sys/module/amdgpu, the KFD topology) and PyTorch's
rocmX.Y indexes. Each fact with its source."""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.core.files import read_host
from envbuild.core.hostfacts import HostDriver, Runner, first_file
from envbuild.matrix.stacks.base import GpuTorch, Stack


def gfx_name(target_version: int) -> str | None:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) -> 'gfx942'; 0 (a CPU node) -> None.
    Source: the amdgpu KFD topology (kfd_topology.c) encodes it so; steppings print in hex (90010 -> gfx90a)."""
    if target_version <= 0:
        return None
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def read_amdgpu(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("amdgpu")
    # Only the DKMS (ROCm) driver has a version file; the kernel's own amdgpu has none: unknown, not old.
    found.version = first_file(root, ["/sys/module/amdgpu/version"], r"^[ \t]*([0-9]{1,9}(?:\.[0-9]{1,9}){1,5})(?![0-9.])", found)
    nodes = sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties"))
    archs = []
    for props in nodes:
        m = re.search(r"^gfx_target_version[ \t]+([0-9]{1,9})$", read_host(props, limit=16384) or "", re.MULTILINE | re.ASCII)
        if m and (name := gfx_name(int(m.group(1)))):
            archs.append(name)
    if archs:
        found.archs = archs
        found.evidence.append("/sys/class/kfd/kfd/topology/nodes/*/properties")
    else:
        found.notes.append("no GPU node with a gfx_target_version under /sys/class/kfd/kfd/topology/nodes")
    return found


def gfx_runs(image_archs: list[str], device: str, ptx: bool = True) -> bool:
    """ROCm code objects are built per gfx target and load only on that target (LLVM AMDGPU docs); feature
    suffixes (':xnack-') are ignored here. (`ptx` is CUDA's: there is no such fallback here.)"""
    return device in {a.split(":")[0] for a in image_archs}


def gpu_name(said: str) -> str | None:
    """`--gpu gfx942` -> 'gfx942'."""
    return said.lower() if re.fullmatch(r"gfx[0-9a-f]{3,4}", said.lower()) else None


# AMD gfx target -> family (ROCm's GPU support tables; LLVM AMDGPU processor table).
GFX_FAMILIES = {"gfx803": "GCN 3 (Polaris/Fiji)", "gfx900": "Vega", "gfx906": "Vega 20", "gfx908": "CDNA (MI100)",
                "gfx90a": "CDNA 2 (MI200)", "gfx942": "CDNA 3 (MI300)", "gfx950": "CDNA 4 (MI350)",
                "gfx1030": "RDNA 2", "gfx1100": "RDNA 3", "gfx1101": "RDNA 3", "gfx1102": "RDNA 3",
                "gfx1200": "RDNA 4", "gfx1201": "RDNA 4"}


def family(arch: str) -> str | None:
    return GFX_FAMILIES.get(arch.split(":")[0])


# Product -> gfx target, for `pick --gpu MI300X` (AMD's product pages).
PRODUCTS = {
    "MI100": "gfx908", "MI210": "gfx90a", "MI250": "gfx90a", "MI250X": "gfx90a", "MI300A": "gfx942",
    "MI300X": "gfx942", "MI325X": "gfx942", "MI350X": "gfx950", "MI355X": "gfx950", "RX6900XT": "gfx1030",
    "W6800": "gfx1030", "RX7900XTX": "gfx1100", "W7900": "gfx1100", "RX9070XT": "gfx1201",
}

STACK = Stack(
    # ROCm's docs (user and kernel-space support matrix) promise the kernel driver works with user space +/- 2
    # releases, and name amdgpu driver releases (e.g. 30.30.x for ROCm 6.3-7.2) that /sys/module/amdgpu/version
    # does not report in the same numbering: no minimum is derived. UNCONFIRMED for ROCm 10.x.
    "rocm", "ROCm", "amdgpu", "amdgpu driver", {}, source="ROCm user and kernel-space support matrix",
    image_version=r"rocm(\d+\.\d+(?:\.\d+)?)", torch_index=(r"rocm\d+\.\d+", "rocm{major}.{minor}"),
    read_host=read_amdgpu, arch_runs=gfx_runs, torch_archs=True, arch_pattern=r"gfx[0-9a-f]+(?::\S*)?",
    gpu_name=gpu_name, family=family, products=PRODUCTS, brands=("AMD", "INSTINCT", "RADEON"),
    # ROCm's torch (PyTorch's /whl/rocmX.Y) carries +rocmX.Y and pytorch-triton-rocm; it shares torch's "cuda" device,
    # so the index tells it from a CUDA build.
    gpu_torch=GpuTorch("ROCm", ("+rocm",), ("pytorch-triton-rocm",), index_mark="rocm"),
)
