"""Will this image run on this host? Fake host roots of every vendor (old and new drivers, supported and unsupported
architectures, missing version files) against the images' needs; labels, refusals before any container or
download, and the compatibility table."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine
from support.hosts import VENDORS, add_driver, kfd_nodes, make_root, nvidia_version, own_path

from envbuild.report import report
from envbuild.core.errors import HostMismatch, MatrixError
from envbuild.matrix import compat
from envbuild.matrix import stacks
from envbuild.matrix.stacks import rocm
from envbuild.matrix import load
from envbuild.render import render_backend

M = load(MATRIX_PATH)
# A variant of cuda for older drivers, as a matrix may define one (what the fix then names).
CU126 = ('backends.cuda-cu126={description: NVIDIA GPU (CUDA 12.6), device: cuda, base_image: "nvidia/cuda:12.6.3-base-ubuntu24.04", '
         'platforms: [linux/amd64], torch: {version: "2.15.0", index_url: "https://download.pytorch.org/whl/cu126"}, '
         'host: {stack: cuda, version: "12.6"}, ci: {runs_on: [gpu-nvidia]}}')


@pytest.fixture(autouse=True)
def this_machine(tmp_path, monkeypatch) -> Path:
    return own_path(tmp_path, monkeypatch)


def host(tmp_path: Path, backend: str, files: dict[str, str] | None = None, tool: str | None = None) -> Path:
    """A fake host of `backend`'s vendor with these driver files, and this machine's vendor tool printing `tool`
    (with a fake root, nvidia-smi is this machine's: nothing under the root runs)."""
    import os

    tmp_path.mkdir(parents=True, exist_ok=True)
    root = add_driver(make_root(tmp_path, *VENDORS[backend]), files or {})
    if tool is not None:
        exe = Path(os.environ["PATH"].split(os.pathsep)[0]) / "nvidia-smi"
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(f"'{line}'" for line in tool.splitlines()) + "\n")
        exe.chmod(0o755)
    return root


def verdict(root: Path, backend: str = "cuda", matrix=M, arch: list[str] | None = None):
    return compat.host_check(matrix.backend(backend), root, matrix=matrix, path_env=str(root / "usr/bin"),
                             measured_arch=arch)


# --- NVIDIA ----------------------------------------------------------------------------------------------


def test_old_nvidia_driver_is_refused_with_the_fix(tmp_path):
    c = verdict(host(tmp_path, "cuda", nvidia_version("535.104.05")))
    assert c.status == "FAIL" and c.blocking
    assert "host NVIDIA driver 535.104.05 (/proc/driver/nvidia/version) supports CUDA up to 12.2; this image needs " \
           "driver >= 580.65.06 for CUDA 13.2 (595.45.04 runs it natively)" in c.detail
    assert c.fix == "upgrade the NVIDIA driver to 580.65.06 or later, or use the cuda-cu126 backend"


def test_the_fix_names_a_variant_the_host_can_run(tmp_path):
    m = load(MATRIX_PATH, [CU126])
    c = verdict(host(tmp_path, "cuda", nvidia_version("560.35.03")), matrix=m)
    assert c.status == "FAIL"
    assert c.fix == "upgrade the NVIDIA driver to 580.65.06 or later, or use the cuda-cu126 backend"
    assert verdict(host(tmp_path / "x", "cuda", nvidia_version("560.35.03")), "cuda-cu126", matrix=m).ok
    # 555 is older than CUDA 12.6's own minimum, but above 12.x's floor: cu126 runs under minor version compatibility
    c = verdict(host(tmp_path / "y", "cuda", nvidia_version("555.42.06")), matrix=m)
    assert "cuda-cu126" in c.fix and "supports CUDA up to 12.5" in c.detail
    # 520 is below every floor: no variant to offer
    c = verdict(host(tmp_path / "z", "cuda", nvidia_version("520.61.05")), matrix=m)
    assert "cuda-cu126" not in c.fix and "needs driver >= 580.65.06 for CUDA 13.2" in c.detail


