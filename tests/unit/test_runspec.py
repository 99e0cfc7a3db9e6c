"""One model of run settings (matrix.model.RunSpec.flags): docker run's argv, --dry-run, the SDK's options,
preflight's messages and the probe's ENVBUILD_RUN_FLAGS all come from it."""

from __future__ import annotations

import dataclasses

import pytest
from support.constants import MATRIX as MATRIX_PATH

from envbuild.engine import docker as engine_mod
from envbuild.matrix import RunSpec, load
from envbuild.matrix.model import RUN_KINDS
from envbuild.smoke import preflight

MATRIX = load(MATRIX_PATH)
FULL = RunSpec(gpus="all", devices=("/dev/kfd", "/dev/dri/renderD128:/dev/dri/renderD128"), runtime="habana",
               env=(("A", "1"), ("B", "x=y")), volumes=("/dev/shm:/dev/shm:ro",), group_add=("video", "render"),
               ipc="host", shm_size="8g", privileged=True, security_opt=("seccomp=unconfined",), cap_add=("SYS_PTRACE",),
               network="host", why="a reason")


def test_every_field_of_the_run_settings_is_a_kind_of_flag():
    # why: prose; cdi: how runtimes other than Docker name the device (`pick --for`), never a docker flag
    fields = {f.name for f in dataclasses.fields(RunSpec)} - {"why", "cdi"}
    assert {attr for _, attr in RUN_KINDS} == fields
    assert {f.kind for f in FULL.flags()} == {kind for kind, _ in RUN_KINDS}


def test_the_cli_flags():
    assert FULL.docker_args() == [
        "--gpus=all", "--runtime=habana", "--device", "/dev/kfd", "--device", "/dev/dri/renderD128:/dev/dri/renderD128",
        "-v", "/dev/shm:/dev/shm:ro", "--group-add", "video", "--group-add", "render", "-e", "A=1", "-e", "B=x=y",
        "--cap-add=SYS_PTRACE", "--security-opt", "seccomp=unconfined", "--ipc=host", "--net=host", "--shm-size", "8g",
        "--privileged"]


def test_the_sdk_options_are_the_same_flags():
    kw = engine_mod.run_options(FULL)
    assert set(engine_mod.SDK_OPTIONS) == {kind for kind, _ in RUN_KINDS}
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri/renderD128:/dev/dri/renderD128"]
    assert kw["environment"] == {"A": "1", "B": "x=y"}
    assert (kw["runtime"], kw["ipc_mode"], kw["network_mode"], kw["shm_size"], kw["privileged"]) == ("habana", "host", "host", "8g", True)
    assert kw["group_add"] == ["video", "render"] and kw["cap_add"] == ["SYS_PTRACE"] and kw["volumes"] == ["/dev/shm:/dev/shm:ro"]
    assert kw["device_requests"][0]["Count"] == -1
    assert engine_mod.run_options(RunSpec()) == {}


@pytest.mark.parametrize("backend", [b.name for b in MATRIX.backends if b.containerizable], ids=str)
def test_each_backend_s_flags_reach_the_probe_and_the_sdk(backend):
    from envbuild.render import render_backend

    b = MATRIX.backend(backend)
    assert f'ENVBUILD_RUN_FLAGS="{" ".join(b.run.docker_args())}"' in render_backend(MATRIX, b)
    kw = engine_mod.run_options(b.run)
    assert len(kw.get("devices", [])) == len(b.run.devices) and len(kw.get("volumes", [])) == len(b.run.volumes)
    assert preflight.wanted_runtime(b) == ("nvidia" if b.run.gpus else b.run.runtime)


@pytest.mark.parametrize("said, flag", [
    ("could not select device driver \"\" with capabilities: [[gpu]]", "--gpus=all"),
    ("unknown or invalid runtime name: habana", "--runtime=habana"),
    ("error gathering device information while adding custom device \"/dev/kfd\": no such file or directory",
     "--device /dev/kfd --device /dev/dri/renderD128:/dev/dri/renderD128"),
    ("unable to find group render", "--group-add video --group-add render"),
    ("unable to apply caps: operation not permitted", "--privileged"),
])
def test_preflight_names_the_refused_flag_as_the_cli_writes_it(said, flag):
    b = dataclasses.replace(MATRIX.backend("cpu"), run=FULL)
    assert f"refused `{flag}`" in preflight.refused(b, said)
