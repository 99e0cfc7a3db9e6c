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