def test_new_nvidia_driver_passes_and_says_why(tmp_path):
    c = verdict(host(tmp_path, "cuda", nvidia_version("610.43.02"), tool="9.0\n9.0"), arch=["sm_80", "sm_90"])
    assert c.ok, c.detail
    assert "610.43.02" in c.detail and ">= 595.45.04 needed for CUDA 13.2" in c.detail and "sm_90 are among" in c.detail


def test_sys_module_version_is_read_when_proc_is_absent(tmp_path):
    c = verdict(host(tmp_path, "cuda", {"/sys/module/nvidia/version": "580.95.05\n"}))
    assert c.ok and "580.95.05 (/sys/module/nvidia/version)" in c.detail
    assert "CUDA 13.2 runs under minor version compatibility (driver >= 580.65.06; >= 595.45.04 runs it natively)" in c.detail


def test_missing_nvidia_files_warn_and_never_refuse(tmp_path):
    c = verdict(host(tmp_path, "cuda"))
    assert c.status == "warn" and not c.blocking
    assert "/proc/driver/nvidia/version is absent; /sys/module/nvidia/version is absent" in c.detail
    assert "nothing was refused" in c.fix


@pytest.mark.parametrize(("device", "image", "runs"), [
    ("7.0", ["sm_75", "sm_80", "sm_90"], False),  # Volta: not compiled in
    ("8.9", ["sm_80", "sm_86"], True),  # sm_86 cubins run on 8.9 (same major, higher minor)
    ("12.0", ["sm_90", "compute_90"], True),  # PTX for 9.0 is JIT-compiled for newer devices
    ("12.0", ["sm_90", "sm_100"], False),  # no PTX, another major
    ("9.0", ["sm_90a"], True), ("10.0", ["sm_90a"], False),  # arch-specific: exact only
])
def test_gpu_architecture_verdicts(tmp_path, device, image, runs):
    c = verdict(host(tmp_path, "cuda", nvidia_version("610.43.02"), tool=device), arch=image)
    assert c.ok is runs, c.detail
    if not runs:
        assert c.blocking and f"this host's devices are sm_{device.replace('.', '')}" in c.detail
        assert f"use an image whose torch is built for sm_{device.replace('.', '')}" in c.fix


def test_without_the_images_list_the_cuda_releases_floor_decides(tmp_path):
    """CUDA 13 builds for Turing (sm_75) and newer only: a Volta host is refused before the image's list is known,
    and the fix names the CUDA 12.6 variant, which still builds for it."""
    m = load(MATRIX_PATH, ["backends.cuda.host.arch=[]", "backends.cuda-cu130.host.arch=[]",
                           "backends.cuda.host.arch_arm64=[]", "backends.cuda-cu130.host.arch_arm64=[]"])
    c = verdict(host(tmp_path, "cuda", nvidia_version("610.43.02"), tool="7.0"), matrix=m)
    assert not c.ok and c.blocking and "this host's devices are sm_70 (Volta); CUDA 13.2 builds for sm_75 and newer only" in c.detail
    assert "cuda-cu126" in c.fix
    assert verdict(host(tmp_path / "v", "cuda", nvidia_version("610.43.02"), tool="7.0"), "cuda-cu126", matrix=m).ok
    c = verdict(host(tmp_path / "a", "cuda", nvidia_version("610.43.02"), tool="8.0"), matrix=m)
    assert c.ok and "devices sm_80 are sm_75 or newer" in c.detail


def test_unknown_architectures_are_not_checked(tmp_path):
    m = load(MATRIX_PATH, ["backends.rocm.host.arch=[]"])  # neither declared nor measured
    c = verdict(host(tmp_path, "rocm", {**kfd_nodes(80300), "/sys/module/amdgpu/version": "6.12.12\n"}), "rocm", matrix=m)
    assert not c.blocking and "gfx803" not in c.detail and "devices are" not in c.detail


