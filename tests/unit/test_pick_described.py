"""`envbuild pick --driver VERSION --gpu ARCH`: answers for a described host (a compute node seen from a login node,
a CI runner), reading nothing of this machine. The expected answers below are worked out by hand from NVIDIA's
floors (CUDA 12.x runs on >= 525.60.13 and 13.x on >= 580.65.06 under minor version compatibility; natively each
release needs its own minimum) and from the architectures each variant declares (CUDA 13: sm_75 and newer; CUDA
12.6: no Blackwell). Then `--json` on every outcome and `--for` parsed back as shell words and YAML."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from support.constants import MATRIX
from support.hosts import own_path

from envbuild.matrix import load, stacks

M = load(MATRIX)
REPO = M.image.repository


@pytest.fixture(autouse=True)
def this_machine(tmp_path, monkeypatch) -> Path:
    """This machine's PATH holds an nvidia-smi that would say sm_70 and /proc is this machine's: neither is read."""
    bindir = own_path(tmp_path, monkeypatch)
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 7.0\n")
    (bindir / "nvidia-smi").chmod(0o755)
    return bindir


def pick(invoke, *args: str):
    return invoke("pick", "--matrix", MATRIX, *args)


def gpus(*names: str) -> list[str]:
    return [w for n in names for w in ("--gpu", n)]


# (driver, GPUs, the image, how it runs there): None where nothing fits, with the lowest driver that gives one.
CASES = [
    # R470, R515 and just below 12.x's floor: nothing, upgrade to 525.60.13 (12.6 under minor version compatibility)
    ("470.82.01", ["A100"], None, "525.60.13"),
    ("515.105.01", ["T4"], None, "525.60.13"),
    ("525.60.12", ["A100"], None, "525.60.13"),
    # R525 to R559: 12.6 under minor version compatibility, from Pascal to Hopper
    ("525.60.13", ["A100"], "cuda-cu126", "minor-version"),
    ("535.104.05", ["V100"], "cuda-cu126", "minor-version"),
    ("535.104.05", ["P100"], "cuda-cu126", "minor-version"),
    ("535.104.05", ["L4"], "cuda-cu126", "minor-version"),  # sm_86 kernels run on an sm_89
    ("550.54.15", ["H100", "H100"], "cuda-cu126", "minor-version"),
    ("560.28.02", ["A100"], "cuda-cu126", "minor-version"),
    # Blackwell below R580: 12.6 carries no sm_100/sm_120, and 13.x needs 580.65.06
    ("535.104.05", ["B200"], None, "580.65.06"),
    ("575.51.03", ["RTX 5090"], None, "580.65.06"),
    # 12.6's own minimum and up to just below 13.0's: natively
    ("560.28.03", ["A100"], "cuda-cu126", "native"),
    ("570.86.10", ["GTX1080"], "cuda-cu126", "native"),  # sm_60 kernels run on an sm_61
    ("580.65.05", ["H100"], "cuda-cu126", "native"),
    # R580 to R594: 13.0 natively (13.2 would run only under minor version compatibility)
    ("580.65.06", ["A100"], "cuda-cu130", "native"),
    ("580.65.06", ["B200"], "cuda-cu130", "native"),
    ("590.44.01", ["RTX5090"], "cuda-cu130", "native"),
    ("595.45.03", ["H100"], "cuda-cu130", "native"),
    # R595: 13.2, except for GPUs older than Turing, which only 12.6 carries
    ("595.45.04", ["H100"], "cuda", "native"),
    ("595.45.04", ["B200", "H100"], "cuda", "native"),
    ("595.45.04", ["T4"], "cuda", "native"),
    ("595.45.04", ["V100"], "cuda-cu126", "native"),
    ("595.45.04", ["P100"], "cuda-cu126", "native"),
    ("595.45.04", ["V100", "A100"], "cuda-cu126", "native"),  # mixed: the one variant that carries both
    # Mixed Volta + Blackwell: no one variant carries both, at any driver
    ("595.45.04", ["V100", "RTX5090"], None, None),
]


@pytest.mark.parametrize("driver, named, image, how", CASES)
def test_a_described_host_gets_the_answer_worked_out_from_the_floors(invoke, driver, named, image, how):
    result = pick(invoke, "--driver", driver, *gpus(*named), "--json")
    doc = json.loads(result.stdout)  # JSON whether or not an image fits
    if image:
        assert result.exit_code == 0, result.output
        assert (doc["backend"], doc["mode"], doc["ok"]) == (image, how, True)
        assert doc["image"] == f"{REPO}:{image}" and doc["host"]["source"].startswith("described")
        assert all(g["verdict"] == "runs" for g in doc["gpus"])
        text = pick(invoke, "--driver", driver, *gpus(*named))
        assert text.stdout.strip() == f"{REPO}:{image}"
        notes = [ln for ln in text.stderr.splitlines() if ln.startswith("note: ")]
        assert len(notes) == (1 if how == "minor-version" else 0)
    else:
        assert result.exit_code == 1 and doc["ok"] is False and doc["image"] is None and doc["refusal"]
        assert (doc["upgrade"] or {}).get("driver") == how
        text = pick(invoke, "--driver", driver, *gpus(*named))
        assert text.exit_code == 1 and text.stdout == ""
        if how:
            assert f"Upgrade the NVIDIA driver to {how} or later" in text.stderr
        else:
            assert "No one variant carries every GPU of this host" in text.stderr
        assert "the CPU image" in text.stderr


def test_a_gpu_no_runnable_variant_carries_is_named_with_the_variant_and_driver_that_serve_it(invoke):
    result = pick(invoke, "--driver", "575.51.03", "--gpu", "A100", "--gpu", "sm_120")
    assert result.exit_code == 1
    assert "its sm_120 (Blackwell) GPU is carried by no variant this driver runs" in result.stderr
    assert "Upgrade the NVIDIA driver to 580.65.06 or later: cuda-cu130 (CUDA 13.0) runs there" in result.stderr
    doc = json.loads(pick(invoke, "--driver", "575.51.03", "--gpu", "A100", "--gpu", "sm_120", "--json").stdout)
    verdicts = {g["arch"]: g for g in doc["gpus"]}
    assert verdicts["sm_80"]["carried_by"] == ["cuda-cu126"] and verdicts["sm_120"]["carried_by"] == []
    assert [v["backend"] for v in doc["variants"]] == ["cuda", "cuda-cu130", "cuda-cu126"]
    assert all(v["detail"] for v in doc["variants"])


@pytest.mark.parametrize("spellings", [("8.0", "sm_80", "A100", "compute_80", "nvidia a100"),
                                       ("7.0", "sm_70", "V100", "Tesla V100"),
                                       ("12.0", "sm_120", "RTX 5090", "RTX5090")])
def test_the_gpu_spellings_agree(invoke, spellings):
    answers = {pick(invoke, "--driver", "595.45.04", "--gpu", s).stdout for s in spellings}
    assert len(answers) == 1 and answers.pop().startswith(REPO)


def test_amd_by_gfx_or_product_name(invoke):
    for said in ("gfx942", "MI300X", "mi300x"):
        result = pick(invoke, "--gpu", said)
        assert result.exit_code == 0 and result.stdout.strip() == f"{REPO}:rocm", result.output
    result = pick(invoke, "--gpu", "gfx803")
    assert result.exit_code == 1 and "No variant carries gfx803" in result.stderr


@pytest.mark.parametrize("args, says", [
    (["--gpu", "A1000000"], "--gpu A1000000: not a GPU envbuild knows; give its architecture (8.0, sm_80, gfx942"),
    (["--driver", "latest"], "--driver latest: not a driver version"),
    (["--driver", "535\x1b[31m.1"], "not a driver version"),
    (["--driver", "535.104.05\nx"], "not a driver version"),
    (["--driver", "9" * 30], "not a driver version"),
    (["--gpu", "A100", "--gpu", "MI300X"], "--gpu names NVIDIA and AMD GPUs together"),
    (["--gpu", "A100", "--backend", "rocm"], "--gpu names CUDA GPUs; the rocm image is for ROCm"),
    (["--gpu", "MI300X", "--backend", "cuda"], "--gpu names ROCm GPUs; the cuda image is for CUDA"),  # not "ROCM"
    (["--gpu", "A100", "--backend", "cpu"], "the cpu image needs no driver"),
])
def test_what_cannot_describe_a_host_is_refused_clearly(invoke, args, says):
    result = pick(invoke, *args)
    assert result.exit_code == 2 and says in result.stderr, result.output


def test_nothing_of_this_machine_is_read(invoke, tmp_path, monkeypatch):
    """This machine's nvidia-smi says Volta (sm_70): a described H100 host still gets 13.2, and --root is refused."""
    result = pick(invoke, "--driver", "595.45.04", "--gpu", "H100", "--json")
    doc = json.loads(result.stdout)
    assert doc["backend"] == "cuda" and doc["host"]["archs"] == ["sm_90"] and doc["host"]["evidence"] == ["--driver", "--gpu"]
    assert pick(invoke, "--driver", "595.45.04", "--root", str(tmp_path)).exit_code == 2


