"""Between render and build: locks/<backend>.txt, the exact, hashed distributions an image installs.

Like cargo's and uv's lock files: the build installs the lock; the lock changes only when its inputs change
or when asked to (--upgrade, --upgrade-package); `--locked` (CI, publish) refuses a lock that is missing or
stale instead of resolving. Resolution happens in the backend's own base, on the engine that builds
(the Dockerfile's `lock` target runs resolve.py there); staleness is decided from the lock's header alone.

One file per platform, locks/<backend>/<os>-<arch>.txt: wheels and their hashes differ per platform, each
file is a complete hashed requirements file that its platform's build installs as it is, and the native
runner of each platform refreshes its own file. The header names the platform and the base image by the
registry's digest for that platform (never an engine's local image id), so a lock is current on any machine.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..errors import LockError, StaleLock
from ..files import read_user, write_all, write_atomic
from .lockfile import FORMAT, LockFile, from_report, parse

if TYPE_CHECKING:
    from ..build.plan import BuildOptions, BuildPlan
    from ..engine import Engine
    from ..matrix import Backend, Matrix

RESOLVER = Path(__file__).with_name("resolve.py")

__all__ = ["LockFile", "LockOptions", "LockResult", "base_digest", "check", "ensure", "inputs", "lock", "path", "read",
           "stale", "torch_problem"]


@dataclass(frozen=True)
class LockOptions:
    upgrade: bool = False  # resolve afresh: no previous version is kept
    upgrade_packages: tuple[str, ...] = ()  # only these may move to a newer release


@dataclass
class LockResult:
    backend: str
    path: Path
    status: str  # "up to date", "written", "stale", "missing", "wrong torch"
    why: list[str] = dataclasses.field(default_factory=list)
    count: int = 0
    platform: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "platform": self.platform, "lock": str(self.path), "status": self.status,
                "why": self.why, "distributions": self.count}


def path(opts: BuildOptions, backend: Backend, platform: str | None = None) -> Path:
    """locks/<backend>/<os>-<arch>.txt (default: this host's platform)."""
    from ..host.platform import host_platform

    return opts.locks_dir / backend.name / f"{(platform or host_platform()).replace('/', '-')}.txt"


def platforms(backend: Backend, opts: BuildOptions | None = None) -> list[str]:
    """The platforms to lock: the one asked for (--platform), else every one the backend lists."""
    if opts is not None and opts.platform:
        return [p for p in opts.platform.split(",") if p]
    return [p for p in backend.platforms if p.startswith("linux/")]


def base_digest(backend: Backend, base_image: str, platform: str, opts: BuildOptions,
                environ: Any = None) -> str:
    """The registry's digest of the base image for `platform`: given by a digest-pinned reference (nothing is
    asked), else resolved from the registry's index (manifest list) for that platform."""
    from ..errors import PublishError
    from ..registry.api import Registry

    if "@sha256:" in base_image:
        return base_image.rpartition("@")[2]
    try:
        digest, _ = Registry(base_image, environ, opts.ca_bundle).platform_digest(base_image, platform)
    except PublishError as exc:
        raise LockError(f"{backend.name}: cannot resolve the base image {base_image} for {platform} in its registry "
                        f"({exc}); a lock names its base by the registry's digest: pin it by digest "
                        f"(--set backends.{backend.name}.base_image=REF@sha256:...) to lock without asking") from None
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


def inputs(matrix: Matrix, backend: Backend, plan: BuildPlan, platform: str, digest: str | None) -> dict[str, Any]:
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
        "wheelhouse": [[w.name, w.sha256] for w in plan.wheels],
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


# --- resolving ----------------------------------------------------------------------------------------------


def resolve(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, lock_opts: LockOptions,
            previous: LockFile | None, echo: Callable[[str], None], verbose: bool = False,
            engine: Engine | None = None, *, platform: str, digest: str) -> LockFile:
    """Run the Dockerfile's `lock` target on the engine (for `platform`: the plan's --platform) and turn pip's
    report into the lock."""
    from ..build import builder
    from ..build.plan import lock_command, write_context
    from ..host.platform import require_runnable

    require_runnable(platform, f"locking {backend.name} for {platform}")
    wanted = inputs(matrix, backend, plan, platform, digest)
    write_context(plan)
    folder = plan.context_path / "lock"
    keep = previous is not None and not lock_opts.upgrade
    upgrade = ["*"] if lock_opts.upgrade else [str(canonicalize_name(n)) for n in lock_opts.upgrade_packages]
    for name, text in (("requirements.in", "\n".join(wanted["requirements"]) + "\n"),
                       ("previous.txt", previous.text() if keep and previous else ""),
                       ("upgrade.txt", "".join(f"{n}\n" for n in upgrade)),
                       ("resolve.py", RESOLVER.read_text(encoding="utf-8"))):
        write_atomic(folder / name, text)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    log = opts.log_dir / f"lock-{backend.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    echo(f"[{backend.name}] resolving the lock for {platform} in {plan.base_image} (log: {log})")
    with tempfile.TemporaryDirectory(prefix=f"envbuild-lock-{backend.name}-") as tmp:
        argv = lock_command(plan, Path(tmp), uuid.uuid4().hex)
        error = builder.run_build(argv, opts.build_args, log, builder.Progress(backend.name, echo, verbose), engine)
        if error is not None:
            raise LockError(f"{backend.name}: resolving the lock failed: "
                            f"{builder.base_failure(error, plan.base_image, backend.name) or error}", log)
        out = Path(tmp)
        if (out / "error.txt").exists():
            said = (out / "error.txt").read_text(encoding="utf-8", errors="replace")
            raise LockError(_conflict(backend, matrix, wanted["requirements"], said), log)
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        status = json.loads((out / "status.json").read_text(encoding="utf-8"))
    torch_roots = [r for r in wanted["requirements"][:2] if not r.startswith(("transformers==", "accelerate=="))]
    env = report.get("environment") or {}
    from ..host.platform import arch

    resolved = {"resolver": status.get("resolver"), "python": env.get("python_full_version"),
                "platform": f"{env.get('sys_platform')}/{arch(str(env.get('platform_machine') or '?'))}"}
    if resolved["platform"] != platform:
        raise LockError(f"{backend.name}: asked to resolve for {platform}, the builder resolved on {resolved['platform']} "
                        "(does this builder honour --platform?)", log)
    new = from_report(backend.name, report, wanted, torch_roots, list(matrix.packages_for(backend)), resolved)
    why = torch_problem(backend, new)
    if why:
        raise LockError(why, log)
    return new


def _conflict(backend: Backend, matrix: Matrix, requirements: list[str], said: str) -> str:
    """pip's words when no resolution exists, with the matrix's extras that take part in the conflict named."""
    text = " ".join(line.strip() for line in said.splitlines() if line.strip())
    # pip names a requirement by its line in requirements.in: name it by itself
    text = re.sub(r"-r \S*requirements\.in \(line (\d+)\)",
                  lambda m: requirements[int(m.group(1)) - 1] if 0 < int(m.group(1)) <= len(requirements) else m.group(0), text)
    words = {str(canonicalize_name(w)) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)}
    named = [p for p in matrix.packages_for(backend) if str(canonicalize_name(Requirement(p).name)) in words]
    who = (f"the extra {', '.join(repr(n) for n in named)} (packages: in the matrix) cannot be installed with this "
           "image's pins" if named else "no resolution exists")
    return f"{backend.name}: cannot lock: {who}. pip says: {text[-1500:]}"