# --- AMD -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "name"), [(90402, "gfx942"), (90010, "gfx90a"), (110000, "gfx1100"), (120001, "gfx1201"),
                                             (0, None)])
def test_kfd_gfx_target_version(value, name):
    assert rocm.gfx_name(value) == name


def test_rocm_supported_and_unsupported_gfx(tmp_path):
    files = {**kfd_nodes(90402, 90402), "/sys/module/amdgpu/version": "6.12.12\n"}
    c = verdict(host(tmp_path, "rocm", files), "rocm", arch=["gfx90a", "gfx942"])
    assert c.status == "warn" and not c.blocking  # ROCm 10.1 has no published amdgpu minimum: said, not refused
    assert "no published minimum amdgpu driver for ROCm 10.1" in c.detail
    c = verdict(host(tmp_path / "x", "rocm", {**kfd_nodes(110000), "/sys/module/amdgpu/version": "6.12.12\n"}), "rocm",
                arch=["gfx90a", "gfx942"])
    assert c.status == "FAIL" and "this host's devices are gfx1100 (RDNA 3); the image's torch was built for gfx90a, gfx942" in c.detail


def test_inbox_amdgpu_without_version_still_checks_the_gfx_target(tmp_path):
    c = verdict(host(tmp_path, "rocm", kfd_nodes(110000)), "rocm", arch=["gfx942"])
    assert c.status == "FAIL" and "/sys/module/amdgpu/version is absent" in c.detail and "gfx1100" in c.detail


# --- Ascend, Gaudi, Neuron: versions read, UNCONFIRMED minimums only warn -------------------------------------


def test_ascend_version_info(tmp_path):
    root = host(tmp_path, "npu", {"/usr/local/Ascend/driver/version.info": "Version=24.1.rc2\nascendhal_version=7.35.23\n"})
    assert stacks.read_driver("ascend", root).version == "24.1.rc2"
    c = verdict(root, "npu")
    assert c.status == "warn" and "host Ascend driver 24.1.rc2" in c.detail and "no published minimum" in c.detail
    c = verdict(host(tmp_path / "x", "npu"), "npu")
    assert c.status == "warn" and "/usr/local/Ascend/driver/version.info is absent" in c.detail


@pytest.mark.parametrize(("backend", "file", "old", "new"), [
    ("hpu", "/sys/module/habanalabs/version", "1.23.0-695\n", "1.24.1-f4b5a1c\n"),
    ("neuron", "/sys/module/neuron/version", "2.30.2.0\n", "2.31.1.0\n"),
])
def test_unconfirmed_minimums_warn_but_never_refuse(tmp_path, backend, file, old, new):
    c = verdict(host(tmp_path, backend, {file: old}), backend)
    assert c.status == "warn" and not c.blocking and "UNCONFIRMED" in c.detail
    assert verdict(host(tmp_path / "new", backend, {file: new}), backend).ok
    assert verdict(host(tmp_path / "none", backend), backend).status == "warn"


def test_cpu_needs_nothing_and_unknown_stacks_are_not_checked(tmp_path):
    assert verdict(make_root(tmp_path), "cpu").ok
    c = verdict(make_root(tmp_path), "xpu")
    assert c.ok and "not checked" in c.detail


# --- refusals before work ----------------------------------------------------------------------------------


def test_smoke_refuses_an_old_driver_before_starting_a_container(tmp_path):
    from envbuild import smoke

    root = host(tmp_path, "cuda", nvidia_version("535.104.05"))
    engine = FakeEngine(["runc", "nvidia"])
    engine.add_image("sha256:" + "c" * 64, [M.tags(M.backend("cuda"))[0]])
    with pytest.raises(HostMismatch, match=r"driver >= 580\.65\.06 for CUDA 13\.2.*--ignore-host"):
        smoke.smoke(M, M.backend("cuda"), engine, root=root)
    assert engine.volumes == []  # nothing was started
    with pytest.raises(NotImplementedError):  # --ignore-host goes on to start the container (the fake runs none)
        smoke.smoke(M, M.backend("cuda"), engine, root=root, ignore_host=True)


def test_smoke_uses_the_architectures_the_image_recorded(tmp_path, monkeypatch):
    from envbuild import smoke

    root = host(tmp_path, "cuda", nvidia_version("610.43.02"), tool="7.0")
    engine = FakeEngine(["runc", "nvidia"])
    img = engine.add_image("sha256:" + "c" * 64, [M.tags(M.backend("cuda"))[0]])
    img.files[compat.ARCH_FILE] = b"sm_75 sm_80 sm_90\n"
    reads = []
    monkeypatch.setattr(compat.stacks, "read_driver", lambda *a, read=stacks.read_driver: reads.append(a) or read(*a))
    with pytest.raises(HostMismatch, match="this host's devices are sm_70"):
        smoke.smoke(M, M.backend("cuda"), engine, root=root)
    assert engine.volumes == []
    assert len(reads) == 1  # the host is read once (files, nvidia-smi), checked before and after the image is known


def test_pull_refuses_before_downloading(tmp_path):
    from envbuild.ship import pull

    engine = FakeEngine()
    with pytest.raises(HostMismatch):
        pull.pull(M, M.backend("cuda"), engine, root=host(tmp_path, "cuda", nvidia_version("535.104.05")))
    assert engine.logins == [] and engine.refs == {}


def test_doctor_lists_the_same_check(tmp_path):
    from envbuild.host import doctor
    from envbuild.core.checks import Check

    root = host(tmp_path, "cuda", nvidia_version("535.104.05"))
    rep = doctor.diagnose(M, M.backend("cuda"), root=root, path_env=str(root / "usr/bin"),
                          connector=lambda: (FakeEngine(["runc", "nvidia"], root=tmp_path), Check("docker daemon", True, "fake")))
    c = next(c for c in rep.checks if c.name == "host driver")
    # R535: the family's answer is pick's, cuda-cu126 under minor version compatibility, not "upgrade to 595"
    assert c.status == "ok" and "`envbuild pick` gives cuda-cu126 under minor version compatibility" in c.detail
    assert "no JIT of PTX newer than the driver" in c.detail
    root = host(tmp_path / "old", "cuda", nvidia_version("470.82.01"))
    rep = doctor.diagnose(M, M.backend("cuda"), root=root, path_env=str(root / "usr/bin"),
                          connector=lambda: (FakeEngine(["runc", "nvidia"], root=tmp_path), Check("docker daemon", True, "fake")))
    c = next(c for c in rep.checks if c.name == "host driver")
    assert c.status == "FAIL" and "host driver" in [b.name for b in rep.blockers]
    assert "Upgrade the NVIDIA driver to 525.60.13 or later" in c.detail  # the same lowest driver pick names
    assert c.fix.startswith("upgrade the NVIDIA driver to 525.60.13 or later (then `envbuild pick` gives cuda-cu126)")


def test_detect_reports_the_driver_and_architectures(tmp_path):
    from envbuild.host.detect import detect

    root = host(tmp_path, "cuda", nvidia_version("580.95.05"), tool="9.0")
    f = detect(M, root, path_env=str(root / "usr/bin")).finding("cuda")
    assert f.detected
    assert any(e.kind == "driver" and e.detail.startswith("NVIDIA driver 580.95.05 (/proc/driver/nvidia/version")
               for e in f.evidence)
    assert ("arch", "sm_90") in [(e.kind, e.detail) for e in f.evidence]
    f = detect(M, host(tmp_path / "x", "cuda"), path_env=str(tmp_path / "none")).finding("cuda")
    assert f.detected and any(m.startswith("the NVIDIA driver version (") for m in f.missing)  # a hint, still detected


# --- the image's labels, the matrix, the table -----------------------------------------------------------------


def test_labels_carry_the_requirements():
    cpu = render_backend(M, M.backend("cpu"))
    assert 'dev.envbuild.requires.driver="none"' in cpu and 'dev.envbuild.requires.arch="any"' in cpu
    cuda = render_backend(M, M.backend("cuda"))
    assert 'dev.envbuild.requires.driver="nvidia>=580.65.06; native>=595.45.04"' in cuda and 'dev.envbuild.requires.stack="cuda 13.2"' in cuda
    assert f"> {compat.ARCH_FILE}" in cuda  # the build records torch's own list


def test_a_declared_arch_list_is_enforced_by_the_build():
    m = load(MATRIX_PATH, ["backends.cuda.host.arch=[sm_80, sm_90]"])
    text = render_backend(m, m.backend("cuda"))
    assert "else 'sm_80 sm_90').split())" in text and 'dev.envbuild.requires.arch="sm_80,sm_90"' in text


def test_host_section_is_validated_with_its_location():
    with pytest.raises(MatrixError) as err:
        load(MATRIX_PATH, ["backends.cuda.host.stack=cudaa"])
    assert "backends.cuda.host.stack: 'cudaa' is not one of: cuda, rocm, cann, gaudi, neuron" in str(err.value)
    assert err.value.exit_code == 2


def test_compatibility_md_is_current():
    """COMPATIBILITY.md is generated from matrix.yaml, like the Dockerfiles: regenerate with
    `envbuild list --compat --markdown > COMPATIBILITY.md`."""
    path = Path(MATRIX_PATH).parent / "COMPATIBILITY.md"
    assert path.read_text() == report.compat_markdown(report.compat_rows(M)), "run `envbuild list --compat --markdown > COMPATIBILITY.md`"


def test_compat_rows_follow_the_matrix_and_the_manifest():
    manifest = {"images": {"cpu": {"size": 1_343_000_000, "smoke": {"ok": True, "date": "2026-11-30T03:41:07Z"}}}}
    rows = {r["backend"]: r for r in report.compat_rows(M, manifest)}
    assert set(rows) == {b.name for b in M.containerizable()}
    assert rows["cuda"]["min driver"] == "nvidia >= 580.65.06 (cuda 13.2; minor version compatibility; >= 595.45.04 native)"
    assert rows["cuda-cu130"]["min driver"] == "nvidia >= 580.65.06 (cuda 13.0)"
    assert rows["cuda-cu126"]["min driver"] == "nvidia >= 525.60.13 (cuda 12.6; minor version compatibility; >= 560.28.03 native)"
    assert rows["cpu"]["image size"] == "1.3 GB" and rows["cpu"]["last smoke"] == "passed 2026-11-30"
    assert rows["cpu"]["min driver"] == "none" and rows["xpu"]["min driver"] == "not known"


# --- variants: several backends for one device, and --backend auto's choice among them ---------------------

VARIANT = ('backends.cuda-cu126={variant_of: cuda, description: "NVIDIA GPU (CUDA 12.6)", '
           'base_image: "nvidia/cuda:12.6.3-base-ubuntu24.04", torch: {index_url: "https://download.pytorch.org/whl/cu126"}, '
           'host: {version: "12.6", arch: [sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, sm_90], arch_arm64: []}}')


def test_a_variant_shares_its_base_backend_and_overrides_what_it_sets():
    from envbuild.maintain import ci

    m = load(MATRIX_PATH, [VARIANT])
    base, v = m.backend("cuda"), m.backend("cuda-cu126")
    assert (v.device, v.run, v.detect, v.runs_on, v.compile, v.platforms) == (
        base.device, base.run, base.detect, base.runs_on, base.compile, base.platforms)
    assert (v.torch.version, v.torch.index_url, v.host.stack, v.host.version) == (
        base.torch.version, "https://download.pytorch.org/whl/cu126", "cuda", "12.6")
    assert (v.family, base.family, v.variant_of) == ("cuda", "cuda", "cuda")
    text = render_backend(m, v)
    assert "FROM nvidia/cuda:12.6.3-base-ubuntu24.04" in text and "whl/cu126" in text
    assert 'dev.envbuild.requires.driver="nvidia>=525.60.13; native>=560.28.03"' in text
    jobs = {e["backend"]: e for e in ci.github_matrix(m)["include"]}
    assert jobs["cuda-cu126"]["runs-on"] == jobs["cuda"]["runs-on"]
    assert m.tags(v)[0].endswith(":cuda-cu126")