def test_a_host_without_a_gpu_of_that_kind_is_said_so(tmp_path):
    """A backend named for a GPU this host lacks: a warning first, the image still named; a described host is the
    one meant, so it gets none."""
    from support.hosts import make_root

    from envbuild.host import pick as picking

    answer = picking.pick(M, "cuda", root=make_root(tmp_path))
    assert answer.absent.startswith("this host has no NVIDIA GPU") and "--driver VERSION --gpu ARCH" in answer.absent
    assert answer.lines()[0] == f"warning: {answer.absent}" and answer.warnings[0] == answer.absent
    assert answer.to_json()["warnings"][0] == answer.absent and answer.ref.endswith(f":{answer.picked.backend.name}")
    described = picking.pick(M, "cuda", described=picking.describe("580.95.05", ("H100",)))
    assert described.absent is None and not described.lines()[0].startswith("warning: this host")


def test_auto_with_a_described_host_takes_the_family_of_its_gpus():
    from envbuild.host import pick as picking

    for gpu, family in (("H100", "cuda"), ("gfx942", "rocm")):
        answer = picking.pick(M, "AUTO", described=picking.describe(None, (gpu,)))
        assert answer.picked.backend.family == family and answer.detected is None and answer.absent is None


# --- --for: each tool's own words, parsed back -------------------------------------------------------------


