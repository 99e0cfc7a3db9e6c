"""Between render and build: locks/<backend>/<os>-<arch>.txt, the exact, hashed distributions an image installs.

Like cargo's and uv's lock files: the build installs the lock; the lock changes only when its inputs change
or when asked to (--upgrade, --upgrade-package); `--locked` (CI, publish) refuses a lock that is missing or
stale instead of resolving. This package is the lock's format and its inputs, and decides staleness from the
lock's header alone; it runs no builder. Resolving a lock does (the Dockerfile's `lock` target runs resolve.py
in the backend's own base, on the engine that builds): that is envbuild.imagebuild.locking, which imports this.

One file per platform, locks/<backend>/<os>-<arch>.txt: wheels and their hashes differ per platform, each
file is a complete hashed requirements file that its platform's build installs as it is, and the native
runner of each platform refreshes its own file. The header names the platform and the base image by the
registry's digest for that platform (never an engine's local image id), so a lock is current on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from envbuild.core.errors import LockError, RegistryError
from envbuild.core.files import read_user
from envbuild.core.platform import target
from envbuild.core import regclient
from envbuild.lock.lockfile import FORMAT, LockFile, parse

if TYPE_CHECKING:
    from envbuild.matrix import Backend, Matrix


class Settings(Protocol):
    """What the lock reads of a build's options (the image stage's BuildOptions has these): the lock sits below the
    image stage and names none of its types."""

    locks_dir: Path
    platform: str | None
    ca_bundle: Path | None


class Wheel(Protocol):
    """A wheel of the build's wheelhouse, as the lock records it."""

    name: str
    sha256: str

RESOLVER = Path(__file__).with_name("resolve.py")  # run in the image being locked, by envbuild.imagebuild.locking

__all__ = ["LockFile", "RESOLVER", "base_digest", "inputs", "path", "platforms", "read", "requirements", "stale",
           "torch_problem"]


def path(opts: Settings, backend: Backend, platform: str | None = None) -> Path:
    """locks/<backend>/<os>-<arch>.txt (default: this host's platform)."""
    return opts.locks_dir / backend.name / f"{target(platform).replace('/', '-')}.txt"


def platforms(backend: Backend, opts: Settings | None = None) -> list[str]:
    """The platforms to lock: the one asked for (--platform), else every one the backend lists."""
    if opts is not None and opts.platform:
        return [opts.platform]
    return [p for p in backend.platforms if p.startswith("linux/")]


def base_digest(backend: Backend, base_image: str, platform: str, opts: Settings,
                environ: Any = None) -> str:
    """The registry's digest of the base image for `platform`: given by a digest-pinned reference (nothing is
    asked), else resolved from the registry's index (manifest list) for that platform."""
    if "@sha256:" in base_image:
        return base_image.rpartition("@")[2]
    try:
        digest, _ = regclient.Registry(base_image, environ, opts.ca_bundle, publish=False).platform_digest(base_image, platform)
    except RegistryError as exc:  # unreachable, refused, too slow, not an image
        from envbuild.core.imageref import base_ways_out

        raise LockError(f"{backend.name}: cannot resolve the base image {base_image} for {platform} in its registry "
                        f"({exc}): a lock names its base by the registry's digest. "
                        f"{base_ways_out(base_image, backend.name)}") from None
    return digest


def read(file: Path) -> LockFile | None:
    """The lock at `file`; None when there is none; a LockError naming the file and line when it is broken."""
    if not file.exists() and not file.is_symlink():
        return None
    try:
        text = read_user(file, str(file), LockError).decode("utf-8")
    except UnicodeDecodeError:
        raise LockError(f"{file}: not UTF-8 text") from None
    return parse(text, str(file))


def requirements(matrix: Matrix, backend: Backend) -> list[str]:
    """What the image asks for; torch and a plugin that the base carries are not asked for: they are kept."""
    reqs = []
    if backend.torch.source == "pip":
        reqs.append(f"torch=={backend.torch.version}")
    if backend.plugin and backend.plugin.source == "pip":
        reqs.append(f"{backend.plugin.package}=={backend.plugin.version}")
    return [*reqs, f"transformers=={matrix.pin('transformers', backend)}", f"accelerate=={matrix.pin('accelerate', backend)}", *matrix.packages_for(backend)]


