"""`envbuild doctor`: can this host build and smoke-test a backend? Each check says what it found and, when it
fails, the command that fixes it.

A failing *blocking* check means `build` or `smoke` for that backend would fail; a failing non-blocking one is
a warning. Checks that depend on an earlier failure (the daemon) are skipped, not failed twice.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from envbuild.core.errors import DockerError, EnvbuildError, RegistryAuthError
from envbuild.matrix import Backend, Matrix, not_containerizable_message
from envbuild.net import credentials
from envbuild.core.imageref import Reference
from envbuild.smoke import preflight
from envbuild.core.checks import Check, skip as _skip
from envbuild.engine.owner import left_behind
from envbuild.matrix import compat
from envbuild.core.platform import can_run, emulation_fix, host_platform
from envbuild.host.detect import detect

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.core.settings import Settings

DOCTOR_TIMEOUT = 20  # seconds for each question to the daemon: a doctor must not hang on a dead engine

# GiB a build needs free at Docker's data root: the image plus BuildKit's snapshots and pip's cache mount
# while it builds. Rough on purpose, from the images' sizes:
# - torch preinstalled in a vendor base (rocm/pytorch, Gaudi, Neuron, Cambricon, Moore Threads): those bases
#   alone unpack to 15-25 GiB;
# - pip torch for an accelerator: GPU wheels bring their runtime libraries (CUDA, XPU: 5-10 GiB), or the base
#   carries the vendor toolkit (CANN);
# - pip CPU torch on a plain Debian/Python base: an image of about 2 GiB, plus the build cache.
DISK_GIB = {"base": 30, "accelerator": 20, "cpu": 10}

# What each check is for: building the image, running it here (the default), publishing it. Building needs no
# accelerator, so a host without the GPU can build its image (and a CI runner does).
# The engine's own checks say their purposes themselves (EngineAPI.purposes).
PURPOSES = {"disk": ("build",), "base registry": ("build",), "package index": ("build",), "torch build": ("build",),
            "platforms": ("build", "run"), "publish registry": ("publish",), "registry credentials": ("publish",)}


def purposes(check: Check) -> tuple[str, ...]:
    from envbuild.engine.select import purposes as engine_purposes

    return PURPOSES.get(check.name) or engine_purposes().get(check.name, ("run",))


@dataclass
class Report:
    backend: str
    description: str
    checks: list[Check]
    containerizable: bool = True

    @property
    def blockers(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.blocking and not c.skipped]

    def blockers_for(self, purpose: str) -> list[Check]:
        return [c for c in self.blockers if purpose in purposes(c)]

    @property
    def verdicts(self) -> dict[str, bool]:
        """can build here, can run here (and, when asked, can publish): each apart."""
        asked = ["build", "run"] if self.containerizable else ["run"]
        if any("publish" in purposes(c) for c in self.checks):
            asked.append("publish")
        return {p: not self.blockers_for(p) for p in asked}

    @property
    def ok(self) -> bool:
        return not self.blockers

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, **{f"can_{p}": ok for p, ok in self.verdicts.items()},
                "checks": [{**c.to_json(), "for": list(purposes(c))} for c in self.checks]}


# --------------------------------------------------------------------------------------------------
# The engine: that it answers, and its builder.


def connect(timeout: int = DOCTOR_TIMEOUT, engine_name: str | None = None) -> tuple[EngineAPI | None, Check]:
    """(engine, check): an engine that answered, or None with the failed check and its fix. The engine is the one
    commands would use (--engine, $ENVBUILD_ENGINE, else auto), and the check says which and why."""
    from envbuild.engine.select import choose

    choice = choose(engine_name, timeout=timeout)
    engine = choice.engine
    try:
        version = engine.version()
    except DockerError as exc:
        return None, engine.failed_check(exc, choice.why)
    return engine, engine.answer_check(version, choice.why)


def check_builder(engine: EngineAPI | None = None) -> Check:
    """The engine's builder (without an engine that answered: the default engine's)."""
    from envbuild.engine.select import builder_check

    return builder_check(engine)


# --------------------------------------------------------------------------------------------------
# The backend: runtime, device nodes, groups (smoke's preflight), the device itself, disk.


def needed_gib(backend: Backend) -> int:
    if backend.torch.source == "base":
        return DISK_GIB["base"]
    return DISK_GIB["cpu"] if backend.device == "cpu" else DISK_GIB["accelerator"]


def check_devices(matrix: Matrix, backend: Backend, root: Path, path_env: str | None) -> list[Check]:
    """The accelerator itself (the detection rules of envbuild.detect) and the nodes `docker run --device` passes."""
    if backend.device == "cpu":
        return [Check("device", True, "the CPU is always there")]
    finding = detect(matrix, root, path_env=path_env, docker_runtimes=set()).finding(backend.name)
    seen = [f"{e.kind} {e.detail}" for e in finding.evidence if e.kind in ("device", "pci", "os")]
    hard = [m for m in finding.missing if not m.startswith(("tool ", "Docker runtime"))]
    checks = []
    if finding.detected:
        checks.append(Check("device", True, "; ".join(seen) or "detected"))
    else:
        checks.append(Check(
            "device", False,
            f"no {backend.description} found: missing {'; '.join(hard) or 'evidence'}"
            + (f" (found: {'; '.join(seen)})" if seen else ""),
            f"install and load the {backend.description} driver on this host so its device nodes appear "
            "(`envbuild detect` shows what this host has); or pick the backend this host has",
        ))
    tools = [m for m in finding.missing if m.startswith("tool ")]
    if backend.detect.tools:
        found = [e.detail for e in finding.evidence if e.kind == "tool"]
        if tools:
            checks.append(Check("vendor tools", False, f"missing {'; '.join(tools)}" +
                                (f" (found {', '.join(found)})" if found else ""),
                                f"install the {backend.description} driver's tools (they check the device "
                                "outside containers)", blocking=False))
        else:
            checks.append(Check("vendor tools", True, ", ".join(found)))
    return checks


def check_disk(backend: Backend, engine: EngineAPI | None) -> Check:
    need = needed_gib(backend)
    if engine is None:
        return _skip("disk", "Docker's data root is unknown while the daemon is unreachable")
    try:
        where = engine.info().get("DockerRootDir") or "/var/lib/docker"
    except DockerError as exc:
        return _skip("disk", f"cannot ask the daemon for its data root: {exc}")
    try:
        free = shutil.disk_usage(where).free / 2**30
    except OSError:
        return _skip("disk", f"Docker's data root {where} is not visible from here (a remote or rootless engine?)")
    detail = f"{free:.1f} GiB free at {where}; a {backend.name} image needs about {need} GiB to build"
    if free >= need:
        return Check("disk", True, detail)
    return Check("disk", False, detail,
                 "free space: `docker builder prune` (build cache) and `docker image prune` (dangling images), or "
                 "move Docker's \"data-root\" in /etc/docker/daemon.json to a larger disk and restart Docker")


def check_leftovers(engine: EngineAPI | None) -> Check | None:
    if engine is None:
        return None

    try:
        names = left_behind(engine)
    except DockerError:  # informational only
        return None
    if not names:
        return Check("leftover containers", True, "no smoke container left behind")
    return Check("leftover containers", False, f"{len(names)} smoke container(s) left: {', '.join(names[:5])}",
                 "their runs are gone: `envbuild clean` (this checkout's; `--all` for every checkout's), or `docker rm -f "
                 + " ".join(names[:5]) + "`",
                 blocking=False)


# --------------------------------------------------------------------------------------------------
# Registry credentials (publishing): found where publish and pull would take them.


def check_credentials(registry: str, environ: dict[str, str] | None = None) -> Check:
    """Credentials for pushing to `registry`; says where they were found, never what they are."""
    host = Reference.repository(registry).registry
    try:
        found, where = credentials.where(host, environ)
    except RegistryAuthError as exc:
        return Check("registry credentials", False, f"{host}: {exc}",
                     f"set both {credentials.USER_ENV} and {credentials.PASSWORD_ENV}, or neither to use the Docker config")
    return Check("registry credentials", found, f"{host}: {where}", None if found else credentials.login_fix(host))


REGISTRY_TIMEOUT = 5.0  # seconds: a doctor says a registry does not answer rather than wait for it


def made_base(engine: EngineAPI | None, ref: str) -> Check | None:
    """A base `envbuild base` made and loaded here: lock and build use it without asking a registry."""
    from envbuild.core.distbase import MADE_LABEL

    try:
        image = engine.image(ref) if engine is not None else None
    except DockerError:
        return None
    if image is None or MADE_LABEL not in image.labels:
        return None
    return Check("base registry", True, f"{ref} is in the engine, made from the archive by `envbuild base` "
                                        f"({image.labels[MADE_LABEL]}): no registry is asked")


def check_registry(name: str, ref: str, fix: str, *, publish: bool = False, timeout: float = REGISTRY_TIMEOUT) -> Check:
    """Whether the registry of `ref` (an image, a repository or a host) answers its API (/v2/) at all: what a lock
    and a build ask first (the base's), or what publish pushes to."""
    from envbuild.core.errors import EnvbuildError, RegistryUnreachableError
    from envbuild.net.regclient import Registry

    try:
        registry = Registry(ref, publish=publish)
    except EnvbuildError as exc:
        return Check(name, False, f"{ref}: {exc}", fix)
    try:
        status = registry.ping(timeout)
    except RegistryUnreachableError as exc:
        return Check(name, False, f"{registry.host} for {ref} does not answer: {exc}", fix)
    if status not in (200, 401):
        return Check(name, False, f"{registry.host} for {ref} answered HTTP {status} at /v2/: not a registry's API", fix)
    return Check(name, True, f"{registry.host} answers (HTTP {status} at /v2/) for {ref}")


def check_indexes(matrix: Matrix, backend: Backend, site: Settings | None = None, platform: str | None = None) -> list[Check]:
    """Whether each package index a lock of `backend` asks answers (through the site's mirrors), and whether the
    pinned torch build is where the backend takes it from (its index, the wheel folder), as `lock`'s preflight
    asks before resolving: one check each, with the ways out when it fails."""
    from envbuild.image import reach

    found = reach.needs(matrix, backend, index_mirrors=site.index_mirrors if site else ())
    ca_bundle, netrc = _site_path(site, "ca_bundle"), _site_path(site, "netrc")
    results = reach.probe(found, ca_bundle=ca_bundle, netrc=netrc)
    checks = []
    for need, result in zip(found, results):
        t = need.target
        what = f"{t.name} ({t.purpose})" + ("" if t.name == need.index.rstrip("/") else f", mirror of {need.index}")
        if result.ok:
            checks.append(Check("package index", True, f"{what} answers: {result.detail} ({result.via})"))
        else:
            fix = "; ".join(reach.ways_out(need, backend))
            checks.append(Check("package index", False, f"{what} does not answer from this machine: {result.detail} "
                                f"(asked {t.url} {result.via}, {result.seconds:.1f} s)", f"ways out: {fix}"))
    here = platform or str(host_platform())
    blocker, where = reach.torch_preflight(matrix, backend, here, list(zip(found, results)),
                                           index_mirrors=site.index_mirrors if site else (),
                                           wheelhouse=_site_path(site, "wheelhouse"), ca_bundle=ca_bundle, netrc=netrc)
    if blocker:
        checks.append(Check("torch build", False, blocker.what, "ways out: " + "; ".join(blocker.ways)))
    elif where:
        pin, label = reach.wanted_torch(backend, here)
        checks.append(Check("torch build", True, f"torch {pin}{'+' + label if label else ''} for {here} is in {where}"))
    return checks


def _site_path(site: Settings | None, key: str) -> Path | None:
    if site is None:
        return None
    try:
        return site.path(key)
    except EnvbuildError:  # a doctor reports, never raises: the probe goes without it
        return None


# --------------------------------------------------------------------------------------------------
# Native-only backends (mps): no container, so the questions are the platform and Python's venv.


def native_checks(backend: Backend, system: str | None = None, machine: str | None = None) -> list[Check]:
    here = host_platform(system, machine)
    checks = [Check("container", False, not_containerizable_message(backend),
                    f"`envbuild env --backend {backend.name} --dir DIR` for a native environment", blocking=False)]
    if here in backend.platforms:
        checks.append(Check("platform", True, f"this host is {here}"))
    else:
        checks.append(Check("platform", False, f"{backend.name} needs {' or '.join(backend.platforms)}; this host is "
                            f"{here}", "on this host use the cpu backend (`envbuild build --backend cpu` or "
                            "`envbuild env --backend cpu --dir DIR`)"))
    venv_ok = importlib.util.find_spec("venv") is not None and importlib.util.find_spec("ensurepip") is not None
    checks.append(Check("python venv", venv_ok, f"{sys.executable} {sys.version.split()[0]}" +
                        ("" if venv_ok else ": the venv/ensurepip modules are missing"),
                        None if venv_ok else "install Python's venv support (Debian/Ubuntu: `sudo apt-get install "
                        "python3-venv`; macOS: Python from python.org or Homebrew)"))
    return checks


# --------------------------------------------------------------------------------------------------
# Public API.


def check_platforms(backend: Backend, root: str = "/", host: str | None = None) -> Check:
    """Which of the backend's platforms this host builds and runs: natively, under QEMU (binfmt_misc), or not. A
    warning only: this host's own platform is what build and smoke use by default."""
    here = host or host_platform()
    said, missing = [], []
    for p in backend.platforms:
        runs, emulated, how = can_run(p, root, here)
        said.append(f"{p}: {'under QEMU emulation' if emulated else 'natively' if runs else 'NO (' + how + ')'}")
        if not runs:
            missing.append(p)
    detail = f"this host ({here}) builds and runs " + "; ".join(said)
    fix = "; ".join(f"for {p}: {emulation_fix(p)}" for p in missing) or None
    return Check("platforms", not missing, detail, fix, blocking=False)


def diagnose(
    matrix: Matrix,
    backend: Backend,
    *,
    registry: str | None = None,
    root: str | os.PathLike[str] = "/",
    path_env: str | None = None,
    connector: Callable[[], tuple[EngineAPI | None, Check]] = connect,
    site: Settings | None = None,
) -> Report:
    """Every check for `backend`, in order; never raises for what it finds."""
    rootp = Path(root)
    if not backend.containerizable:
        return Report(backend.name, backend.description, native_checks(backend), containerizable=False)
    engine, daemon = connector()
    runtimes = preflight.daemon_runtimes(engine) if preflight.wanted_runtime(backend) else set()
    checks = [daemon, check_builder(engine), *(engine.host_checks() if engine else []),
              preflight.runtime(backend, runtimes, rootp)]
    checks += check_devices(matrix, backend, rootp, path_env)
    checks += [c for c in (preflight.device_nodes(backend, rootp), preflight.groups(backend, rootp)) if c]
    # smoke, run, pull refuse on it; a family (cuda) is checked as `pick` chooses among its variants: one answer
    checks.append(compat.family_check(matrix, backend, rootp, path_env=path_env))
    checks.append(check_disk(backend, engine))
    checks.append(check_platforms(backend, str(rootp)))
    if backend.base_image:
        from envbuild.core.distbase import base_ways_out
        from envbuild.core.imageref import mirror

        base = mirror(backend.base_image, site.registry_mirrors) if site else backend.base_image
        checks.append(made_base(engine, base) or check_registry("base registry", base, base_ways_out(base, backend.name)))
    checks += check_indexes(matrix, backend, site)
    if registry:
        checks.append(check_registry("publish registry", registry, "check the address and that the registry runs "
                                     "(a local one: `docker run -d -p 5000:5000 registry:2`)", publish=True))
        checks.append(check_credentials(registry))
    checks += [c for c in (check_leftovers(engine),) if c]
    if engine is not None:
        engine.close()
    return Report(backend.name, backend.description, checks)
