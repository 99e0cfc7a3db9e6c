"""CANN on the Ascend driver: the host's driver (version.info, the NPUs' PCI ids) and the SoC families its images
are built for. Each fact with its source."""

from __future__ import annotations

from pathlib import Path

from envbuild.core.files import read_host
from envbuild.core.hostfacts import VERSION, HostDriver, Runner, first_file
from envbuild.matrix.stacks.base import Stack

# Huawei's PCI device ids (vendor 0x19e5) -> the SoC family its CANN images are built for: Ascend's device plugin and
# vllm-ascend tell 910B (Atlas A2) by d802 and 310P by d500; d803 for the A3 generation (910_93) is UNCONFIRMED.
ASCEND_SOCS = {"0xd802": "910b", "0xd803": "a3", "0xd500": "310p"}


def read_ascend(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
    found = HostDriver("ascend")
    # The Ascend driver's installer writes "Version=24.1.rc2" there (the same file the npu run flags mount).
    found.version = first_file(root, ["/usr/local/Ascend/driver/version.info"], rf"^[ \t]*Version[ \t]*=[ \t]*{VERSION}[ \t]*$", found)
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


def soc_runs(image_socs: list[str], device: str, ptx: bool = True) -> bool:
    """Ascend: the vendor ships one CANN image per SoC family (910b for A2, a3, 310p); an image runs on its own."""
    return device.lower() in {s.lower() for s in image_socs}


STACK = Stack(
    # Huawei publishes CANN <-> Ascend HDK (driver) pairs per release on hiascend.com; the pair for CANN 9.2 was
    # not found. UNCONFIRMED: no minimum.
    "cann", "CANN", "ascend", "Ascend driver", {}, source="hiascend.com version pairing (not found for 9.x)",
    image_version=r"cann:(\d+\.\d+\.\d+)", read_host=read_ascend, arch_runs=soc_runs,
)
