"""Between render and build: locks/<backend>/<os>-<arch>.txt, the exact, hashed distributions an image installs.

Like cargo's and uv's lock files: the build installs the lock; the lock changes only when its inputs change
or when asked to (--upgrade, --upgrade-package); `--locked` (CI, publish) refuses a lock that is missing or
stale instead of resolving. This module is the lock's format and its inputs, and decides staleness from the
lock's header alone; it runs no builder. Beside it, the lock's orchestration: locking.py resolves a lock (the
Dockerfile's `lock` target runs resolve.py in the backend's own base, on the engine that builds), ensures one
before a build and checks them all; build.py is a build from its lock (ensure it, then build).

One file per platform, locks/<backend>/<os>-<arch>.txt: wheels and their hashes differ per platform, each
file is a complete hashed requirements file that its platform's build installs as it is, and the native
runner of each platform refreshes its own file. The header names the platform and the base image by the
registry's digest for that platform (never an engine's local image id), so a lock is current on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.core.errors import LockError, RegistryError
from envbuild.core.files import read_project
from envbuild.core.platform import Platform, target
from envbuild.net import regclient
from envbuild.image.lockfile import FORMAT, BrokenLock, LockFile, parse

if TYPE_CHECKING:
    from envbuild.image.plan import BuildOptions
    from envbuild.matrix import Backend, Matrix


PING_TIMEOUT = 3.0  # seconds the base's registry has to answer at all before a lock asks it for a digest
RESOLVER = Path(__file__).with_name("resolve.py")  # run in the image being locked, by envbuild.image.locking


def path(opts: BuildOptions, backend: Backend, platform: Platform | None = None) -> Path:
    """locks/<backend>/<os>-<arch>.txt (default: this host's platform)."""
    return opts.locks_dir / backend.name / f"{target(platform).stem}.txt"


def platforms(backend: Backend, opts: BuildOptions | None = None) -> list[Platform]:
    """The platforms to lock: the one asked for (--platform), else every one the backend lists."""
    if opts is not None and opts.platform:
        return [Platform(opts.platform)]
    return [p for p in backend.platforms if p.os == "linux"]


def base_digest(backend: Backend, base_image: str, platform: Platform, opts: BuildOptions,
                environ: Any = None) -> str:
    """The registry's digest of the base image for `platform`: given by a digest-pinned reference (nothing is
    asked), else resolved from the registry's index (manifest list) for that platform."""
    if "@sha256:" in base_image:
        return base_image.rpartition("@")[2]
    try:
        registry = regclient.Registry(base_image, environ, opts.ca_bundle, publish=False)
        registry.ping(PING_TIMEOUT)  # a registry that never answers is said in seconds, not after each request's 30
        digest, _ = registry.platform_digest(base_image, platform)
    except RegistryError as exc:  # unreachable, refused, too slow, not an image
        from envbuild.core.distbase import base_ways_out

        ways = base_ways_out(base_image, backend.name)  # names `envbuild base` where it can make the base
        raise LockError(f"{backend.name}: cannot resolve the base image {base_image} for {platform} in its registry "
                        f"({exc}): a lock names its base by the registry's digest. {ways}") from None
    return digest


MAX_LOCK = 16 << 20  # a lock of a few hundred distributions is tens of KB


def read(file: Path) -> LockFile | None:
    """The lock at `file`; None when there is none; a LockError naming the file and line when it is broken. A
    pull request may bring it: a regular file inside the locks folder (locks/<backend>/<platform>.txt), never a
    link out of it."""
    if not file.exists() and not file.is_symlink():
        return None
    try:
        text = read_project(file, str(file), BrokenLock, limit=MAX_LOCK, within=file.parent.parent).decode("utf-8")
    except UnicodeDecodeError:
        raise BrokenLock(f"{file}: not UTF-8 text") from None
    return parse(text, str(file))


def requirements(matrix: Matrix, backend: Backend) -> list[str]:
    """What the image asks for; torch and a plugin that the base carries are not asked for: they are kept."""
    reqs = []
    if backend.torch.source == "pip":
        reqs.append(f"torch=={backend.torch.version}")
    if backend.plugin and backend.plugin.source == "pip":
        reqs.append(f"{backend.plugin.package}=={backend.plugin.version}")
    return [*reqs, f"transformers=={matrix.pin('transformers', backend)}", f"accelerate=={matrix.pin('accelerate', backend)}", *matrix.packages_for(backend)]


def inputs(matrix: Matrix, backend: Backend, platform: Platform, digest: str | None) -> dict[str, Any]:
    """Everything a lock is resolved from: a different value is a stale lock. `digest`: the base's registry digest
    for `platform` (None: not asked, e.g. by `lock --check`, which reads files only). Not the wheel folder: the
    lock names each file by its URL and hash, and a wheel folder (or a mirror) only serves those files, so a lock
    made where the indexes answer stays current where only a wheel folder does."""
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
        # the matrix's explicit acceptance of any torch build (torch.any_build), recorded: it changes what is refused
        "torch_build": "any (torch.any_build)" if backend.torch.any_build else "the backend's",
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


# --- a lock holds the backend's own build of torch ----------------------------------------------------------------

# What marks a GPU build of torch in a lock: each driver stack says its own (envbuild.matrix.stacks, `gpu_torch`).
# Intel's XPU has no driver stack in the matrix yet; its row moves into that module when it gets one.
_XPU_TORCH = {"xpu": ("XPU", ("+xpu",), ("intel-", "pytorch-triton-xpu"))}
# What a CUDA build of torch brings into a lock (PyPI's default torch for linux x86_64 is one): its CUDA runtime
# wheels and the Triton it compiles kernels with.
_CUDA_WHEELS = ("nvidia-", "cuda-", "triton")
_CPU_INDEX = "download.pytorch.org/whl/cpu"


def torch_problem(backend: Backend, lockfile: LockFile) -> str | None:
    """Why the lock's torch is not the build the backend declares (None: it is, torch is not locked here, or the
    matrix accepts any build: torch.any_build). Both ways happen silently: PyPI's aarch64 torch has been a CPU build
    for some releases, so a GPU backend would run on CPU; PyPI's default x86_64 torch is a CUDA build, so a cpu
    backend whose CPU index did not answer would carry gigabytes of CUDA."""
    if backend.torch.source != "pip" or backend.torch.any_build:
        return None
    torch = next((p for p in lockfile.packages if p.name == "torch"), None)
    if torch is None:
        return None
    index = backend.torch.index_url or ""
    platform = lockfile.inputs.get("platform") or lockfile.resolved.get("platform") or "?"
    if backend.device == "cpu":
        return _cpu_problem(backend, lockfile, torch, index, platform)
    from envbuild.matrix import stacks  # the matrix, only where a lock is checked

    build = stacks.gpu_torch(backend.device, index) or _XPU_TORCH.get(backend.device)
    if build is None:
        return None
    name, labels, companions = build[:3]
    if any(label in torch.version for label in labels) or any(p.name.startswith(companions) for p in lockfile.packages):
        return None
    said = (f"{backend.name} ({name}) on {platform}: the locked torch=={torch.version} is a CPU-only build (no "
            f"{name} version label, none of {', '.join(c.rstrip('-') + '*' for c in companions)})")
    if "download.pytorch.org/whl/" in index:
        return (f"{said}; the index {index} has the {name} build for {platform}, but another source (PyPI, a "
                "wheelhouse) served this one: lock again with torch taken from that index")
    return (f"{said}; PyTorch's {name} index (https://download.pytorch.org/whl/<{name.lower()} version>, e.g. "
            f"https://download.pytorch.org/whl/cu132) has the {name} build for {platform}: set "
            f"backends.{backend.name}.torch.index_url to it and lock again")


def _cpu_problem(backend: Backend, lockfile: LockFile, torch: Any, index: str, platform: Platform) -> str | None:
    """A cpu lock holding a CUDA build of torch: its CUDA wheels, or (where PyTorch's CPU index is declared, on
    x86_64, where that index's builds carry `+cpu`) a torch without the label."""
    cuda = [p.name for p in lockfile.packages if p.name.startswith(_CUDA_WHEELS)]
    unlabelled = _CPU_INDEX in index and platform.endswith("/amd64") and "+cpu" not in torch.version
    if not cuda and not unlabelled:
        return None
    what = (f"CUDA wheels ({', '.join(cuda[:6])}{', ...' if len(cuda) > 6 else ''}: {len(cuda)} of them)" if cuda
            else "no `+cpu` version label")
    source = f"the CPU index {index}" if index else "PyTorch's CPU index (https://download.pytorch.org/whl/cpu)"
    return (f"{backend.name} (CPU) on {platform}: the locked torch=={torch.version} is not the CPU build: the lock holds "
            f"{what}. That is PyPI's default torch, taken when {source} did not serve torch (unreachable?). "
            f"Ways out: lock again with that index reachable, or an index mirror of it "
            f"(--set backends.{backend.name}.torch.index_url=MIRROR_URL); or a wheel folder holding the CPU wheel "
            f"(--wheelhouse DIR, e.g. filled by `pip download --no-deps torch=={torch.version.split('+')[0]}+cpu "
            f"--index-url https://download.pytorch.org/whl/cpu -d DIR`); or, to really take PyPI's default build, "
            f"set backends.{backend.name}.torch.any_build: true in the matrix (recorded in the lock)")
