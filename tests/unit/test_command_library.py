"""What the commands call, called directly: the CLI parses and prints, and these are the checks, readers, lines
and orchestration behind it (tests/unit/test_cli.py holds the commands' own messages and exit codes)."""

from __future__ import annotations

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.hosts import VENDORS, make_root

from envbuild.report import report
from envbuild.image import plan
from envbuild.host import detect
from envbuild.core.errors import DockerError
from envbuild.matrix import load
from envbuild.maintain.sources import bump as bumping

MATRIX = load(MATRIX_PATH)


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