def run_for(invoke, tool: str, *args: str) -> str:
    result = pick(invoke, *args, "--for", tool)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_for_docker(invoke):
    pull, run = [shlex.split(ln) for ln in run_for(invoke, "docker", "--driver", "535.104.05").splitlines()]
    assert pull == ["docker", "pull", f"{REPO}:cuda-cu126"]
    assert run[:3] == ["docker", "run", "--rm"] and "--gpus=all" in run and run[-2:] == [f"{REPO}:cuda-cu126", "envbuild-probe"]


def test_for_podman_uses_cdi_names(invoke):
    lines = [shlex.split(ln) for ln in run_for(invoke, "podman", "--driver", "595.45.04").splitlines()]
    assert lines[0] == ["podman", "pull", f"docker://{REPO}:cuda"]
    run = lines[1]
    assert run[run.index("--device") + 1] == "nvidia.com/gpu=all" and "--gpus=all" not in run
    assert run[-2:] == [f"{REPO}:cuda", "envbuild-probe"]
    run = shlex.split(run_for(invoke, "podman", "--gpu", "gfx942").splitlines()[1])
    assert run[run.index("--device") + 1] == "amd.com/gpu=all" and "/dev/kfd" not in run
    assert ["--group-add", "video"] == run[run.index("--group-add"):run.index("--group-add") + 2]


def test_for_apptainer(invoke):
    pull, run = [shlex.split(ln) for ln in run_for(invoke, "apptainer", "--driver", "580.65.06").splitlines()]
    assert pull[:2] == ["apptainer", "pull"] and pull[-1] == f"docker://{REPO}:cuda-cu130"
    assert run[:3] == ["apptainer", "exec", "--nv"] and run[3] == pull[2] and run[-1] == "envbuild-probe"
    run = shlex.split(run_for(invoke, "apptainer", "--gpu", "MI300X").splitlines()[1])
    assert "--rocm" in run
    assert "--nv" not in shlex.split(run_for(invoke, "apptainer", "--backend", "cpu").splitlines()[1])


def test_for_enroot_takes_registry_hash_image():
    """An older pyxis cannot read an image index: enroot gets the described (else this) platform's own image."""
    from envbuild.host import pick as picking

    def srun(driver: str, gpu: str, platform: str | None = None) -> list[str]:
        answer = picking.pick(M, "auto", described=picking.describe(driver, (gpu,), platform))
        return shlex.split(answer.how_to_run("enroot"))

    words = srun("550.54.15", "A100")
    registry, _, path = REPO.partition("/")
    # cuda lists amd64 and arm64, published as an index: an older pyxis reads only the platform's own tag
    assert words[0] == "srun" and f"--container-image={registry}#{path}:cuda-cu126-amd64" in words and "--gpus=1" in words
    assert f"--container-image={registry}#{path}:cuda-cu126-arm64" in srun("550.54.15", "GH200", "linux/arm64")


