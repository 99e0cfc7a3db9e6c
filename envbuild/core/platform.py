"""The one Platform value ('linux/amd64', 'darwin/arm64'): Docker's spellings read once, here and nowhere else
(aarch64 is arm64, arm64/v8 is arm64), its parts and forms (os, arch, oci, stem), this host's platform, and
whether this host runs another's binaries (QEMU through binfmt_misc)."""

from __future__ import annotations

import platform as _platform
import re
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
# containerd's known architectures: a first part that is one of these is ARCH/VARIANT ('arm64/v8'), not OS/ARCH
_ARCHES = {"386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "ppc64", "ppc64le", "loong64", "mips",
           "mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "riscv", "riscv64", "s390", "s390x",
           "sparc", "sparc64", "wasm", *_ARCH_SPELLINGS}


class InvalidPlatform(InvalidInput):
    """A --platform (or a matrix's platform) that is not one envbuild builds for; the message escapes the value."""


class Platform(str):
    """One platform, in Docker's canonical form once parsed: str() gives 'linux/arm64' whatever was written
    ('LINUX/aarch64', 'linux/arm64/v8'), so that every command, lock file name, tag and manifest agrees.

    A value (immutable, hashable, equal only to its canonical spelling) that is also that spelling: JSON, labels,
    lock headers and file names write it as they wrote the string, and the matrix's lists compare with it. Built
    from parts (Platform('linux', 'arm64')) or from one text read as Docker reads it (Platform('linux/aarch64'))."""

    __slots__ = ()

    def __new__(cls, os: str, arch: str | None = None, variant: str = "") -> "Platform":
        if arch is None:  # one text (copy and pickle come this way too): Docker's normalisation, any platform
            if isinstance(os, Platform):
                return os
            found = cls.normal(os)
            if found is None:
                raise InvalidPlatform(_refusal(os, tuple(SUPPORTED)))
            return found
        return super().__new__(cls, "/".join(x for x in (os, arch, variant) if x))

    def __repr__(self) -> str:
        return f"Platform({str.__repr__(self)})"

    def __str__(self) -> str:
        return str.__str__(self)

    @property
    def os(self) -> str:
        return self.split("/")[0]

    @property
    def arch(self) -> str:
        """The architecture in Docker's words: 'arm64' for linux/arm64 (the suffix of a platform's own tags)."""
        parts = self.split("/")
        return parts[1] if len(parts) > 1 else ""

    architecture = arch

    @property
    def variant(self) -> str:
        parts = self.split("/")
        return parts[2] if len(parts) > 2 else ""

    @property
    def oci(self) -> str:
        """The OCI form, 'linux/arm64', as --platform, image indexes and labels write it."""
        return str(self)

    @property
    def stem(self) -> str:
        """The file name's form, 'linux-arm64' (locks/BACKEND/linux-arm64.txt)."""
        return str(self).replace("/", "-")

    def oci_dict(self) -> dict[str, str]:
        """An image index's platform object: {'architecture': 'arm64', 'os': 'linux'} (and 'variant' when there is one)."""
        return {"architecture": self.arch, "os": self.os, **({"variant": self.variant} if self.variant else {})}

    @classmethod
    def of(cls, value: "str | Platform") -> "Platform":
        """A library caller's platform, read at the boundary by the same rule as the CLI's (parse); a Platform as it is."""
        return value if isinstance(value, Platform) else cls.parse(value)

    @classmethod
    def normal(cls, text: str) -> "Platform | None":
        """Docker's normalisation of any platform (case, aarch64 and x86_64, the variant Docker drops, a bare
        architecture as Linux's), supported or not; None for what is no platform at all. For what registries
        and images say (an index may list linux/arm/v7); what a user gives goes through parse."""
        parts = text.lower().split("/") if isinstance(text, str) and text.isascii() else []
        if (len(parts) == 1 and parts[0] and parts[0] not in SUPPORTED) or (len(parts) == 2 and parts[0] in _ARCHES):
            parts = ["linux", *parts]  # `--platform arm64` (or arm64/v8): Docker reads it as the daemon's OS, Linux
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
    from envbuild.core.text import quoted

    accepted = ", ".join(f"{o}/{a}" for o in oses for a in SUPPORTED[o])
    value = quoted(text) if isinstance(text, str) else quoted(repr(text))
    what = ("several platforms; one is taken here (`envbuild publish --platform` joins several in one image index)"
            if isinstance(text, str) and "," in text else "not a platform envbuild builds for")
    return f"'{value}' is {what}: give one of {accepted} (or Docker's other names: x86_64, aarch64, arm64/v8)"


def parse_list(text: str) -> tuple[Platform, ...]:
    """Several platforms, comma-separated (publish's index), each read by Platform.parse; in order, once each."""
    return tuple(dict.fromkeys(Platform.parse(p) for p in text.split(",")))


def canonical(text: str) -> str:
    """Docker's canonical spelling of a platform from a registry or an image ('linux/arm64' for 'linux/arm64/v8');
    the text as it is when it is no platform."""
    found = Platform.normal(text)
    return str(found) if found else text


def target(p: str | None) -> Platform:
    """The platform asked for (--platform), else this host's: the one default of every stage."""
    return Platform(p) if p else Platform.host()


def arch(machine: str | None = None) -> str:
    """'x86_64' -> 'amd64', 'aarch64' -> 'arm64'; other names lower-cased as they are."""
    name = (machine or _platform.machine()).lower()
    return ARCH_ALIASES.get(name, name)


def host_platform(system: str | None = None, machine: str | None = None) -> Platform:
    return Platform.host(system, machine)


def describe(p: str) -> str:
    found = Platform.normal(p)
    os_name, cpu = (found.os, found.arch) if found else p.partition("/")[::2]
    if p == "darwin/arm64":
        return "macOS on Apple Silicon (darwin/arm64)"
    return f"{_OS_NAMES.get(os_name, os_name)} on {cpu} ({p})"


# --- running another architecture: QEMU through binfmt_misc ---------------------------------------------------

BINFMT = "proc/sys/fs/binfmt_misc"
QEMU_NAMES = {"arm64": "aarch64", "amd64": "x86_64", "arm": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
              "riscv64": "riscv64", "386": "i386"}


def platform_arch(p: str) -> str:
    """'linux/arm64/v8' -> 'arm64'; a bare architecture ('aarch64') in Docker's words."""
    found = p if isinstance(p, Platform) else Platform.normal(p)
    return found.arch if found else arch(p)


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
    if Platform(here).os != "linux":
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
