"""The driver stacks an image can carry (CUDA, ROCm, ...): one module each (cuda.py, rocm.py, cann.py, gaudi.py,
neuron.py) holding that vendor's driver floors, compatibility rules, device architectures, host readers and torch
build rule, with their sources. This registry lists them; the schema, the lock, compat and the host commands ask it
instead of naming a stack. Adding a stack: a module with a `STACK`, and its `STACK` in the `STACKS` table.

Part of the matrix (validation checks a backend against these facts; the rendered image records what it needs);
the host stage reads what a host has (each stack's reader, over envbuild.core.hostfacts) and compares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.core import hostfacts
from envbuild.core.hostfacts import HostDriver, Runner
from envbuild.matrix.stacks import cann, cuda, gaudi, neuron, rocm
from envbuild.matrix.stacks.base import (  # noqa: F401 (the rules the rest of envbuild asks, importable from here)
    GpuTorch, Stack, arch_beyond, arch_floor, compat_driver, image_release, minimum_driver, newest_supported,
    parse_version, require_floor, torch_index,
)

if TYPE_CHECKING:
    from envbuild.matrix.model import Backend

# The registry: host.stack -> its Stack, in the order people see the stacks (the matrix reference lists them so).
# Built once here and never changed at run time (a test adds a stack for itself with monkeypatch.setitem).
STACKS: dict[str, Stack] = {s.name: s for s in (cuda.STACK, rocm.STACK, cann.STACK, gaudi.STACK, neuron.STACK)}


def gpu_products() -> dict[str, str]:
    """The GPU products `pick --gpu` accepts, every stack's: product -> architecture."""
    return {product: arch for s in STACKS.values() for product, arch in s.products.items()}


def by_driver(driver: str) -> Stack | None:
    return next((s for s in STACKS.values() if s.driver == driver), None)


def read_driver(driver: str, root: Path = Path("/"), path_env: str | None = None,
                runner: Runner = hostfacts.run_tool) -> HostDriver:
    """What the host (or a fake root) says of `driver`; a driver envbuild has no reader for is all unknown."""
    stack = by_driver(driver)
    if stack is None or stack.read_host is None:
        return HostDriver(driver, notes=[f"envbuild reads no version of the {driver} driver"])
    return stack.read_host(root, path_env, runner)


def gpu_torch(device: str, index: str) -> GpuTorch | None:
    """What marks a GPU build of torch for this backend: the stack its torch index names (ROCm's shares torch's
    `cuda` device), else the stack named as its device; None where no stack says."""
    for s in STACKS.values():
        if s.gpu_torch and s.gpu_torch.index_mark and s.gpu_torch.index_mark in index:
            return s.gpu_torch
    own = STACKS.get(device)
    return own.gpu_torch if own else None


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


def arch_title(arch: str) -> str:
    """'sm_70' -> 'sm_70 (Volta)', 'gfx942' -> 'gfx942 (CDNA 3 (MI300))'; an unknown one as it is."""
    name = next((n for s in STACKS.values() if s.family and (n := s.family(arch))), None)
    return f"{arch} ({name})" if name else arch


def gpu_arch(text: str) -> str | None:
    """`--gpu`: an architecture in a stack's spelling ('8.0', 'sm_80', 'compute_80', 'gfx942') or a product name
    ('A100', 'h100', 'MI300X') -> 'sm_80' or 'gfx942'; None when it is none of those."""
    said = text.strip()
    if not said.isascii():  # '٨.٠' or 'sm_８０': re's \d and int() read other scripts' digits as these
        return None
    for s in STACKS.values():
        if s.gpu_name and (arch := s.gpu_name(said)):
            return arch
    key = re.sub(r"[\s_-]", "", said.upper())
    for s in STACKS.values():
        for brand in s.brands:
            key = key.removeprefix(brand)
    return gpu_products().get(key)


def arch_stack(arch: str) -> str | None:
    """Which stack an architecture belongs to: 'cuda' (sm_), 'rocm' (gfx); None: none says."""
    return next((s.name for s in STACKS.values() if s.arch_pattern and re.fullmatch(s.arch_pattern, arch)), None)
