"""Podman as the engine, for real: the engine contract against both engines (parametrized), and the cpu image built
with `podman build` from the lock of the session's Docker build, compared with it, smoke-tested, run, published
to a registry with a login and pulled back, all through the CLI with no Docker daemon answering.

scripts/test installs and configures Podman (default_ulimits = [] in /etc/containers/containers.conf). What
these tests add to CI: one cpu build with Podman (its uv cache is Podman's own), one smoke, one push.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.constants import MATRIX as MATRIX_PATH
from support.constants import TORCH
from support.fixtures import start_registry

from envbuild.engine.docker import Engine, EngineError
from envbuild.engine.podman import Podman
from envbuild.engine.runspec import RunSpec

pytestmark = pytest.mark.docker
MATRIX = str(MATRIX_PATH)
LOCK = "/opt/envbuild/lock.txt"
PROBE = "/opt/envbuild/probe.py"
UID = uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def podman_ok():
    exe = shutil.which("podman")
    proc = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=60) if exe else None
    if proc is None or proc.returncode != 0:
        why = f"podman is not usable here: {proc.stderr.strip()[-300:] if proc else 'not installed'} (scripts/test installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def no_docker(tmp_path_factory) -> dict[str, str]:
    """An environment where no Docker daemon answers (DOCKER_HOST at a socket path that does not exist, for these
    processes alone: the shared daemon runs on) and a `docker` first on PATH that records being started."""
    where = tmp_path_factory.mktemp("no-docker")
    (where / "bin").mkdir()
    spy = where / "bin" / "docker"
    spy.write_text(f"#!/bin/sh\necho \"$@\" >> {where}/docker-started\nexit 1\n")
    spy.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVBUILD_REGISTRY_", "ENVBUILD_ENGINE"))}
    return {**env, "DOCKER_HOST": f"unix://{where}/no-such-docker.sock", "PATH": f"{where / 'bin'}:{env['PATH']}",
            "ENVBUILD_DOCKER": str(spy), "SPY": str(where / "docker-started")}


def envbuild(args: list[str], env: dict[str, str], cwd: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# --- the contract, against both engines ----------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["docker", "podman"])
def any_engine(request, base_image, docker_client):
    """Each engine with the session's base image on it (Podman pulls it from the loopback registry: its pull too)."""
    if request.param == "docker":
        e = Engine()
    else:
        request.getfixturevalue("podman_ok")
        e = Podman()
        for _ in e.pull(base_image, None):
            pass
    yield e, base_image
    e.close()


def test_the_contract_on_both_engines(any_engine):
    """What the stages ask of an engine answers the same on Docker and on Podman: an image and its id, tags, a
    container's exit status and output streams apart, environment by name, a volume, a file read without running,
    labelled containers listed and removed."""
    engine, base = any_engine
    image = engine.image(base)
    assert image is not None and image.id.startswith("sha256:") and engine.image_id(base) == image.id
    assert (image.os, image.architecture) == ("linux", "amd64")
    assert engine.image(f"envbuild-test/absent-{UID}:none") is None
    tag = f"envbuild-test/contract-{UID}:{engine.kind}"
    engine.tag(image.id, [tag])
    try:
        assert engine.image_id(tag) == image.id
    finally:
        engine.untag(tag)
    assert engine.image_id(tag) is None
    label = f"dev.envbuild.test-contract={UID}"
    with engine.volume(f"envbuild-test-contract-{UID}", {"dev.envbuild.test-contract": UID}) as volume:
        done = engine.run(base, ["sh", "-c", 'echo out; echo "err $SECRET" >&2; echo kept > /v/f; exit 3'],
                          name=f"envbuild-test-contract-{UID}", labels={"dev.envbuild.test-contract": UID},
                          run=RunSpec(env=(("A", "1"),)), volumes=[f"{volume}:/v"], environment={"SECRET": "s3"}, timeout=120)
        assert (done.status, done.stdout, done.stderr, done.timed_out) == (3, b"out\n", b"err s3\n", False)
        again = engine.run(base, ["sh", "-c", "cat /v/f; echo $A"], name=f"envbuild-test-contract2-{UID}", labels={},
                           run=RunSpec(env=(("A", "1"),)), volumes=[f"{volume}:/v"], timeout=120)
        assert again.stdout == b"kept\n1\n"  # the volume kept what the first wrote; the matrix's env reached it
    slow = engine.run(base, ["sleep", "60"], name=f"envbuild-test-contract3-{UID}", labels={}, run=RunSpec(), timeout=3)
    assert slow.timed_out and slow.status is None
    assert engine.container_list(label) == []  # every run's container removed
    assert engine.read_file(base, "/etc/debian_version").startswith(b"12")
    assert engine.read_file(base, "/no/such/file") is None
    with pytest.raises(EngineError):
        engine.run(f"envbuild-test/absent-{UID}:none", ["true"], name=f"envbuild-test-contract4-{UID}", labels={},
                   run=RunSpec(), timeout=60)