def inputs(matrix: Matrix, backend: Backend, wheels: Iterable[Wheel], platform: str, digest: str | None) -> dict[str, Any]:
    """Everything a lock is resolved from: a different value is a stale lock. `digest`: the base's registry digest
    for `platform` (None: not asked, e.g. by `lock --check`, which reads files only)."""
    indexes = [matrix.index.url, *matrix.index.extra_urls, backend.torch.index_url,
               backend.plugin.index_url if backend.plugin else None]
    return {
        "format": FORMAT,
        "backend": backend.name,
        "requirements": requirements(matrix, backend),
        "keep_base": backend.torch.source == "base" or bool(backend.plugin and backend.plugin.source == "base"),
        "platform": platform,
        "base_image": backend.base_image,
        "base_digest": digest,
        "python": backend.python.executable if backend.torch.source == "base" else f"{backend.python.executable} (venv)",
        "indexes": list(dict.fromkeys(u for u in indexes if u)),
        "wheelhouse": [[w.name, w.sha256] for w in wheels],
        "uv": matrix.uv,
    }


def stale(current: LockFile | None, wanted: dict[str, Any]) -> list[str]:
    """Why `current` is not the lock of `wanted` (empty when it is). A base digest that was not asked (`lock --check`
    reads files only) is not compared: the reference still is, and a digest-pinned reference is exact."""
    if current is None:
        return ["there is no lock"]
    why = []
    for key in sorted(set(current.inputs) | set(wanted)):
        old, new = current.inputs.get(key), wanted.get(key)
        if key == "base_digest" and new is None and key in current.inputs:
            continue
        if old != new and isinstance(old, list) and isinstance(new, list):
            gone = [json.dumps(x) if not isinstance(x, str) else x for x in old if x not in new]
            came = [json.dumps(x) if not isinstance(x, str) else x for x in new if x not in old]
            why.append(f"{key}: {_short(', '.join(gone) or '(none)')} -> {_short(', '.join(came) or '(none)')}")
        elif old != new:
            why.append(f"{key}: {_short(old)} -> {_short(new)}")
    return why


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- a GPU image never quietly lacks its GPU ----------------------------------------------------------------------

# What marks a GPU build of torch in a lock: a local version label, or the runtime wheels it pulls in.
_GPU_TORCH = {
    "cuda": ("CUDA", ("+cu",), ("nvidia-", "cuda-")),
    "rocm": ("ROCm", ("+rocm",), ("pytorch-triton-rocm",)),
    "xpu": ("XPU", ("+xpu",), ("intel-", "pytorch-triton-xpu")),
}


def torch_problem(backend: Backend, lockfile: LockFile) -> str | None:
    """Why a GPU backend's lock holds a CPU-only torch (None: it does not, or torch is not locked here). PyPI's
    aarch64 torch has been a CPU build for some releases: pip takes it silently, and the image would run on CPU."""
    if backend.torch.source != "pip":
        return None
    index = backend.torch.index_url or ""
    kind = "rocm" if "rocm" in index else backend.device
    if kind not in _GPU_TORCH:
        return None
    name, labels, companions = _GPU_TORCH[kind]
    torch = next((p for p in lockfile.packages if p.name == "torch"), None)
    if torch is None:
        return None
    if any(label in torch.version for label in labels) or any(p.name.startswith(companions) for p in lockfile.packages):
        return None
    platform = lockfile.inputs.get("platform") or lockfile.resolved.get("platform") or "?"
    said = (f"{backend.name} ({name}) on {platform}: the locked torch=={torch.version} is a CPU-only build (no "
            f"{name} version label, none of {', '.join(c.rstrip('-') + '*' for c in companions)})")
    if "download.pytorch.org/whl/" in index:
        return (f"{said}; the index {index} has the {name} build for {platform}, but another source (PyPI, a "
                "wheelhouse) served this one: lock again with torch taken from that index")
    return (f"{said}; PyTorch's {name} index (https://download.pytorch.org/whl/<{name.lower()} version>, e.g. "
            f"https://download.pytorch.org/whl/cu132) has the {name} build for {platform}: set "
            f"backends.{backend.name}.torch.index_url to it and lock again")
