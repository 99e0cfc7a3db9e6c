"""What an accelerator stack needs of the host's driver, and which torch index and device architectures go with it:
vendor facts, each with its source. Part of the matrix (validation checks a backend against them; the rendered
image records what it needs); the host stage reads what a host has (envbuild.core.hostfacts) and compares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from envbuild.matrix.model import Backend


@dataclass(frozen=True)
class Stack:
    """An accelerator stack an image carries (CUDA, ROCm, ...) and the kernel driver it runs on."""

    name: str  # the matrix's host.stack
    title: str  # for people: "CUDA"
    driver: str  # the host driver's name: "nvidia"
    driver_title: str  # "NVIDIA driver"
    # stack release ("X.Y") -> minimum driver version; empty where the vendor publishes no such table
    minimum: dict[str, str] = field(default_factory=dict)
    # False where the table could not be checked against the vendor: a mismatch is then a warning only
    confirmed: bool = False
    source: str = ""
    # Where the stack's release shows in a vendor base image's reference (group 1): the base and host.version are
    # one fact, so validate compares them and bump moves them together.
    image_version: str = ""
    # The torch index folder that matches a release (PyTorch's /whl/cu132 for CUDA 13.2): (pattern, "{mm}" form).
    torch_index: tuple[str, str] | None = None
    # (first release, oldest device architecture it builds for): from that release on, older devices have no code
    # in any torch built with it, whatever its own list says.
    arch_floor: tuple[tuple[str, str], ...] = ()
    # Minor version compatibility: stack major -> the oldest driver that runs any release of that major, with a
    # limited feature set (what `minor_gives_up` says). Empty: the stack has none (every release needs its own row).
    compat_floor: dict[str, str] = field(default_factory=dict)
    minor_gives_up: str = ""
    # Device architecture -> the first release that can build for it (a torch built with an older one carries none).
    arch_first: dict[str, str] = field(default_factory=dict)


STACKS = {
    # Source: NVIDIA CUDA Toolkit release notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions"
    # (docs.nvidia.com/cuda/cuda-toolkit-release-notes), Linux x86_64 column, GA rows; read from copies of that
    # table in public repositories (2026), which agree with one another. The nvidia/cuda base images refuse an
    # older driver at start ("unsatisfied condition: cuda>=X.Y", their NVIDIA_REQUIRE_CUDA).
    "cuda": Stack("cuda", "CUDA", "nvidia", "NVIDIA driver", {
        "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
        "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
        "13.1": "590.44.01", "13.2": "595.45.04", "13.3": "610.43.02",
    }, confirmed=True, source="NVIDIA CUDA Toolkit release notes, Table 3",
        image_version=r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)-", torch_index=(r"cu\d+", "cu{major}{minor}"),
        # CUDA 13.0 release notes: offline compilation and library support for Maxwell, Pascal and Volta
        # (sm_50 to sm_72) removed; Turing (sm_75) is the oldest. CUDA 12.x builds from sm_50.
        arch_floor=(("12.0", "sm_50"), ("13.0", "sm_75")),
        # CUDA Compatibility guide, "Minor Version Compatibility", table 1: any 11.x application (11.1 on) runs on a
        # driver >= 450.80.02, any 12.x on >= 525.60.13 and any 13.x on >= 580.65.06 (uv's --torch-backend auto uses the same numbers), without JIT
        # of PTX newer than the driver: only the kernels compiled for the GPU (SASS) run.
        compat_floor={"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"},
        minor_gives_up="no JIT of PTX newer than the driver: only kernels compiled for the GPU itself run, and "
                       "features of the newer CUDA that need a newer driver fail",
        # CUDA 12.8 release notes: first with Blackwell (sm_100, sm_120); 12.9: sm_103, sm_121; 13.0 renamed
        # Thor's sm_101 to sm_110.
        arch_first={"sm_100": "12.8", "sm_120": "12.8", "sm_101": "12.8", "sm_103": "12.9", "sm_121": "12.9",
                    "sm_110": "13.0"}),
    # ROCm's docs (user and kernel-space support matrix) promise the kernel driver works with user space +/- 2
    # releases, and name amdgpu driver releases (e.g. 30.30.x for ROCm 6.3-7.2) that /sys/module/amdgpu/version
    # does not report in the same numbering: no minimum is derived. UNCONFIRMED for ROCm 10.x.
    "rocm": Stack("rocm", "ROCm", "amdgpu", "amdgpu driver", {}, source="ROCm user and kernel-space support matrix",
                  image_version=r"rocm(\d+\.\d+(?:\.\d+)?)", torch_index=(r"rocm\d+\.\d+", "rocm{major}.{minor}")),
    # Huawei publishes CANN <-> Ascend HDK (driver) pairs per release on hiascend.com; the pair for CANN 9.2 was
    # not found. UNCONFIRMED: no minimum.
    "cann": Stack("cann", "CANN", "ascend", "Ascend driver", {}, source="hiascend.com version pairing (not found for 9.x)",
                  image_version=r"cann:(\d+\.\d+\.\d+)"),
    # Gaudi: the driver and the container image come from one software release (docs.habana.ai support matrix
    # lists one build per release). UNCONFIRMED that an older driver is refused: a mismatch only warns.
    "gaudi": Stack("gaudi", "Intel Gaudi software", "habanalabs", "habanalabs driver",
                   {"1.24": "1.24.0"}, source="docs.habana.ai Support Matrix (UNCONFIRMED as a minimum)",
                   image_version=r"gaudi-docker/(\d+\.\d+\.\d+)/"),
    # Neuron: SDK 2.33.0 was tested with Neuron Driver 2.31 (aws-neuronx-dkms), per the Neuron Runtime and Driver
    # compatibility reference (awsdocs-neuron, 2026-10-08). UNCONFIRMED as a minimum: a mismatch only warns.
    "neuron": Stack("neuron", "Neuron SDK", "neuron", "Neuron driver", {"2.33": "2.31"},
                    source="Neuron Runtime and Driver compatibility reference (tested, UNCONFIRMED as a minimum)",
                    image_version=r"-sdk(\d+\.\d+)(?:\.\d+)?-"),
}


def release(version: str) -> str:
    """'13.2.1' -> '13.2': the table's key."""
    return ".".join(version.split(".")[:2])


