"""`envbuild doctor`: can this host build and smoke-test a backend? Each check says what it found and, when it
fails, the command that fixes it.

A failing *blocking* check means `build` or `smoke` for that backend would fail; a failing non-blocking one is
a warning. Checks that depend on an earlier failure (the daemon) are skipped, not failed twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from packaging.version import InvalidVersion, Version

from .errors import DockerError
from .matrix import Backend, Matrix, not_containerizable_message

DOCTOR_TIMEOUT = 20  # seconds for each question to the daemon: a doctor must not hang on a dead engine
MIN_SERVER = "18.09"  # the first engine with BuildKit (RUN --mount, secrets)

# GiB a build needs free at Docker's data root: the image plus BuildKit's snapshots and pip's cache mount
# while it builds. Rough on purpose, from the images' sizes:
# - torch preinstalled in a vendor base (rocm/pytorch, Gaudi, Neuron, Cambricon, Moore Threads): those bases
#   alone unpack to 15-25 GiB;
# - pip torch for an accelerator: GPU wheels bring their runtime libraries (CUDA, XPU: 5-10 GiB), or the base
#   carries the vendor toolkit (CANN);
# - pip CPU torch on a plain Debian/Python base: an image of about 2 GiB, plus the build cache.
DISK_GIB = {"base": 30, "accelerator": 20, "cpu": 10}

# How to register each container runtime a matrix backend names (run.runtime, or nvidia for run.gpus).
RUNTIME_FIXES = {
    "nvidia": (
        "install the NVIDIA driver and the NVIDIA Container Toolkit (`sudo apt-get install nvidia-container-toolkit` "
        "from NVIDIA's repository), then `sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl "
        "restart docker` (or write CDI specs: `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"
    ),
    "habana": (
        "install habanalabs-container-runtime from the Gaudi software release, register it in /etc/docker/daemon.json "
        '(`"runtimes": {"habana": {"path": "/usr/bin/habana-container-runtime", "runtimeArgs": []}}`), then '
        "`sudo systemctl restart docker`"
    ),
    "mthreads": (
        "install Moore Threads' mt-container-toolkit, register its runtime as \"mthreads\" under \"runtimes\" in "
        "/etc/docker/daemon.json, then `sudo systemctl restart docker`"
    ),
}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    blocking: bool = True
    skipped: bool = False

    @property
    def status(self) -> str:
        if self.ok:
            return "ok"
        if self.skipped:
            return "skip"
        return "FAIL" if self.blocking else "warn"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "ok": self.ok,
            "blocking": self.blocking,
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass
class Report:
    backend: str
    description: str
    checks: list[Check]

    @property
    def blockers(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.blocking and not c.skipped]

    @property
    def ok(self) -> bool:
        return not self.blockers

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "checks": [c.to_json() for c in self.checks]}


# --------------------------------------------------------------------------------------------------
# Docker: the daemon and the builder.


def _docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _daemon_fix(message: str) -> str:
    host = _docker_host()
    if "Permission denied" in message or "PermissionError" in message:
        return (
            f"this user may not use {host}: `sudo usermod -aG docker $USER` and log in again (or run as root); "
            "rootless Docker: `export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock`"
        )
    parts = []
    if os.environ.get("DOCKER_HOST"):
        parts.append(f"DOCKER_HOST is set to {host}: unset it or point it at a running engine")
    if not shutil.which("dockerd"):
        parts.append("install Docker (Debian/Ubuntu: `sudo apt-get install docker.io`) and start it: "
                     "`sudo systemctl enable --now docker`")
    else:
        parts.append("start the daemon: `sudo systemctl start docker` (without systemd: "
                     "`sudo sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'`)")
    return "; ".join(parts)


def connect(timeout: int = DOCTOR_TIMEOUT) -> tuple[Any | None, Check]:
    """(client, check): a client that answered, or None with the failed check and its fix."""
    try:
        import docker
    except ImportError:
        return None, Check("docker daemon", False, "the Docker SDK for Python is not installed",
                           "`pip install 'docker>=7'` (or reinstall envbuild)")
    host = _docker_host()
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        version = client.version()
    except Exception as exc:  # DockerException, requests errors, OSError: all mean "not reachable"
        text = str(exc)
        reason = ("nothing listens there (connection refused)" if "Connection refused" in text
                  else "no socket there (no such file)" if "No such file" in text
                  else "permission denied" if "Permission denied" in text
                  else text.split("\n")[0][:200])
        return None, Check("docker daemon", False, f"cannot reach the Docker daemon at {host}: {reason}",
                           _daemon_fix(text))
    server = str(version.get("Version", "unknown"))
    detail = (f"reachable at {host}: Docker {server} (API {version.get('ApiVersion', '?')}), "
              f"{version.get('Os', '?')}/{version.get('Arch', '?')}")
    try:
        too_old = Version(server.split("+")[0].split("-")[0]) < Version(MIN_SERVER)
    except InvalidVersion:
        too_old = False
    if too_old:
        return client, Check("docker daemon", False, detail + f"; BuildKit needs Docker {MIN_SERVER} or later",
                             "upgrade Docker (Debian/Ubuntu: `sudo apt-get install docker.io`)")
    if version.get("Os") not in (None, "linux"):
        return client, Check("docker daemon", False, detail + "; envbuild's images are Linux images",
                             "switch the engine to Linux containers")
    return client, Check("docker daemon", True, detail)


def check_builder() -> Check:
    from . import engine

    try:
        builder = engine.find_builder()
    except DockerError as exc:
        return Check(
            "buildkit", False, str(exc).split(":")[0],
            "install the buildx plugin (Debian/Ubuntu: `sudo apt-get install docker-buildx`; Docker's repository: "
            "docker-buildx-plugin), or set ENVBUILD_DOCKER=/usr/bin/docker (Debian's docker.io 20.10 client "
            "builds with BuildKit itself)",
        )
    how = "the buildx plugin" if builder.buildx else "a client older than 23.0, which builds with BuildKit itself"
    return Check("buildkit", True, f"`{builder.describe()}` ({how})")


def _skip(name: str, why: str) -> Check:
    return Check(name, False, f"not checked: {why}", blocking=False, skipped=True)


# --------------------------------------------------------------------------------------------------
# The backend: runtime, device nodes, groups, disk.


def needed_gib(backend: Backend) -> int:
    if backend.torch.source == "base":
        return DISK_GIB["base"]
    return DISK_GIB["cpu"] if backend.device == "cpu" else DISK_GIB["accelerator"]


def check_runtime(backend: Backend, client: Any | None, root: Path) -> Check:
    run = backend.run
    wanted = "nvidia" if run.gpus else run.runtime
    if not wanted:
        return Check("runtime", True, "no special container runtime needed (runc)")
    if client is None:
        return _skip("runtime", f"needs the Docker runtime '{wanted}', but the daemon is unreachable")
    try:
        runtimes = sorted((client.info().get("Runtimes") or {}).keys())
    except Exception as exc:  # the SDK raises several types; all mean "could not ask"
        return _skip("runtime", f"cannot ask the daemon for its runtimes: {exc}")
    fix = RUNTIME_FIXES.get(wanted) or (
        f"install the {backend.description} container runtime, register it as \"{wanted}\" under \"runtimes\" "
        "in /etc/docker/daemon.json, then `sudo systemctl restart docker`"
    )
    if wanted in runtimes:
        return Check("runtime", True, f"Docker runtime '{wanted}' registered")
    if run.gpus and (root / "etc/cdi").is_dir():
        return Check("runtime", True, f"CDI specs in {root / 'etc/cdi'} (for --gpus={run.gpus})")
    flag = f"--gpus={run.gpus}" if run.gpus else f"--runtime={wanted}"
    return Check("runtime", False, f"`{flag}` needs the Docker runtime '{wanted}'; the daemon has: "
                 f"{', '.join(runtimes) or 'none'}", fix)


def check_devices(matrix: Matrix, backend: Backend, root: Path, path_env: str | None) -> list[Check]:
    """The accelerator itself (the detection rules of envbuild.detect) and the nodes `docker run --device` passes."""
    from .detect import detect

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
    nodes = [d.split(":")[0] for d in backend.run.devices]
    if nodes:
        missing = [n for n in nodes if not (root / n.lstrip("/")).exists()]
        if missing:
            checks.append(Check("device nodes", False,
                                f"`docker run --device` needs {', '.join(missing)}, absent on this host",
                                f"load the {backend.description} driver (these nodes come with it); "
                                "`envbuild detect` shows what this host has"))
        else:
            checks.append(Check("device nodes", True, ", ".join(nodes)))
    return checks


def _group_gid(name: str, root: Path) -> int | None:
    if root == Path("/"):
        import grp

        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None
    try:
        lines = (root / "etc/group").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    return None


def check_groups(backend: Backend, root: Path) -> Check | None:
    groups = backend.run.group_add
    if not groups:
        return None
    found = {g: _group_gid(g, root) for g in groups}
    missing = [g for g, gid in found.items() if gid is None]
    if missing:
        return Check(
            "groups", False, f"`--group-add {' '.join(missing)}`: no such group on this host",
            f"the {backend.description} driver's packages create it with the udev rules that give it the device "
            f"nodes; otherwise `sudo groupadd --system {missing[0]}`; users who run the container need it too: "
            f"`sudo usermod -aG {','.join(groups)} $USER`",
        )
    return Check("groups", True, ", ".join(f"{g} (gid {gid})" for g, gid in found.items()))


def check_disk(backend: Backend, client: Any | None) -> Check:
    need = needed_gib(backend)
    if client is None:
        return _skip("disk", "Docker's data root is unknown while the daemon is unreachable")
    try:
        where = client.info().get("DockerRootDir") or "/var/lib/docker"
    except Exception as exc:
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


def check_leftovers(client: Any | None) -> Check | None:
    if client is None:
        return None
    from .smoke import leftover_containers

    try:
        names = leftover_containers(client)
    except Exception:  # informational only
        return None
    if not names:
        return Check("leftover containers", True, "no smoke container left behind")
    return Check("leftover containers", False, f"{len(names)} smoke container(s) left: {', '.join(names[:5])}",
                 "they may belong to a smoke test still running; otherwise `docker rm -f " + " ".join(names[:5]) + "`",
                 blocking=False)


# --------------------------------------------------------------------------------------------------
# Registry credentials (publishing).


def registry_host(ref: str) -> str:
    """'ghcr.io/org/img' or 'ghcr.io' -> 'ghcr.io'; 'org/img' -> 'docker.io' (Docker's rule: a host has a dot,
    a port or is localhost)."""
    first = ref.partition("/")[0]
    if "." in first or ":" in first or first == "localhost":
        return first
    return "docker.io"


_DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


def _config_keys(host: str) -> tuple[str, ...]:
    if host == "docker.io":
        return _DOCKER_HUB_KEYS
    return (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/")


def docker_config_path(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def check_credentials(registry: str, environ: dict[str, str] | None = None) -> Check:
    """Credentials for pushing to `registry`; says where they were found, never what they are."""
    environ = os.environ if environ is None else environ
    host = registry_host(registry)
    name = "registry credentials"
    fix = f"`docker login{'' if host == 'docker.io' else ' ' + host}` (or set ENVBUILD_REGISTRY_USER and ENVBUILD_REGISTRY_PASSWORD)"
    user, password = environ.get("ENVBUILD_REGISTRY_USER"), environ.get("ENVBUILD_REGISTRY_PASSWORD")
    if user and password:
        return Check(name, True, f"{host}: ENVBUILD_REGISTRY_USER and ENVBUILD_REGISTRY_PASSWORD are set")
    if user or password:
        half = "ENVBUILD_REGISTRY_PASSWORD" if user else "ENVBUILD_REGISTRY_USER"
        return Check(name, False, f"{host}: {half} is not set (the other one is)", f"set {half} too")
    path = docker_config_path(environ)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Check(name, False, f"{host}: no ENVBUILD_REGISTRY_* variables and no {path}", fix)
    except (OSError, ValueError) as exc:
        return Check(name, False, f"{host}: cannot read {path}: {exc}", fix)
    if not isinstance(config, dict):
        return Check(name, False, f"{host}: {path} is not a JSON object", fix)
    helpers = config.get("credHelpers") if isinstance(config.get("credHelpers"), dict) else {}
    keys = _config_keys(host)
    helper = next((helpers[k] for k in keys if k in helpers), None)
    if helper:
        return Check(name, True, f"{host}: credential helper docker-credential-{helper} ({path}; not read)")
    auths = config.get("auths") if isinstance(config.get("auths"), dict) else {}
    entry = next((auths[k] for k in keys if k in auths), None)
    if isinstance(entry, dict) and (entry.get("auth") or entry.get("identitytoken")):
        return Check(name, True, f"{host}: a login in {path}")
    store = config.get("credsStore")
    if entry is not None and store:
        return Check(name, True, f"{host}: a login kept by docker-credential-{store} ({path}; not read)")
    return Check(name, False, f"{host}: no login for it in {path}", fix)


# --------------------------------------------------------------------------------------------------
# Native-only backends (mps): no container, so the questions are the platform and Python's venv.


def _host_platform(system: str | None = None, machine: str | None = None) -> str:
    import platform

    arch = (machine or platform.machine()).lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)
    return f"{(system or platform.system()).lower()}/{arch}"


def native_checks(backend: Backend, system: str | None = None, machine: str | None = None) -> list[Check]:
    here = _host_platform(system, machine)
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


def diagnose(
    matrix: Matrix,
    backend: Backend,
    *,
    registry: str | None = None,
    root: str | os.PathLike[str] = "/",
    path_env: str | None = None,
    connector: Callable[[], tuple[Any | None, Check]] = connect,
) -> Report:
    """Every check for `backend`, in order; never raises for what it finds."""
    rootp = Path(root)
    if not backend.containerizable:
        return Report(backend.name, backend.description, native_checks(backend))
    client, daemon = connector()
    checks = [daemon, check_builder(), check_runtime(backend, client, rootp)]
    checks += check_devices(matrix, backend, rootp, path_env)
    checks += [c for c in (check_groups(backend, rootp),) if c]
    checks.append(check_disk(backend, client))
    if registry:
        checks.append(check_credentials(registry))
    checks += [c for c in (check_leftovers(client),) if c]
    if client is not None:
        client.close()
    return Report(backend.name, backend.description, checks)


def format_report(report: Report) -> str:
    width = max(len(c.name) for c in report.checks)
    lines = [f"envbuild doctor: {report.backend} ({report.description})"]
    for c in report.checks:
        lines.append(f"  {c.status:<4}  {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"        {'':<{width}}  fix: {c.fix}")
    if report.ok:
        warn = [c.name for c in report.checks if not c.ok and not c.skipped]
        lines.append(f"Ready for {report.backend}" + (f" (warnings: {', '.join(warn)})." if warn else "."))
    else:
        names = ", ".join(c.name for c in report.blockers)
        lines.append(f"Not ready for {report.backend}: {len(report.blockers)} blocking problem(s): {names}.")
    return "\n".join(lines)
