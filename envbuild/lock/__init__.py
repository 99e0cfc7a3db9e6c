"""Between render and build: locks/<backend>.txt, the exact, hashed distributions an image installs.

Like cargo's and uv's lock files: the build installs the lock; the lock changes only when its inputs change
or when asked to (--upgrade, --upgrade-package); `--locked` (CI, publish) refuses a lock that is missing or
stale instead of resolving. Resolution happens in the backend's own base, on the engine that builds
(the Dockerfile's `lock` target runs resolve.py there); staleness is decided from the lock's header alone.
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

from ..errors import DockerError, LockError, StaleLock
from ..files import read_user, write_all, write_atomic
from .lockfile import FORMAT, LockFile, from_report, parse

if TYPE_CHECKING:
    from ..build.plan import BuildOptions, BuildPlan
    from ..engine import Engine
    from ..matrix import Backend, Matrix

RESOLVER = Path(__file__).with_name("resolve.py")

__all__ = ["LockFile", "LockOptions", "LockResult", "check", "ensure", "inputs", "lock", "path", "read", "stale"]


@dataclass(frozen=True)
class LockOptions:
    upgrade: bool = False  # resolve afresh: no previous version is kept
    upgrade_packages: tuple[str, ...] = ()  # only these may move to a newer release


@dataclass
class LockResult:
    backend: str
    path: Path
    status: str  # "up to date", "written", "stale", "missing"
    why: list[str] = dataclasses.field(default_factory=list)
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "lock": str(self.path), "status": self.status, "why": self.why, "distributions": self.count}


def path(opts: BuildOptions, backend: Backend) -> Path:
    return opts.locks_dir / f"{backend.name}.txt"


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


def inputs(matrix: Matrix, backend: Backend, plan: BuildPlan) -> dict[str, Any]:
    """Everything a lock is resolved from: a different value is a stale lock."""
    indexes = [matrix.index.url, *matrix.index.extra_urls, backend.torch.index_url,
               backend.plugin.index_url if backend.plugin else None]
    return {
        "format": FORMAT,
        "backend": backend.name,
        "requirements": requirements(matrix, backend),
        "keep_base": backend.torch.source == "base" or bool(backend.plugin and backend.plugin.source == "base"),
        "base_image": backend.base_image,
        "base_id": plan.base_id,
        "python": backend.python.executable if backend.torch.source == "base" else f"{backend.python.executable} (venv)",
        "indexes": list(dict.fromkeys(u for u in indexes if u)),
        "wheelhouse": [[w.name, w.sha256] for w in plan.wheels],
        "uv": matrix.uv,
    }


def stale(current: LockFile | None, wanted: dict[str, Any]) -> list[str]:
    """Why `current` is not the lock of `wanted` (empty when it is). A base image id that either side does
    not know is not compared: the reference still is (pin it by digest for an exact answer)."""
    if current is None:
        return ["there is no lock"]
    why = []
    for key in sorted(set(current.inputs) | set(wanted)):
        old, new = current.inputs.get(key), wanted.get(key)
        if key == "base_id" and (old is None or new is None):
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
            engine: Engine | None = None) -> LockFile:
    """Run the Dockerfile's `lock` target on the engine and turn pip's report into the lock."""
    from ..build import builder
    from ..build.plan import lock_command, write_context

    wanted = inputs(matrix, backend, plan)
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
    echo(f"[{backend.name}] resolving the lock in {plan.base_image} (log: {log})")
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
    return from_report(backend.name, report, wanted, torch_roots, list(matrix.packages_for(backend)), resolved)


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


def ensure(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, engine: Engine, *, locked: bool,
           echo: Callable[[str], None], verbose: bool = False) -> LockFile:
    """The lock to build from: the current one, or (unless --locked) a fresh one, written and said so."""
    file = path(opts, backend)
    current = read(file)
    why = stale(current, inputs(matrix, backend, plan))
    if not why:
        return current
    what = "missing" if current is None else f"stale ({'; '.join(why)})"
    if locked:
        raise StaleLock(f"{file} is {what}: run `envbuild lock --backend {backend.name}` and commit the result "
                        "(--locked builds only from a current lock)")
    echo(f"[{backend.name}] {file} is {what}: resolving it")
    new = resolve(matrix, backend, plan, opts, LockOptions(), current, echo, verbose, engine)
    write_atomic(file, new.text())
    echo(f"[{backend.name}] wrote {file} ({len(new.packages)} distributions)")
    return new


def lock(matrix: Matrix, backends: list[Backend], opts: BuildOptions, lock_opts: LockOptions, engine: Engine, *,
         echo: Callable[[str], None] = lambda s: None, verbose: bool = False) -> list[LockResult]:
    """Write each backend's lock when it is missing or stale, or when asked to upgrade."""
    from ..build import records
    from ..build.plan import make_plan

    results = []
    texts: dict[Path, str] = {}  # every lock is written at the end, all or none: a failed resolve leaves all as they were
    for backend in backends:
        file = path(opts, backend)
        with records.locked(opts.context_dir, backend.name):
            plan = make_plan(matrix, backend, opts, engine)
            current = read(file)
            why = stale(current, inputs(matrix, backend, plan))
            asked = lock_opts.upgrade or bool(lock_opts.upgrade_packages)
            if not why and not asked:
                results.append(LockResult(backend.name, file, "up to date", count=len(current.packages)))
                continue
            new = resolve(matrix, backend, plan, opts, lock_opts, current, echo, verbose, engine)
            texts[file] = new.text()
            results.append(LockResult(backend.name, file, "written", why if not asked else ["asked to upgrade"], len(new.packages)))
    if texts:
        write_all(texts)
    return results


def check(matrix: Matrix, backends: list[Backend], opts: BuildOptions, engine: Engine, *,
          require: bool) -> list[LockResult]:
    """Which locks are stale (or missing, when `require`); writes nothing, resolves nothing. An engine that
    does not answer leaves the base image's id unknown, which is then not compared."""
    from ..build.plan import make_plan

    results = []
    for backend in backends:
        file = path(opts, backend)
        current = read(file)
        if current is None:
            if require:
                results.append(LockResult(backend.name, file, "missing", ["there is no lock"]))
            continue
        try:  # writes nothing: not even the wheel digest cache
            plan = make_plan(matrix, backend, opts, engine, write_cache=False)
        except DockerError:
            plan = make_plan(matrix, backend, opts, None, write_cache=False)
        why = stale(current, inputs(matrix, backend, plan))
        results.append(LockResult(backend.name, file, "stale" if why else "up to date", why, len(current.packages)))
    return results
