"""scripts/gpu_host_check.py on this host, which has no GPU: the same report a lent GPU machine gives, saying so.
Run with no network where the kernel lets a test make a network namespace (CI runs as root), so a step that asked
the network would fail here as it would there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_host_check.py"


def _offline() -> list[str]:
    ok = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    return ["unshare", "-n"] if ok else []


def check(out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([*_offline(), sys.executable, str(SCRIPT), "--out", str(out), *args], capture_output=True,
                          text=True, timeout=600, cwd=out.parent)
    return proc, json.loads((out / "gpu-host-report.json").read_text())


def test_no_gpu_is_said_in_the_report_and_every_step_runs_without_the_network(tmp_path):
    proc, report = check(tmp_path / "out", "--no-install")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["format"] == 1 and report["ok"] is True
    assert report["gpu"]["found"] is False and report["gpu"]["backends"] == []
    assert "no GPU on this host" in report["gpu"]["says"]
    assert report["pick"]["backend"] == "cpu" and report["pick"]["image"].endswith(":cpu")
    assert report["doctor"]["backend"] == "cpu" and report["doctor"]["can_run"] is True
    assert [s["name"] for s in report["steps"]][:4] == ["detect", "pick", "doctor", "show"]
    assert all(s["rc"] is not None and not s["timed_out"] for s in report["steps"])
    # nothing left the host: the registry and index checks could not answer
    failed = {c["name"] for c in report["doctor"]["checks"] if c["status"] == "FAIL"}
    assert {"base registry", "package index"} <= failed
    # torch is installed for the test suite: the probe ran natively, on the CPU
    assert report["probe"]["ran"] is True and report["probe"]["ok"] is True, report["probe"]
    assert report["probe"]["report"]["device"] == "cpu"
    summary = (tmp_path / "out" / "gpu-host-summary.txt").read_text()
    assert "no GPU on this host" in summary and "probe:   passed" in summary
    assert summary.strip() in proc.stdout and len(summary.splitlines()) <= 24


def test_installs_from_the_tree_and_a_wheel_folder_with_no_index(tmp_path):
    wheels = tmp_path / "wheels"
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    made = subprocess.run([str(ROOT / "scripts" / "gpu-host-wheels"), str(wheels)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONS": py})
    assert made.returncode == 0, made.stderr[-3000:]
    proc, report = check(tmp_path / "out", "--wheels", str(wheels))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    install = report["steps"][0] if report["host"]["nvidia_smi"] is None else report["steps"][1]
    assert install["name"] == "install" and install["rc"] == 0
    # the envbuild that ran is the one installed into the check's own folder
    assert (tmp_path / "out" / "site" / "envbuild" / "cli").is_dir()
    assert report["gpu"]["found"] is False and report["pick"]["backend"] == "cpu"


def test_a_missing_wheel_folder_is_one_clear_error(tmp_path):
    proc, report = check(tmp_path / "out", "--wheels", str(tmp_path / "none"))
    assert proc.returncode == 1
    assert "scripts/gpu-host-wheels" in report["error"] and "--no-install" in report["error"]
    assert "error:" in proc.stdout


def test_the_deadline_stops_steps_and_the_report_is_still_written(tmp_path):
    proc, report = check(tmp_path / "out", "--no-install", "--deadline", "1")
    assert proc.returncode == 1
    assert report["ok"] is False
    assert all(s["stderr"].startswith("not run: the check's deadline") for s in report["steps"])


@pytest.mark.parametrize("bad", [["--deadline", "soon"], ["--nope"]])
def test_bad_usage_exits_2(tmp_path, bad):
    proc = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr
