"""A backend's `docker run` settings: the one model of them. The matrix fills it; the CLI's argv (run, --dry-run, the
image's ENVBUILD_RUN_FLAGS), the engine's SDK options and preflight's messages are all views of it. It lives at the
bottom because the engine, below the matrix, takes it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSpec:
    """What `docker run` needs to expose the device."""

    gpus: str | None = None
    devices: tuple[str, ...] = ()
    runtime: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    ipc: str | None = None
    shm_size: str | None = None
    privileged: bool = False
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    network: str | None = None
    cdi: str | None = None  # the device's CDI kind (nvidia.com/gpu): how runtimes other than Docker name it
    why: str | None = None  # why the backend needs these flags (prose; not a flag)

    def flags(self) -> tuple[RunFlag, ...]:
        """The run settings, one entry per `docker run` flag, in a stable order: the one reading of these fields.
        The CLI's argv (run, --dry-run, the image's ENVBUILD_RUN_FLAGS for the probe), the SDK's options (engine)
        and preflight's messages all come from these."""
        found: list[RunFlag] = []
        for kind, attr in RUN_KINDS:
            value = getattr(self, attr)
            if kind == "env":
                found += [RunFlag(kind, f"{k}={v}") for k, v in value]
            elif kind == "privileged":
                found += [RunFlag(kind, "")] if value else []
            elif isinstance(value, tuple):
                found += [RunFlag(kind, v) for v in value]
            elif value:
                found.append(RunFlag(kind, value))
        return tuple(found)

    def docker_args(self) -> list[str]:
        """The `docker run` flags, in a stable order."""
        return [arg for flag in self.flags() for arg in flag.argv]

    def shown(self, kind: str) -> str | None:
        """The flags of one kind as the user would type them (None: the backend asks for none)."""
        return " ".join(str(f) for f in self.flags() if f.kind == kind) or None

    def command_line(self, image: str, command: list[str]) -> list[str]:
        """`docker run` of `image` with these flags, as a user would type it."""
        return ["docker", "run", "--rm", *self.docker_args(), image, *command]

    @property
    def runtime_needed(self) -> str | None:
        """The Docker runtime these flags need: nvidia for --gpus, else the runtime asked for."""
        return "nvidia" if self.gpus else self.runtime

    @property
    def device_nodes(self) -> tuple[str, ...]:
        """The host's side of each --device."""
        return tuple(d.split(":")[0] for d in self.devices)


# (flag kind, RunSpec field), in the order the flags are written.
RUN_KINDS = (("gpus", "gpus"), ("runtime", "runtime"), ("device", "devices"), ("volume", "volumes"),
             ("group_add", "group_add"), ("env", "env"), ("cap_add", "cap_add"), ("security_opt", "security_opt"),
             ("ipc", "ipc"), ("network", "network"), ("shm_size", "shm_size"), ("privileged", "privileged"))
_ARGV = {
    "gpus": lambda v: [f"--gpus={v}"], "runtime": lambda v: [f"--runtime={v}"], "device": lambda v: ["--device", v],
    "volume": lambda v: ["-v", v], "group_add": lambda v: ["--group-add", v], "env": lambda v: ["-e", v],
    "cap_add": lambda v: [f"--cap-add={v}"], "security_opt": lambda v: ["--security-opt", v],
    "ipc": lambda v: [f"--ipc={v}"], "network": lambda v: [f"--net={v}"], "shm_size": lambda v: ["--shm-size", v],
    "privileged": lambda v: ["--privileged"],
}


@dataclass(frozen=True)
class RunFlag:
    """One `docker run` need of a backend; `kind` is one of RUN_KINDS (the engine maps each to the SDK's option)."""

    kind: str
    value: str

    @property
    def argv(self) -> list[str]:
        return _ARGV[self.kind](self.value)

    def __str__(self) -> str:
        return " ".join(self.argv)


# The runtimes `envbuild pick --for` knows, named once here (host/launch.py has one function per name, the CLI's
# choice reads them). Those besides Docker each have words for a device the matrix names by its CDI kind: one small
# table per runtime. A device missing from a runtime's table has no known way there, and is refused by name.
RUNTIMES = ("docker", "podman", "apptainer", "enroot", "kubernetes")
# Podman with CDI specs (`nvidia-ctk cdi generate`, amd-ctk): the kind and 'all'.
PODMAN_DEVICES = {"nvidia.com/gpu": ("--device", "nvidia.com/gpu=all"), "amd.com/gpu": ("--device", "amd.com/gpu=all")}
# Apptainer binds the host's driver libraries and device nodes itself.
APPTAINER_DEVICES = {"nvidia.com/gpu": ("--nv",), "amd.com/gpu": ("--rocm",)}
# Slurm with pyxis/enroot: Slurm hands out the GPUs, enroot's NVIDIA hook mounts the driver; AMD's nodes are mounted
# (enroot has no ROCm hook; UNCONFIRMED beyond NVIDIA).
SRUN_DEVICES = {"nvidia.com/gpu": ("--gpus=1",), "amd.com/gpu": ("--gpus=1", "--container-mounts=/dev/kfd,/dev/dri")}
# Kubernetes device plugins' resource names (NVIDIA's and AMD's device plugins).
KUBERNETES_RESOURCES = {"nvidia.com/gpu": "nvidia.com/gpu", "amd.com/gpu": "amd.com/gpu"}
# The `docker run` flag kinds Podman takes as they are (its --gpus and --runtime are Docker's own).
PODMAN_SAME = ("device", "volume", "group_add", "env", "cap_add", "security_opt", "ipc", "network", "shm_size",
               "privileged")
