"""What an accelerator stack needs of the host's driver (vendor facts, each with its source), and what the host
has: its driver version and device architectures, read from the files a real host carries (under --root), and
from the vendor's tool where no file says it.

Unknown stays unknown: a file that is absent or unreadable gives None and a note, never a guess.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.version import InvalidVersion, Version

from ..files import read_host


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
        image_version=r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)-", torch_index=(r"cu\d+", "cu{major}{minor}")),
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


def minimum_driver(stack: Stack, version: str) -> str | None:
    return stack.minimum.get(release(version))


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


def cuda_arch_runs(image_archs: list[str], device: str) -> bool:
    """Can a torch built for `image_archs` ('sm_86', 'compute_90') run on a device of compute capability `device`
    ('sm_89')? Source: CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility": a cubin for
    X.y runs on X.z with z >= y; PTX for X.y is compiled by the driver for any capability >= X.y. Arch-specific
    targets ('sm_90a') run only on that exact capability."""
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
        elif arch.startswith("compute_") and got <= dev:
            return True
    return False


def _cc(arch: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(?:sm|compute)_(\d+?)(\d)[af]?", arch)
    return (int(m.group(1)), int(m.group(2))) if m else None


def gfx_name(target_version: int) -> str | None:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) -> 'gfx942'; 0 (a CPU node) -> None.
    Source: the amdgpu KFD topology (kfd_topology.c) encodes it so; steppings print in hex (90010 -> gfx90a)."""
    if target_version <= 0:
        return None
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def gfx_runs(image_archs: list[str], device: str) -> bool:
    """ROCm code objects are built per gfx target and load only on that target (LLVM AMDGPU docs); feature
    suffixes (':xnack-') are ignored here."""
    return device in {a.split(":")[0] for a in image_archs}


ARCH_RULES: dict[str, Callable[[list[str], str], bool]] = {"cuda": cuda_arch_runs, "rocm": gfx_runs}


# --------------------------------------------------------------------------------------------------
# The host's side.


@dataclass
class HostDriver:
    """What the host says of one vendor's driver: None where it could not be read (see notes)."""

    driver: str  # "nvidia"
    version: str | None = None
    archs: list[str] | None = None  # one per device, e.g. ["sm_90", "sm_90"]; None: unknown
    evidence: list[str] = field(default_factory=list)  # where the answers came from
    notes: list[str] = field(default_factory=list)  # what could not be read, and why

    def to_json(self) -> dict:
        return {"driver": self.driver, "version": self.version, "archs": self.archs, "evidence": self.evidence,
                "notes": self.notes}


Runner = Callable[[list[str]], str | None]


def run_tool(argv: list[str], timeout: float = 10) -> str | None:
    """A vendor tool's output, or None when it fails or hangs (a wedged driver can hang nvidia-smi)."""
    import subprocess  # here: `render` reads this module's facts and never runs a tool

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _first_file(root: Path, paths: list[str], pattern: str, found: HostDriver) -> str | None:
    """The version from the first of `paths` (under root) whose text matches `pattern`; a note per miss."""
    for rel in paths:
        text = read_host(root / rel.lstrip("/"), limit=4096)
        if text is None:
            found.notes.append(f"{rel} is absent")
            continue
        m = re.search(pattern, text, re.MULTILINE)
        if m:
            found.evidence.append(rel)
            return m.group(1)
        found.notes.append(f"{rel} does not say a version")
    return None


def _tool(name: str, args: list[str], path_env: str | None, runner: Runner, found: HostDriver,
          root: Path = Path("/")) -> str | None:
    """A vendor tool's output. A folder given to be read (a fake root) is only read: no program under it runs.
    With one, the tool is this machine's own (its PATH), and the evidence says so."""
    import shutil

    real = Path(root).resolve() == Path("/")
    exe = shutil.which(name, path=path_env if real else None)
    if exe is not None and not real and _inside(Path(exe), Path(root)):
        exe = None
    if exe is None:
        found.notes.append(f"{name} is not on PATH" if real else f"{name} is not on this machine's PATH (nothing under {root} is run)")
        return None
    out = runner([exe, *args])
    where = "" if real else f" (run on this machine, not under {root})"
    if out is None:
        found.notes.append(f"`{name} {' '.join(args)}` failed{where}")
        return None
    found.evidence.append(f"{name} {' '.join(args)}{where}")
    return out


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def read_nvidia(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("nvidia")
    # /proc's line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." (open and
    # proprietary modules alike); /sys/module/nvidia/version holds the bare version.
    found.version = _first_file(root, ["/proc/driver/nvidia/version", "/sys/module/nvidia/version"],
                                r"(?:Kernel Module(?: for \S+)?\s+|^)(\d+\.\d+(?:\.\d+)?)", found)
    # No file says the compute capability; nvidia-smi does (compute_cap, driver 510 and later).
    out = _tool("nvidia-smi", ["--query-gpu=compute_cap", "--format=csv,noheader"], path_env, runner, found, root)
    caps = [ln.strip() for ln in (out or "").splitlines() if re.fullmatch(r"\d+\.\d+", ln.strip())]
    if caps:
        found.archs = ["sm_" + c.replace(".", "") for c in caps]
    return found


def read_amdgpu(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("amdgpu")
    # Only the DKMS (ROCm) driver has a version file; the kernel's own amdgpu has none: unknown, not old.
    found.version = _first_file(root, ["/sys/module/amdgpu/version"], r"^\s*(\d+\.\d+(?:\.\d+)*)", found)
    nodes = sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties"))
    archs = []
    for props in nodes:
        m = re.search(r"^gfx_target_version\s+(\d+)", read_host(props, limit=16384) or "", re.MULTILINE)
        if m and (name := gfx_name(int(m.group(1)))):
            archs.append(name)
    if archs:
        found.archs = archs
        found.evidence.append("/sys/class/kfd/kfd/topology/nodes/*/properties")
    else:
        found.notes.append("no GPU node with a gfx_target_version under /sys/class/kfd/kfd/topology/nodes")
    return found


def read_ascend(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("ascend")
    # The Ascend driver's installer writes "Version=24.1.rc2" there (the same file the npu run flags mount).
    found.version = _first_file(root, ["/usr/local/Ascend/driver/version.info"], r"^\s*Version\s*=\s*(\S+)", found)
    return found


def _module(name: str) -> Callable[[Path, str | None, Runner], HostDriver]:
    def read(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
        found = HostDriver(name)
        found.version = _first_file(root, [f"/sys/module/{name}/version"], r"^\s*(\S+)", found)
        return found

    return read


READERS: dict[str, Callable[[Path, str | None, Runner], HostDriver]] = {
    "nvidia": read_nvidia,
    "amdgpu": read_amdgpu,
    "ascend": read_ascend,
    "habanalabs": _module("habanalabs"),
    "neuron": _module("neuron"),
}


def root_path(root: Path) -> str:
    """This PATH's folders inside a fake root: where its vendor tools are."""
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]
    return os.pathsep.join(str(root / p.lstrip("/")) for p in folders)


def read(driver: str, root: Path = Path("/"), path_env: str | None = None, runner: Runner = run_tool) -> HostDriver:
    """What the host (or a fake root) says of `driver`; a driver envbuild has no reader for is all unknown."""
    reader = READERS.get(driver)
    if reader is None:
        return HostDriver(driver, notes=[f"envbuild reads no version of the {driver} driver"])
    return reader(root, path_env, runner)