def test_for_kubernetes_is_yaml_with_the_limit_and_a_non_root_context(invoke):
    pod = yaml.safe_load(run_for(invoke, "kubernetes", "--driver", "595.45.04", "--gpu", "H100"))
    c = pod["spec"]["containers"][0]
    assert pod["kind"] == "Pod" and c["image"] == f"{REPO}:cuda" and c["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert c["args"] == ["envbuild-probe"] and "command" not in c  # the image's entrypoint runs
    assert c["securityContext"]["runAsUser"] == 1000 and c["securityContext"]["runAsNonRoot"] is True
    pod = yaml.safe_load(run_for(invoke, "kubernetes", "--gpu", "gfx90a"))
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}
    pod = yaml.safe_load(run_for(invoke, "kubernetes", "--backend", "cpu"))
    assert "resources" not in pod["spec"]["containers"][0]


def test_for_a_manifest_digest_and_hostile_references_stay_one_word(invoke, tmp_path):
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"cuda": {"digest": digest, "repository": "reg.example:5000/a/b"}}}))
    words = shlex.split(run_for(invoke, "enroot", "--driver", "600.1.2", "--manifest", str(manifest)))
    assert f"--container-image=reg.example:5000#a/b@{digest}" in words
    # a manifest that records the platforms of an index: enroot gets the platform's own image
    child = "sha256:" + "cd" * 32
    manifest.write_text(json.dumps({"schema": 1, "images": {"cuda": {
        "digest": digest, "repository": "reg.example:5000/a/b", "platforms": {"linux/amd64": {"digest": child}}}}}))
    words = shlex.split(run_for(invoke, "enroot", "--driver", "600.1.2", "--manifest", str(manifest)))
    assert f"--container-image=reg.example:5000#a/b@{child}" in words
    for tool in ("docker", "podman", "apptainer"):
        lines = run_for(invoke, tool, "--driver", "600.1.2", "--manifest", str(manifest)).splitlines()
        assert any(w.endswith(f"reg.example:5000/a/b@{digest}") for w in shlex.split(lines[0]))


def test_a_device_a_tool_has_no_words_for_is_refused_by_name(invoke):
    result = pick(invoke, "--backend", "hpu", "--for", "kubernetes")
    assert result.exit_code == 2 and "envbuild knows no Kubernetes way to hand Intel Gaudi to a container" in result.stderr


def test_the_product_table_maps_to_known_architectures():
    for product, arch in stacks.gpu_products().items():
        assert stacks.gpu_arch(product) == arch and stacks.arch_title(arch) != arch, product


def test_the_declared_architectures_keep_to_each_cuda_releases_limits():
    """CUDA 13 carries nothing older than Turing; a build before CUDA 12.8 no Blackwell: the matrix's own lists, and
    validation refuses a list that claims otherwise."""
    from envbuild.core.errors import MatrixError

    for b in M.family(M.backend("cuda")):
        major_minor = tuple(int(x) for x in b.host.version.split("."))
        for arch in (*b.host.arch, *b.host.arch_arm64):
            cc = int(arch.split("_")[1])
            assert not (major_minor >= (13, 0) and cc < 75), (b.name, arch)
            assert not (major_minor < (12, 8) and cc >= 100), (b.name, arch)
    for override, says in [("backends.cuda.host.arch=[sm_70, sm_80]", "sm_70: CUDA 13.2 builds for sm_75 and newer only"),
                           ("backends.cuda-cu126.host.arch=[sm_90, sm_120]", "sm_120: CUDA 12.8 is the first release")]:
        with pytest.raises(MatrixError, match=says):
            load(MATRIX, [override])


def test_an_arm64_host_is_judged_by_the_arm64_build_s_list(invoke):
    """Jetson Thor's sm_110 is in CUDA 13's linux/arm64 build only (PyTorch builds sm_110 there)."""
    result = pick(invoke, "--driver", "595.45.04", "--gpu", "sm_110", "--arch", "arm64")
    assert result.exit_code == 0 and result.stdout.strip() == f"{REPO}:cuda", result.output
    result = pick(invoke, "--driver", "595.45.04", "--gpu", "sm_110")  # amd64's lists have no sm_110 (PTX 12.0 > 11.0)
    assert result.exit_code == 1 and "No variant carries sm_110 (Blackwell (Thor))" in result.stderr
    assert pick(invoke, "--arch", "arm64").exit_code == 2


