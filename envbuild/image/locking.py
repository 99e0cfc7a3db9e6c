"""The lock's orchestration: resolving a lock (`envbuild lock`), ensuring one before a build, checking them all.

lockstate.py and lockfile.py are the lock's inputs, its format and when it is stale; this module runs them.
Resolving a lock runs the Dockerfile's `lock` target on the engine that builds, through the same plan and builder as
a build; a build's plan holds its lock as data (`with_lock`: the lock's text and each layer's pylock.toml).
`check` resolves nothing and reads files only (no Docker client, engine or network).
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
from typing import TYPE_CHECKING, Any, Callable, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envbuild.core.distbase import MADE_LABEL
from envbuild.core.errors import LockError, StaleLock, UnreachableError
from envbuild.core.files import write_all, write_atomic
from envbuild.core.imageref import mirror
from envbuild.core.platform import Platform, arch, require_runnable, target
from envbuild.image import builder, reach, records
from envbuild.image.plan import content_key, lock_command, make_plan, write_context
from envbuild.image.lockstate import RESOLVER, base_digest, inputs, path, platforms, read, stale, torch_problem
from envbuild.image.lockfile import LAYERS, LockFile, from_report

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend, Matrix
    from envbuild.image.plan import BuildOptions, BuildPlan

__all__ = ["LockOptions", "LockResult", "check", "ensure", "lock", "planned_content_key", "resolve", "with_lock"]


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
    platform: Platform | None = None

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "platform": self.platform, "lock": str(self.path), "status": self.status,
                "why": self.why, "distributions": self.count}


# --- what the image stage takes of a lock ----------------------------------------------------------------------


def with_lock(plan: BuildPlan, lockfile: LockFile | None) -> BuildPlan:
    """The plan that installs `lockfile` (None: none yet, while it is being resolved): its text, and each of its
    layers as a pylock.toml naming each file's source (the locked URL, an index mirror's, or the wheel folder's file
    of the same name and hash), which the image stage writes into the build context as they are."""
    held = {w.name: w.sha256 for w in plan.wheels}
    layers = tuple((layer, lockfile.pylock(layer, held, plan.index_mirrors) if lockfile else "") for layer in LAYERS)
    return dataclasses.replace(plan, lock=lockfile.text().encode("utf-8") if lockfile else b"", lock_layers=layers)


def planned_content_key(matrix: Matrix, backend: Backend, opts: BuildOptions, platform: Platform | None = None,
                        environ: Mapping[str, str] | None = None) -> str | None:
    """The content key the image of this cell will carry, from the checkout alone: its committed lock for the
    platform (None when there is none: it cannot be known before resolving), nothing built, no engine asked."""
    popts = dataclasses.replace(opts, platform=platform or opts.platform)
    lockfile = read(path(popts, backend, target(popts.platform)))
    if lockfile is None:
        return None
    plan = make_plan(matrix, backend, popts, None, environ, lock=lockfile.text().encode("utf-8"), write_cache=False)
    return content_key(plan, popts, environ)


# --- resolving ----------------------------------------------------------------------------------------------


def resolve(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, lock_opts: LockOptions,
            previous: LockFile | None, echo: Callable[[str], None], verbose: bool = False,
            engine: EngineAPI | None = None, *, platform: Platform, digest: str) -> LockFile:
    """Run the Dockerfile's `lock` target on the engine (for `platform`: the plan's --platform) and turn pip's
    report into the lock."""
    require_runnable(platform, f"locking {backend.name} for {platform}")
    # Every index the resolver asks must answer (a dead one costs minutes of retries, then a wrong lock), and the
    # pinned torch build must be there (else gigabytes of another build are fetched, then refused).
    reach.require(matrix, backend, what=f"locking {backend.name}", index_mirrors=opts.index_mirrors,
                  platform=str(platform), wheelhouse=opts.wheelhouse, ca_bundle=opts.ca_bundle, netrc=opts.netrc)
    wanted = inputs(matrix, backend, platform, digest)
    write_context(with_lock(plan, None))
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
        error = builder.run_build(argv, opts.build_args, log, builder.Progress(
            backend.name, echo, verbose, others=lambda: records.building(opts.context_dir, backend.name)), engine)
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


def _platform_opts(opts: BuildOptions, platform: Platform) -> BuildOptions:
    """The options of one platform's build: --platform for any but this host's own."""
    return opts if platform == target(opts.platform) else dataclasses.replace(opts, platform=platform)


def made_base_digest(engine: EngineAPI | None, base_image: str) -> str | None:
    """Where no registry serves the base, a base `envbuild base` made and loaded here stands for it: its one
    layer's digest (the same wherever it is made from the same archive state) is what the lock records."""
    image = engine.image(base_image) if engine is not None else None
    if image is None or MADE_LABEL not in image.labels or len(image.layers) != 1:
        return None
    return image.layers[0]


