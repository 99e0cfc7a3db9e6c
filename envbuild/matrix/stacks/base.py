"""What every driver stack module fills in (a `Stack`), and the rules that read it: floors, minor version
compatibility, the torch index a release goes with, the architectures it builds for. Vendor facts live in the
stack modules beside this one (cuda.py, rocm.py, ...), each with its source; nothing here names a stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from packaging.version import InvalidVersion, Version

from envbuild.core.hostfacts import HostDriver, Runner

Reader = Callable[[Path, "str | None", Runner], HostDriver]
# (torch's compiled architectures, a host device, whether the driver can compile the build's PTX) -> runs there?
ArchRule = Callable[..., bool]


class GpuTorch(NamedTuple):
    """What marks the stack's build of torch in a lock: a local version label, or the runtime wheels it pulls in."""

    name: str  # for people: "CUDA"
    labels: tuple[str, ...]  # "+cu"
    companions: tuple[str, ...]  # wheel name prefixes: "nvidia-", "cuda-"
    index_mark: str = ""  # a torch index URL holding this says the build is this stack's ("rocm"): else the device's


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
    # What the image declares to the container toolkit for its major's floor ("cuda>={major}.0"); "": nothing.
    require: str = ""
    # Reads the host's driver (version, device architectures) from its files and tools: envbuild.core.hostfacts
    # holds the generic readers. None: envbuild reads nothing of this driver.
    read_host: Reader | None = None
    # Whether an image built for some architectures runs on a device; None: devices are not compared.
    arch_runs: ArchRule | None = None
    torch_archs: bool = False  # torch says which architectures it was built for (checked at build)
    arch_key: Callable[[str], Any] | None = None  # orders architectures (None: they have no order)
    canonical: Callable[[str], str] = str  # one spelling per architecture (compute_80 -> sm_80)
    # An image with no list of its own is taken to carry code for its release's floor: in which spelling (CUDA: PTX)
    floor_arch: Callable[[str], str] = str
    arch_pattern: str = ""  # the architectures this stack's devices have ('gfx...'), for telling a GPU's stack
    gpu_name: Callable[[str], "str | None"] | None = None  # `pick --gpu` spellings of an architecture -> it
    family: Callable[[str], "str | None"] | None = None  # an architecture's family for people ("Ampere")
    products: dict[str, str] = field(default_factory=dict)  # product name (A100) -> architecture, for --gpu
    brands: tuple[str, ...] = ()  # vendor words dropped before a product name ("NVIDIA", "GEFORCE")
    gpu_torch: GpuTorch | None = None  # what the lock checks torch against


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
    """What the image declares to the container toolkit (CUDA: NVIDIA_REQUIRE_CUDA): its major's first release,
    'cuda>=12.0' for any 12.x build, so that a driver which runs the build under minor version compatibility is not
    refused at start; None where the stack has no such floor."""
    if not stack.require or not compat_driver(stack, version):
        return None
    return stack.require.format(major=version.split(".")[0])


def arch_beyond(stack: Stack, version: str, arch: str) -> str | None:
    """Why a torch built with this release cannot carry `arch` (None: it can, as far as the table knows): older than
    the release's floor (CUDA 13: sm_75), or newer than the release (sm_120 needs CUDA 12.8)."""
    have = parse_version(release(version))
    floor = arch_floor(stack, version)
    key = stack.arch_key
    if key and floor and (cc := key(arch)) and (fc := key(floor)) and cc < fc:
        return f"{stack.title} {release(version)} builds for {floor} and newer only"
    first = arch_first(stack, arch)
    if first and have is not None and have < parse_version(first):
        return f"{stack.title} {first} is the first release that builds for it"
    return None


def arch_first(stack: Stack, arch: str) -> str | None:
    """The first release of the stack that builds for this architecture (None: any release this table knows)."""
    return stack.arch_first.get(stack.canonical(arch))


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
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)(?:[.-]?(rc|a|b)\.?(\d+))?", text.lower(), re.ASCII)
    if not m:
        return None
    try:
        return Version(m.group(1) + (f"{m.group(2)}{m.group(3)}" if m.group(2) else ""))
    except InvalidVersion:
        return None
