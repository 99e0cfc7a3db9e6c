"""What the host has of an accelerator stack's driver: its version and device architectures, read from the files a
real host carries (under --root), and from the vendor's tool where no file says it. What each stack needs (vendor
facts) is part of the matrix (envbuild.matrix.stacks), which compares the two.

Unknown stays unknown: a file that is absent or unreadable gives None and a note, never a guess.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from envbuild.core.files import read_host


def gfx_name(target_version: int) -> str | None:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) -> 'gfx942'; 0 (a CPU node) -> None.
    Source: the amdgpu KFD topology (kfd_topology.c) encodes it so; steppings print in hex (90010 -> gfx90a)."""
    if target_version <= 0:
        return None
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


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


TOOL_OUTPUT = 1 << 20  # bytes of a vendor tool's answer read; a tool that says more is not believed


def run_tool(argv: list[str], timeout: float = 10, limit: int = TOOL_OUTPUT) -> str | None:
    """A vendor tool's output, or None when it fails, hangs (a wedged driver can hang nvidia-smi) or says more than
    `limit` bytes: read as it comes, never whole, and the tool is killed then."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    end = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
        code = proc.wait(max(0.1, end - time.monotonic()))
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return b"".join(chunks).decode("utf-8", "replace") if code == 0 else None


# What a host file or tool may say, in ASCII (re.ASCII: no other script's digits), bounded in length: a version
# read anywhere is only ever one of these, so no escape or other control character reaches what is printed.
VERSION = r"([0-9][0-9A-Za-z.+_~-]{0,63})"
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


def _first_file(root: Path, paths: list[str], pattern: "str | re.Pattern[str]", found: HostDriver) -> str | None:
    """The version from the first of `paths` (under root) whose text matches `pattern`; a note per miss."""
    for rel in paths:
        text = read_host(root / rel.lstrip("/"), limit=4096)
        if text is None:
            found.notes.append(f"{rel} is absent")
            continue
        m = pattern.search(text) if isinstance(pattern, re.Pattern) else re.search(pattern, text, re.MULTILINE | re.ASCII)
        if m:
            found.evidence.append(rel)
            return m.group(1)
        found.notes.append(f"{rel} does not say a version")
    return None


def _tool(name: str, args: list[str], path_env: str | None, runner: Runner, found: HostDriver,
          root: Path = Path("/")) -> str | None:
    """A vendor tool's output. A folder given to be read (a fake root) is only read: no program under it runs.
    With one, the tool is this machine's own (its PATH), and the evidence says so."""
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
    found.version = _first_file(root, ["/proc/driver/nvidia/version", "/sys/module/nvidia/version"], _NVIDIA_VERSION, found)
    # No file says the compute capability; nvidia-smi does (compute_cap, driver 510 and later).
    out = _tool("nvidia-smi", ["--query-gpu=compute_cap", "--format=csv,noheader"], path_env, runner, found, root)
    caps = compute_caps(out or "")
    if caps:
        found.archs = caps
    return found


def read_amdgpu(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("amdgpu")
    # Only the DKMS (ROCm) driver has a version file; the kernel's own amdgpu has none: unknown, not old.
    found.version = _first_file(root, ["/sys/module/amdgpu/version"], r"^[ \t]*([0-9]{1,9}(?:\.[0-9]{1,9}){1,5})(?![0-9.])", found)
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


# Huawei's PCI device ids (vendor 0x19e5) -> the SoC family its CANN images are built for: Ascend's device plugin and
# vllm-ascend tell 910B (Atlas A2) by d802 and 310P by d500; d803 for the A3 generation (910_93) is UNCONFIRMED.
ASCEND_SOCS = {"0xd802": "910b", "0xd803": "a3", "0xd500": "310p"}


def read_ascend(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("ascend")
    # The Ascend driver's installer writes "Version=24.1.rc2" there (the same file the npu run flags mount).
    found.version = _first_file(root, ["/usr/local/Ascend/driver/version.info"], rf"^[ \t]*Version[ \t]*=[ \t]*{VERSION}[ \t]*$", found)
    socs = []
    for dev in sorted((root / "sys/bus/pci/devices").glob("*")):
        if (read_host(dev / "vendor", limit=64) or "").strip().lower() != "0x19e5":
            continue
        soc = ASCEND_SOCS.get((read_host(dev / "device", limit=64) or "").strip().lower())
        if soc:
            socs.append(soc)
    if socs:
        found.archs = socs
        found.evidence.append("/sys/bus/pci/devices/*/device (Huawei)")
    else:
        found.notes.append("no Ascend NPU with a known PCI device id under /sys/bus/pci/devices")
    return found


def _module(name: str) -> Callable[[Path, str | None, Runner], HostDriver]:
    def read(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
        found = HostDriver(name)
        found.version = _first_file(root, [f"/sys/module/{name}/version"], rf"\A[ \t]*{VERSION}[ \t]*$", found)
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