# --- the commands -------------------------------------------------------------------------------------------


def _platform_opts(opts: BuildOptions, platform: str) -> BuildOptions:
    """The options of one platform's build: --platform for any but this host's own."""
    from ..host.platform import host_platform

    return opts if platform == (opts.platform or host_platform()) else dataclasses.replace(opts, platform=platform)


def ensure(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, engine: Engine, *, locked: bool,
           echo: Callable[[str], None], verbose: bool = False) -> LockFile:
    """The lock to build from (the platform's: --platform, else this host's): the current one, or (unless
    --locked) a fresh one, written and said so. A GPU backend's lock whose torch is a CPU-only build is refused."""
    from ..host.platform import host_platform

    platform = opts.platform or host_platform()
    file = path(opts, backend, platform)
    current = read(file)
    try:
        digest = base_digest(backend, plan.base_image, platform, opts)
    except LockError as exc:
        # Offline, with a lock current in everything else: build from it (BuildKit may have the base), said so.
        if current is None or stale(current, inputs(matrix, backend, plan, platform, None)):
            raise
        echo(f"[{backend.name}] note: {exc}; building from {file}, current in every other input")
        digest = None
    why = stale(current, inputs(matrix, backend, plan, platform, digest))
    if not why:
        problem = torch_problem(backend, current)
        if problem:
            raise LockError(f"{file}: {problem}")
        return current
    what = "missing" if current is None else f"stale ({'; '.join(why)})"
    if locked:
        raise StaleLock(f"{file} is {what}: run `envbuild lock --backend {backend.name} --platform {platform}` and "
                        "commit the result (--locked builds only from a current lock)")
    echo(f"[{backend.name}] {file} is {what}: resolving it")
    new = resolve(matrix, backend, plan, opts, LockOptions(), current, echo, verbose, engine, platform=platform, digest=digest)
    write_atomic(file, new.text())
    echo(f"[{backend.name}] wrote {file} ({len(new.packages)} distributions)")
    return new


