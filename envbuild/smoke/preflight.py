"""Can this host start the backend's container the way the matrix says? One copy of each check and its fix,
for `doctor` (which lists them all) and `smoke` (which refuses at the first blocking failure).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.core.checks import Check, skip
from envbuild.core.errors import DockerError, HostMismatch, SmokeError
from envbuild.core.files import read_host

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend

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


def wanted_runtime(backend: Backend) -> str | None:
    """The Docker runtime the backend's `docker run` needs: nvidia for --gpus, else run.runtime."""
    return backend.run.runtime_needed


def runtime(backend: Backend, runtimes: set[str] | None, root: Path) -> Check:
    """`runtimes`: what the daemon has registered; None when it could not be asked."""
    run, wanted = backend.run, wanted_runtime(backend)
    if not wanted:
        return Check("runtime", True, "no special container runtime needed (runc)")
    if runtimes is None:
        return skip("runtime", f"needs the Docker runtime '{wanted}', but the daemon is unreachable")
    if wanted in runtimes:
        return Check("runtime", True, f"Docker runtime '{wanted}' registered")
    if run.gpus and (root / "etc/cdi").is_dir():
        return Check("runtime", True, f"CDI specs in {root / 'etc/cdi'} (for --gpus={run.gpus})")
    fix = RUNTIME_FIXES.get(wanted) or (
        f"install the {backend.description} container runtime, register it as \"{wanted}\" under \"runtimes\" "
        "in /etc/docker/daemon.json, then `sudo systemctl restart docker`"
    )
    flag = run.shown("gpus") or run.shown("runtime")
    return Check("runtime", False, f"`{flag}` needs the Docker runtime '{wanted}'; the daemon has: "
                 f"{', '.join(sorted(runtimes)) or 'none'}", fix)


def device_nodes(backend: Backend, root: Path) -> Check | None:
    """Every node `docker run --device` passes exists on the host."""
    nodes = list(backend.run.device_nodes)
    if not nodes:
        return None
    missing = [n for n in nodes if not (root / n.lstrip("/")).exists()]
    if missing:
        return Check("device nodes", False, f"`docker run --device` needs {', '.join(missing)}, absent on this host",
                     f"load the {backend.description} driver (these nodes come with it); "
                     "`envbuild detect` shows what this host has")
    return Check("device nodes", True, ", ".join(nodes))


def _group_gid(name: str, root: Path) -> int | None:
    if root == Path("/"):
        import grp

        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None
    lines = (read_host(root / "etc/group") or "").split("\n")
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name and fields[2].isascii() and fields[2].isdigit():
            return int(fields[2])
    return None


def groups(backend: Backend, root: Path) -> Check | None:
    """Every `--group-add` group exists on the host (its device nodes belong to it)."""
    wanted = backend.run.group_add
    if not wanted:
        return None
    found = {g: _group_gid(g, root) for g in wanted}
    missing = [g for g, gid in found.items() if gid is None]
    if missing:
        return Check(
            "groups", False, f"`--group-add {' '.join(missing)}`: no such group on this host",
            f"the {backend.description} driver's packages create it with the udev rules that give it the device "
            f"nodes; otherwise `sudo groupadd --system {missing[0]}`; users who run the container need it too: "
            f"`sudo usermod -aG {','.join(wanted)} $USER`",
        )
    return Check("groups", True, ", ".join(f"{g} (gid {gid})" for g, gid in found.items()))


def daemon_runtimes(engine: EngineAPI | None) -> set[str] | None:
    """The daemon's runtimes, or None when there is no engine to ask or it does not answer."""
    if engine is None:
        return None
    try:
        return engine.runtimes()
    except DockerError:
        return None


def require(backend: Backend, engine: EngineAPI, root: Path = Path("/")) -> None:
    """Refuse early, with the fix, when the host cannot expose the device the way the matrix says."""
    runtimes = engine.runtimes() if wanted_runtime(backend) else set()
    for check in (runtime(backend, runtimes, root), device_nodes(backend, root)):
        if check is not None and not check.ok:
            from envbuild.matrix.names import human  # the matrix package: see CONTRIBUTING.md, Imports

            raise SmokeError(f"backend '{backend.name}': no {human(backend)} can be reached here: {check.detail}. "
                             f"Fix: {check.fix}")


IGNORE_HOST = "--ignore-host skips this check"


def require_host(backend: Backend, host: Any, *, matrix: Any = None, measured_arch: list[str] | None = None,
                 echo: Any = None) -> Check:
    """Refuse, with the fix, an image the host's driver or devices are known not to run (doctor lists the same
    check). `host` is what `compat.host_driver` read, once per command: smoke and run check it again once the
    image's measured architectures are known. Unknowns and UNCONFIRMED facts are said through `echo`, never
    refused."""
    from envbuild.matrix import compat

    check = compat.check(backend, host, matrix=matrix, measured_arch=measured_arch)
    if not check.ok and check.blocking:
        raise HostMismatch(f"backend '{backend.name}': this image will not run on this host: {check.detail}. "
                         f"Fix: {check.fix} ({IGNORE_HOST})")
    if not check.ok and echo is not None:
        echo(f"[{backend.name}] warning: {check.detail}")
    return check


def _refusals(run: Any) -> list[tuple[tuple[str, ...], str | None]]:
    """(what the runtime says, lower case) -> the flag of this backend it refused; None: not asked for."""
    return [
        (("unable to apply caps", "operation not permitted"), run.shown("privileged") or run.shown("cap_add")),
        (("could not select device driver",), run.shown("gpus")),
        (("unknown or invalid runtime name",), run.shown("runtime")),
        (("error gathering device information", "no such file or directory"), run.shown("device")),
        (("bind source path does not exist",), run.shown("volume")),
        (("seccomp",), run.shown("security_opt")),
        (("unable to find group",), run.shown("group_add")),
    ]


def refused(backend: Backend, text: str) -> str | None:
    """When the engine or runtime refused to start the backend's container, which of its flags the host refused
    and why the backend needs them; None when the text is not such a refusal."""
    low = text.lower()
    for needles, flag in _refusals(backend.run):
        if flag and all(n in low for n in needles):
            why = backend.run.why or f"the matrix asks for it to expose the {backend.description}"
            return (f"this host refused `{flag}`, which the {backend.name} backend's container needs: {why} "
                    f"(the runtime said: {' '.join(text.split())[:300]})")
    return None
