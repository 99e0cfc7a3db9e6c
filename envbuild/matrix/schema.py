"""The matrix schema: what each field may hold, as data.

Strings that reach a Dockerfile are held to narrow patterns so that no value can inject an instruction
(a line break) or break quoting. A field is a leaf checker, a list of a leaf, a string map, or a section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import InvalidInput
from envbuild.engine.cachemount import CACHE, CACHE_DERIVED_ENV, CACHE_ENV
from envbuild.core.imageref import Reference
from envbuild.core.output import scrub, secret_name
from envbuild.core.platform import Platform
from envbuild.core.text import unsafe_char, unsafe_message
from envbuild.matrix import stacks
from envbuild.matrix.rules import RULES

# --------------------------------------------------------------------------------------------------
# Value checkers. Each returns (value, None) or (None, "why").

_TEXT = re.compile(r'^[^"\\$`]*$')


class _Reads:
    """A pattern whose match is that `read` accepts the value: image references have one grammar (imageref)."""

    def __init__(self, read: Callable[[str], Any]):
        self.read = read

    def match(self, value: str) -> bool:
        try:
            self.read(value)
        except InvalidInput:
            return False
        return True


MATRIX_OSES = ("linux", "darwin")  # darwin: a backend that runs on the host (mps), never in a container

_PATTERNS = {
    "name": (re.compile(r"^[a-z][a-z0-9_-]*\Z"), "a lower-case name (letters, digits, '-', '_')"),
    "image": (_Reads(Reference.parse), "an image reference such as 'debian:bookworm-slim' or 'host:5000/repo/name:tag'"),
    "repository": (_Reads(lambda v: Reference.repository(v) if v == v.strip().rstrip("/") else Reference.parse("")), "an image repository without a tag, such as 'ghcr.io/org/envbuild'"),
    "url": (re.compile(r"^(?:https?|file)://[A-Za-z0-9._~:/?#\[\]@!+,=%-]+\Z"), "an http(s):// or file:// URL without shell metacharacters"),
    "module": (re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z"), "a dotted module name"),
    "api": (re.compile(r"^torch(?:\.[A-Za-z_][A-Za-z0-9_]*)+\Z"), "a dotted torch API such as 'torch.cuda.is_available'"),
    "dist": (re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z"), "a Python distribution name"),
    "apt": (re.compile(r"^[a-z0-9][a-z0-9+.-]+(?:=[A-Za-z0-9.+:~-]+)?\Z"), "a Debian package name"),
    "executable": (re.compile(r"^(?:/[A-Za-z0-9_.+-]+)*/?[A-Za-z0-9_.+-]+\Z"), "an executable name or absolute path"),
    "env_key": (re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z"), "an environment variable name"),
    "env_value": (re.compile(r"^[^\"\\`]*$"), "a value without quotes, backslashes or backticks"),
    "device_node": (re.compile(r"^/dev/[A-Za-z0-9_./-]+(?::/dev/[A-Za-z0-9_./-]+)?\Z"), "a device path such as '/dev/kfd'"),
    "volume": (re.compile(r"^/[^\s:\"'`$]+:/[^\s:\"'`$]+(?::(?:ro|rw))?$"), "'HOST:CONTAINER[:ro]' with absolute paths"),
    "glob": (re.compile(r"^/[A-Za-z0-9_./*?\[\]-]+\Z"), "an absolute path glob such as '/dev/nvidia[0-9]*'"),
    "label": (re.compile(r"^[A-Za-z0-9_.:-]+\Z"), "a runner label"),
    "platform": (_Reads(lambda v: Platform.parse(v, MATRIX_OSES)), "a platform such as 'linux/amd64'"),
    "size": (re.compile(r"^[0-9]+[bkmgBKMG]?\Z"), "a size such as '8g'"),
    "word": (re.compile(r"^[A-Za-z0-9_.:=][A-Za-z0-9_.:=-]*\Z"), "a single word (not starting with '-': docker would read it as an option)"),
    # docker run --gpus: all, a count, or one device (a list would need the client's CSV quoting)
    "gpus": (re.compile(r"^(?:all|[1-9][0-9]*|device=[A-Za-z0-9-]+)\Z"), "'all', a number of GPUs, or 'device=ID'"),
    "cdi": (re.compile(r"^[a-z0-9][a-z0-9.-]*\.[a-z]{2,}/[a-z0-9][a-z0-9_.-]*\Z"), "a CDI device kind such as 'nvidia.com/gpu'"),
    "pci": (re.compile(r"^0x[0-9a-f]{4}\Z"), "a PCI vendor id such as '0x10de'"),
    "text": (_TEXT, "text without quotes, backslashes, '$' or backticks"),
}


def check_str(kind: str) -> Callable[[Any], tuple[Any, str | None]]:
    pattern, hint = _PATTERNS[kind]

    def check(value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return None, type_message(value, "a string")
        if (ch := unsafe_char(value)) is not None:
            return None, unsafe_message(value, ch)
        if kind in ("image", "repository") and len(value) > 255:  # Docker's own limit on a reference
            return None, f"{value[:64]!r}... is longer than an image reference may be (255 characters)"
        if not pattern.match(value):
            return None, f"{value!r} is not {hint}"
        if kind == "url" and (why := url_credentials(value)):
            return None, why
        if kind == "platform":  # read as Docker reads it, kept in its one spelling: linux/aarch64 is linux/arm64
            return Platform.parse(value, MATRIX_OSES), None
        return value, None

    return check


def url_credentials(url: str) -> str | None:
    """Why a URL with credentials in it (user:password@) is refused, or None: what a matrix holds is written into
    every Dockerfile and so into the image's build history. The message does not quote them."""
    scheme, sep, rest = url.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if not sep or "@" not in netloc:
        return None
    bare = f"{scheme}://{netloc.rsplit('@', 1)[1]}{rest[len(netloc):]}"
    return (f"'{bare}' carries credentials (user:password@ before the host, not shown): they would be written into "
            "every Dockerfile and the image's build history. Give the URL without them and the credentials in a "
            "netrc file: `--netrc FILE` (passed to the build as a BuildKit secret, never a layer)")


