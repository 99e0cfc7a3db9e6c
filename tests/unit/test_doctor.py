"""`envbuild doctor`: each check with the fake engine and fake roots, and the CLI where Docker does not run
(tests/engine/test_doctor_engine.py runs it against the real engine)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.constants import MATRIX
from support.fakes import FakeEngine
from support.hosts import VENDORS, add_driver, make_root, nvidia_version
from support.loopback import serve

from envbuild.engine import docker as docker_engine
from envbuild.engine import docker as engine
from envbuild.image import builder
from envbuild.core.errors import DockerError
from envbuild.host import doctor
from envbuild.report.report import doctor_text as report_text
from envbuild.matrix import load
from envbuild.smoke import preflight
import http.server
import socket
from envbuild.report.report import doctor_text

SECRET = "s3cr3t-never-printed"


@pytest.fixture(scope="module")
def m():
    return load(MATRIX)


def connector(client):
    return lambda: (client, doctor.Check("docker daemon", True, "fake daemon"))


def by_name(report, name):
    return next(c for c in report.checks if c.name == name)


@pytest.fixture
def builder_ok(monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    # The fake daemon's disk is roomy whatever this machine's disk holds; the disk test sets its own.
    real = doctor.shutil.disk_usage

    def roomy(path):
        real(path)  # an invisible path still fails as it would
        return SimpleNamespace(total=500 * 2**30, used=100 * 2**30, free=400 * 2**30)

    monkeypatch.setattr(doctor.shutil, "disk_usage", roomy)


# --------------------------------------------------------------------------------------------------
# The checks, one by one, without a daemon.


def test_cpu_passes_trivially_with_a_daemon(m, tmp_path, builder_ok):
    client = FakeEngine(root=tmp_path)
    report = doctor.diagnose(m, m.backend("cpu"), connector=connector(client), root=make_root(tmp_path))
    assert report.ok, report_text(report)
    assert [c.name for c in report.checks] == ["docker daemon", "buildkit", "runtime", "device", "host driver", "disk",
                                                "platforms", "base registry", "package index", "package index",
                                                "leftover containers"]
    assert all(c.ok or c.skipped for c in report.checks)  # the base's registry, the indexes: not asked in a test (conftest)
    assert client.closed
    assert report_text(report).splitlines()[-2:] == ["Can build cpu here.", "Can run cpu here."]


def test_cuda_without_the_nvidia_runtime_fails_with_nvidia_ctk(m, tmp_path, builder_ok):
    root = make_root(tmp_path, *VENDORS["cuda"])
    report = doctor.diagnose(m, m.backend("cuda"), connector=connector(FakeEngine(root=tmp_path)), root=root)
    runtime = by_name(report, "runtime")
    assert runtime.status == "FAIL" and "'nvidia'" in runtime.detail
    assert "nvidia-ctk runtime configure --runtime=docker" in runtime.fix
    assert by_name(report, "device").ok  # the GPU is there; only the runtime is missing
    assert [c.name for c in report.blockers] == ["runtime"]
    assert by_name(report, "vendor tools").status == "warn"  # nvidia-smi missing: a warning only


def test_cuda_with_the_runtime_and_the_gpu_passes(m, tmp_path, builder_ok, monkeypatch):
    root = add_driver(make_root(tmp_path, *VENDORS["cuda"]), nvidia_version("610.43.02"))
    tool = tmp_path / "bin/nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tool.parent))
    client = FakeEngine(runtimes=("runc", "nvidia"), root=tmp_path)
    report = doctor.diagnose(m, m.backend("cuda"), connector=connector(client), root=root, path_env=str(tool.parent))
    assert report.ok and all(c.ok or c.skipped for c in report.checks), report_text(report)
    assert "/dev/nvidiactl" in by_name(report, "device").detail


def test_cdi_specs_stand_in_for_the_nvidia_runtime(m, tmp_path, builder_ok):
    root = make_root(tmp_path, *VENDORS["cuda"])
    (root / "etc/cdi").mkdir(parents=True)
    report = doctor.diagnose(m, m.backend("cuda"), connector=connector(FakeEngine(root=tmp_path)), root=root)
    assert by_name(report, "runtime").ok and "CDI" in by_name(report, "runtime").detail


@pytest.mark.parametrize("backend, runtime, words", [
    ("hpu", "habana", "/etc/docker/daemon.json"),
    ("musa", "mthreads", "mt-container-toolkit"),
])
def test_vendor_runtimes_name_their_fix(m, tmp_path, builder_ok, backend, runtime, words):
    report = doctor.diagnose(m, m.backend(backend), connector=connector(FakeEngine(root=tmp_path)), root=make_root(tmp_path))
    check = by_name(report, "runtime")
    assert check.status == "FAIL" and f"--runtime={runtime}" in check.detail and words in check.fix


def test_rocm_device_nodes_and_groups(m, tmp_path, builder_ok):
    root = make_root(tmp_path, *VENDORS["rocm"])
    (root / "etc").mkdir()
    (root / "etc/group").write_text("root:x:0:\nvideo:x:44:\nrender:x:109:\n")
    report = doctor.diagnose(m, m.backend("rocm"), connector=connector(FakeEngine(root=tmp_path)), root=root)
    assert by_name(report, "device nodes").ok and by_name(report, "device nodes").detail == "/dev/kfd, /dev/dri"
    assert by_name(report, "groups").detail == "video (gid 44)"
    assert report.ok, report_text(report)


def test_rocm_on_a_plain_host_fails_with_fixes(m, tmp_path, builder_ok):
    root = make_root(tmp_path)
    (root / "etc").mkdir()
    (root / "etc/group").write_text("root:x:0:\n")
    report = doctor.diagnose(m, m.backend("rocm"), connector=connector(FakeEngine(root=tmp_path)), root=root)
    nodes, groups, device = by_name(report, "device nodes"), by_name(report, "groups"), by_name(report, "device")
    assert nodes.status == "FAIL" and "/dev/kfd, /dev/dri" in nodes.detail and "driver" in nodes.fix
    assert groups.status == "FAIL" and "usermod -aG video" in groups.fix and "groupadd --system video" in groups.fix
    assert device.status == "FAIL" and "/dev/kfd" in device.detail and "envbuild detect" in device.fix
    assert {c.name for c in report.blockers} == {"device", "device nodes", "groups"}


def test_groups_on_the_real_host_use_grp(m):
    import grp

    name = grp.getgrgid(0).gr_name
    rocm = m.backend("rocm")
    check = preflight.groups(replace(rocm, run=replace(rocm.run, group_add=(name,))), Path("/"))
    assert check.ok and check.detail == f"{name} (gid 0)"


def test_disk_too_small_fails_with_prune(m, tmp_path, builder_ok, monkeypatch):
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: SimpleNamespace(total=100 * 2**30, used=97 * 2**30, free=3 * 2**30))
    report = doctor.diagnose(m, m.backend("cpu"), connector=connector(FakeEngine(root=tmp_path)), root=make_root(tmp_path))
    disk = by_name(report, "disk")
    assert disk.status == "FAIL" and disk.detail == f"3.0 GiB free at {tmp_path}; a cpu image needs about 10 GiB to build"
    assert "docker builder prune" in disk.fix and "data-root" in disk.fix
    assert not report.ok


@pytest.mark.parametrize("backend, gib", [("cpu", 10), ("cuda", 20), ("npu", 20), ("rocm", 30), ("hpu", 30)])
def test_disk_estimates(m, backend, gib):
    assert doctor.needed_gib(m.backend(backend)) == gib


def test_invisible_docker_root_is_skipped_not_failed(m, tmp_path, builder_ok):
    report = doctor.diagnose(m, m.backend("cpu"), connector=connector(FakeEngine(root=tmp_path / "elsewhere")), root=make_root(tmp_path))
    assert by_name(report, "disk").status == "skip" and report.ok


def test_leftover_containers_warn(m, tmp_path, builder_ok):
    client = FakeEngine(root=tmp_path, containers=["envbuild-smoke-cpu-1234abcd"])
    report = doctor.diagnose(m, m.backend("cpu"), connector=connector(client), root=make_root(tmp_path))
    check = by_name(report, "leftover containers")
    assert check.status == "warn" and "docker rm -f envbuild-smoke-cpu-1234abcd" in check.fix
    assert report.ok and "(warnings: leftover containers)" in report_text(report)


def test_no_buildkit_client(m, tmp_path, monkeypatch):
    def none():
        raise DockerError("no BuildKit-capable docker client found (tried: /usr/local/bin/docker). Install ...")

    monkeypatch.setattr(docker_engine, "find_builder", none)
    report = doctor.diagnose(m, m.backend("cpu"), connector=connector(FakeEngine(root=tmp_path)), root=make_root(tmp_path))
    check = by_name(report, "buildkit")
    assert check.status == "FAIL" and "apt-get install docker-buildx" in check.fix and "ENVBUILD_DOCKER=/usr/bin/docker" in check.fix


@pytest.mark.parametrize("version, buildx, words", [
    ("28.2.2", True, "(the buildx plugin)"),
    ("20.10.24+dfsg1", False, "(a client older than 23.0, which builds with BuildKit itself)"),
])
def test_the_builder_found_is_described(tmp_path, monkeypatch, fake_docker, version, buildx, words):
    exe = fake_docker(tmp_path / "bin", version, buildx=buildx)
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("PATH", str(exe.parent))
    docker_engine.find_builder.cache_clear()
    try:
        check = doctor.check_builder()
    finally:
        docker_engine.find_builder.cache_clear()
    assert check.ok and check.detail.startswith(f"`{'' if buildx else 'DOCKER_BUILDKIT=1 '}{exe}") and words in check.detail


def test_old_server_is_too_old_for_buildkit(monkeypatch):
    old = {"Version": "18.06.3-ce", "ApiVersion": "1.38", "Os": "linux", "Arch": "amd64"}
    monkeypatch.setenv("ENVBUILD_ENGINE", "docker")  # auto would take Podman where no Docker daemon answers
    monkeypatch.setattr(engine.Engine, "version", lambda self: old)
    client, check = doctor.connect()
    assert client is not None and check.status == "FAIL" and "BuildKit needs Docker 18.09" in check.detail


@pytest.mark.parametrize("message, words", [
    ("('Connection aborted.', PermissionError(13, 'Permission denied'))", "usermod -aG docker"),
    ("('Connection aborted.', ConnectionRefusedError(111, 'Connection refused'))", "systemctl start docker"),
])
def test_daemon_failure_fixes(monkeypatch, message, words):
    def fail(self):
        raise engine.unreachable_error(f"Error while fetching server API version: {message}", self.host)

    monkeypatch.setenv("ENVBUILD_ENGINE", "docker")  # auto would take Podman where no Docker daemon answers
    monkeypatch.setattr(engine.Engine, "version", fail)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/sbin/dockerd")
    client, check = doctor.connect()
    assert client is None and check.status == "FAIL" and words in check.fix


def test_no_dockerd_installed_says_apt_get(monkeypatch, closed_socket):
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    client, check = doctor.connect()
    assert client is None
    assert "connection refused" in check.detail
    assert "sudo apt-get install docker.io" in check.fix and f"DOCKER_HOST is set to unix://{closed_socket}" in check.fix


# --------------------------------------------------------------------------------------------------
# mps: no container; the platform and Python's venv instead.


def test_mps_on_linux_fails_on_the_platform(m):
    checks = doctor.native_checks(m.backend("mps"), "Linux", "x86_64")
    assert [(c.name, c.status) for c in checks] == [("container", "warn"), ("platform", "FAIL"), ("python venv", "ok")]
    assert "envbuild env --backend cpu" in checks[1].fix


def test_mps_on_a_mac_is_ready_for_a_native_environment(m):
    checks = doctor.native_checks(m.backend("mps"), "Darwin", "arm64")
    assert [c.status for c in checks] == ["warn", "ok", "ok"]
    assert "envbuild env --backend mps" in checks[0].fix


def test_mps_report_never_asks_docker(m):
    def boom():
        raise AssertionError("mps must not need Docker")

    report = doctor.diagnose(m, m.backend("mps"), connector=boom)
    assert {c.name for c in report.checks} == {"container", "platform", "python venv"}


# --------------------------------------------------------------------------------------------------
# Registry credentials: where they were found, never what they are.


def _config(tmp_path, doc) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return {"DOCKER_CONFIG": str(tmp_path)}


def test_credentials_from_the_environment(tmp_path):
    env = {"ENVBUILD_REGISTRY_USER": "bot", "ENVBUILD_REGISTRY_PASSWORD": SECRET, "DOCKER_CONFIG": str(tmp_path)}
    check = doctor.check_credentials("ghcr.io/org/img", env)
    assert check.ok and SECRET not in json.dumps(check.to_json())


@pytest.mark.parametrize("registry, env, found", [
    ("ghcr.io/org/img", {"GITHUB_ACTOR": "octo", "GITHUB_TOKEN": SECRET}, True),  # GitHub Actions
    ("quay.io/org/img", {"GITHUB_ACTOR": "octo", "GITHUB_TOKEN": SECRET}, False),  # GitHub's token is for GHCR only
    ("quay.io/org/img", {"ENVBUILD_REGISTRY_USER": "bot", "ENVBUILD_REGISTRY_PASSWORD": SECRET}, True),
    ("quay.io/org/img", {}, False),
])
def test_doctor_finds_credentials_where_publish_takes_them(tmp_path, registry, env, found):
    """Doctor says credentials are found exactly where a publish (through the fake engine) logs in and pushes
    with credentials: the two paths compared, not one function with itself."""
    from support.constants import MATRIX
    from support.fakes import FakeEngine

    from envbuild.matrix import load
    from envbuild.ship.publish import PublishOptions, publish

    env = {**env, "DOCKER_CONFIG": str(tmp_path / "none")}
    check = doctor.check_credentials(registry, env)
    assert check.ok is found
    m = load(MATRIX)
    cpu = m.backend("cpu")
    engine = FakeEngine()
    engine.add_image("sha256:" + "a" * 64, [m.tags(cpu)[0]], {"dev.envbuild.backend": "cpu", "dev.envbuild.torch": cpu.torch.version,
                     "dev.envbuild.plugin": "", "dev.envbuild.transformers": m.transformers, "dev.envbuild.accelerate": m.accelerate})
    publish(m, [cpu], PublishOptions(registry=registry, manifest=tmp_path / "m.json"), engine, environ=env)
    assert engine.pushed
    assert all((auth is not None) is found for _, auth in engine.pushed)
    assert bool(engine.logins) is found
    assert SECRET not in json.dumps(check.to_json())


def test_cli_publish_with_github_actions_variables(invoke, closed_socket, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("ENVBUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVBUILD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("GITHUB_ACTOR", "octo")
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    result = invoke("doctor", "--backend", "cpu", "--publish", "--json", "--matrix", MATRIX)  # ghcr.io/envbuild/envbuild
    creds = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "registry credentials")
    assert creds["status"] == "ok" and "GITHUB_ACTOR/GITHUB_TOKEN" in creds["detail"] and SECRET not in result.output


def test_half_the_environment_is_a_failure(tmp_path):
    check = doctor.check_credentials("ghcr.io/org/img", {"ENVBUILD_REGISTRY_USER": "bot", "DOCKER_CONFIG": str(tmp_path)})
    assert check.status == "FAIL" and "ENVBUILD_REGISTRY_PASSWORD" in check.fix


def test_credentials_from_a_docker_login(tmp_path):
    env = _config(tmp_path, {"auths": {"ghcr.io": {"auth": SECRET}}})
    check = doctor.check_credentials("ghcr.io/org/img", env)
    assert check.ok and "a login in" in check.detail and SECRET not in json.dumps(check.to_json())
    other = doctor.check_credentials("quay.io/org/img", env)
    assert other.status == "FAIL" and other.fix.startswith("`docker login quay.io`")


def test_docker_hub_keys_and_helpers(tmp_path):
    assert doctor.check_credentials("org/img", _config(tmp_path, {"auths": {"https://index.docker.io/v1/": {"auth": SECRET}}})).ok
    check = doctor.check_credentials("ghcr.io/x", _config(tmp_path, {"credHelpers": {"ghcr.io": "gh"}}))
    assert check.ok and "docker-credential-gh" in check.detail
    check = doctor.check_credentials("ghcr.io/x", _config(tmp_path, {"auths": {"ghcr.io": {}}, "credsStore": "pass"}))
    assert check.ok and "docker-credential-pass" in check.detail
    check = doctor.check_credentials("ghcr.io/x", _config(tmp_path, {"auths": {"ghcr.io": {}}}))
    assert check.status == "FAIL"


def test_no_config_at_all(tmp_path):
    check = doctor.check_credentials("org/img", {"DOCKER_CONFIG": str(tmp_path / "none")})
    assert check.status == "FAIL" and check.fix.startswith("`docker login`")


def test_credentials_check_only_when_publishing(m, tmp_path, builder_ok, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("ENVBUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVBUILD_REGISTRY_PASSWORD", raising=False)
    plain = doctor.diagnose(m, m.backend("cpu"), connector=connector(FakeEngine(root=tmp_path)), root=make_root(tmp_path))
    assert "registry credentials" not in [c.name for c in plain.checks]
    publish = doctor.diagnose(m, m.backend("cpu"), connector=connector(FakeEngine(root=tmp_path)), root=make_root(tmp_path),
                              registry="ghcr.io/envbuild/envbuild")
    assert [c.name for c in publish.blockers] == ["registry credentials"]


# --------------------------------------------------------------------------------------------------
# The CLI where Docker does not run: exit 1 with the fix, no traceback.


def test_cli_without_docker_fails_with_the_fix(invoke, closed_socket, buildkit_client):
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)  # a client is there: the daemon is what is missing
    assert result.exit_code == 1
    out = result.stdout
    assert "FAIL  docker daemon" in out and f"cannot reach the Docker daemon at unix://{closed_socket}" in out
    assert "fix: DOCKER_HOST is set to" in out and ("systemctl start docker" in out or "apt-get install docker.io" in out)
    assert "skip  disk" in out
    assert out.splitlines()[-2:] == ["Cannot build cpu here: 1 blocking problem(s): docker daemon.",
                                     "Cannot run cpu here: 1 blocking problem(s): docker daemon."]


def test_a_slow_doctor_says_it_is_still_checking(invoke, closed_socket, buildkit_client, monkeypatch):
    """Each question is bounded, but several that do not answer add up: stderr says it is still checking."""
    import threading

    from envbuild.core import heartbeat
    from envbuild.host import doctor as doc

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    said = threading.Event()
    tick, diagnose = heartbeat.Waiting.tick, doc.diagnose

    def ticked(self):
        tick(self)
        said.set()

    def slow(*args, **kwargs):
        assert said.wait(30)  # answers only once the wait was said
        return diagnose(*args, **kwargs)

    monkeypatch.setattr(heartbeat.Waiting, "tick", ticked)
    monkeypatch.setattr(doc, "diagnose", slow)
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)
    assert result.exit_code == 1
    assert "still checking (an engine, registry or index that does not answer takes seconds each): " in result.stderr
    assert "still" not in result.stdout and "FAIL  docker daemon" in result.stdout


def test_cli_without_docker_json(invoke, closed_socket):
    result = invoke("doctor", "--backend", "cpu", "--json", "--matrix", MATRIX)
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["backend"] == "cpu" and data["ok"] is False
    daemon = data["checks"][0]
    assert set(daemon) == {"name", "status", "ok", "blocking", "detail", "fix", "for"}
    assert daemon["for"] == ["build", "run"] and data["can_build"] is False and data["can_run"] is False
    assert daemon["name"] == "docker daemon" and daemon["status"] == "FAIL" and daemon["fix"]


def test_cli_publish_checks_the_matrix_repository(invoke, closed_socket, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("ENVBUILD_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVBUILD_REGISTRY_PASSWORD", raising=False)
    result = invoke("doctor", "--backend", "cpu", "--publish", "--json", "--matrix", MATRIX)
    creds = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "registry credentials")
    assert creds["status"] == "FAIL" and creds["fix"].startswith("`docker login ghcr.io`")


def test_cli_mps_on_linux(invoke):
    if sys.platform == "darwin":
        pytest.skip("a Mac")
    result = invoke("doctor", "--backend", "mps", "--matrix", MATRIX)
    assert result.exit_code == 1 and "FAIL  platform" in result.stdout and "mps needs darwin/arm64" in result.stdout


def test_cli_unknown_backend(invoke):
    result = invoke("doctor", "--backend", "nope", "--matrix", MATRIX)
    assert result.exit_code == 2 and "unknown backend 'nope'" in result.stderr


def test_platforms_say_what_this_host_builds_and_runs(m, tmp_path):
    cpu = m.backend("cpu")
    folder = tmp_path / "proc/sys/fs/binfmt_misc"
    folder.mkdir(parents=True)
    check = doctor.check_platforms(cpu, str(tmp_path), "linux/amd64")
    assert not check.ok and not check.blocking
    assert "linux/amd64: natively" in check.detail and "linux/arm64: NO (binfmt_misc is not mounted" in check.detail
    assert "update-binfmts --enable qemu-aarch64" in check.fix
    (folder / "status").write_text("enabled\n")
    (folder / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    check = doctor.check_platforms(cpu, str(tmp_path), "linux/amd64")
    assert check.ok and check.detail == ("this host (linux/amd64) builds and runs linux/amd64: natively; "
                                         "linux/arm64: under QEMU emulation")


def test_a_base_made_from_the_archive_needs_no_registry(m, tmp_path, builder_ok, monkeypatch):
    """`envbuild base` loaded the base: the base's registry is not asked, and doctor says why it can build."""
    from envbuild.core.distbase import MADE_LABEL

    monkeypatch.setattr(doctor, "check_registry", lambda *a, **k: doctor.Check("base registry", False, "no answer", "fix"))
    client = FakeEngine(root=tmp_path)
    assert not by_name(doctor.diagnose(m, m.backend("cpu"), connector=connector(client), root=make_root(tmp_path)),
                       "base registry").ok
    client = FakeEngine(root=tmp_path)
    client.add_image("sha256:" + "e" * 64, [m.backend("cpu").base_image], {MADE_LABEL: "mmdebstrap bookworm amd64"})
    check = by_name(doctor.diagnose(m, m.backend("cpu"), connector=connector(client), root=make_root(tmp_path)),
                    "base registry")
    assert check.ok and "envbuild base" in check.detail and "no registry is asked" in check.detail


