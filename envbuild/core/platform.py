"""This host's platform in the matrix's spelling ('linux/amd64', 'darwin/arm64'): one table of architecture names."""

from __future__ import annotations

import platform as _platform
from pathlib import Path

from envbuild.core.errors import PlatformError

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


# --- running another architecture: QEMU through binfmt_misc ---------------------------------------------------

BINFMT = "proc/sys/fs/binfmt_misc"
QEMU_NAMES = {"arm64": "aarch64", "amd64": "x86_64", "arm": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
              "riscv64": "riscv64", "386": "i386"}


def platform_arch(p: str) -> str:
    """'linux/arm64/v8' -> 'arm64'."""
    return arch(p.split("/")[1] if "/" in p else p)


def emulator(p: str, root: str = "/") -> tuple[bool, str]:
    """Whether this kernel runs `p`'s binaries through QEMU (binfmt_misc): (ok, what was found). The entry must be
    enabled and carry flag F (the interpreter is opened at registration, so a container needs no qemu inside)."""
    name = f"qemu-{QEMU_NAMES.get(platform_arch(p), platform_arch(p))}"
    folder = Path(root) / BINFMT.lstrip("/")
    entry = folder / name
    if not (folder / "status").exists():
        return False, f"binfmt_misc is not mounted at /{BINFMT}"
    try:
        text = entry.read_text()
    except OSError:
        return False, f"no binfmt entry {name} in /{BINFMT}"
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        return False, f"the binfmt entry {name} is disabled"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    interpreter = next((ln.split(None, 1)[1] for ln in lines if ln.startswith("interpreter ")), "?")
    if "F" not in flags:
        return False, f"the binfmt entry {name} lacks flag F (containers would need {interpreter} inside)"
    return True, f"QEMU through binfmt ({name}: {interpreter}, flags {flags})"


def foreign_arch(p: str | None, host: str | None = None) -> str | None:
    """The architecture of `p` when it is not this host's (the suffix of its local tags), else None."""
    if not p or "," in p:
        return None
    a = platform_arch(p)
    return None if a == platform_arch(host or host_platform()) else a


def emulation_fix(p: str) -> str:
    name = f"qemu-{QEMU_NAMES.get(platform_arch(p), platform_arch(p))}"
    return ("apt-get install qemu-user-static binfmt-support; mount binfmt_misc -t binfmt_misc /proc/sys/fs/binfmt_misc "
            f"(if it is not mounted); update-binfmts --enable {name}")


def can_run(p: str, root: str = "/", host: str | None = None) -> tuple[bool, bool, str]:
    """(runs, emulated, how) for a linux platform on this host: natively, through QEMU, or not at all."""
    here = host or host_platform()
    if here.split("/")[0] != "linux":
        return False, False, f"this host is {here}: containers of {p} run in Docker's Linux VM, not checked here"
    if platform_arch(p) == platform_arch(here):
        return True, False, f"natively ({here})"
    ok, how = emulator(p, root)
    return ok, ok, how


def require_runnable(p: str, what: str, root: str = "/", host: str | None = None) -> bool:
    """Refuse a platform this host can neither run nor emulate, naming the fix; True when it is emulated."""
    runs, emulated, how = can_run(p, root, host)
    if not runs:
        raise PlatformError(f"{what} needs {p}, which this host ({host or host_platform()}) cannot run: {how}. "
                            f"Set up emulation: {emulation_fix(p)}; or use a native {platform_arch(p)} machine")
    return emulated