def image_release(stack: Stack, image: str | None, like: str) -> str | None:
    """The stack's release a base image carries, to the precision of `like` (host.version): None when its reference
    does not say (a mirror, a local stand-in)."""
    m = re.search(stack.image_version, image or "") if stack.image_version else None
    if not m:
        return None
    parts = m.group(1).split(".")
    return ".".join(parts[:len(like.split("."))]) if len(parts) >= len(like.split(".")) else m.group(1)


def torch_index(stack: Stack, version: str, current: str | None) -> str | None:
    """The torch index URL for this release, derived from the current one (its last folder replaced, e.g. cu132 ->
    cu133); None where the current URL names no release of the stack (PyPI, the CPU index)."""
    if not stack.torch_index or not current:
        return None
    pattern, form = stack.torch_index
    head, _, last = current.rstrip("/").rpartition("/")
    if not re.fullmatch(pattern, last):
        return None
    major, minor = (version.split(".") + ["0"])[:2]
    return f"{head}/{form.format(major=major, minor=minor)}" + ("/" if current.endswith("/") else "")


def arch_floor(stack: Stack, version: str | None) -> str | None:
    """The oldest device architecture any torch built with this release can run on (None: not known)."""
    have = parse_version(release(version or ""))
    found = None
    for first, arch in stack.arch_floor:
        if have is not None and have >= parse_version(first):
            found = arch
    return found


def minimum_driver(stack: Stack, version: str) -> str | None:
    return stack.minimum.get(release(version))


def compat_driver(stack: Stack, version: str) -> str | None:
    """The oldest driver that runs this release under minor version compatibility (None: the stack has none)."""
    return stack.compat_floor.get(version.split(".")[0]) if version else None