@pytest.mark.parametrize("overrides, fragment", [
    (["backends.gpu={variant_of: cuda-x}"], "backends.gpu.variant_of: 'cuda-x' is not another backend of this matrix (valid: cpu, cuda"),
    (["backends.gpu={variant_of: gpu}"], "backends.gpu.variant_of: 'gpu' is not another backend"),
    ([VARIANT, "backends.cu2={variant_of: cuda-cu126}"], "'cuda-cu126' is itself a variant (of 'cuda'): name that one"),
])
def test_variant_of_must_name_another_backend_that_is_no_variant(overrides, fragment):
    with pytest.raises(MatrixError) as err:
        load(MATRIX_PATH, overrides)
    assert fragment in str(err.value)


def test_a_variant_keeps_its_base_device():
    with pytest.raises(MatrixError, match="backends.gpu.device: a variant keeps its base's device \\('cuda'\\)"):
        load(MATRIX_PATH, ["backends.gpu={variant_of: cuda, device: xpu}"])


@pytest.mark.parametrize("files, chosen, said", [
    (nvidia_version("560.35.03"), "cuda-cu126", "passed over: cuda (this image needs driver >= 580.65.06"),
    (nvidia_version("535.104.05"), "cuda-cu126", "cuda-cu126 is the newest variant this host runs under minor version"),
    (nvidia_version("585.05.01"), "cuda-cu130", "cuda-cu130 is the newest variant this host runs"),
    (nvidia_version("610.43.02"), "cuda", "cuda is the newest variant this host runs"),
    ({}, "cuda", "cuda, the newest variant (cannot tell the host's NVIDIA driver version: not a refusal)"),  # unknown is never a refusal
])
def test_auto_picks_the_newest_variant_the_hosts_driver_runs(tmp_path, files, chosen, said):
    from envbuild.host import detect as d

    m = load(MATRIX_PATH, [VARIANT])
    root = host(tmp_path, "cuda", files)
    detection = d.detect(m, root, path_env=str(root / "usr/bin"))
    assert detection.detected == ["cuda"]  # one family, one finding: the variants are the driver's question
    name, reason = d.choose(detection, m, root=root)
    assert name == chosen and said in reason, reason


def test_auto_refuses_when_no_variant_fits_naming_the_driver_and_the_upgrade(tmp_path):
    from envbuild.core.errors import NoVariantFitsError
    from envbuild.host import detect as d

    root = host(tmp_path, "cuda", nvidia_version("525.60.12"))
    with pytest.raises(NoVariantFitsError) as err:
        d.choose(d.detect(M, root, path_env=str(root / "usr/bin")), M, root=root)
    assert "its NVIDIA driver is 525.60.12" in str(err.value) and "needs driver >= 525.60.13" in str(err.value)
    assert "Upgrade the NVIDIA driver to 525.60.13 or later: cuda-cu126 (CUDA 12.6) runs there under minor" in str(err.value)
    assert err.value.exit_code == 1


def test_variants_of_two_devices_are_still_a_choice_to_make(tmp_path):
    from envbuild.host import detect as d

    m = load(MATRIX_PATH, [VARIANT])
    root = make_root(tmp_path, ["/dev/nvidiactl", "/dev/nvidia0", "/dev/dri/renderD128", "/dev/dri/renderD129"],
                     [("0000:00:02.0", "0x8086", "0x030000"), ("0000:01:00.0", "0x10de", "0x030000")],
                     {"renderD128": "0x8086", "renderD129": "0x10de"})
    detection = d.detect(m, root, path_env=str(root / "usr/bin"))
    assert set(detection.detected) == {"cuda", "xpu"}
    with pytest.raises(d.AmbiguousBackendError):
        d.choose(detection, m, root=root)
