"""What the commands call, called directly: the CLI parses and prints, and these are the checks, readers, lines
and orchestration behind it (tests/unit/test_cli.py holds the commands' own messages and exit codes)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine
from support.hosts import VENDORS, make_root

from envbuild.report import report
from envbuild import smoke
from envbuild.imagebuild import plan
from envbuild.lock import locking
from envbuild.host import detect
from envbuild.core.errors import BuildError, DockerError, EnvbuildError, InvalidInput
from envbuild.matrix import load
from envbuild.maintain.sources import Sources
from envbuild.maintain.sources import bump as bumping
from envbuild.ship.trust.verify import split_image

MATRIX = load(MATRIX_PATH)


# --- the inputs of build and lock ----------------------------------------------------------------------------


def test_build_options_refuse_special_files_and_a_missing_ca_bundle(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for given in ({"ca_bundle": fifo}, {"netrc": fifo}):
        with pytest.raises(InvalidInput, match=r"(--ca-bundle|--netrc) .*fifo: not a regular file"):
            plan.options(**given)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "gone.pem"))
    with pytest.raises(BuildError, match=r"gone.pem \(from the environment\) does not exist"):
        plan.options()
    assert plan.options(no_ca_bundle=True).ca_bundle is None  # --no-ca-bundle: not even the environment's
    pem = tmp_path / "ca.pem"
    pem.write_text("not read here")
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    assert plan.options().ca_bundle == pem
    opts = plan.options(no_ca_bundle=True, tags=("a/b:c",), locks_dir=tmp_path / "locks")
    assert opts.tags == ("a/b:c",) and opts.locks_dir == tmp_path / "locks"
    with pytest.raises(InvalidInput, match="starts with '-'"):  # and every value the builder reads is checked
        plan.options(no_ca_bundle=True, build_args=("-x=1",))


def test_a_bad_netrc_is_named_never_quoted(tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine example.org login u password n3trc-Pa55word extra-token\n")
    with pytest.raises(EnvbuildError, match="not a valid netrc file") as info:
        plan.options(no_ca_bundle=True, netrc=netrc)
    assert "n3trc-Pa55word" not in str(info.value) and f"--netrc {netrc}:" in str(info.value)


def test_sources_are_checked_before_anything_is_asked(tmp_path, monkeypatch):
    with pytest.raises(InvalidInput, match="--mirror"):
        Sources.checked(["not a rule"])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match=r"--netrc .*fifo: not a regular file"):
        Sources.checked(netrc=fifo)
    pem = tmp_path / "ca.pem"
    pem.write_text("")
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    sources = Sources.checked(["docker.io=mirror.example:5000"])
    assert sources.ca_bundle == pem and sources.mirrors == ("docker.io=mirror.example:5000",)


# --- what the commands print ----------------------------------------------------------------------------------


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


# --- bump: the locks after the matrix -------------------------------------------------------------------------


def test_bump_refreshes_only_the_locks_that_exist(tmp_path, monkeypatch):
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: "linux/amd64")
    opts = plan.BuildOptions(locks_dir=tmp_path / "locks", context_dir=tmp_path / "ctx")
    cpu = tmp_path / "locks" / "cpu" / "linux-amd64.txt"
    cpu.parent.mkdir(parents=True)
    cpu.write_text("a lock\n")
    result = bumping.Bump(written=["matrix.yaml"], backends=["cpu", "cuda"], matrix=MATRIX)
    asked = []

    def no_engine():
        asked.append(1)
        raise DockerError("Cannot connect to the Docker daemon\nsecond line")

    # nothing written (a dry run, nothing to bump): no lock is touched, no engine asked
    assert bumping.refresh_locks(bumping.Bump(backends=["cpu"], matrix=MATRIX), opts, no_engine) == ([], [])
    # --no-lock: the existing locks are named, no engine asked
    assert bumping.refresh_locks(result, opts, no_engine, no_lock=True) == ([], [str(cpu)])
    assert asked == []
    # a lock that cannot be resolved here is named with why, not fatal; cuda has no lock: not refreshed
    refreshed, left = bumping.refresh_locks(result, opts, no_engine)
    assert refreshed == [] and left == [f"{cpu} (Cannot connect to the Docker daemon)"] and asked == [1]
    assert cpu.read_text() == "a lock\n"


# --- detect, doctor and verify: what they are given -----------------------------------------------------------


def test_detect_under_a_root_reads_its_path_folders_and_asks_no_engine(tmp_path, monkeypatch):
    root = make_root(tmp_path, *VENDORS["cuda"])
    tool = root / "usr/bin/nvidia-smi"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", "relative/bin:/usr/bin")  # a relative folder is no folder under the root
    monkeypatch.setattr(detect, "docker_runtimes_from_engine", lambda: pytest.fail("--root asked the engine"))
    found = detect.detect_host(MATRIX, root)
    cuda = next(f for f in found.findings if f.backend == "cuda")
    assert found.detected == ["cuda"] and str(tool) in [e.detail for e in cuda.evidence if e.kind == "tool"]
    assert report.root_facts(root)["root"] == str(root) and report.root_facts(None) == {}


def test_detect_here_asks_the_engine_for_its_runtimes(monkeypatch):
    monkeypatch.setattr(detect, "docker_runtimes_from_engine", lambda: {"runc", "nvidia"})
    seen = {}
    monkeypatch.setattr(detect, "detect", lambda m, *a, **kw: seen.update(kw) or "detection")
    assert detect.detect_host(MATRIX) == "detection" and seen == {"docker_runtimes": {"runc", "nvidia"}}


@pytest.mark.parametrize("value, expected", [
    ("ghcr.io/org/envbuild:cpu", ("ghcr.io/org/envbuild", "cpu")),
    ("127.0.0.1:5000/envbuild:cpu", ("127.0.0.1:5000/envbuild", "cpu")),
    ("r/x@sha256:" + "a" * 64, ("r/x", "sha256:" + "a" * 64)),
])
def test_verify_takes_a_tag_or_a_digest(value, expected):
    assert split_image(value) == expected


@pytest.mark.parametrize("value, fragment", [
    ("127.0.0.1:5000/envbuild", "give REPOSITORY:TAG or REPOSITORY@sha256:DIGEST"),
    ("x@sha256:zz", "the digest must be sha256:<64 hex>"),
    ("reg/x:bad\x1btag", "give REPOSITORY:TAG"),
])
def test_verify_refuses_anything_else(value, fragment):
    with pytest.raises(InvalidInput, match=fragment.replace("(", r"\(")) as info:
        split_image(value)
    assert "\x1b" not in str(info.value)


# --- smoke: several backends ----------------------------------------------------------------------------------


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