def require_floor(stack: Stack, version: str) -> str | None:
    """What the image declares to the NVIDIA Container Toolkit (NVIDIA_REQUIRE_CUDA): its major's first release,
    'cuda>=12.0' for any 12.x build, so that a driver which runs the build under minor version compatibility is not
    refused at start; None where the stack has no such floor."""
    if stack.name != "cuda" or not compat_driver(stack, version):
        return None
    return f"cuda>={version.split('.')[0]}.0"


def arch_beyond(stack: Stack, version: str, arch: str) -> str | None:
    """Why a torch built with this release cannot carry `arch` (None: it can, as far as the table knows): older than
    the release's floor (CUDA 13: sm_75), or newer than the release (sm_120 needs CUDA 12.8)."""
    have = parse_version(release(version))
    cc, floor = _cc(arch), arch_floor(stack, version)
    if cc and floor and (fc := _cc(floor)) and cc < fc:
        return f"{stack.title} {release(version)} builds for {floor} and newer only"
    first = arch_first(stack, arch)
    if first and have is not None and have < parse_version(first):
        return f"{stack.title} {first} is the first release that builds for it"
    return None


def arch_first(stack: Stack, arch: str) -> str | None:
    """The first release of the stack that builds for this architecture (None: any release this table knows)."""
    base = re.sub(r"^(?:sm|compute)_(\d+)[af]?$", r"sm_\1", arch)
    return stack.arch_first.get(base)


def newest_supported(stack: Stack, driver: str) -> str | None:
    """The newest release of the stack whose minimum driver this driver meets (None: older than every row)."""
    have = parse_version(driver)
    if have is None:
        return None
    fits = [r for r, need in stack.minimum.items() if (v := parse_version(need)) is not None and have >= v]
    return max(fits, key=parse_version, default=None)


