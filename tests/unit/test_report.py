"""Unit tests of envbuild/report/report.py: the tables, JSON and summaries commands print."""

from __future__ import annotations

import pytest
from types import SimpleNamespace
from support.constants import MATRIX as MATRIX_PATH
from envbuild.report import report
from envbuild.image import locking
from envbuild.matrix import load
import xml.etree.ElementTree as ET
from envbuild import smoke


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

@pytest.mark.parametrize("doc", ['{"backend": 1, "ok": true, "checks": []}', '{"backend": "cpu", "ok": "yes", "checks": []}',
                                 '{"backend": "cpu", "ok": true, "checks": [{"name": 3}]}', '[]', '[[1]]',
                                 '{"backend": "cpu", "ok": true, "checks": [], "seconds": "fast"}', "[" * 100000])
def test_summary_refuses_results_of_the_wrong_shape(doc, invoke, tmp_path):
    f = tmp_path / "smoke.json"
    f.write_text(doc)
    result = invoke("summary", f)
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {f}"), result.output


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

MATRIX = load(MATRIX_PATH)


def _built(**kw):
    base = dict(backend="cpu", ok=True, tags=["r:cpu"], image_id="sha256:" + "a" * 64, seconds=12.4, up_to_date=False,
                error=None)
    return SimpleNamespace(**{**base, **kw})


def test_build_lines_and_rows():
    assert report.build_line(_built()) == "cpu: built sha256:aaaaaaaaaaaa in 12s, tagged r:cpu"
    assert report.build_line(_built(up_to_date=True)).startswith("cpu: up to date (nothing changed")
    assert report.build_line(_built(ok=False, error="no space")) == "cpu: build FAILED: no space"
    rows = report.build_rows([_built(), _built(backend="cuda", ok=False, error="x" * 100)])
    assert rows[0] == {"backend": "cpu", "result": "ok", "seconds": "12", "image": "r:cpu"}
    assert rows[1]["result"] == "FAILED" and rows[1]["image"] == "x" * 70


def test_lock_lines(tmp_path):
    ok = locking.LockResult("cpu", tmp_path / "l.txt", "up to date", ["ignored"], 10, "linux/amd64")
    assert report.lock_line(ok) == f"cpu (linux/amd64): {tmp_path}/l.txt up to date (10 distributions)"
    stale = locking.LockResult("cpu", tmp_path / "l.txt", "stale", ["uv: 1 -> 2", "python: a -> b"], 3, "linux/arm64")
    assert report.lock_line(stale).endswith("l.txt stale (3 distributions): uv: 1 -> 2; python: a -> b")
    assert "stale" in report.LOCK_PROBLEMS and "written" not in report.LOCK_PROBLEMS


def test_published_summary():
    entry = {"backend": "cpu", "tags": ["r:cpu"], "digest": "sha256:" + "b" * 64, "smoke": {"ok": True, "passed": 3,
                                                                                          "failed": 0}}
    text = report.published_summary([entry])
    assert text.startswith("### Published images\n\n| backend | tags |") and "passed (3/3 checks)" in text
    assert report.published_summary([]) == "### Published images\n\nNothing landed.\n"


def test_ci_rows():
    from envbuild.maintain import ci

    doc = ci.github_matrix(MATRIX, [MATRIX.backend("cpu")])
    (row,) = report.ci_rows(doc)
    assert row["backend"] == "cpu" and row["runs-on"] == ",".join(doc["include"][0]["runs-on"]) and row["smoke"] == "yes"
    assert report.table(report.ci_rows(doc), report.CI_COLUMNS).splitlines()[0].split() == [
        "BACKEND", "PLATFORM", "DEVICE", "RUNS-ON", "SMOKE", "IMAGE"]


def test_published_lines():
    digest = "sha256:" + "c" * 64
    one = SimpleNamespace(backend="cpu", ok=True, refs=["r:cpu", "r:cpu-pinned"], digest=digest, entry={"signed": True})
    assert report.published_lines(one, "m.json") == [
        f"cpu: pushed r:cpu, r:cpu-pinned ({digest}); signed and attested; recorded in m.json"]
    platforms = {"linux/amd64": {"digest": "sha256:" + "1" * 64}, "linux/arm64": {"digest": "sha256:" + "2" * 64}}
    index = SimpleNamespace(backend="cpu", ok=False, refs=["r:cpu"], digest=digest,
                            entry={"platforms": platforms, "index": True})
    assert report.published_lines(index, "m.json") == [  # a platform left out: the index still landed, said so
        f"cpu: linux/amd64 sha256:{'1' * 64}", f"cpu: linux/arm64 sha256:{'2' * 64}",
        f"cpu: pushed index r:cpu ({digest}); recorded in m.json"]
    part = SimpleNamespace(backend="cpu", ok=True, refs=["r:cpu-arm64"], digest=digest, entry={"platforms": platforms})
    assert report.published_lines(part, "m.json")[-1] == f"cpu: pushed platform image r:cpu-arm64 ({digest}); recorded in m.json"
    failed = SimpleNamespace(backend="cpu", ok=False, refs=[], digest=None, entry=None, error="denied")
    assert report.published_lines(failed, "m.json") == []  # the failure is said on stderr by the caller


def test_pulled_text():
    r = SimpleNamespace(backend="cpu", ref="r:cpu-pinned", digest="sha256:" + "d" * 64, verified=True,
                        platform="linux/arm64", emulated=True, tagged=["r:cpu-pinned", "r:cpu"],
                        docker_run="docker run --rm r:cpu envbuild-probe")
    assert report.pulled_text(r, "m.json").splitlines() == [
        f"cpu: pulled r:cpu-pinned for linux/arm64 (runs under QEMU emulation) (sha256:{'d' * 64}, verified against m.json)",
        "cpu: tagged as r:cpu",
        "run it (self-test):  docker run --rm r:cpu envbuild-probe",
        "smoke-test it:       envbuild smoke --backend cpu --platform linux/arm64"]
    plain = SimpleNamespace(**{**vars(r), "verified": False, "platform": None, "emulated": False, "tagged": ["r:cpu"]})
    assert report.pulled_text(plain).splitlines()[::2] == [
        f"cpu: pulled r:cpu-pinned (sha256:{'d' * 64})", "smoke-test it:       envbuild smoke --backend cpu"]


# --- Smoke-test logic without an engine: preflight, model arguments, JUnit (from test_smoke_units.py)

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
