"""Smoke-test logic without an engine: the preflight's verdicts and fixes, the model arguments, JUnit.
tests/engine/test_build_smoke.py runs containers for real."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine

from envbuild.report import report
from envbuild import smoke
from envbuild.core.errors import InvalidInput
from envbuild.matrix import load
from envbuild.smoke import preflight

MATRIX = load(MATRIX_PATH)


def test_preflight_names_the_missing_piece(tmp_path):
    (tmp_path / "dev").mkdir()
    with pytest.raises(smoke.SmokeError, match="NVIDIA Container Toolkit"):
        preflight.require(MATRIX.backend("cuda"), FakeEngine(["runc"]), root=tmp_path)
    preflight.require(MATRIX.backend("cuda"), FakeEngine(["runc", "nvidia"]), root=tmp_path)
    with pytest.raises(smoke.SmokeError, match="runtime=habana"):
        preflight.require(MATRIX.backend("hpu"), FakeEngine(["runc"]), root=tmp_path)
    with pytest.raises(smoke.SmokeError, match="/dev/kfd, /dev/dri"):
        preflight.require(MATRIX.backend("rocm"), FakeEngine(["runc"]), root=tmp_path)
    (tmp_path / "dev" / "kfd").touch()
    (tmp_path / "dev" / "dri").mkdir()
    preflight.require(MATRIX.backend("rocm"), FakeEngine(["runc"]), root=tmp_path)
    preflight.require(MATRIX.backend("cpu"), FakeEngine([]), root=tmp_path)


@pytest.mark.parametrize("backend", ["cuda", "hpu", "musa", "rocm"])
def test_smoke_and_doctor_give_the_same_fix(tmp_path, backend):
    """One copy of each check: the line smoke refuses with is the check doctor lists."""
    from envbuild.host import doctor

    b = MATRIX.backend(backend)
    with pytest.raises(smoke.SmokeError) as refused:
        preflight.require(b, FakeEngine(["runc"]), root=tmp_path)
    report = doctor.diagnose(MATRIX, b, connector=lambda: (FakeEngine(["runc"], root=tmp_path), preflight.Check("docker daemon", True, "fake")),
                             root=tmp_path)
    failed = next(c for c in report.checks if c.name in ("runtime", "device nodes") and not c.ok)
    assert str(refused.value) == f"backend '{backend}': no {b.description} can be reached here: {failed.detail}. Fix: {failed.fix}"


def test_model_arguments(tmp_path):
    assert smoke.model_args("synthetic") == (["--model", "synthetic"], [], {"HF_HUB_OFFLINE": "1"})
    args, volumes, env = smoke.model_args(str(tmp_path))
    assert args == ["--model", f"/models/{tmp_path.name}"]
    assert volumes == [f"{tmp_path}:/models/{tmp_path.name}:ro"]
    assert smoke.model_args("org/model") == (["--model", "org/model"], [], {})
    for bad in ("./absent-model", "-x", "a\x1b[2Jb"):
        with pytest.raises(InvalidInput, match="no such directory"):
            smoke.model_args(bad)


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


def test_missing_image_says_how_to_get_it():
    with pytest.raises(smoke.SmokeError, match="envbuild build --backend cpu.*envbuild pull --backend cpu"):
        smoke.smoke(MATRIX, MATRIX.backend("cpu"), FakeEngine(), image="envbuild-test/absent:nothing")


def test_the_image_carries_the_matrix_s_run_flags_for_the_probe_s_advice():
    from envbuild.render import render_backend

    for b in MATRIX.containerizable():
        assert f'ENVBUILD_RUN_FLAGS="{" ".join(b.run.docker_args())}"' in render_backend(MATRIX, b)
    assert "DEVICE_FLAGS" not in Path(preflight.__file__).with_name("probe.py").read_text()


# What runc and the daemon answer when a host will not start a container as asked (their own words).
REFUSALS = {
    "tpu": ("OCI runtime create failed: runc create failed: unable to start container process: unable to apply caps: "
            "operation not permitted: unknown", "--privileged"),
    "cuda": ('could not select device driver "" with capabilities: [[gpu]]', "--gpus=all"),
    "hpu": ("unknown or invalid runtime name: habana", "--runtime=habana"),
    "rocm": ("unable to find group video: no matching entries in group file", "--group-add video"),
}


@pytest.mark.parametrize("backend", sorted(REFUSALS))
def test_a_refused_flag_is_named_with_why_the_backend_needs_it(backend):
    b = MATRIX.backend(backend)
    said, flag = REFUSALS[backend]
    why = preflight.refused(b, f"cannot run img: {said}")
    assert why.startswith(f"this host refused `{flag}`, which the {backend} backend's container needs: {b.run.why}")
    assert said in why
    assert preflight.refused(MATRIX.backend("cpu"), said) is None  # cpu asks for no such flag
    assert preflight.refused(b, "no space left on device") is None


def test_smoke_says_which_flag_the_host_refused(tmp_path):
    engine = FakeEngine()
    engine.add_image("sha256:t", ["ghcr.io/envbuild/envbuild:tpu"])
    engine.start_error = REFUSALS["tpu"][0]
    with pytest.raises(smoke.SmokeError) as info:
        smoke.smoke(MATRIX, MATRIX.backend("tpu"), engine)
    assert str(info.value).startswith("backend 'tpu': this host refused `--privileged`, which the tpu backend's")
    assert "only a privileged container may open" in str(info.value)
    assert info.value.exit_code == 1


# --- one pass: the runner's flow, with an engine that answers what the probe would -------------------------

CPU_TAG = "ghcr.io/envbuild/envbuild:cpu"


def _probe_report(*names: str, failed: str = "") -> bytes:
    import json

    checks = [{"name": n, "ok": n != failed, "message": "broken" if n == failed else "fine", "seconds": 0.5} for n in names]
    return json.dumps({"probe": 1, "ok": not failed, "checks": checks}).encode()


def _engine_with(stdout: bytes, status: int = 0):
    from envbuild.core.engine import Exited

    engine = FakeEngine()
    engine.add_image("sha256:" + "a" * 64, [CPU_TAG])
    engine.exited = Exited(status, stdout, b"[probe] ...\n", False)
    return engine


ALL = ("import_torch", "import_plugin", "device", "versions", "load", "forward", "generate", "cpu_match", "compile",
       "arbitrary_uid")


def test_smoke_runs_the_probe_as_an_arbitrary_uid_with_group_0_then_read_only_as_clusters_do():
    engine = _engine_with(_probe_report(*ALL))
    result = smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True)
    assert result.ok and result.error is None
    assert len(engine.runs) == 2  # every check, compile included, in one container; then the cluster's way
    run, ro = engine.runs
    assert not run["read_only"]
    # read-only, a uid and group the image does not know, HOME elsewhere, no cache volume: the caches must move
    assert ro["read_only"] and ro["user"] == "4242:4242" and ro["volumes"] == []
    assert ro["environment"]["HOME"] == "/tmp" and ro["environment"]["ENVBUILD_ARBITRARY_UID"] == "1"
    assert ro["command"][-1] == "--no-compile"  # compile is the first run's
    uid, gid = run["user"].split(":")
    assert gid == "0" and int(uid) not in (0, 1000)  # not root, not the image's own user
    assert run["environment"]["ENVBUILD_ARBITRARY_UID"] == "1"  # the probe checks its folders as that user
    volume = engine.volumes[0]
    assert run["volumes"] == [f"{volume}:/cache"] and run["volumes_alive"] == [volume]
    assert engine.volumes_removed == [volume]  # a cache of its own, gone with the smoke test
    assert [c["name"] for c in result.checks] == [*ALL, "read_only_any_uid"]
    assert all(c["seconds"] == 0.5 for c in result.checks[:-1])  # one entry per check, with its time
    assert result.checks[-1]["ok"] and "read-only, as 4242:4242" in result.checks[-1]["message"]


def test_a_read_only_run_that_fails_is_the_smoke_s_error():
    from envbuild.core.engine import Exited

    engine = _engine_with(_probe_report(*ALL))
    first = engine.exited
    failing = Exited(1, _probe_report(*ALL, failed="load"), b"PermissionError: /cache/torchinductor\n", False)
    runs = iter([first, failing])
    real = engine.run
    engine.run = lambda *a, **k: (real(*a, **k), next(runs))[1]
    result = smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True)
    assert not result.ok and result.error.startswith("read_only_any_uid: read-only, as 4242:4242")
    assert "load: broken" in result.error and result.checks[-1] == {**result.checks[-1], "name": "read_only_any_uid", "ok": False}


def test_a_failed_check_is_the_smoke_s_error():
    engine = _engine_with(_probe_report(*ALL, failed="compile"), status=1)
    result = smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True)
    assert not result.ok and result.error == "compile: broken" and result.exit_code == 1
    assert len(engine.runs) == 1


def test_an_image_whose_probe_predates_the_uid_check_still_says_who_ran_it():
    engine = _engine_with(_probe_report(*ALL[:-1]))
    result = smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True)
    assert result.ok and result.checks[-2]["name"] == "arbitrary_uid"
    assert result.checks[-2]["message"].startswith(f"every check ran as user {engine.runs[0]['user']}")


def test_the_user_s_cache_is_mounted_and_kept(tmp_path):
    engine = _engine_with(_probe_report(*ALL))
    smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, cache=str(tmp_path / "cache"))
    assert engine.runs[0]["volumes"] == [f"{tmp_path / 'cache'}:/cache"] and (tmp_path / "cache").is_dir()
    assert engine.runs[0]["user"] == f"{os.getuid()}:0"  # a folder of yours: the probe runs as you
    smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, cache="envbuild-cache")
    probes = [r for r in engine.runs if not r["read_only"]]  # each smoke's first run (as root here: no second)
    assert probes[1]["volumes"] == ["envbuild-cache:/cache"]
    assert engine.volumes == []  # no volume of its own was made, none removed
    with pytest.raises(InvalidInput, match="--cache"):
        smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, cache="no good")
    assert len([r for r in engine.runs if not r["read_only"]]) == 2  # the refused one started none


def test_with_a_model_folder_mounted_the_probe_runs_as_you(tmp_path, monkeypatch):
    from envbuild.smoke import runner

    monkeypatch.setattr(runner.os, "getuid", lambda: 4321)
    engine = _engine_with(_probe_report(*ALL))
    smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, model=str(tmp_path))
    assert engine.runs[0]["user"] == "4321:0"  # a folder of yours is readable by you
    assert engine.runs[0]["environment"]["ENVBUILD_ARBITRARY_UID"] == "1"
    monkeypatch.setattr(runner.os, "getuid", lambda: 0)  # root's files (safetensors writes 0600): read as root
    engine = _engine_with(_probe_report(*ALL[:-1]))
    result = smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, model=str(tmp_path))
    assert engine.runs[0]["user"] == "0:0" and "ENVBUILD_ARBITRARY_UID" not in engine.runs[0]["environment"]
    assert [c["name"] for c in result.checks] == list(ALL[:-1])  # no uid check claimed for root


def test_a_backend_whose_image_runs_as_root_is_probed_as_its_user():
    from dataclasses import replace

    from envbuild.smoke import runner

    root_backend = replace(MATRIX.backend("cpu"), user="root")
    assert runner.probe_user(root_backend, mounted=False) is None
    engine = _engine_with(_probe_report(*ALL[:-1]))
    result = smoke.smoke(MATRIX, root_backend, engine, ignore_host=True)
    assert engine.runs[0]["user"] is None and "ENVBUILD_ARBITRARY_UID" not in engine.runs[0]["environment"]
    assert [c["name"] for c in result.checks] == list(ALL[:-1])
