"""`envbuild detect` and `--backend auto` through the CLI, on fake roots (tests/test_detect.py's trees) and on
this plain machine. None of these needs a Docker engine."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from support.constants import MATRIX
from support.hosts import VENDORS, make_root

from envbuild.host import detect as d
from envbuild.matrix import load

MIXED = (
    ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dri/renderD128", "/dev/dri/renderD129"],
    [("0000:00:02.0", "0x8086", "0x030000"), ("0000:01:00.0", "0x10de", "0x030000")],
    {"renderD128": "0x8086", "renderD129": "0x10de"},
)
HAS_NODES = any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dri", "/dev/accel"))


def detect_json(invoke, root: Path, *extra: str) -> dict:
    result = invoke("detect", "--json", "--root", root, "--matrix", MATRIX, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("host", sorted(VENDORS))
def test_detect_each_vendor_root(invoke, tmp_path, host):
    data = detect_json(invoke, make_root(tmp_path, *VENDORS[host]))
    backend = host.split("-")[0]
    assert data["detected"] == [backend]
    found = next(b for b in data["backends"] if b["backend"] == backend)
    kinds = {e["kind"] for e in found["evidence"]}
    assert {"device", "pci"} <= kinds
    assert any(e["detail"].startswith("0000:") and "vendor 0x" in e["detail"] for e in found["evidence"] if e["kind"] == "pci")


@pytest.mark.parametrize("host", sorted(VENDORS))
def test_detect_text_names_the_backend_and_auto_choice(invoke, tmp_path, host):
    backend = host.split("-")[0]
    result = invoke("detect", "--root", make_root(tmp_path, *VENDORS[host]), "--matrix", MATRIX)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "Detected:"
    assert lines[1].split()[0] == backend
    assert f"--backend auto would choose {backend} (detected " in result.stdout


def test_detect_json_is_the_library_detection(invoke, tmp_path):
    root = make_root(tmp_path, *VENDORS["rocm"])
    data = detect_json(invoke, root)
    m = load(MATRIX)
    expected = d.detect_host(m, root).to_json()
    assert {k: v for k, v in data.items() if k not in ("root", "facts", "variants")} == expected
    assert set(data) == {"detected", "fallback", "backends", "variants", "root", "facts"}  # --root: which facts came from where
    # every variant of every family, with whether it fits this host: ROCm's gfx targets without a gfx node are unknown
    assert [(v["family"], v["backend"]) for v in data["variants"]] == [
        ("cuda", "cuda"), ("cuda", "cuda-cu130"), ("cuda", "cuda-cu126"), ("rocm", "rocm"), ("rocm", "rocm-10-0"),
        ("npu", "npu"), ("npu", "npu-a3"), ("npu", "npu-310p")]
    assert all(v["fits"] for v in data["variants"] if v["family"] == "rocm")
    assert [b["backend"] for b in data["backends"]] == [b.name for b in m.backends if not b.variant_of]


def test_detect_mixed_host_lists_both_and_asks_for_a_choice(invoke, tmp_path):
    root = make_root(tmp_path, *MIXED)
    assert detect_json(invoke, root)["detected"] == ["cuda", "xpu"]
    result = invoke("detect", "--root", root, "--matrix", MATRIX)
    assert result.exit_code == 0  # detection itself succeeded
    assert "--backend auto found several accelerators" in result.stdout
    assert "Pass an explicit --backend (cuda or xpu)" in result.stdout


def test_detect_empty_root_is_cpu(invoke, tmp_path):
    root = make_root(tmp_path)
    data = detect_json(invoke, root)
    assert data["detected"] == [] and data["fallback"] == "cpu"
    cpu = data["backends"][0]
    assert cpu["backend"] == "cpu" and cpu["detected"] and cpu["evidence"] == [{"kind": "fallback", "detail": "always"}]
    result = invoke("detect", "--root", root, "--matrix", MATRIX)
    assert result.stdout.splitlines()[0] == "No accelerator detected."
    assert "--backend auto would choose cpu (no accelerator detected)" in result.stdout


def test_detect_root_tools_come_from_the_roots_path(invoke, tmp_path, monkeypatch):
    root = make_root(tmp_path, *VENDORS["cuda"])
    tool = root / "usr/bin/nvidia-smi"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    cuda = next(b for b in detect_json(invoke, root)["backends"] if b["backend"] == "cuda")
    assert {"kind": "tool", "detail": str(tool)} in cuda["evidence"]
    # --root never asks the engine: its runtimes belong to the real host, not to the fake one.
    assert any("not checked" in m for m in cuda["missing"])


def test_detect_root_must_exist(invoke, tmp_path):
    result = invoke("detect", "--root", tmp_path / "nope", "--matrix", MATRIX)
    assert result.exit_code == 2 and "does not exist" in result.stderr


@pytest.mark.skipif(sys.platform != "linux" or HAS_NODES, reason="this host has accelerator device nodes")
def test_detect_on_this_plain_machine_says_cpu(invoke):
    result = invoke("detect", "--matrix", MATRIX)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "No accelerator detected."
    assert "--backend auto would choose cpu (no accelerator detected)" in result.stdout
    data = json.loads(invoke("detect", "--json", "--matrix", MATRIX).stdout)
    assert data["detected"] == []


@pytest.mark.skipif(sys.platform != "linux" or HAS_NODES, reason="this host has accelerator device nodes")
def test_detect_needs_no_docker(invoke, closed_socket):
    result = invoke("detect", "--json", "--matrix", MATRIX)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["detected"] == []
    cuda = next(b for b in data["backends"] if b["backend"] == "cuda")
    assert "Docker runtime 'nvidia' (not checked: no Docker engine information)" in cuda["missing"]


# --------------------------------------------------------------------------------------------------
# --backend auto for build and smoke (pull shares the same _choose).


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """Make `--backend auto` read a fake root (and a chosen OS/arch) instead of this machine."""
    real = d.detect
    empty = tmp_path / "emptybin"
    empty.mkdir()

    def use(root: Path, system: str = "Linux", machine: str = "x86_64") -> None:
        monkeypatch.setattr(d, "detect", functools.partial(real, root=root, path_env=str(empty), system=system, machine=machine))
        monkeypatch.setattr(d, "docker_runtimes_from_engine", lambda: None)

    return use


@pytest.mark.parametrize("command", ["build", "smoke"])
@pytest.mark.skipif(sys.platform != "linux" or HAS_NODES, reason="this host has accelerator device nodes")
def test_auto_on_this_machine_chooses_cpu_and_says_why(invoke, closed_socket, command):
    result = invoke(command, "--backend", "auto", "--matrix", MATRIX)
    assert result.stderr.splitlines()[0] == "auto: chose cpu (no accelerator detected)"
    assert result.exit_code == 1 and "cannot reach the Docker daemon" in result.stderr  # it went on with cpu


def test_auto_takes_the_detected_vendor(invoke, fake_host, tmp_path, closed_socket):
    fake_host(make_root(tmp_path, *VENDORS["rocm"]))
    result = invoke("smoke", "--backend", "auto", "--matrix", MATRIX)
    first = result.stderr.splitlines()[0]
    assert first.startswith("auto: chose rocm (detected AMD GPU (ROCm): /dev/kfd, /dev/dri/renderD128 (PCI vendor 0x1002)")
    assert result.exit_code == 1


def test_auto_with_two_vendors_asks_for_a_choice(invoke, fake_host, tmp_path):
    fake_host(make_root(tmp_path, *MIXED))
    result = invoke("build", "--backend", "auto", "--matrix", MATRIX)
    assert result.exit_code == 2
    assert "auto: chose" not in result.stderr
    assert result.stderr.startswith("Error: --backend auto found several accelerators: cuda (")
    assert "Pass an explicit --backend (cuda or xpu)." in result.stderr


def test_auto_on_a_mac_explains_that_mps_has_no_container(invoke, fake_host, tmp_path):
    fake_host(make_root(tmp_path), system="Darwin", machine="arm64")
    result = invoke("build", "--backend", "auto", "--matrix", MATRIX)
    assert result.exit_code == 2
    assert "--backend auto detected Apple Silicon (Darwin on arm64), but backend 'mps' cannot run in a container" in result.stderr
    assert "envbuild env --backend mps" in result.stderr