def test_the_runtimes_are_named_once_and_each_has_its_way_and_its_choice():
    from envbuild.cli import app
    from envbuild.engine import runspec
    from envbuild.host import launch

    assert tuple(launch.TOOLS) == runspec.RUNTIMES and all(f.__name__ == n for n, f in launch.TOOLS.items())
    tool = next(p for p in app.every_command()["pick"].params if p.name == "tool")
    assert tuple(tool.type.choices) == runspec.RUNTIMES
# --- what `--json` says and how --driver/--gpu are read (mutation testing found these untested) ----------------


def test_json_says_the_host_source_the_upgrade_and_the_warnings(invoke, tmp_path):
    from support.hosts import VENDORS, make_root

    described = json.loads(pick(invoke, "--driver", "595.45.04", "--gpu", "H100", "--json").stdout)
    assert described["host"]["source"] == "described (--driver/--gpu)" and described["host"]["driver"] == "nvidia"
    assert described["warnings"] == [] and described["upgrade"] is None and described["refusal"] is None
    assert described["minor_version_note"] is None and described["family"] == "cuda"
    # a refusal: the upgrade names the driver, the variant it gives and how it runs there
    refused = json.loads(pick(invoke, "--driver", "470.82.01", "--gpu", "A100", "--json").stdout)
    assert refused["upgrade"] == {"driver": "525.60.13", "backend": "cuda-cu126", "mode": "minor-version"}
    assert refused["mode"] is None and refused["backend"] is None and refused["warnings"] == []
    refused = json.loads(pick(invoke, "--driver", "535.104.05", "--gpu", "B200", "--json").stdout)
    assert refused["upgrade"] == {"driver": "580.65.06", "backend": "cuda-cu130", "mode": "native"}
    # a host read under --root: its source is "read"; a driver it cannot tell is a warning in the JSON too
    root = make_root(tmp_path, *VENDORS["cuda"])
    read = invoke("pick", "--matrix", MATRIX, "--root", root, "--backend", "cuda", "--json")
    doc = json.loads(read.stdout)
    # (this machine's nvidia-smi says sm_70: only 12.6 carries Volta)
    assert read.exit_code == 0 and doc["host"]["source"] == "read" and doc["backend"] == "cuda-cu126"
    assert len(doc["warnings"]) == 1 and "cannot tell the host's NVIDIA driver version" in doc["warnings"][0]


def test_a_backend_without_variants_says_so_in_json(invoke, tmp_path):
    from support.hosts import make_root

    doc = json.loads(invoke("pick", "--matrix", MATRIX, "--root", make_root(tmp_path), "--backend", "cpu", "--json").stdout)
    assert (doc["backend"], doc["image"], doc["ok"], doc["mode"]) == ("cpu", f"{REPO}:cpu", True, None)
    assert doc["why"] == "cpu (no variants)" and doc["host"] == {"source": "read"}
    assert doc["gpus"] == [] and doc["variants"] == [] and doc["upgrade"] is None and doc["warnings"] == []


@pytest.mark.parametrize("said", ["A100,H100", "A100, H100", "sm_80,,9.0", " A100 ,H100,"])
def test_a_comma_separated_gpu_is_one_gpu_each(invoke, said):
    doc = json.loads(pick(invoke, "--driver", "595.45.04", "--gpu", said, "--json").stdout)
    assert doc["host"]["archs"] == ["sm_80", "sm_90"] and [g["arch"] for g in doc["gpus"]] == ["sm_80", "sm_90"]
    result = pick(invoke, "--driver", "595.45.04", "--gpu", "A100,P100X")
    assert result.exit_code == 2 and "--gpu P100X: not a GPU envbuild knows" in result.stderr
    assert "or one of: A10, A100, A10G, A30, A40, B200" in result.stderr  # every known product, sorted