# --- the cpu image, built with Podman ------------------------------------------------------------------------------

@dataclass
class PodmanBuild:
    proc: subprocess.CompletedProcess
    again: subprocess.CompletedProcess
    cwd: Path
    tag: str


@dataclass
class Facts:
    labels: dict
    user: str
    lock: bytes
    probe: bytes


@pytest.fixture(scope="module")
def docker_cpu(cpu_image) -> Facts:
    """What the session's Docker build holds, read at once (the shared daemon's tags move under other sessions)."""
    doc = _inspect("docker", cpu_image.image_id)
    return Facts(doc["Config"]["Labels"], doc["Config"]["User"], Engine().read_file(cpu_image.image_id, LOCK),
                 Engine().read_file(cpu_image.image_id, PROBE))


@pytest.fixture(scope="module")
def podman_cpu(podman_ok, docker_cpu, cpu_image, wheelhouse, ca_bundle, no_docker, tmp_path_factory) -> PodmanBuild:
    """The cpu image built with Podman through the CLI, auto-chosen (no Docker daemon answers), from the very lock
    the session's Docker build used (--locked: nothing resolved again); then built again (up to date)."""
    cwd = tmp_path_factory.mktemp("podman-build")
    cpu_image.copy_locks(cwd)
    args = ["build", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--wheelhouse", str(wheelhouse),
            "--ca-bundle", str(ca_bundle), "--locked"]
    first = envbuild(args, no_docker, cwd)
    assert first.returncode == 0, first.stdout + first.stderr
    again = envbuild(args, no_docker, cwd, timeout=300)
    return PodmanBuild(first, again, cwd, cpu_image.tag)


def _inspect(exe: str, ref: str) -> dict:
    proc = subprocess.run([exe, "image", "inspect", ref], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)[0]


def test_podman_builds_the_same_image_as_docker(podman_cpu, docker_cpu, no_docker):
    assert "[cpu] building" in podman_cpu.proc.stderr
    assert any(line.startswith("[cpu] ") and " ... DONE" in line for line in podman_cpu.proc.stderr.splitlines())
    podman_side = _inspect("podman", podman_cpu.tag)
    labels = {k: v for k, v in podman_side["Config"]["Labels"].items() if k != "io.buildah.version"}
    assert labels == docker_cpu.labels  # content key, pins, what it needs of the host, base
    assert podman_side["Config"]["User"] == docker_cpu.user == "1000:0"
    assert Podman().read_file(podman_cpu.tag, LOCK) == docker_cpu.lock and b"torch" in docker_cpu.lock
    assert Podman().read_file(podman_cpu.tag, PROBE) == docker_cpu.probe
    assert "up to date" in podman_cpu.again.stderr + podman_cpu.again.stdout  # the same rule as Docker's
    assert not Path(no_docker["SPY"]).exists(), "a docker process was started"


