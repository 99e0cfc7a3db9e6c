"""`envbuild pick --for TOOL`: how to fetch and run the picked image in the tool people use (Docker, Podman,
Apptainer, Slurm with pyxis/enroot, Kubernetes), from the backend's run settings (engine/runspec.py: one table of
device words per runtime). Every value bound for a shell is quoted for it (shlex); Kubernetes gets YAML from a YAML
library."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from envbuild.engine import runspec
from envbuild.core.errors import InvalidInput
from envbuild.core.imageref import Reference
from envbuild.matrix import Backend

PROBE = ["envbuild-probe"]
UID = 1000  # the image's own user (USER 1000:0 in every non-root image)


def _no_way(b: Backend, tool: str, why: str) -> InvalidInput:
    return InvalidInput(f"envbuild knows no {tool} way to hand {b.description} to a container ({why}); "
                        f"`envbuild pick --for docker` prints Docker's")


def _device(b: Backend, table: dict[str, Any], tool: str) -> Any:
    """The tool's words for the backend's device: nothing for a CPU image, the table's entry for its CDI kind."""
    spec = b.run
    if not spec.flags():
        return None
    if spec.cdi and spec.cdi in table:
        return table[spec.cdi]
    raise _no_way(b, tool, f"its Docker flags are {' '.join(spec.docker_args())}")


def docker(b: Backend, ref: str) -> str:
    return "\n".join([shlex.join(["docker", "pull", ref]), shlex.join(b.run.command_line(ref, PROBE))])


def podman(b: Backend, ref: str) -> str:
    spec = b.run
    if spec.runtime and not spec.cdi:
        raise _no_way(b, "Podman", f"it needs Docker's {spec.runtime} runtime")
    args: list[str] = list(runspec.PODMAN_DEVICES[spec.cdi]) if spec.cdi in runspec.PODMAN_DEVICES else []
    # With a CDI kind the CDI spec brings the device nodes; the other flags carry over as they are.
    args += [a for f in spec.flags() if f.kind in runspec.PODMAN_SAME and not (spec.cdi and f.kind == "device")
             for a in f.argv]
    return "\n".join([shlex.join(["podman", "pull", f"docker://{ref}"]),
                      shlex.join(["podman", "run", "--rm", *args, ref, *PROBE])])  # run: the image just pulled


def _sif(ref: str) -> str:
    r = Reference.parse(ref)
    tail = r.path.rsplit("/", 1)[-1]
    return f"{tail}_{r.tag or (r.digest or 'image').split(':')[-1][:12]}.sif"


def apptainer(b: Backend, ref: str) -> str:
    flags = list(_device(b, runspec.APPTAINER_DEVICES, "Apptainer") or ())
    sif = _sif(ref)
    return "\n".join([shlex.join(["apptainer", "pull", sif, f"docker://{ref}"]),
                      shlex.join(["apptainer", "exec", *flags, sif, *PROBE])])


def enroot_image(ref: str) -> str:
    """pyxis/enroot's REGISTRY#IMAGE form: ghcr.io/org/img:tag -> ghcr.io#org/img:tag."""
    r = Reference.parse(ref)
    where = f":{r.tag}" if r.tag and not r.digest else ""
    where += f"@{r.digest}" if r.digest else ""
    return f"{r.domain}#{r.path}{where}"


def enroot(b: Backend, ref: str) -> str:
    flags = list(_device(b, runspec.SRUN_DEVICES, "Slurm/enroot") or ())
    return shlex.join(["srun", *flags, f"--container-image={enroot_image(ref)}", *PROBE])


def kubernetes(b: Backend, ref: str) -> str:
    resource = _device(b, runspec.KUBERNETES_RESOURCES, "Kubernetes")
    root = b.user == "root"  # a vendor stack that needs root: no non-root context to claim
    # `args`, not `command`: the image's entrypoint still runs (it moves the caches off a /cache it cannot write)
    container: dict[str, Any] = {"name": f"envbuild-{b.name}", "image": ref, "args": PROBE}
    if not root:
        container["securityContext"] = {"runAsUser": UID, "runAsNonRoot": True, "allowPrivilegeEscalation": False}
    if resource:
        container["resources"] = {"limits": {resource: 1}}
    if b.run.ipc == "host" or b.run.shm_size:  # DataLoader workers and NCCL: a memory-backed /dev/shm
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"envbuild-{b.name}"},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    if not root:
        pod["spec"]["securityContext"] = {"runAsUser": UID, "runAsGroup": 0, "fsGroup": 0, "runAsNonRoot": True}
    if "volumeMounts" in container:
        pod["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return yaml.safe_dump(pod, sort_keys=False).rstrip("\n")


# One function above per runtime that runspec.RUNTIMES names (the names are written there, once), named for it.
TOOLS = {name: globals()[name] for name in runspec.RUNTIMES}


def how_to_run(b: Backend, ref: str, tool: str) -> str:
    """The lines that fetch and run `ref` with `tool`; InvalidInput naming the way out where the tool has none."""
    return TOOLS[tool](b, ref)
