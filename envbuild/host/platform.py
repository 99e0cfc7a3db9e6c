"""This host's platform in the matrix's spelling ('linux/amd64', 'darwin/arm64'): one table of architecture names."""

from __future__ import annotations

import platform as _platform

ARCH_ALIASES = {"x86_64": "amd64", "aarch64": "arm64"}
_OS_NAMES = {"darwin": "macOS", "linux": "Linux"}


def arch(machine: str | None = None) -> str:
    """'x86_64' -> 'amd64', 'aarch64' -> 'arm64'; other names lower-cased as they are."""
    name = (machine or _platform.machine()).lower()
    return ARCH_ALIASES.get(name, name)


def host_platform(system: str | None = None, machine: str | None = None) -> str:
    return f"{(system or _platform.system()).lower()}/{arch(machine)}"


def describe(p: str) -> str:
    os_name, _, cpu = p.partition("/")
    if p == "darwin/arm64":
        return "macOS on Apple Silicon (darwin/arm64)"
    return f"{_OS_NAMES.get(os_name, os_name)} on {cpu} ({p})"
