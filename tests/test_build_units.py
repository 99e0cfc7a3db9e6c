"""Pure logic of build, engine and smoke, without an engine: fakes are fine here, never as proof a command works
(test_build_smoke.py builds and runs for real)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envbuild import build, engine, report, smoke
from envbuild.errors import DockerError, EnvbuildError
from envbuild.matrix import RunSpec, load

REPO = Path(__file__).resolve().parents[1]
MATRIX = load(REPO / "matrix.yaml")


@pytest.mark.parametrize(
    "ref, full",
    [
        ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"),
        ("nvidia/cuda:13.2.1-base-ubuntu24.04", "docker.io/nvidia/cuda:13.2.1-base-ubuntu24.04"),
        ("quay.io/ascend/cann:9.2.0", "quay.io/ascend/cann:9.2.0"),
        ("localhost/x:1", "localhost/x:1"),
        ("127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c"),
    ],
)
def test_normalize_ref(ref, full):
    assert build.normalize_ref(ref) == full


def test_mirror_rewrites_only_matching_registries():
    mirrors = ["docker.io=mirror.corp:5000", "quay.io/ascend=mirror.corp:5000/ascend"]
    assert build.mirror_image("debian:bookworm-slim", mirrors) == "mirror.corp:5000/library/debian:bookworm-slim"
    assert build.mirror_image("rocm/pytorch:tag", mirrors) == "mirror.corp:5000/rocm/pytorch:tag"
    assert build.mirror_image("quay.io/ascend/cann:9", mirrors) == "mirror.corp:5000/ascend/cann:9"
    assert build.mirror_image("public.ecr.aws/neuron/x:1", mirrors) == "public.ecr.aws/neuron/x:1"
    # a prefix must end at a path boundary: docker.io does not match docker.iox
    assert build.mirror_image("docker.iox/a:1", mirrors) == "docker.iox/a:1"
    with pytest.raises(EnvbuildError, match="expected FROM=TO"):
        build.mirror_image("debian:12", ["docker.io"])


def test_build_command_passes_secrets_as_files_never_as_values(tmp_path):
    ca = tmp_path / "ca.pem"
    b = engine.Builder(argv=("docker", "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)
    argv = build.build_command(b, tmp_path, tmp_path / "iid", build.BuildOptions(ca_bundle=ca, build_args=("A=1",), no_cache=True),
                               ["r/e:cpu", "r/e:cpu-pinned"])
    assert argv[:2] == ["docker", "build"]
    assert f"id=ca_bundle,src={ca}" in argv
    # BuildKit names the image only when the whole build succeeded (test_failed_build_keeps_the_old_tag
    # proves it on a real engine), so the tags go to the builder itself: no extra round trip afterwards.
    assert "--iidfile" in argv and argv.count("-t") == 2 and "r/e:cpu-pinned" in argv
    assert argv[-1] == str(tmp_path)
    with pytest.raises(EnvbuildError, match="buildx"):
        build.build_command(b, tmp_path, tmp_path / "iid", build.BuildOptions(cache_to=("type=local,dest=x",)))


def test_progress_prints_a_line_per_finished_step():
    lines: list[str] = []
    p = build.Progress("cpu", lines.append)
    for raw in [
        "#5 [2/7] RUN apt-get update",
        "#5 0.3 Get:1 http://deb.debian.org bookworm InRelease",
        "#5 DONE 7.3s",
        "#6 [3/7] RUN python3 -m venv /opt/venv",
        "#6 CACHED",
    ]:
        p.feed(raw)
    assert lines == ["[cpu] 2/7 RUN apt-get update ... DONE 7.3s", "[cpu] 3/7 RUN python3 -m venv /opt/venv ... CACHED"]


def test_find_builder_skips_a_new_client_without_buildx(tmp_path, monkeypatch, fake_docker):
    new = fake_docker(tmp_path / "new", "28.2.2", buildx=False)
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{old.parent}")
    engine.find_builder.cache_clear()
    try:
        b = engine.find_builder()
        assert b.argv == (str(old), "build") and dict(b.env) == {"DOCKER_BUILDKIT": "1"}
        monkeypatch.setenv("PATH", str(new.parent))
        engine.find_builder.cache_clear()
        with pytest.raises(DockerError, match="buildx plugin"):
            engine.find_builder()
        fake_docker(tmp_path / "bx", "28.2.2", buildx=True)
        monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{tmp_path / 'bx'}")
        engine.find_builder.cache_clear()
        assert engine.find_builder().argv[1:] == ("buildx", "build", "--load")
    finally:
        engine.find_builder.cache_clear()


def test_unreachable_daemon_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(DockerError, match="no daemon socket there.*apt-get install docker.io"):
        engine.client()


def test_run_kwargs_translate_the_matrix_flags():
    kw = smoke.run_kwargs(MATRIX.backend("rocm").run)
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kw["group_add"] == ["video"] and kw["ipc_mode"] == "host" and kw["shm_size"] == "8g"
    assert kw["security_opt"] == ["seccomp=unconfined"] and kw["cap_add"] == ["SYS_PTRACE"]
    cuda = smoke.run_kwargs(MATRIX.backend("cuda").run)
    (req,) = cuda["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    hpu = smoke.run_kwargs(MATRIX.backend("hpu").run)
    assert hpu["runtime"] == "habana" and hpu["environment"]["HABANA_VISIBLE_DEVICES"] == "all"
    assert smoke.run_kwargs(RunSpec()) == {}


class FakeClient:
    def __init__(self, runtimes):
        self.runtimes = runtimes

    def info(self):
        return {"Runtimes": {r: {} for r in self.runtimes}}


def test_preflight_names_the_missing_piece(tmp_path):
    (tmp_path / "dev").mkdir()
    with pytest.raises(smoke.SmokeError, match="NVIDIA Container Toolkit"):
        smoke.preflight(FakeClient(["runc"]), MATRIX.backend("cuda"), root=str(tmp_path))
    smoke.preflight(FakeClient(["runc", "nvidia"]), MATRIX.backend("cuda"), root=str(tmp_path))
    with pytest.raises(smoke.SmokeError, match="runtime=habana"):
        smoke.preflight(FakeClient(["runc"]), MATRIX.backend("hpu"), root=str(tmp_path))
    with pytest.raises(smoke.SmokeError, match="/dev/kfd, /dev/dri"):
        smoke.preflight(FakeClient(["runc"]), MATRIX.backend("rocm"), root=str(tmp_path))
    (tmp_path / "dev" / "kfd").touch()
    (tmp_path / "dev" / "dri").mkdir()
    smoke.preflight(FakeClient(["runc"]), MATRIX.backend("rocm"), root=str(tmp_path))
    smoke.preflight(FakeClient([]), MATRIX.backend("cpu"), root=str(tmp_path))


def test_model_arguments(tmp_path):
    assert smoke._model_args("synthetic") == (["--model", "synthetic"], {}, {"HF_HUB_OFFLINE": "1"})
    args, volumes, env = smoke._model_args(str(tmp_path))
    assert args == ["--model", f"/models/{tmp_path.name}"]
    assert volumes == {str(tmp_path): {"bind": f"/models/{tmp_path.name}", "mode": "ro"}}
    assert smoke._model_args("org/model") == (["--model", "org/model"], {}, {})
    with pytest.raises(smoke.SmokeError, match="no such directory"):
        smoke._model_args("./absent-model")


def test_junit_has_a_case_per_check_and_failures():
    ok = smoke.SmokeResult("cpu", "img:cpu", True, 3.0, 0, [{"name": "load", "ok": True, "message": "m", "seconds": 1.0}])
    bad = smoke.SmokeResult("cuda", "img:cuda", False, 1.0, 1, [{"name": "device", "ok": False, "message": "no cuda device", "seconds": 0.1}])
    broken = smoke.SmokeResult("rocm", "img:rocm", False, 1.0, None, error="timed out after 1s")
    root = ET.fromstring(report.junit_xml([ok, bad, broken]).split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["envbuild.smoke.cpu", "envbuild.smoke.cuda", "envbuild.smoke.rocm"]
    assert [s.get("failures") for s in suites] == ["0", "1", "1"]
    assert suites[1].find("testcase/failure").get("message") == "no cuda device"
    assert suites[2].find("testcase/failure").get("message") == "timed out after 1s"


def test_up_to_date_needs_same_inputs_same_local_base_and_all_tags(tmp_path, monkeypatch):
    context = tmp_path / "ctx"
    (context / "wheelhouse").mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM base\n")
    (context / "wheelhouse" / "torch.whl").write_bytes(b"x" * 10)
    argv = ["docker", "build", "--iidfile", "/tmp/a/iid", "-t", "r:cpu", str(context)]
    fp = build.fingerprint(context, argv)
    # the id file's path changes every build and is not an input
    assert build.fingerprint(context, [*argv[:3], "/tmp/b/iid", *argv[4:]]) == fp
    ids = {"base:1": "sha256:base", "r:cpu": "sha256:img"}
    monkeypatch.setattr(build.engine, "local_image_ids", lambda refs: {r: ids.get(r) for r in refs})
    build._remember(context, fp, "base:1", ["r:cpu"], "sha256:img")
    assert build._up_to_date(context, fp, "base:1", ["r:cpu"]) == "sha256:img"
    # a changed Dockerfile, wheel or option is a different fingerprint
    (context / "Dockerfile").write_text("FROM base\nRUN true\n")
    assert build.fingerprint(context, argv) != fp
    (context / "Dockerfile").write_text("FROM base\n")
    os.utime(context / "wheelhouse" / "torch.whl", ns=(1, 1))
    assert build.fingerprint(context, argv) != fp
    assert build.fingerprint(context, [*argv, "--build-arg", "A=1"]) != fp
    # a newer local base, or a tag moved away, means a real build
    ids["base:1"] = "sha256:newer"
    assert build._up_to_date(context, fp, "base:1", ["r:cpu"]) is None
    ids["base:1"] = "sha256:base"
    ids["r:cpu"] = "sha256:other"
    assert build._up_to_date(context, fp, "base:1", ["r:cpu"]) is None
    # an engine that cannot be asked: build
    monkeypatch.setattr(build.engine, "local_image_ids", lambda refs: None)
    assert build._up_to_date(context, fp, "base:1", ["r:cpu"]) is None


def test_a_base_the_engine_does_not_hold_is_never_recorded(tmp_path, monkeypatch):
    """BuildKit asks the registry for such a base on every build; so must we (no record, no shortcut)."""
    monkeypatch.setattr(build.engine, "local_image_ids", lambda refs: {r: None for r in refs})
    build._remember(tmp_path, "fp", "debian:12", ["r:cpu"], "sha256:img")
    assert not (tmp_path / build.STATE_FILE).exists()


def test_quick_check_keys_on_every_raw_input(tmp_path, monkeypatch):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("backends: {}\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch.whl").write_bytes(b"x")
    params = {"matrix": str(matrix), "overrides": ("backends.cpu.torch.version=2.13.0",), "wheelhouse": str(wheels)}
    key = build.inputs_key("cpu", params)
    assert build.inputs_key("cpu", dict(params)) == key
    assert build.inputs_key("cuda", params) != key
    assert build.inputs_key("cpu", {**params, "overrides": ()}) != key
    matrix.write_text("backends: {cpu: {}}\n")
    assert build.inputs_key("cpu", params) != key
    matrix.write_text("backends: {}\n")
    (wheels / "extra.whl").write_bytes(b"y")
    assert build.inputs_key("cpu", params) != key
    (wheels / "extra.whl").unlink()
    assert build.inputs_key("cpu", params) == key

    # a record with that key, a base and tags still in place: up to date without parsing anything
    ctx = tmp_path / "ctx"
    (ctx / "cpu").mkdir(parents=True)
    ids = {"base:1": "sha256:base", "r:cpu": "sha256:img"}
    monkeypatch.setattr(build.engine, "local_image_ids", lambda refs: {r: ids.get(r) for r in refs})
    build._remember(ctx / "cpu", "fp", "base:1", ["r:cpu"], "sha256:img", key)
    (done,) = build.quick_up_to_date(["cpu"], params, ctx)
    assert done.ok and done.up_to_date and done.image_id == "sha256:img" and done.tags == ["r:cpu"]
    assert build.quick_up_to_date(["cpu"], {**params, "labels": ("a=b",)}, ctx) is None
    assert build.quick_up_to_date(["cpu", "cuda"], params, ctx) is None  # cuda has no record
    ids["base:1"] = "sha256:pulled-newer"
    assert build.quick_up_to_date(["cpu"], params, ctx) is None