def test_describe_reads_driver_and_gpus():
    from envbuild.core.errors import InvalidInput
    from envbuild.host import pick as picking

    assert picking.describe(None, ()) is None
    d = picking.describe(" 535.104.05 ", ("A100", "8.6"), "linux/arm64")
    assert (d.driver, d.archs, d.platform, d.stack) == ("535.104.05", ("sm_80", "sm_86"), "linux/arm64", "cuda")
    assert d.to_json() == {"driver": "535.104.05", "gpus": ["sm_80", "sm_86"], "platform": "linux/arm64"}
    host = d.host("nvidia")
    assert (host.driver, host.version, host.archs, host.evidence, host.notes) == (
        "nvidia", "535.104.05", ["sm_80", "sm_86"], ["--driver", "--gpu"], [])
    gpu_only = picking.describe(None, ("MI300X",))
    assert gpu_only.stack == "rocm" and gpu_only.host("amdgpu").notes == ["no --driver given"]
    assert gpu_only.host("amdgpu").evidence == ["--gpu"] and gpu_only.host("amdgpu").version is None
    driver_only = picking.describe("580.65.06", ())
    assert driver_only.stack == "cuda" and driver_only.host("nvidia").archs is None
    assert driver_only.host("nvidia").evidence == ["--driver"]
    assert picking.Described(None, ()).stack is None
    assert picking.Described(None, ()).to_json() == {"driver": None, "gpus": [], "platform": None}
    assert picking.describe(None, ("A100",)).platform is None
    assert len({d, picking.describe("535.104.05", ("A100", "8.6"), "linux/arm64")}) == 1  # a value: frozen, hashable
    for ok in ("1.2", "1234.5678", "1.2.3.4"):
        assert picking.describe(ok, ()).driver == ok
    for bad in ("1", "12345.1", "1.2.3.4.5", "1.23456", "a.b"):
        with pytest.raises(InvalidInput, match="not a driver version"):
            picking.describe(bad, ())
    with pytest.raises(InvalidInput, match="NVIDIA and AMD GPUs together"):
        picking.describe(None, ("A100,MI300X",)).stack


def test_resolve_without_variants_and_a_described_host():
    from envbuild.host import pick as picking

    cpu = picking.resolve(M, M.backend("cpu"))
    assert (cpu.backend.name, cpu.why, cpu.choice, cpu.mode, cpu.note, cpu.warnings) == ("cpu", "cpu (no variants)",
                                                                                        None, None, None, ())
    assert cpu.to_json(f"{REPO}:cpu")["image"] == f"{REPO}:cpu"
    d = picking.describe("535.104.05", ("A100",))
    got = picking.resolve(M, M.backend("cuda"), described=d)
    assert got.backend.name == "cuda-cu126" and got.mode == "minor-version" and got.note
    assert got.to_json("x")["host"]["source"].startswith("described") and got.described is d
    by_hand = picking.resolve(M, M.backend("cuda"), variant_text="12.6", described=d)
    assert by_hand.backend.name == "cuda-cu126" and by_hand.why.startswith("cuda-cu126, as asked (")
    assert picking.resolve(M, M.backend("cuda-cu126"), described=d).why.startswith("cuda-cu126, as asked")
    unknown = picking.resolve(M, M.backend("cuda-cu126"), described=picking.describe(None, ("A100",)))
    assert len(unknown.warnings) == 1 and unknown.to_json("x")["warnings"] == list(unknown.warnings)
    assert "driver" in unknown.warnings[0]


def test_the_single_platform_reference_of_a_one_platform_backend_is_its_tag(invoke, tmp_path):
    from envbuild.host import pick as picking

    rocm = M.backend("rocm")
    assert list(rocm.platforms) == ["linux/amd64"]
    assert picking.single_platform_ref(M, rocm, "amd64") == M.tags(rocm)[0] == f"{REPO}:rocm"
    assert picking.single_platform_ref(M, M.backend("cuda"), "arm64") == f"{REPO}:cuda-arm64"
    words = shlex.split(run_for(invoke, "enroot", "--gpu", "gfx942"))
    registry, _, path = REPO.partition("/")
    assert f"--container-image={registry}#{path}:rocm" in words  # one platform: no -amd64 tag exists
    # a manifest without the platform's record: the index's digest
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"rocm": {"digest": digest}}}))
    assert picking.single_platform_ref(M, rocm, "amd64", manifest) == f"{REPO}@{digest}"
    assert picking.image_ref(M, rocm) == f"{REPO}:rocm" and picking.image_ref(M, rocm, manifest) == f"{REPO}@{digest}"


def test_choice_json_without_a_choice():
    from envbuild.host import pick as picking

    assert picking.choice_json("cuda", None) == {
        "backend": None, "family": "cuda", "image": None, "ok": True, "mode": None, "minor_version_note": None,
        "host": {"source": "read"}, "gpus": [], "variants": [], "refusal": None, "upgrade": None, "warnings": []}
    said = picking.choice_json("rocm", None, described=picking.describe(None, ("gfx942",)), refusal="no")
    assert (said["ok"], said["refusal"], said["host"], said["mode"]) == (False, "no", {"source": "described (--driver/--gpu)"}, None)