RESERVED_ENV = "ENVBUILD_"  # the image's own controls (what the probe imports and calls): set from their fields
# The image's guard of what it carries (a vendor's torch above all): set to its lock's constraints, never replaced.
GUARD_ENV = ("PIP_CONSTRAINT", "UV_CONSTRAINT")


_SECRET_WAY = ("a matrix is committed, written into every Dockerfile and printed: pass a secret at run time "
               "(`envbuild run -e NAME`, its value from your environment) or to a build as a BuildKit secret (--netrc)")


def _check_env_key(value: Any) -> tuple[Any, str | None]:
    value, why = check_str("env_key")(value)
    if why is None and value.upper().startswith(RESERVED_ENV):
        return None, (f"{value!r} is reserved: envbuild sets {RESERVED_ENV}* itself, from the backend's fields "
                      "(device, import, availability, ...)")
    if why is None and value.upper() in GUARD_ENV:
        return None, (f"{value!r} is reserved: the image sets it to its own constraints, so that no later pip or uv "
                      "install replaces the torch (or the vendor's plugin) it was built and tested with")
    if why is None and value.upper() in (*CACHE_ENV, *CACHE_DERIVED_ENV):
        return None, (f"{value!r} is reserved: the image keeps its caches under {CACHE} (one volume, kept between runs); "
                      f"moving this one would bypass the cache volume, and every run would download and compile again. "
                      f"To keep the cache somewhere of your own, mount your own folder at {CACHE}: `envbuild run --cache "
                      "./my-cache` (or `smoke --cache`)")
    if why is None and secret_name(value, strict=True):
        return None, f"{value!r} names a secret: {_SECRET_WAY}"
    return value, why


def _check_env_value(value: Any) -> tuple[Any, str | None]:
    value, why = check_str("env_value")(value)
    if why is None and scrub(value, environ={}) != value:
        return None, f"the value looks like a secret (a token, a URL's password; not shown): {_SECRET_WAY}"
    return value, why


