"""The run settings' two forms against the engine: a container created by the docker client with the CLI flags
and one created through the SDK with the options, from the same RunSpec, get the same HostConfig."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import uuid

import pytest

from envbuild.engine.docker import Engine, run_options
from envbuild.matrix import RunSpec

pytestmark = pytest.mark.docker
IMAGE = "envbuild-test/runsettings:empty"
SPEC = RunSpec(gpus="all", devices=("/dev/null", "/dev/zero:/dev/zero2:r"), runtime="runc", env=(("A", "1"), ("B", "x=y")),
               volumes=("/tmp:/mnt/tmp:ro",), group_add=("video",), ipc="host", shm_size="256m",
               security_opt=("seccomp=unconfined",), cap_add=("SYS_PTRACE",), network="none")
KEYS = ("DeviceRequests", "Runtime", "Devices", "Binds", "GroupAdd", "CapAdd", "SecurityOpt", "IpcMode", "NetworkMode",
        "ShmSize", "Privileged")


def _same(value):
    """The API writes an empty list or null alike for "none": compared as the same."""
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same(v) for v in value] or None
    return value


@pytest.fixture(scope="module")
def empty_image(docker_client):
    buf = io.BytesIO()
    tarfile.open(fileobj=buf, mode="w").close()
    docker_client.api.import_image_from_data(buf.getvalue(), repository=IMAGE.split(":")[0], tag="empty")
    yield IMAGE
    docker_client.api.remove_image(IMAGE)


@pytest.mark.parametrize("spec", [SPEC, RunSpec(privileged=True), RunSpec(gpus="2"), RunSpec(gpus="device=GPU-1")],
                         ids=["many", "privileged", "gpu-count", "gpu-device"])
def test_cli_flags_and_sdk_options_make_the_same_container(docker_client, empty_image, spec):
    docker = shutil.which("docker")
    cli_name, sdk_name = f"envbuild-test-cli-{uuid.uuid4().hex[:8]}", f"envbuild-test-sdk-{uuid.uuid4().hex[:8]}"
    try:
        made = subprocess.run([docker, "create", "--name", cli_name, *spec.docker_args(), empty_image, "true"],
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        Engine().client.containers.create(empty_image, command=["true"], name=sdk_name, **run_options(spec))
        cli, sdk = (docker_client.api.inspect_container(n) for n in (cli_name, sdk_name))
        for key in KEYS:
            got = [_same(c["HostConfig"].get(key)) for c in (cli, sdk)]
            if key == "CapAdd":  # clients from 23 write CAP_SYS_PTRACE for SYS_PTRACE: one capability
                got = [[c.upper().removeprefix("CAP_") for c in g or []] for g in got]
            assert got[0] == got[1], key
        # the order of Env is not a setting: some docker clients pass the list through a map
        env = sorted(e for e in cli["Config"]["Env"] or [] if e.split("=")[0] in ("A", "B"))
        assert env == sorted(e for e in sdk["Config"]["Env"] or [] if e.split("=")[0] in ("A", "B"))
        assert env == sorted(f"{k}={v}" for k, v in spec.env)
    finally:
        for name in (cli_name, sdk_name):
            try:
                docker_client.api.remove_container(name, force=True)
            except Exception:
                pass