def ensure(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, engine: EngineAPI, *, locked: bool,
           echo: Callable[[str], None], verbose: bool = False) -> LockFile:
    """The lock to build from (the platform's: --platform, else this host's): the current one, or (unless
    --locked) a fresh one, written and said so. A GPU backend's lock whose torch is a CPU-only build is refused."""
    platform = target(opts.platform)
    file = path(opts, backend, platform)
    current = read(file)
    try:
        digest = base_digest(backend, plan.base_image, platform, opts)
    except LockError as exc:
        # Offline, with a lock current in everything else: build from it (BuildKit may have the base), said so.
        if current is None or stale(current, inputs(matrix, backend, platform, None)):
            digest = made_base_digest(engine, plan.base_image)
            if digest is None:
                _all_blockers(exc, matrix, backend, opts, platform, "building")
                raise
        else:
            echo(f"[{backend.name}] note: {exc}; building from {file}, current in every other input")
            digest = None
    why = stale(current, inputs(matrix, backend, platform, digest))
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


def _all_blockers(exc: LockError, matrix: Matrix, backend: Backend, opts: BuildOptions, platform: Platform,
                  verb: str) -> None:
    """The base cannot be had: before saying so, the rest of the preflight (the indexes, the torch pin), so that
    every blocker is named at once; raises UnreachableError with them all where there are more."""
    found = reach.blockers(matrix, backend, what=f"{verb} {backend.name}", platform=str(platform),
                           index_mirrors=opts.index_mirrors, wheelhouse=opts.wheelhouse, ca_bundle=opts.ca_bundle,
                           netrc=opts.netrc)
    if found:
        raise UnreachableError(reach.said(found, str(exc))) from None


def lock(matrix: Matrix, backends: list[Backend], opts: BuildOptions, lock_opts: LockOptions, engine: EngineAPI, *,
         echo: Callable[[str], None] = lambda s: None, verbose: bool = False) -> list[LockResult]:
    """Write each backend's lock for each of its platforms (or --platform's) when it is missing or stale, or when
    asked to upgrade."""
    results = []
    texts: dict[Path, str] = {}  # every lock is written at the end, all or none: a failed resolve leaves all as they were
    for backend in backends:
        for platform in _checked_platforms(backend, opts):
            file = path(opts, backend, platform)
            popts = _platform_opts(opts, platform)
            with records.locked(opts.context_dir, backend.name, echo):
                plan = make_plan(matrix, backend, popts, engine)
                current = read(file)
                try:
                    digest = base_digest(backend, plan.base_image, platform, opts)
                except LockError as exc:
                    digest = made_base_digest(engine, plan.base_image)
                    if digest is None:
                        _all_blockers(exc, matrix, backend, popts, platform, "locking")
                        raise
                why = stale(current, inputs(matrix, backend, platform, digest))
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


def _checked_platforms(backend: Backend, opts: BuildOptions) -> list[Platform]:
    """--platform's platforms, refused unless the backend lists them; else every platform it lists."""
    return [backend.listed(p) for p in platforms(backend, opts)]


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
        base = mirror(backend.base_image, opts.mirrors) if backend.base_image else ""  # the reference a build asks
        for p, current in found.items():
            if current is None:
                results.append(LockResult(backend.name, files[p], "missing", [f"there is no lock for {p}"], platform=p))
                continue
            pinned = base.rpartition("@")[2] if "@sha256:" in base else None
            why = stale(current, inputs(matrix, backend, p, pinned))
            problem = None if why else torch_problem(backend, current)
            status = "stale" if why else ("wrong torch" if problem else "up to date")
            results.append(LockResult(backend.name, files[p], status, why or ([problem] if problem else []),
                                      len(current.packages), p))
    return results