def lock(matrix: Matrix, backends: list[Backend], opts: BuildOptions, lock_opts: LockOptions, engine: Engine, *,
         echo: Callable[[str], None] = lambda s: None, verbose: bool = False) -> list[LockResult]:
    """Write each backend's lock for each of its platforms (or --platform's) when it is missing or stale, or when
    asked to upgrade."""
    from ..build import records
    from ..build.plan import make_plan

    results = []
    texts: dict[Path, str] = {}  # every lock is written at the end, all or none: a failed resolve leaves all as they were
    for backend in backends:
        for platform in _checked_platforms(backend, opts):
            file = path(opts, backend, platform)
            popts = _platform_opts(opts, platform)
            with records.locked(opts.context_dir, backend.name):
                plan = make_plan(matrix, backend, popts, engine)
                current = read(file)
                digest = base_digest(backend, plan.base_image, platform, opts)
                why = stale(current, inputs(matrix, backend, plan, platform, digest))
                asked = lock_opts.upgrade or bool(lock_opts.upgrade_packages)
                if not why and not asked:
                    results.append(LockResult(backend.name, file, "up to date", count=len(current.packages), platform=platform))
                    continue
                new = resolve(matrix, backend, plan, popts, lock_opts, current, echo, verbose, engine,
                              platform=platform, digest=digest)
                texts[file] = new.text()
                results.append(LockResult(backend.name, file, "written", why if not asked else ["asked to upgrade"],
                                          len(new.packages), platform))
    if texts:
        write_all(texts)
    return results


def _checked_platforms(backend: Backend, opts: BuildOptions) -> list[str]:
    """--platform's platforms, refused unless the backend lists them; else every platform it lists."""
    from ..errors import InvalidInput

    chosen = platforms(backend, opts)
    for p in chosen:
        if p not in backend.platforms:
            raise InvalidInput(f"--platform {p}: backend {backend.name} lists {', '.join(backend.platforms)} "
                               "(matrix.yaml, its `platforms`)")
    return chosen


def check(matrix: Matrix, backends: list[Backend], opts: BuildOptions, *, require: bool) -> list[LockResult]:
    """Which locks are stale, missing or hold a CPU-only torch for a GPU backend; writes nothing, resolves nothing,
    and reads files only: no Docker client, engine or network. A backend with a lock for any of its platforms (or
    named, with `require`) needs one for each; a base digest is compared where the matrix pins it by digest."""
    results = []
    for backend in backends:
        chosen = _checked_platforms(backend, opts)
        files = {p: path(opts, backend, p) for p in chosen}
        found = {p: read(f) for p, f in files.items()}
        if not require and all(v is None for v in found.values()):
            continue
        plan = _offline_plan(backend, opts)
        for p, current in found.items():
            if current is None:
                results.append(LockResult(backend.name, files[p], "missing", [f"there is no lock for {p}"], platform=p))
                continue
            pinned = plan.base_image.rpartition("@")[2] if "@sha256:" in plan.base_image else None
            why = stale(current, inputs(matrix, backend, plan, p, pinned))
            problem = None if why else torch_problem(backend, current)
            status = "stale" if why else ("wrong torch" if problem else "up to date")
            results.append(LockResult(backend.name, files[p], status, why or ([problem] if problem else []),
                                      len(current.packages), p))
    return results


def _offline_plan(backend: Backend, opts: BuildOptions) -> Any:
    """What inputs() reads of a plan, from files alone (no builder, no engine): the base after --mirror, the wheels."""
    from types import SimpleNamespace

    from ..build.plan import DIGESTS, wheels
    from ..imageref import mirror

    context = (opts.context_dir / backend.name).resolve()
    return SimpleNamespace(base_image=mirror(backend.base_image, opts.mirrors) if backend.base_image else "",
                           wheels=wheels(opts.wheelhouse, context / DIGESTS))


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