def parse_version(text: str | None) -> Version | None:
    """A driver version as the kernel prints it ('535.104.05', '1.24.1-fb3a2b4', '24.1.rc2'); None if unreadable."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)(?:[.-]?(rc|a|b)\.?(\d+))?", text.lower())
    if not m:
        return None
    try:
        return Version(m.group(1) + (f"{m.group(2)}{m.group(3)}" if m.group(2) else ""))
    except InvalidVersion:
        return None


# --------------------------------------------------------------------------------------------------
# Architectures.


def cuda_arch_runs(image_archs: list[str], device: str, ptx: bool = True) -> bool:
    """Can a torch built for `image_archs` ('sm_86', 'compute_90') run on a device of compute capability `device`
    ('sm_89')? Source: CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility": a cubin for
    X.y runs on X.z with z >= y; PTX for X.y is compiled by the driver for any capability >= X.y. Arch-specific
    targets ('sm_90a') run only on that exact capability. Without `ptx` (a driver older than the build's CUDA, under
    minor version compatibility, cannot JIT the build's PTX) only the compiled kernels count."""
    dev = _cc(device)
    if dev is None:
        return True  # unknown: never a refusal
    for arch in image_archs:
        got = _cc(arch)
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


def _cc(arch: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(?:sm|compute)_(\d+?)(\d)[af]?", arch)
    return (int(m.group(1)), int(m.group(2))) if m else None


def gfx_runs(image_archs: list[str], device: str) -> bool:
    """ROCm code objects are built per gfx target and load only on that target (LLVM AMDGPU docs); feature
    suffixes (':xnack-') are ignored here."""
    return device in {a.split(":")[0] for a in image_archs}


def soc_runs(image_socs: list[str], device: str) -> bool:
    """Ascend: the vendor ships one CANN image per SoC family (910b for A2, a3, 310p); an image runs on its own."""
    return device.lower() in {s.lower() for s in image_socs}


TORCH_ARCHS = ("cuda", "rocm")  # stacks whose torch says which architectures it was built for (checked at build)

ARCH_RULES: dict[str, Callable[[list[str], str], bool]] = {"cuda": cuda_arch_runs, "rocm": gfx_runs, "cann": soc_runs}


# --------------------------------------------------------------------------------------------------
# What one backend's image needs of the host (its labels, the host's preflight).

ARCH_FILE = "/opt/envbuild/torch-arch.txt"  # what the build measured: torch's compiled architectures


@dataclass(frozen=True)
class Needs:
    """What one backend's image needs of the host."""

    backend: str
    stack: Stack | None  # None: no driver (cpu, or a stack envbuild has no facts for)
    version: str | None
    min_driver: str | None  # None: unknown (the native minimum: every feature of the release)
    confirmed: bool
    arch: tuple[str, ...]  # declared or measured; empty: unknown
    device: str = "cpu"
    compat_driver: str | None = None  # the oldest driver that runs it under minor version compatibility

    @property
    def lowest_driver(self) -> str | None:
        """The oldest driver the image starts and runs on at all: the compatibility floor, else the minimum."""
        return self.compat_driver or self.min_driver

    @property
    def driver_label(self) -> str:
        """dev.envbuild.requires.driver: 'nvidia>=595.45.04', 'none' (cpu), 'unknown' (no facts for this stack), or
        'nvidia (minimum unknown)'."""
        if self.stack is None:
            return "none" if self.device == "cpu" else "unknown"
        if self.min_driver is None:
            return f"{self.stack.driver} (minimum unknown)"
        return (f"{self.stack.driver}>={self.lowest_driver}" + ("" if self.confirmed else " (UNCONFIRMED)")
                + (f"; native>={self.min_driver}" if self.compat_driver else ""))

    @property
    def stack_label(self) -> str:
        return f"{self.stack.name} {self.version}" if self.stack else "none"

    def arch_label(self, device: str) -> str:
        if device == "cpu":
            return "any"
        return ",".join(self.arch) if self.arch else "unknown"

    def to_json(self, device: str) -> dict[str, Any]:
        return {"stack": self.stack.name if self.stack else None, "stack_version": self.version,
                "driver": self.stack.driver if self.stack else None, "min_driver": self.min_driver,
                "compat_driver": self.compat_driver, "require_cuda": require_floor(self.stack, self.version or "")
                if self.stack else None,
                "confirmed": self.confirmed if self.stack else None, "source": self.stack.source if self.stack else None,
                "arch": list(self.arch) if self.arch else ("any" if device == "cpu" else None)}


def declared_arch(backend: Backend, platform: str | None = None) -> tuple[str, ...]:
    """The architectures the matrix declares for the backend's torch on `platform` (linux/arm64 may differ)."""
    h = backend.host
    if h is None:
        return ()
    if platform and platform.endswith("arm64") and h.arch_arm64:
        return h.arch_arm64
    return h.arch


def needs(backend: Backend, measured_arch: list[str] | None = None, platform: str | None = None) -> Needs:
    """The backend's needs from the matrix; `measured_arch` (read from the image) replaces the declared list."""
    arch = tuple(measured_arch) if measured_arch else ()
    h = backend.host
    if h is None:
        return Needs(backend.name, None, None, None, True, arch, backend.device)
    stack = STACKS[h.stack]
    arch = arch or declared_arch(backend, platform)
    floor = compat_driver(stack, h.version)
    native = h.driver or minimum_driver(stack, h.version)
    if floor and (parse_version(native) is None or parse_version(floor) >= parse_version(native)):
        floor = None  # the major's first release (13.0): nothing below its own minimum
    if h.driver:  # the matrix states it (with its source in a comment): taken as confirmed
        return Needs(backend.name, stack, h.version, h.driver, True, arch, backend.device, floor)
    return Needs(backend.name, stack, h.version, minimum_driver(stack, h.version), stack.confirmed, arch,
                 backend.device, floor)


# --------------------------------------------------------------------------------------------------
# Device names people use: architecture families, and the products `pick --gpu` accepts.

# NVIDIA compute capability (major, minor) -> family name (CUDA C++ Programming Guide, "Compute Capabilities").
CUDA_FAMILIES = {(5, 0): "Maxwell", (5, 2): "Maxwell", (5, 3): "Maxwell", (6, 0): "Pascal", (6, 1): "Pascal",
                 (6, 2): "Pascal", (7, 0): "Volta", (7, 2): "Volta", (7, 5): "Turing", (8, 0): "Ampere",
                 (8, 6): "Ampere", (8, 7): "Ampere", (8, 9): "Ada", (9, 0): "Hopper", (10, 0): "Blackwell",
                 (10, 3): "Blackwell", (11, 0): "Blackwell (Thor)", (12, 0): "Blackwell", (12, 1): "Blackwell"}
# AMD gfx target -> family (ROCm's GPU support tables; LLVM AMDGPU processor table).
GFX_FAMILIES = {"gfx803": "GCN 3 (Polaris/Fiji)", "gfx900": "Vega", "gfx906": "Vega 20", "gfx908": "CDNA (MI100)",
                "gfx90a": "CDNA 2 (MI200)", "gfx942": "CDNA 3 (MI300)", "gfx950": "CDNA 4 (MI350)",
                "gfx1030": "RDNA 2", "gfx1100": "RDNA 3", "gfx1101": "RDNA 3", "gfx1102": "RDNA 3",
                "gfx1200": "RDNA 4", "gfx1201": "RDNA 4"}

# Product -> architecture, for `pick --gpu A100` (vendors' product pages; a product with several variants of one
# name maps to its data-center part). Any other name is refused with this list: give the architecture instead.
GPU_PRODUCTS = {
    "P100": "sm_60", "P40": "sm_61", "P4": "sm_61", "GTX1080": "sm_61", "V100": "sm_70", "TITANV": "sm_70",
    "T4": "sm_75", "RTX2080": "sm_75", "A100": "sm_80", "A30": "sm_80", "A10": "sm_86", "A40": "sm_86",
    "A10G": "sm_86", "RTX3090": "sm_86", "RTXA6000": "sm_86", "L4": "sm_89", "L40": "sm_89", "L40S": "sm_89",
    "RTX4090": "sm_89", "RTX6000ADA": "sm_89", "H100": "sm_90", "H200": "sm_90", "H800": "sm_90", "H20": "sm_90",
    "GH200": "sm_90", "B200": "sm_100", "GB200": "sm_100", "B300": "sm_103", "GB300": "sm_103",
    "RTX5090": "sm_120", "RTXPRO6000": "sm_120", "DGXSPARK": "sm_121", "GB10": "sm_121",
    "MI100": "gfx908", "MI210": "gfx90a", "MI250": "gfx90a", "MI250X": "gfx90a", "MI300A": "gfx942",
    "MI300X": "gfx942", "MI325X": "gfx942", "MI350X": "gfx950", "MI355X": "gfx950", "RX6900XT": "gfx1030",
    "W6800": "gfx1030", "RX7900XTX": "gfx1100", "W7900": "gfx1100", "RX9070XT": "gfx1201",
}


def arch_title(arch: str) -> str:
    """'sm_70' -> 'sm_70 (Volta)', 'gfx942' -> 'gfx942 (CDNA 3 (MI300))'; an unknown one as it is."""
    cc = _cc(arch)
    name = CUDA_FAMILIES.get(cc) if cc else GFX_FAMILIES.get(arch.split(":")[0])
    return f"{arch} ({name})" if name else arch


def gpu_arch(text: str) -> str | None:
    """`--gpu`: '8.0', 'sm_80', 'compute_80', 'gfx942' or a product name ('A100', 'h100', 'MI300X') -> 'sm_80' or
    'gfx942'; None when it is none of those."""
    said = text.strip()
    if m := re.fullmatch(r"(\d{1,2})\.(\d)", said):
        return f"sm_{int(m.group(1))}{m.group(2)}"
    if m := re.fullmatch(r"(?:sm|compute)_(\d{2,3})", said.lower()):
        return f"sm_{m.group(1)}"
    if re.fullmatch(r"gfx[0-9a-f]{3,4}", said.lower()):
        return said.lower()
    key = re.sub(r"[\s_-]", "", said.upper()).removeprefix("NVIDIA").removeprefix("AMD").removeprefix("INSTINCT")
    key = key.removeprefix("TESLA").removeprefix("GEFORCE").removeprefix("RADEON")
    return GPU_PRODUCTS.get(key)


def arch_stack(arch: str) -> str:
    """Which stack an architecture belongs to: 'cuda' (sm_), 'rocm' (gfx)."""
    return "rocm" if arch.startswith("gfx") else "cuda"
