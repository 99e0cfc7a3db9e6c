"""This host's platform in the matrix's spelling ('linux/amd64', 'darwin/arm64'): one table of architecture names."""

from __future__ import annotations

import platform as _platform
import re
from dataclasses import dataclass
from pathlib import Path

from envbuild.core.errors import InvalidInput, PlatformError

ARCH_ALIASES = {"x86_64": "amd64", "aarch64": "arm64"}
_OS_NAMES = {"darwin": "macOS", "linux": "Linux"}

# The platforms envbuild builds, locks, smoke-tests and publishes (the matrix's `platforms` may list only these);
# darwin only for a backend that runs on the host (mps), never as a container's platform.
SUPPORTED = {"linux": ("amd64", "arm64", "ppc64le", "s390x"), "darwin": ("amd64", "arm64")}
# Docker's (containerd's) normalisation of what a user writes: its other names of an architecture, the variant
# it drops (arm64/v8 is arm64), an operating system's other name.
_ARCH_SPELLINGS = {**ARCH_ALIASES, "x86-64": "amd64", "i386": "386", "x86": "386", "armhf": "arm/v7", "armel": "arm/v6"}
_DROPPED_VARIANTS = {"amd64": ("v1",), "arm64": ("v8", "8")}
_OS_SPELLINGS = {"macos": "darwin"}


class InvalidPlatform(InvalidInput):
    """A --platform (or a matrix's platform) that is not one envbuild builds for; the message escapes the value."""


@dataclass(frozen=True)
class Platform:
    """One platform, in Docker's canonical form once parsed: str() gives 'linux/arm64' whatever was written
    ('LINUX/aarch64', 'linux/arm64/v8'), so that every command, lock file name, tag and manifest agrees."""

    os: str
    arch: str
    variant: str = ""

    def __str__(self) -> str:
        return "/".join(x for x in (self.os, self.arch, self.variant) if x)

    @classmethod
    def normal(cls, text: str) -> "Platform | None":
        """Docker's normalisation of any platform (case, aarch64 and x86_64, the variant Docker drops, a bare
        architecture as Linux's), supported or not; None for what is no platform at all. For what registries
        and images say (an index may list linux/arm/v7); what a user gives goes through parse."""
        parts = text.lower().split("/") if isinstance(text, str) else []
        if len(parts) == 1 and parts[0] and parts[0] not in SUPPORTED:
            parts = ["linux", *parts]  # `--platform arm64`: Docker reads it as the daemon's OS, which is Linux
        if not 2 <= len(parts) <= 3 or not all(re.fullmatch(r"[a-z0-9_-]+", x) for x in parts):
            return None
        arch_, _, variant = "/".join([_ARCH_SPELLINGS.get(parts[1], parts[1]), *parts[2:]]).partition("/")
        if "/" in variant:
            return None
        return cls(_OS_SPELLINGS.get(parts[0], parts[0]), arch_, "" if variant in _DROPPED_VARIANTS.get(arch_, ()) else variant)

    @classmethod
    def parse(cls, text: str, oses: tuple[str, ...] = ("linux",)) -> "Platform":
        """One platform envbuild builds for, read as Docker would (normal); InvalidPlatform, naming the value
        escaped and the accepted forms, for anything else: another operating system or architecture, a list,
        a line break."""
        found = cls.normal(text)
        if found is None or found.os not in oses or found.arch not in SUPPORTED.get(found.os, ()) or found.variant:
            raise InvalidPlatform(_refusal(text, oses))
        return found

    @classmethod
    def host(cls, system: str | None = None, machine: str | None = None) -> "Platform":
        """This host's platform (as it is, supported or not)."""
        return cls((system or _platform.system()).lower(), arch(machine))


def _refusal(text: object, oses: tuple[str, ...]) -> str:
    from envbuild.core.text import shown

    accepted = ", ".join(f"{o}/{a}" for o in oses for a in SUPPORTED[o])
    value = shown(text) if isinstance(text, str) else repr(text)
    what = ("several platforms; one is taken here (`envbuild publish --platform` joins several in one image index)"
            if isinstance(text, str) and "," in text else "not a platform envbuild builds for")
    return f"'{value}' is {what}: give one of {accepted} (or Docker's other names: x86_64, aarch64, arm64/v8)"


def parse_list(text: str) -> tuple[str, ...]:
    """Several platforms, comma-separated (publish's index), each read by Platform.parse; in order, once each."""
    return tuple(dict.fromkeys(str(Platform.parse(p)) for p in text.split(",")))


def canonical(text: str) -> str:
    """Docker's canonical spelling of a platform from a registry or an image ('linux/arm64' for 'linux/arm64/v8');
    the text as it is when it is no platform."""
    found = Platform.normal(text)
    return str(found) if found else text


def target(p: str | None) -> str:
    """The platform asked for (--platform), else this host's: the one default of every stage."""
    return p or host_platform()


def arch(machine: str | None = None) -> str:
    """'x86_64' -> 'amd64', 'aarch64' -> 'arm64'; other names lower-cased as they are."""
    name = (machine or _platform.machine()).lower()
    return ARCH_ALIASES.get(name, name)


def host_platform(system: str | None = None, machine: str | None = None) -> str:
    return str(Platform.host(system, machine))


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
    if not p:
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
