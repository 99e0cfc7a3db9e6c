"""Unit tests of envbuild/smoke: results read from files and folders, several backends in one run."""

from __future__ import annotations

import json
import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine
from support.hosts import REFUSALS
from envbuild.report import report
from envbuild import smoke
from envbuild.core.errors import InvalidInput
from envbuild.matrix import load
import os
from envbuild.smoke import preflight


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

MATRIX = load(MATRIX_PATH)


def test_smoke_results_are_read_from_files_and_folders(tmp_path):
    good = {"backend": "cpu", "ok": True, "checks": [{"name": "device", "ok": True, "message": ""}]}
    folder = tmp_path / "results"
    (folder / "cpu").mkdir(parents=True)
    (folder / "cpu" / "smoke.json").write_text(json.dumps(good))
    (folder / "package.json").write_text('{"name": "something else"}')  # passed over in a folder
    assert report.read_smoke_results([folder]) == [good]
    both = tmp_path / "both.json"
    both.write_text(json.dumps([good, {**good, "backend": "cuda"}]))
    assert [d["backend"] for d in report.read_smoke_results([both])] == ["cpu", "cuda"]
    with pytest.raises(InvalidInput, match=r"package.json: not the output of `envbuild smoke --json`"):
        report.read_smoke_results([folder / "package.json"])  # named: refused
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, "ok": "yes"}))
    with pytest.raises(InvalidInput, match='"ok" must be bool'):
        report.read_smoke_results([bad])
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(InvalidInput, match="an empty list"):
        report.read_smoke_results([empty])


def test_smoke_each_keeps_going_only_when_asked():
    """A smoke that cannot run (no image; no runtime for the device) is a SmokeError before any container: alone it
    is raised; with keep_going it is a failed result, said, and the next backend still runs."""
    chosen = [MATRIX.backend("cpu"), MATRIX.backend("cuda")]
    with pytest.raises(smoke.SmokeError, match="is not on this Docker engine"):
        smoke.smoke_each(MATRIX, chosen, FakeEngine(), keep_going=False, ignore_host=True)
    said, seen = [], []
    results = smoke.smoke_each(MATRIX, chosen, FakeEngine(), keep_going=True, failed=said.append, done=seen.append,
                               ignore_host=True, platform="linux/amd64")
    assert [r.backend for r in results] == ["cpu", "cuda"] and seen == results and len(said) == 2
    assert not any(r.ok for r in results) and [r.error for r in results] == [str(e) for e in said]
    assert "is not on this Docker engine" in results[0].error and "runtime 'nvidia'" in results[1].error
    assert results[0].image == MATRIX.tags(chosen[0])[0] and results[0].platform == "linux/amd64"


# --- Smoke-test logic without an engine: preflight, model arguments, JUnit (from test_smoke_units.py)

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


def test_missing_image_says_how_to_get_it():
    with pytest.raises(smoke.SmokeError, match="envbuild build --backend cpu.*envbuild pull --backend cpu"):
        smoke.smoke(MATRIX, MATRIX.backend("cpu"), FakeEngine(), image="envbuild-test/absent:nothing")




def test_smoke_says_which_flag_the_host_refused(tmp_path):
    engine = FakeEngine()
    engine.add_image("sha256:t", ["ghcr.io/envbuild/envbuild:tpu"])
    engine.start_error = REFUSALS["tpu"][0]
    with pytest.raises(smoke.SmokeError) as info:
        smoke.smoke(MATRIX, MATRIX.backend("tpu"), engine)
    assert str(info.value).startswith("backend 'tpu': this host refused `--privileged`, which the tpu backend's")
    assert "only a privileged container may open" in str(info.value)
    assert info.value.exit_code == 1


CPU_TAG = "ghcr.io/envbuild/envbuild:cpu"


def _probe_report(*names: str, failed: str = "") -> bytes:
    import json

    checks = [{"name": n, "ok": n != failed, "message": "broken" if n == failed else "fine", "seconds": 0.5} for n in names]
    return json.dumps({"probe": 1, "ok": not failed, "checks": checks}).encode()


def _engine_with(stdout: bytes, status: int = 0):
    from envbuild.engine.docker import Exited

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
    assert "--no-compile" not in ro["command"]  # compile too, as users run it: /tmp of the read-only run runs code
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
    from envbuild.engine.docker import Exited

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


def test_a_missing_image_offers_image_only_when_it_was_not_named():
    from envbuild.smoke.runner import smoke as smoke_one

    cpu = MATRIX.backend("cpu")
    with pytest.raises(smoke.SmokeError) as default:
        smoke_one(MATRIX, cpu, FakeEngine(), ignore_host=True)
    assert str(default.value).endswith("(or pass --image)")
    with pytest.raises(smoke.SmokeError) as named:
        smoke_one(MATRIX, cpu, FakeEngine(), image="team/images:cpu", ignore_host=True)
    assert "image team/images:cpu is not on this Docker engine" in str(named.value)
    assert "--image" not in str(named.value)


def test_a_smoke_says_each_check_as_it_finishes_and_the_read_only_run_too():
    from envbuild.engine.docker import Exited

    engine = _engine_with(_probe_report(*ALL))
    engine.exited = Exited(0, engine.exited.stdout, b"[probe] import_torch: ok (2.51s) torch 2.13.0\nnoise\n"
                           b"[probe] load: FAILED (0.10s) no model\n", False)
    said: list[str] = []
    smoke.smoke(MATRIX, MATRIX.backend("cpu"), engine, ignore_host=True, echo=said.append)
    lines = [s for s in said if "import_torch" in s or "load" in s]
    assert lines == ["[cpu] import_torch: ok (2.5s)", "[cpu] load: FAILED (0.1s)",
                     "[cpu] read-only import_torch: ok (2.5s)", "[cpu] read-only load: FAILED (0.1s)"]
    assert not any("noise" in s for s in said)


def test_a_silent_probe_is_said_every_ten_seconds_with_what_it_waits_for():
    from envbuild.smoke.runner import Watch

    now = [0.0]
    said: list[str] = []
    watch = Watch("cpu", said.append, clock=lambda: now[0])
    now[0] = 9.0
    watch.tick()
    assert said == []  # under ten seconds: nothing to add
    now[0] = 12.0
    watch.tick()
    assert said == ["[cpu] still waiting for the container to start and torch to import: 12s"]
    watch.line("[probe] device: ok (0.01s) cpu")
    watch.line("[probe] versions: ok (0.20s) pins")
    now[0] = 40.0
    watch.tick()
    assert said[-1] == "[cpu] still waiting for the model to load (after versions): 28s"
    watch.line("[probe] cpu_match: ok (0.50s) same")
    now[0] = 60.0
    watch.tick()
    assert said[-1] == "[cpu] still waiting for torch.compile to build a kernel (after cpu_match): 20s"
    watch.line("[probe] arbitrary_uid: ok (0.01s) fine")
    now[0] = 80.0
    watch.tick()
    assert said[-1] == "[cpu] still waiting for the probe to finish (after arbitrary_uid): 20s"