# --- doctor says can build and can run apart, and asks the registries whether they answer (from test_doctor_verdicts.py)

class _V2(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/v2/" else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    with serve(_V2) as host:
        yield host


@pytest.fixture
def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.fixture
def quiet_host(monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: SimpleNamespace(total=500 * 2**30, used=0, free=500 * 2**30))


def diagnose(tmp_path, backend, **sets):
    publish = sets.pop("_registry", None)
    m = load(MATRIX, [f"{k}={v}" for k, v in sets.items()])
    return doctor.diagnose(m, m.backend(backend), connector=lambda: (FakeEngine(root=tmp_path), doctor.Check("docker daemon", True, "fake")),
                           root=make_root(tmp_path), registry=publish)


def test_a_registry_that_answers(registry):
    check = doctor.check_registry("base registry", f"{registry}/debian:bookworm", "fix")
    assert check.ok and f"{registry} answers (HTTP 200 at /v2/)" in check.detail


def test_a_registry_that_does_not_answer(closed_port):
    check = doctor.check_registry("base registry", f"{closed_port}/debian:bookworm", "the ways out", timeout=2)
    assert not check.ok and check.blocking and f"{closed_port} for {closed_port}/debian:bookworm does not answer" in check.detail
    assert check.fix == "the ways out"


def test_rocm_without_a_gpu_can_build_but_not_run(tmp_path, quiet_host, registry):
    report = diagnose(tmp_path, "rocm", **{"backends.rocm.base_image": f"{registry}/rocm/pytorch:latest"})
    assert report.verdicts == {"build": True, "run": False}
    lines = doctor_text(report).splitlines()
    assert lines[-3] == "Can build rocm here."
    assert lines[-2].startswith("Cannot run rocm here: ") and "device" in lines[-2]
    assert lines[-1] == "Building needs no AMD GPU (ROCm): build here, run the image where one is."


def test_an_unreachable_base_registry_blocks_building_with_every_way_out(tmp_path, quiet_host, closed_port):
    report = diagnose(tmp_path, "cpu", **{"backends.cpu.base_image": f"{closed_port}/debian:bookworm"})
    check = next(c for c in report.checks if c.name == "base registry")
    assert check.status == "FAIL"
    for way in (f"--mirror {closed_port}=MIRROR", "--set backends.cpu.base_image=IMAGE", "registry:2", "@sha256:"):
        assert way in check.fix
    assert report.verdicts == {"build": False, "run": True}
    assert "Cannot build cpu here: 1 blocking problem(s): base registry." in doctor_text(report)


def test_publish_checks_the_publish_registry(tmp_path, quiet_host, registry, closed_port):
    ok = diagnose(tmp_path, "cpu", _registry=f"{registry}/envbuild")
    assert next(c for c in ok.checks if c.name == "publish registry").ok
    assert "publish" in ok.verdicts
    down = diagnose(tmp_path, "cpu", _registry=f"{closed_port}/envbuild")
    assert not next(c for c in down.checks if c.name == "publish registry").ok
    assert down.verdicts["publish"] is False and down.verdicts["build"] is True