def _check_prose(value: Any) -> tuple[Any, str | None]:
    """Free text for people (reasons, alternatives): never rendered into a Dockerfile."""
    if not isinstance(value, str):
        return None, type_message(value, "a string")
    if (ch := unsafe_char(value, allow="\n")) is not None:  # printed to terminals
        return None, unsafe_message(value, ch)
    return value.strip(), None


def _check_version(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, type_message(value, "a version string") + " (quote it, e.g. \"2.13.0\")"
    if (ch := unsafe_char(value)) is not None:
        return None, unsafe_message(value, ch)
    if value != value.strip():
        return None, f"{value!r} has leading or trailing spaces"
    try:
        if len(value) > 64:  # no release number is this long (and a 5,000-digit one is not a number Python reads)
            raise InvalidVersion(value)
        Version(value)
    except ValueError:  # InvalidVersion, and an integer too long to convert
        return None, f"{value[:64]!r}{'...' if len(value) > 64 else ''} is not a valid version (PEP 440), e.g. \"2.13.0\""
    return value, None


def _check_specifier(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, type_message(value, "a version specifier string") + " (e.g. \">=2.5,<2.6\")"
    if (ch := unsafe_char(value)) is not None:
        return None, unsafe_message(value, ch)
    try:
        if len(value) > 200:
            raise InvalidSpecifier(value)
        for spec in SpecifierSet(value):
            if spec.operator != "===":
                Version(spec.version.rstrip(".*"))  # a number Python can read (not 5,000 digits)
    except ValueError:  # InvalidSpecifier, InvalidVersion, an integer too long to convert
        return None, f"{value[:200]!r} is not a valid version specifier (PEP 440), e.g. \">=2.5,<2.6\""
    return value, None


_REQUIREMENT_CHARS = re.compile(r'["\\$`]')


def _check_requirement(value: Any) -> tuple[Any, str | None]:
    """A PEP 508 requirement from an index (name, extras, specifier, marker): what a lock can pin and hash."""
    if not isinstance(value, str):
        return None, type_message(value, "a requirement string") + " (e.g. \"datasets>=4\")"
    if (ch := unsafe_char(value)) is not None:
        return None, unsafe_message(value, ch)
    if _REQUIREMENT_CHARS.search(value):
        return None, f"{value!r} contains a quote, backslash, '$' or backtick"

    from packaging.requirements import InvalidRequirement, Requirement  # 50 to 150 ms (markers, tags): only for one

    try:
        if len(value) > 400:
            raise InvalidRequirement("longer than 400 characters")
        req = Requirement(value)
        for spec in req.specifier:
            if spec.operator != "===":
                Version(spec.version.rstrip(".*"))
    except ValueError as exc:  # InvalidRequirement, InvalidVersion, an integer too long to convert
        return None, f"{value!r} is not a PEP 508 requirement ({str(exc).splitlines()[0]})"
    if req.url:
        return None, f"{value!r} names a URL: a lock pins packages from an index (publish it there, or use --wheelhouse)"
    return str(req), None


_PYTHON = re.compile(r"^3\.[0-9]{1,2}\Z")


def _check_python(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, type_message(value, "a Python version string") + " (quote it, e.g. \"3.12\")"
    if (ch := unsafe_char(value)) is not None:
        return None, unsafe_message(value, ch)
    if not _PYTHON.match(value):
        return None, f"{value!r} is not a Python release such as \"3.12\" (major.minor)"
    return value, None


def _check_bool(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, bool):
        return value, None
    return None, type_message(value, "true or false")


def type_message(value: Any, expected: str) -> str:
    kinds = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "a mapping", str: "a string"}
    got = "nothing (null)" if value is None else kinds.get(type(value), type(value).__name__)
    shown = "" if isinstance(value, (list, dict)) or value is None else f" {value!r}"
    return f"expected {expected}, got {got}{shown}"


# --------------------------------------------------------------------------------------------------
# The schema: data, not code.


@dataclass(frozen=True)
class Field:
    check: Callable[[Any], tuple[Any, str | None]] | None = None
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    list_of: Callable[[Any], tuple[Any, str | None]] | None = None
    map_of: tuple[Callable, Callable] | None = None
    section: dict[str, "Field"] | None = None


def _leaf(kind: str, **kw: Any) -> Field:
    return Field(check=check_str(kind), **kw)


def _list(kind: str, **kw: Any) -> Field:
    return Field(list_of=check_str(kind), default=(), **kw)


# `avoid`: releases known broken for these images (say why in a comment): outdated and bump never propose them.
_VERSIONED = {"version": Field(check=_check_version, required=True), "avoid": Field(list_of=_check_version, default=())}
# transformers and accelerate: the torch the pinned release declares it needs (its metadata's Requires-Dist),
# so that validate can hold every backend's torch to it offline; outdated and bump refresh it.
_NEEDS_TORCH = {**_VERSIONED, "torch": Field(check=_check_specifier)}

_RUN = {
    "gpus": _leaf("gpus"),
    "devices": _list("device_node"),
    "runtime": _leaf("word"),
    "env": Field(map_of=(_check_env_key, _check_env_value), default={}),
    "volumes": _list("volume"),
    "group_add": _list("word"),
    "ipc": _leaf("word"),
    "shm_size": _leaf("size"),
    "privileged": Field(check=_check_bool, default=False),
    "security_opt": _list("word"),
    "cap_add": _list("word"),
    "network": _leaf("word"),
    # The device's CDI kind (nvidia.com/gpu, amd.com/gpu): what Podman's --device, Kubernetes' resource limits and
    # Apptainer's GPU flag name it by (core/runspec.py holds each tool's words for it).
    "cdi": _leaf("cdi"),
    # Why the backend needs these flags: said when a host refuses one (prose for people, never rendered).
    "why": Field(check=_check_prose),
}

BACKEND = {
    "description": _leaf("text", required=True),
    "device": _leaf("name", required=True),
    "containerizable": Field(check=_check_bool, default=True),
    "reason": Field(check=_check_prose),
    "alternatives": Field(check=_check_prose),
    "base_image": _leaf("image"),
    "platforms": _list("platform", required=True),
    "python": Field(
        section={
            "executable": _leaf("executable", default="python3"),
            "apt": _list("apt"),
            # The Python the base runs (X.Y): every pinned package's Requires-Python is held to it (validate,
            # from the metadata cache), and the build and the lock fail when the base runs another.
            "version": Field(check=_check_python),
        }
    ),
    "torch": Field(
        required=True,
        section={
            "source": _leaf("word", default="pip", choices=("pip", "base")),
            "version": Field(check=_check_version, required=True),
            "index_url": _leaf("url"),
            # true: take whatever build of torch the indexes serve, even PyPI's default (CUDA on linux x86_64) for
            # a cpu backend; recorded in the lock. false: a lock whose torch is not the backend's build is refused.
            "any_build": Field(check=_check_bool, default=False),
        },
    ),
    "plugin": Field(
        section={
            "package": _leaf("dist", required=True),
            "version": Field(check=_check_version, required=True),
            "source": _leaf("word", default="pip", choices=("pip", "base")),
            "index_url": _leaf("url"),
            "pairing": _leaf("word", default="none", choices=RULES),
            "torch": Field(check=_check_specifier),
            # What the plugin loads from the vendor (toolkit, driver) and where that comes from: the probe's
            # advice when the plugin cannot load.
            "needs": _leaf("text"),
        }
    ),
    "import": _leaf("module"),
    # Only for a torch older than 2.6: newer ones answer through torch.accelerator.
    "availability": _leaf("api"),
    # Debian packages the backend's runtime asks for (e.g. a library its plugin wants preloaded).
    "apt": _list("apt"),
    "env": Field(map_of=(_check_env_key, _check_env_value), default={}),
    "run": Field(section=_RUN),
    "detect": Field(
        section={
            "device_nodes": _list("glob"),
            "pci_vendors": _list("pci"),
            "tools": _list("word"),
            "runtimes": _list("word"),
            "os": _leaf("word", choices=("linux", "darwin")),
            "arch": _list("word"),
        }
    ),
    "ci": Field(section={"runs_on": _list("label", required=True)}),
    # This backend's own transformers/accelerate, where the shared pin cannot run on its base (an older Python
    # or torch of a vendor's image): the newest release that fits, from its metadata.
    "transformers": Field(section=_NEEDS_TORCH),
    "accelerate": Field(section=_NEEDS_TORCH),
    # Who the image runs as: a named non-root user (the default), or root where the vendor's stack needs it.
    "user": _leaf("word", default="envbuild", choices=("envbuild", "root")),
    # torch.compile: the compiler and Python headers it needs (Debian packages, a layer of their own), and
    # whether the probe's compile check runs in smoke tests.
    "compile": Field(section={"check": Field(check=_check_bool, default=False), "apt": _list("apt")}),
    # This backend's own extra packages (PEP 508), locked and installed in its image only.
    "packages": Field(list_of=_check_requirement, default=()),
    # Another backend of the same device whose settings this one shares, overriding only what it sets (a
    # variant, e.g. cuda-cu126 beside cuda: its own torch index and base image for older drivers).
    "variant_of": _leaf("name"),
    # What the image needs of the host: the accelerator stack it carries (its minimum driver comes from
    # its module in envbuild/matrix/stacks/, or `driver` where the vendor says otherwise) and, optionally, the device
    # architectures it runs on: for CUDA and ROCm those torch was built for (the build checks them against torch
    # itself), for CANN the Ascend SoC family of its base (910b, a3, 310p). `envbuild pick` compares both with the host.
    "host": Field(section={
        "stack": _leaf("word", required=True, choices=stacks.STACKS.keys()),  # the registry, live
        "version": Field(check=_check_version, required=True),
        "driver": Field(check=_check_version),
        "arch": _list("word"),
        # The linux/arm64 build's list where PyTorch builds another one (CUDA 13 on aarch64 adds sm_110).
        "arch_arm64": _list("word"),
        # NVIDIA's forward compatibility (the cuda-compat package: a newer CUDA on an older driver, data-center
        # GPUs only): true only where the image carries it and it was confirmed; off by default.
        "forward_compat": Field(check=_check_bool, default=False),
    }),
}

TOP = {
    "image": Field(
        required=True,
        section={
            "repository": _leaf("repository", required=True),
            "source": _leaf("url", required=True),
            "licenses": _leaf("word", default="Apache-2.0"),
            "vendor": _leaf("text", default="envbuild"),
        },
    ),
    "transformers": Field(section=_NEEDS_TORCH, required=True),
    "accelerate": Field(section=_NEEDS_TORCH, required=True),
    # The installer used inside image builds (never shipped in an image): pinned here, and only here.
    "uv": Field(section=_VERSIONED, required=True),
    # Extra packages every image carries (PEP 508): locked with transformers and accelerate, under the torch
    # and plugin of each backend.
    "packages": Field(list_of=_check_requirement, default=()),
    # Where every package but torch and the plugin comes from (the lock records them; builds install from them).
    "index": Field(section={
        "url": _leaf("url", default="https://pypi.org/simple"),
        "extra_urls": _list("url"),
    }),
    "backends": Field(required=True),  # a mapping of name -> BACKEND, checked below
    # The public key (cosign.pub, relative to this file) that pull and run verify images with (envbuild/ship/trust).
    "trust": Field(section={"public_key": _leaf("text")}),
}




def check_field(dotted: str, value: Any) -> str | None:
    """Why `value` may not be the scalar at `dotted` (as matrix.yaml is checked), or None; an unknown field, or
    one that holds no single value, is a reason too."""
    parts = dotted.split(".")
    section: dict[str, Field] | None = TOP
    if len(parts) > 2 and parts[0] == "backends":
        section, parts = BACKEND, parts[2:]
    spec = None
    for i, part in enumerate(parts):
        spec = section.get(part) if section is not None else None
        if spec is None:
            return f"{dotted}: no such field in the matrix"
        section = spec.section
    if spec is None or spec.check is None:
        return f"{dotted}: not a field that holds one value"
    checked, why = spec.check(value)
    if why is None and spec.choices and checked not in spec.choices:
        why = f"{value!r} is not one of {', '.join(spec.choices)}"
    return why