@pytest.fixture(scope="module")
def podman_smoke(podman_cpu, no_docker, cpu_image) -> Path:
    """`envbuild smoke` of the Podman-built image (auto: Podman), once: its result is what publish needs."""
    out = podman_cpu.cwd / "smoke.json"
    smoke = envbuild(["smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--json-file", str(out)],
                     no_docker, podman_cpu.cwd, timeout=900)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    return out


def test_smoke_run_and_doctor_with_podman(podman_cpu, podman_smoke, no_docker, cpu_image, wheelhouse):
    doc = json.loads(podman_smoke.read_text())
    assert doc["ok"] and doc["image"] == cpu_image.tag and [c["name"] for c in doc["checks"]][-2:] == ["arbitrary_uid", "read_only_any_uid"]
    run = envbuild(["run", "--engine", "podman", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--no-workdir",
                    "--", "python", "-c", "import os, torch; print(torch.__version__, os.getuid())"], no_docker, podman_cpu.cwd, 300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == [f"{TORCH}+cpu", "1000"]  # the image's own non-root user
    # the wheel folder the build took torch 2.13.0+cpu from (PyPI's x86_64 torch is CUDA's: doctor says so without it)
    doctor = envbuild(["doctor", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--json"],
                      {**no_docker, "ENVBUILD_WHEELHOUSE": str(wheelhouse)}, podman_cpu.cwd, 120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["podman"]["ok"] and "no Docker daemon answers" in checks["podman"]["detail"]
    assert checks["podman rootless"]["ok"] and checks["podman storage"]["ok"] and checks["cdi specs"]["ok"]
    assert not Path(no_docker["SPY"]).exists(), "a docker process was started"


def test_engine_podman_is_podman_while_docker_answers(podman_ok, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ENVBUILD_ENGINE"}
    proc = envbuild(["doctor", "--backend", "cpu", "--matrix", MATRIX, "--engine", "podman", "--json"], env, tmp_path, 120)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert "--engine podman chose Podman" in checks["podman"]["detail"] and "docker daemon" not in checks


def test_publish_and_pull_with_podman_record_the_registrys_digest(podman_cpu, podman_smoke, cpu_image, no_docker,
                                                                   tmp_path_factory):
    user = "envbuild"
    reg = start_registry(tmp_path_factory.mktemp("podman-registry"), auth=(user, "pw-" + secrets.token_urlsafe(18)))
    work = podman_cpu.cwd
    env = {**no_docker, "ENVBUILD_REGISTRY_USER": user, "ENVBUILD_REGISTRY_PASSWORD": reg.password}
    repo = f"{reg.host}/envbuild-podman-{UID}"
    made: list[str] = []
    try:
        proc = envbuild(["publish", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--registry", repo,
                         "--smoke-json", str(podman_smoke)], env, work)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert reg.password not in proc.stdout + proc.stderr
        entry = json.loads((work / "envbuild-manifest.json").read_text())["images"]["cpu"]
        made += [*entry["tags"], entry["content_tag"], f"{repo}@{entry['digest']}"]  # the pull's by-digest name too
        served = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", "--creds", f"{user}:{reg.password}",
                                 f"docker://{repo}:cpu"], capture_output=True, timeout=120, check=True).stdout
        import hashlib

        assert entry["digest"] == "sha256:" + hashlib.sha256(served).hexdigest()  # what the registry serves
        for ref in entry["tags"]:
            subprocess.run(["podman", "untag", ref, ref], capture_output=True, timeout=60)
        pulled = envbuild(["pull", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--registry", repo,
                           "--insecure-skip-verify"], env, work)
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert entry["digest"] in pulled.stdout + pulled.stderr
        pulled_tag = re.search(r"pulled (\S+) \(sha256:", pulled.stdout + pulled.stderr).group(1)
        assert pulled_tag in entry["tags"]
        assert any(d.endswith(entry["digest"]) for d in _inspect("podman", pulled_tag)["RepoDigests"])
        assert not Path(no_docker["SPY"]).exists(), "a docker process was started"
    finally:
        reg.stop()
        for ref in made:  # by name: the image stays under the session's tags
            subprocess.run(["podman", "rmi", ref], capture_output=True, timeout=60)
