"""Host detection against fake roots (plain files stand in for device nodes and sysfs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.constants import MATRIX as MATRIX_PATH
from support.hosts import VENDORS, make_root

from envbuild.host.detect import (
    AmbiguousBackendError,
    Detection,
    PciDevice,
    choose,
    counts_as_accelerator,
    detect,
    docker_runtimes_from_engine,
)
from envbuild.report.report import detect_text
from envbuild.core.errors import EnvbuildError, NotContainerizableError
from envbuild.matrix import load
import re
import functools
from support.constants import MATRIX
from envbuild.host import detect as d



@pytest.fixture(scope="module")
def matrix():
    return load(MATRIX_PATH)


@pytest.fixture
def empty_path(tmp_path):
    d = tmp_path / "emptybin"
    d.mkdir()
    return str(d)


def run(matrix, root, empty_path, **kw):
    kw.setdefault("path_env", empty_path)
    kw.setdefault("system", "Linux")
    kw.setdefault("machine", "x86_64")
    return detect(matrix, root, **kw)


@pytest.mark.parametrize("host", sorted(VENDORS))
def test_each_vendor_is_detected_alone(matrix, tmp_path, empty_path, host):
    nodes, pci, drm = VENDORS[host]
    det = run(matrix, make_root(tmp_path, nodes, pci, drm), empty_path)
    backend = host.split("-")[0]
    assert det.detected == [backend]
    f = det.finding(backend)
    assert {e.kind for e in f.evidence} >= {"device", "pci"}
    name, reason = choose(det, matrix)
    assert name == backend and reason.startswith(f"detected {matrix.backend(backend).description}: ")
    assert "PCI 0000:" in reason


def test_every_matrix_backend_with_detect_data_has_a_fake_host(matrix):
    covered = {h.split("-")[0] for h in VENDORS} | {"mps"}
    assert {b.name for b in matrix.backends if b.device != "cpu" and not b.variant_of} <= covered


def test_nvidia_reason_and_evidence(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia10", "/dev/nvidia2"], [("0000:01:00.0", "0x10DE", "0x030200")])
    det = run(matrix, root, empty_path)
    nodes = [e.detail for e in det.finding("cuda").evidence if e.kind == "device"]
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia2", "/dev/nvidia10"]  # natural order
    assert choose(det, matrix) == (
        "cuda",
        "detected NVIDIA GPU: /dev/nvidiactl, /dev/nvidia2, /dev/nvidia10, PCI 0000:01:00.0 vendor 0x10de class 0x030200; "
        "cuda, the newest variant (cannot tell the host's NVIDIA driver version: not a refusal)",
    )


def test_reason_is_short_on_an_eight_gpu_host(matrix, tmp_path, empty_path):
    nodes = ["/dev/nvidiactl"] + [f"/dev/nvidia{i}" for i in range(8)]
    pci = [(f"0000:{i + 1:02x}:00.0", "0x10de", "0x030200") for i in range(8)]
    _, reason = choose(run(matrix, make_root(tmp_path, nodes, pci), empty_path), matrix)
    assert reason == (
        "detected NVIDIA GPU: /dev/nvidiactl, /dev/nvidia0, /dev/nvidia1, (+6 more), "
        "PCI 0000:01:00.0 vendor 0x10de class 0x030200, PCI 0000:02:00.0 vendor 0x10de class 0x030200, "
        "PCI 0000:03:00.0 vendor 0x10de class 0x030200, (+5 more); "
        "cuda, the newest variant (cannot tell the host's NVIDIA driver version: not a refusal)"
    )


def test_empty_host_is_cpu_only(matrix, tmp_path, empty_path):
    det = run(matrix, make_root(tmp_path), empty_path)
    assert det.detected == []
    cpu = det.finding("cpu")
    assert cpu.detected and cpu.evidence[0].kind == "fallback" and cpu.evidence[0].detail == "always"
    assert choose(det, matrix) == ("cpu", "no accelerator detected")
    text = detect_text(det)
    assert "No accelerator detected." in text and "Hints:" not in text


def test_two_vendors_are_both_detected_and_choose_refuses(matrix, tmp_path, empty_path):
    root = make_root(
        tmp_path,
        ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dri/renderD128", "/dev/dri/renderD129"],
        [("0000:00:02.0", "0x8086", "0x030000"), ("0000:01:00.0", "0x10de", "0x030000")],
        {"renderD128": "0x8086", "renderD129": "0x10de"},
    )
    det = run(matrix, root, empty_path)
    assert det.detected == ["cuda", "xpu"]
    xpu_nodes = [e.detail for e in det.finding("xpu").evidence if e.kind == "device"]
    assert xpu_nodes == ["/dev/dri/renderD128 (PCI vendor 0x8086)"]  # the NVIDIA render node does not count
    with pytest.raises(AmbiguousBackendError) as exc:
        choose(det, matrix)
    assert isinstance(exc.value, EnvbuildError) and exc.value.exit_code == 2
    assert exc.value.candidates == ["cuda", "xpu"]
    assert "explicit --backend" in str(exc.value) and "cuda" in str(exc.value) and "xpu" in str(exc.value)


def test_amd_render_node_without_kfd_is_not_rocm(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/dri/renderD128"], [("0000:03:00.0", "0x1002", "0x030000")], {"renderD128": "0x1002"})
    det = run(matrix, root, empty_path)
    assert det.detected == []
    rocm = det.finding("rocm")
    assert "device node /dev/kfd" in rocm.missing
    assert any(e.kind == "device" and "renderD128" in e.detail for e in rocm.evidence)
    assert "rocm not detected" in detect_text(det)


def test_render_node_of_another_vendor_is_not_xpu(matrix, tmp_path, empty_path):
    # Intel PCI display present, but the render node's own vendor file says AMD.
    root = make_root(tmp_path, ["/dev/dri/renderD128"], [("0000:00:02.0", "0x8086", "0x030000")], {"renderD128": "0x1002"})
    det = run(matrix, root, empty_path)
    assert det.detected == []
    assert not any(e.kind == "device" for e in det.finding("xpu").evidence)
    assert any("renderD* of PCI vendor 0x8086" in m for m in det.finding("xpu").missing)


def test_nvidia_render_node_is_not_xpu(matrix, tmp_path, empty_path):
    root = make_root(
        tmp_path,
        ["/dev/dri/renderD128", "/dev/nvidiactl", "/dev/nvidia0"],
        [("0000:00:00.0", "0x8086", "0x060000"), ("0000:01:00.0", "0x10de", "0x030000")],
        {"renderD128": "0x10de"},
    )
    det = run(matrix, root, empty_path)
    assert det.detected == ["cuda"]
    assert det.finding("xpu").evidence == []  # the Intel host bridge is not an accelerator


def test_render_node_without_sysfs_vendor_does_not_count(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/dri/renderD128"], [("0000:00:02.0", "0x8086", "0x030000")])
    assert run(matrix, root, empty_path).detected == []


def test_pci_vendor_without_device_nodes_is_a_hint(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, [], [("0000:33:00.0", "0x1da3", "0x120000")])
    det = run(matrix, root, empty_path)
    assert det.detected == []
    hpu = det.finding("hpu")
    assert [e.kind for e in hpu.evidence] == ["pci"]
    assert "a device node matching /dev/accel/accel[0-9]*" in hpu.missing
    text = detect_text(det)
    assert "hpu not detected: found pci 0000:33:00.0 vendor 0x1da3" in text


def test_device_nodes_without_matching_pci_device(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0"], [("0000:00:03.0", "0x1af4", "0x020000")])
    det = run(matrix, root, empty_path)
    assert det.detected == []
    assert "a PCI accelerator of vendor 0x10de" in det.finding("cuda").missing


def test_root_without_pci_bus_skips_the_pci_requirement(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0"], with_pci_bus=False)
    det = run(matrix, root, empty_path)
    assert det.detected == ["cuda"]
    assert any(e.kind == "note" and "PCI not checked" in e.detail for e in det.finding("cuda").evidence)


def test_nvidiactl_alone_is_not_enough(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl"], [("0000:01:00.0", "0x10de", "0x030000")])
    det = run(matrix, root, empty_path)
    assert det.detected == []
    assert "a device node matching /dev/nvidia[0-9]*" in det.finding("cuda").missing


def test_vfio_without_google_pci_is_not_tpu(matrix, tmp_path, empty_path):
    # A VFIO passthrough of some other device creates /dev/vfio/N too.
    root = make_root(tmp_path, ["/dev/vfio/0"], [("0000:00:05.0", "0x15b3", "0x020000")])
    assert run(matrix, root, empty_path).detected == []


def test_cloud_vendor_nics_and_disks_are_not_accelerators(matrix, tmp_path, empty_path):
    # Every EC2 / GCE VM has AWS/Google NICs and NVMe disks: no Trainium/TPU hint for those.
    pci = [("0000:00:05.0", "0x1d0f", "0x020000"), ("0000:00:04.0", "0x1d0f", "0x010802"), ("0000:00:06.0", "0x1ae0", "0x020000")]
    det = run(matrix, make_root(tmp_path, [], pci), empty_path)
    assert det.finding("neuron").evidence == [] and det.finding("tpu").evidence == []
    assert "Hints:" not in detect_text(det)


@pytest.mark.parametrize(
    "vendor, cls, counts",
    [
        ("0x10de", 0x030200, True),
        ("0x10de", 0x040300, False),  # the GPU's HDMI audio function
        ("0x1da3", 0x120000, True),
        ("0x8086", 0x088000, False),  # Intel uncore "system peripheral"
        ("0x1d0f", 0x088000, True),
        ("0x1ae0", 0xff0000, True),
        ("0x1ae0", 0x060400, False),
    ],
)
def test_pci_class_rule(vendor, cls, counts):
    assert counts_as_accelerator(PciDevice("0000:00:00.0", vendor, cls)) is counts


def test_macos_arm64_is_mps_and_choose_explains(matrix, tmp_path, empty_path):
    det = run(matrix, make_root(tmp_path, with_pci_bus=False), empty_path, system="Darwin", machine="arm64")
    assert det.detected == ["mps"]
    assert det.finding("mps").evidence[0].kind == "os"
    with pytest.raises(NotContainerizableError) as exc:
        choose(det, matrix)
    msg = str(exc.value)
    assert exc.value.exit_code == 2
    assert "cannot run in a container" in msg and "envbuild env --backend mps" in msg and "--backend cpu" in msg
    # Where no container is needed (`envbuild env`, `doctor`), mps is the answer.
    assert choose(det, matrix, native=True) == ("mps", "detected Apple Silicon: Darwin on arm64")


@pytest.mark.parametrize("system, machine", [("Darwin", "x86_64"), ("Linux", "aarch64"), ("Linux", "arm64")])
def test_mps_needs_macos_on_arm64(matrix, tmp_path, empty_path, system, machine):
    det = run(matrix, make_root(tmp_path), empty_path, system=system, machine=machine)
    assert "mps" not in det.detected
    assert any("darwin on arm64" in m for m in det.finding("mps").missing)


def test_tools_on_path_are_evidence_not_requirements(matrix, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("nvidia-smi", "hl-smi"):
        exe = bindir / tool
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    (bindir / "npu-smi").write_text("not executable")
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0"], [("0000:01:00.0", "0x10de", "0x030000")])
    det = detect(matrix, root, path_env=str(bindir), system="Linux", machine="x86_64")
    assert det.detected == ["cuda"]
    assert Evidence_of(det, "cuda", "tool") == [str(bindir / "nvidia-smi")]
    assert Evidence_of(det, "hpu", "tool") == [str(bindir / "hl-smi")] and not det.finding("hpu").detected
    assert "tool npu-smi on PATH" in det.finding("npu").missing
    assert "hpu not detected: found tool" in detect_text(det)


def Evidence_of(det: Detection, backend: str, kind: str) -> list[str]:
    return [e.detail for e in det.finding(backend).evidence if e.kind == kind]


def test_docker_runtimes_are_reported(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0"], [("0000:01:00.0", "0x10de", "0x030000")])
    det = run(matrix, root, empty_path, docker_runtimes={"runc", "nvidia"})
    assert Evidence_of(det, "cuda", "runtime") == ["Docker runtime 'nvidia' registered"]
    assert "Docker runtime 'habana' (not registered with the Docker engine)" in det.finding("hpu").missing

    det = run(matrix, root, empty_path, docker_runtimes={"runc"})
    assert det.detected == ["cuda"]  # a runtime is a hint, never a requirement
    assert "Docker runtime 'nvidia' (not registered with the Docker engine)" in det.finding("cuda").missing
    text = detect_text(det)
    assert "cuda     NVIDIA GPU: device /dev/nvidiactl, /dev/nvidia0; pci 0000:01:00.0" in text
    assert "cuda: missing tool nvidia-smi on PATH; Docker runtime 'nvidia' (not registered" in text

    det = run(matrix, root, empty_path)
    assert any("not checked" in m for m in det.finding("cuda").missing)


def test_json_shape(matrix, tmp_path, empty_path):
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0"], [("0000:01:00.0", "0x10de", "0x030000")])
    data = json.loads(json.dumps(run(matrix, root, empty_path).to_json()))
    assert data["detected"] == ["cuda"] and data["fallback"] == "cpu"
    assert [b["backend"] for b in data["backends"]] == [b.name for b in matrix.backends if not b.variant_of]
    cuda = data["backends"][matrix.names.index("cuda")]
    assert {"backend", "device", "detected", "evidence", "missing"} <= set(cuda)
    assert cuda["device"] == "cuda" and cuda["detected"] is True
    assert cuda["evidence"][0] == {"kind": "device", "detail": "/dev/nvidiactl"}


def test_docker_runtimes_from_engine(monkeypatch):
    from envbuild.engine import docker as engine
    from envbuild.core.errors import DockerError

    monkeypatch.setattr(engine.Engine, "runtimes", lambda self: {"runc", "nvidia"})
    assert docker_runtimes_from_engine() == {"runc", "nvidia"}

    def unreachable(self):
        raise engine.unreachable_error("Error while fetching server API version", self.host)

    monkeypatch.setattr(engine.Engine, "runtimes", unreachable)
    assert docker_runtimes_from_engine() is None

    def refused(self):
        raise DockerError("the engine refused")

    monkeypatch.setattr(engine.Engine, "runtimes", refused)
    assert docker_runtimes_from_engine() is None


def test_import_is_light():
    import subprocess

    code = "import sys, envbuild.host.detect; print('docker' in sys.modules, 'click' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.skipif(
    sys.platform != "linux" or any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dri", "/dev/accel")),
    reason="this host has accelerator device nodes",
)
def test_this_plain_linux_machine_is_cpu_only(matrix):
    det = detect(matrix)
    assert det.detected == []
    assert choose(det, matrix) == ("cpu", "no accelerator detected")


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

@pytest.mark.parametrize("where", ["usr/bin", "bin", "usr/local/bin", "usr/sbin"])
@pytest.mark.parametrize("command", [["detect", "--json"], ["detect"], ["doctor", "--backend", "cuda"],
                                     ["doctor", "--backend", "cuda", "--json"]])
def test_root_runs_nothing_from_the_folder(where, command, tmp_path, invoke, closed_socket, monkeypatch):
    from support.hosts import VENDORS, add_driver, make_root, nvidia_version

    root = add_driver(make_root(tmp_path, *VENDORS["cuda"]), nvidia_version("610.43.02"))
    marker = tmp_path / "ran"
    for tool in ("nvidia-smi", "rocm-smi", "hl-smi", "neuron-ls", "npu-smi", "xpu-smi"):
        exe = root / where / tool
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text(f"#!/bin/sh\necho ran >> {marker}\necho 9.0\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"/{where}:/usr/bin:/bin")
    result = invoke(*command, "--root", root, "--matrix", MATRIX_PATH)
    assert not marker.exists(), result.output
    # no device read from its output (the variants' declared lists name sm_90: those are the matrix's, not the host's)
    assert "devices sm_90" not in result.output and "arch sm_90" not in result.output
    assert not re.search(r'"detail":\s*"sm_90"|"archs":\s*\[\s*"sm_90"', result.output)
    if "--json" not in command:
        assert "--root" in result.stdout  # says which facts came from where


def test_detect_prints_device_names_escaped(invoke, tmp_path):
    from support.hosts import VENDORS, make_root

    root = make_root(tmp_path, *VENDORS["cuda"])
    evil = root / "dev" / "nvidia\x1b[2J9"
    evil.write_text("")
    for args in (["detect"], ["doctor", "--backend", "cuda"]):
        result = invoke(*args, "--root", root, "--matrix", MATRIX_PATH)
        assert "\x1b" not in result.output, result.output


# --- detect and --backend auto through the CLI, on fake roots and on this plain machine (from test_host_cli.py)

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
