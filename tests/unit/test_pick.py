"""`envbuild pick` and the variant choice of pull, run, smoke and build, on fake hosts at every boundary: a driver
exactly at each CUDA variant's minimum and just below it, R535 and R550, an unknown driver, AMD gfx targets, Ascend
SoC families and an arm64 GH200-like host. The repo's matrix: the variants people get."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.constants import MATRIX
from support.hosts import VENDORS, add_driver, kfd_nodes, make_root, nvidia_version, own_path

from envbuild.matrix import load, stacks

M = load(MATRIX)
CUDA = M.family(M.backend("cuda"))  # newest first: cuda (13.2), cuda-cu130, cuda-cu126
MINIMUMS = [(b.name, stacks.needs(b).min_driver) for b in CUDA]


@pytest.fixture(autouse=True)
def this_machine(tmp_path, monkeypatch) -> Path:
    return own_path(tmp_path, monkeypatch)


def nvidia_host(tmp_path: Path, driver: str | None, caps: str | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    root = make_root(tmp_path, *VENDORS["cuda"])
    if driver:
        add_driver(root, nvidia_version(driver))
    if caps:  # nvidia-smi's compute_cap, one line per GPU
        exe = Path(os.environ["PATH"].split(os.pathsep)[0]) / "nvidia-smi"
        exe.write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(f"'{c}'" for c in caps.split()) + "\n")
        exe.chmod(0o755)
    return root


def pick(invoke, root: Path, *args: str):
    return invoke("pick", "--root", root, "--matrix", MATRIX, *args)


def below(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:-1] + [f"{int(parts[-1]) - 1:0{len(parts[-1])}d}"])


def test_the_matrix_ships_three_cuda_and_two_rocm_variants_with_distinct_minimums(invoke):
    assert [name for name, _ in MINIMUMS] == ["cuda", "cuda-cu130", "cuda-cu126"]
    assert [m for _, m in MINIMUMS] == ["595.45.04", "580.65.06", "560.28.03"]
    assert [b.name for b in M.family(M.backend("rocm"))] == ["rocm", "rocm-10-0"]
    assert [b.name for b in M.family(M.backend("npu"))] == ["npu", "npu-a3", "npu-310p"]
    shown = json.loads(invoke("show", "cuda", "--json", "--matrix", MATRIX).stdout)
    assert [(v["backend"], v["min_driver"]) for v in shown["variants"]] == MINIMUMS
    assert shown["tags"][0].endswith(":cuda") and shown["tags"][-1].endswith(":cuda13.2")
    assert M.tags(M.backend("cuda-cu126"))[-1].endswith(":cuda12.6")
    assert M.tags(M.backend("rocm-10-0"))[-1].endswith(":rocm10.0")


@pytest.mark.parametrize("at", range(3))
def test_a_driver_at_a_native_minimum_gets_that_variant_and_just_below_the_next(invoke, tmp_path, at):
    """Just below a variant's own minimum: the next older one natively, or (below 12.6's) 12.6 under minor version
    compatibility, said on stderr with what it gives up."""
    name, minimum = MINIMUMS[at]
    result = pick(invoke, nvidia_host(tmp_path / "at", minimum), "--backend", "cuda")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{M.image.repository}:{name}"
    assert "note:" not in result.stderr
    result = pick(invoke, nvidia_host(tmp_path / "below", below(minimum)), "--backend", "cuda")
    assert result.exit_code == 0, result.output
    if at + 1 < len(MINIMUMS):
        assert result.stdout.strip() == f"{M.image.repository}:{MINIMUMS[at + 1][0]}"
        assert "\n  passed over " in result.stderr and "note:" not in result.stderr
    else:
        assert result.stdout.strip() == f"{M.image.repository}:cuda-cu126"
        notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note: ")]
        assert len(notes) == 1 and "under CUDA minor version compatibility" in notes[0]
        assert "no JIT of PTX newer than the driver" in notes[0]


@pytest.mark.parametrize("driver, up_to", [("535.104.05", "12.2"), ("550.54.14", "12.4")])
def test_r535_and_r550_get_cuda_12_under_minor_version_compatibility(invoke, tmp_path, driver, up_to):
    for backend in ("cuda", "auto", "nvidia"):
        result = pick(invoke, nvidia_host(tmp_path / backend, driver), "--backend", backend)
        assert result.exit_code == 0 and result.stdout.strip() == f"{M.image.repository}:cuda-cu126", result.output
        assert f"note: cuda-cu126 (CUDA 12.6) runs on driver {driver} (native up to CUDA {up_to}) under CUDA minor " \
               "version compatibility" in result.stderr


@pytest.mark.parametrize("driver", ["470.82.01", "515.105.01", "525.60.12"])
def test_below_every_floor_is_refused_naming_the_lowest_driver_and_what_is_left(invoke, tmp_path, driver):
    for backend in ("cuda", "auto"):
        result = pick(invoke, nvidia_host(tmp_path / backend, driver), "--backend", backend)
        assert result.exit_code == 1 and result.stdout == ""
        assert f"its NVIDIA driver is {driver}" in result.stderr
        assert "Upgrade the NVIDIA driver to 525.60.13 or later: cuda-cu126 (CUDA 12.6) runs there under minor " \
               "version compatibility" in result.stderr
        assert "the CPU image (`envbuild pick --backend cpu`), or a matrix variant of your own with an older CUDA" \
               in result.stderr


def test_doctor_and_pick_name_the_same_lowest_driver(invoke, tmp_path):
    from envbuild.core.checks import Check
    from envbuild.host import doctor
    from support.fakes import FakeEngine

    for driver in ("470.82.01", "535.104.05"):
        root = nvidia_host(tmp_path / driver, driver)
        picked = pick(invoke, root, "--backend", "cuda", "--json")
        rep = doctor.diagnose(M, M.backend("cuda"), root=root, connector=lambda: (
            FakeEngine(["runc", "nvidia"], root=tmp_path), Check("docker daemon", True, "fake")))
        c = next(c for c in rep.checks if c.name == "host driver")
        doc = json.loads(picked.stdout)
        if doc["ok"]:
            assert c.ok and f"`envbuild pick` gives {doc['backend']} under minor version" in c.detail
        else:
            assert doc["upgrade"]["driver"] == "525.60.13" and "525.60.13 or later" in c.fix and not c.ok


def test_auto_on_an_nvidia_host_picks_from_the_cuda_family(invoke, tmp_path):
    result = pick(invoke, nvidia_host(tmp_path, "580.95.05"), "--json")
    doc = json.loads(result.stdout)
    assert (doc["backend"], doc["family"]) == ("cuda-cu130", "cuda") and doc["image"].endswith(":cuda-cu130")
    assert doc["detected"].startswith("detected NVIDIA GPU") and doc["mode"] == "native"
    # 13.2 would run under minor version compatibility; 13.0 runs natively and is preferred
    assert [(v["backend"], v["fits"], v["mode"]) for v in doc["variants"]] == [
        ("cuda", True, "minor-version"), ("cuda-cu130", True, "native"), ("cuda-cu126", True, "native")]


def test_gpus_older_than_turing_get_cuda_12(invoke, tmp_path):
    """CUDA 13 builds for sm_75 and newer: a Volta (sm_70) host on a new driver gets the CUDA 12.6 image."""
    result = pick(invoke, nvidia_host(tmp_path, "610.43.02", caps="7.0 7.0"), "--backend", "cuda")
    assert result.exit_code == 0 and result.stdout.strip().endswith(":cuda-cu126")
    assert "passed over cuda: this host's devices are sm_70 (Volta); the image's torch was built for sm_75" in result.stderr


def test_an_arm64_gh200_like_host(invoke, tmp_path):
    """Grace Hopper: arm64, one sm_90 GPU, an R580 driver: the CUDA 13.0 image, which is built for linux/arm64."""
    root = nvidia_host(tmp_path, "580.65.06", caps="9.0")
    doc = json.loads(pick(invoke, root, "--backend", "cuda", "--json").stdout)
    assert doc["backend"] == "cuda-cu130" and "devices sm_90 are among the image's" in doc["why"]
    assert "linux/arm64" in M.backend("cuda-cu130").platforms


def test_an_unknown_driver_is_a_warning_and_the_newest(invoke, tmp_path):
    result = pick(invoke, nvidia_host(tmp_path, None), "--backend", "cuda")
    assert result.exit_code == 0 and result.stdout.strip().endswith(":cuda")
    assert result.stderr.startswith("warning: cuda: ") and "cannot tell the host's NVIDIA driver version" in result.stderr


@pytest.mark.parametrize("gfx, fits", [(90402, True), (90010, True), (110000, True), (80003, False)])
def test_rocm_by_gfx_target(invoke, tmp_path, gfx, fits):
    root = add_driver(make_root(tmp_path, *VENDORS["rocm"]), {**kfd_nodes(gfx), "/sys/module/amdgpu/version": "6.16.6\n"})
    result = pick(invoke, root, "--backend", "amd")
    if fits:
        assert result.exit_code == 0 and result.stdout.strip().endswith(":rocm"), result.output
    else:
        assert result.exit_code == 1 and "this host's devices are gfx803" in result.stderr


@pytest.mark.parametrize("device, name", [("0xd802", "npu"), ("0xd803", "npu-a3"), ("0xd500", "npu-310p"), ("0xd100", None)])
def test_ascend_by_soc_family(invoke, tmp_path, device, name):
    root = make_root(tmp_path, *VENDORS["npu"])
    (root / "sys/bus/pci/devices/0000:c1:00.0/device").write_text(device + "\n")
    result = pick(invoke, root, "--backend", "ascend")
    if name:
        assert result.exit_code == 0 and result.stdout.strip() == f"{M.image.repository}:{name}", result.output
    else:  # an SoC envbuild ships no image for (Ascend 310): unknown, so the newest, with a warning
        assert result.exit_code == 0 and result.stdout.strip().endswith(":npu") and result.stderr.startswith("warning:")


@pytest.mark.parametrize("said", ["cu126", "12.6", "cuda12.6", "cuda-cu126", "CU126"])
def test_variant_by_hand(invoke, tmp_path, said):
    result = pick(invoke, nvidia_host(tmp_path, "610.43.02"), "--backend", "cuda", "--variant", said)
    assert result.exit_code == 0 and result.stdout.strip().endswith(":cuda-cu126"), result.output


def test_a_variant_by_hand_that_this_host_cannot_run_is_refused(invoke, tmp_path):
    root = nvidia_host(tmp_path, "570.86.10")
    for args in (["--backend", "cuda-cu130"], ["--backend", "cuda", "--variant", "13.0"]):
        result = pick(invoke, root, *args)
        assert result.exit_code == 1 and "needs driver >= 580.65.06" in result.stderr
        assert "upgrade the NVIDIA driver to 580.65.06 or later" in result.stderr
    result = pick(invoke, root, "--backend", "cuda", "--variant", "11.8")
    assert result.exit_code == 2 and "cuda has no such variant; it has cuda (cuda13.2), cuda-cu130" in result.stderr


def test_by_digest_with_a_manifest(invoke, tmp_path):
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"cuda-cu130": {"digest": digest, "repository": "reg.example/eb"}}}))
    root = nvidia_host(tmp_path, "580.65.06")
    result = pick(invoke, root, "--backend", "cuda", "--manifest", manifest)
    assert result.exit_code == 0 and result.stdout.strip() == f"reg.example/eb@{digest}"
    result = pick(invoke, nvidia_host(tmp_path / "new", "600.1.2"), "--backend", "cuda", "--manifest", manifest)
    assert result.exit_code == 2 and "has no image for cuda (never published there" in result.stderr


def test_a_backend_without_variants_and_the_cpu_fallback(invoke, tmp_path):
    empty = make_root(tmp_path)
    result = pick(invoke, empty)
    assert result.exit_code == 0 and result.stdout.strip().endswith(":cpu") and "no accelerator detected" in result.stderr
    assert pick(invoke, empty, "--backend", "xpu").stdout.strip().endswith(":xpu")
    assert pick(invoke, empty, "--backend", "mps").exit_code == 2  # no container reaches Apple Silicon


def test_build_pull_run_and_smoke_choose_the_same_way_and_say_so(invoke, tmp_path, monkeypatch):
    """Without a driver on this machine: the newest, said on stderr; --variant chooses by hand; `all` is every cell."""
    result = invoke("run", "--dry-run", "--backend", "cuda", "--matrix", MATRIX, "--", "true")
    assert "cuda: chose cuda (cuda, the newest variant" in result.stderr and f"{M.image.repository}:cuda " in result.stdout
    result = invoke("run", "--dry-run", "--backend", "cuda", "--variant", "cu126", "--matrix", MATRIX, "--", "true")
    assert f"{M.image.repository}:cuda-cu126 " in result.stdout and "chose" not in result.stderr
    result = invoke("build", "--backend", "all", "--variant", "12.6", "--matrix", MATRIX)
    assert result.exit_code == 2 and "--variant chooses within one backend" in result.stderr


def test_run_chooses_as_pick_does_and_says_the_same_note(invoke, monkeypatch):
    """An R535 host: `run --backend cuda` takes cuda-cu126 under minor version compatibility, with pick's note line."""
    from envbuild.core.hostfacts import HostDriver
    from envbuild.matrix import compat

    monkeypatch.setattr(compat, "host_driver", lambda *a, **k: HostDriver("nvidia", "535.104.05", ["sm_80"]))
    result = invoke("run", "--dry-run", "--backend", "cuda", "--matrix", MATRIX, "--", "true")
    assert result.exit_code == 0, result.output
    assert f"{M.image.repository}:cuda-cu126 " in result.stdout
    assert "cuda: chose cuda-cu126 (cuda-cu126 is the newest variant this host runs under minor version" in result.stderr
    assert "note: cuda-cu126 (CUDA 12.6) runs on driver 535.104.05 (native up to CUDA 12.2) under CUDA minor" in result.stderr


# --- the choice policy itself (host/pick.py), called as the library, not through click ---------------------------

def test_names_are_repeatable_comma_separated_and_auto_all_in_any_case():
    from envbuild.host import pick as picking

    assert picking.names(("cpu, ROCm", "AUTO", " all ", ",")) == ["cpu", "ROCm", "auto", "all"]
    assert picking.names(()) == []


def test_auto_reads_the_root_it_is_given_and_never_asks_the_engine_for_it(tmp_path, monkeypatch):
    from envbuild.host import detect, pick as picking

    monkeypatch.setattr(detect, "docker_runtimes_from_engine", lambda: pytest.fail("--root asked the engine"))
    name, reason = picking.auto(M, root=nvidia_host(tmp_path / "gpu", "580.95.05"))
    assert name == "cuda-cu130" and reason.startswith("detected NVIDIA GPU")
    assert picking.auto(M, root=make_root(tmp_path)) == ("cpu", "no accelerator detected")


def test_auto_asks_the_engine_for_runtimes_on_this_host_unless_native(monkeypatch):
    """One path for every command: this host with the engine's runtimes (run, smoke, pull, build), or without
    asking any engine (env, doctor: `native`, no container)."""
    from envbuild.host import detect, pick as picking

    asked = []
    monkeypatch.setattr(detect, "docker_runtimes_from_engine", lambda: asked.append(1) or {"runc"})
    contained, native = picking.auto(M), picking.auto(M, native=True)
    assert asked == [1] and contained[0] and native[0]


def test_choose_all_every_cell_and_refuses_a_variant_with_it():
    from envbuild.core.errors import InvalidInput
    from envbuild.host import pick as picking

    assert [b.name for b in picking.choose(M, ("all",))] == [b.name for b in M.select(["all"])]
    with pytest.raises(InvalidInput, match="--variant chooses within one backend"):
        picking.choose(M, ("all",), "12.6")
    with pytest.raises(InvalidInput, match="say which backend"):
        picking.choose(M, (" ",))


def test_choose_for_this_host_takes_the_newest_variant_it_runs_and_says_so(monkeypatch):
    from envbuild.core.hostfacts import HostDriver
    from envbuild.host import pick as picking
    from envbuild.matrix import compat

    monkeypatch.setattr(compat, "host_driver", lambda *a, **k: HostDriver("nvidia", "535.104.05", ["sm_80"]))
    said: list[str] = []
    assert [b.name for b in picking.choose(M, ("cuda", "cpu,cuda"), for_host=True, echo=said.append)] == [
        "cuda-cu126", "cpu"]
    assert said[0].startswith("cuda: chose cuda-cu126 (") and said[0].endswith("; --variant chooses another")
    assert said[1].startswith("note: cuda-cu126 (CUDA 12.6) runs on driver 535.104.05")
    said.clear()  # not for this host: the name is that cell; --variant chooses by hand, silently
    assert [b.name for b in picking.choose(M, ("cuda",), echo=said.append)] == ["cuda"]
    assert [b.name for b in picking.choose(M, ("cuda",), "cu126", for_host=True, echo=said.append)] == ["cuda-cu126"]
    assert said == []


def test_choose_auto_says_what_it_chose(monkeypatch):
    from envbuild.host import pick as picking

    monkeypatch.setattr(picking, "auto", lambda m, **kw: ("cpu", "no accelerator detected"))
    said: list[str] = []
    assert [b.name for b in picking.choose(M, ("auto",), for_host=True, echo=said.append)] == ["cpu"]
    assert said == ["auto: chose cpu (no accelerator detected)"]


def test_variant_fits_lists_every_family_s_variants_with_the_one_chosen(tmp_path):
    from envbuild.host import pick as picking

    fits = picking.variant_fits(M, nvidia_host(tmp_path, "580.95.05"))
    cuda = [(f["backend"], f["fits"], f["chosen"]) for f in fits if f["family"] == "cuda"]
    assert cuda == [("cuda", True, False), ("cuda-cu130", True, True), ("cuda-cu126", True, False)]
    assert {f["family"] for f in fits} >= {"cuda", "rocm", "npu"}


def test_the_metadata_check_names_each_pin_the_cache_lacks(tmp_path):
    import shutil

    from envbuild.matrix import metadata_check

    shutil.copy(MATRIX, tmp_path / "matrix.yaml")
    assert metadata_check.check(M, tmp_path / "matrix.yaml").cache_path is None
    shutil.copy(Path(MATRIX).with_name("matrix.metadata.json"), tmp_path / "matrix.metadata.json")
    whole = metadata_check.check(M, tmp_path / "matrix.yaml")
    assert whole.ok and whole.lacking == [] and whole.cache_path == str(tmp_path / "matrix.metadata.json")
    doc = json.loads((tmp_path / "matrix.metadata.json").read_text())
    doc["distributions"].pop("transformers")
    (tmp_path / "matrix.metadata.json").write_text(json.dumps(doc))
    lacking = metadata_check.check(M, tmp_path / "matrix.yaml")
    assert not lacking.ok and any(line.startswith("transformers ") for line in lacking.lacking)


def test_absent_warns_of_a_gpu_this_host_lacks_and_only_then(tmp_path):
    from envbuild.host import pick as picking

    empty = make_root(tmp_path)
    said = picking.absent(M, M.backend("cuda"), empty)
    assert said.startswith("this host has no ") and said.endswith("say --driver VERSION --gpu ARCH")
    assert picking.absent(M, M.backend("cpu"), empty) is None
    assert picking.absent(M, M.backend("cuda-cu126"), nvidia_host(tmp_path / "gpu", "580.95.05")) is None


def test_a_refusal_on_auto_says_what_was_detected_for_pick_json(tmp_path):
    from envbuild.core.errors import NoVariantFitsError
    from envbuild.host import pick as picking

    with pytest.raises(NoVariantFitsError) as refused:  # auto finds the GPU; the variant asked for needs more
        picking.pick(M, "auto", variant_text="13.2", root=nvidia_host(tmp_path, "535.104.05"))
    assert refused.value.data["ok"] is False and refused.value.data["detected"].startswith("detected NVIDIA GPU")


def test_pick_says_the_evidence_for_a_backend_without_variants_and_the_note_under_minor_version(tmp_path):
    from envbuild.host import pick as picking

    cpu = picking.pick(M, "auto", root=make_root(tmp_path))
    assert cpu.lines() == ["cpu: no accelerator detected"] and cpu.to_json()["detected"] == "no accelerator detected"
    minor = picking.pick(M, "cuda", root=nvidia_host(tmp_path / "r535", "535.104.05"))
    assert minor.lines()[-1] == f"note: {minor.picked.note}" and minor.picked.backend.name == "cuda-cu126"


# --- hostile input (issue 51): digits of other scripts, a manifest brought by a pull request ----------------------

@pytest.mark.parametrize("driver", ["٥٧٠.١٢٤.٠٦", "５７０.１２４.０６", "580.６５.06", "580.65.0\u0666"])
def test_a_driver_in_other_scripts_digits_is_refused_not_read_as_another_number(invoke, driver):
    """Python's \\d and int() take Arabic-Indic and fullwidth digits; no driver prints them."""
    result = invoke("pick", "--driver", driver, "--gpu", "A100", "--matrix", MATRIX)
    assert result.exit_code == 2 and "not a driver version" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("gpu", ["٨.٠", "８.０", "sm_８０", "compute_٩٠", "gfx９４２"])
def test_a_compute_capability_in_other_scripts_digits_is_refused(invoke, gpu):
    result = invoke("pick", "--driver", "580.65.06", "--gpu", gpu, "--matrix", MATRIX)
    assert result.exit_code == 2 and "not a GPU envbuild knows" in result.stderr and result.stdout == ""


def test_a_long_driver_or_gpu_is_quoted_capped(invoke):
    result = invoke("pick", "--driver", "5" * 10_000, "--gpu", "A100", "--matrix", MATRIX)
    assert result.exit_code == 2 and "more characters" in result.stderr and len(result.stderr) < 2000
    result = invoke("pick", "--driver", "580.65.06", "--gpu", "x" * 10_000, "--matrix", MATRIX)
    assert result.exit_code == 2 and "more characters" in result.stderr and len(result.stderr) < 3000


@pytest.mark.parametrize("repository", ["reg.example/eb\n", "reg.example/eb\nrm -rf ~", "reg.example/$(id)", "reg.example/`id`",
                                        "reg.example/e'b", 'reg.example/e"b', "reg.example/e b", " reg.example/eb",
                                        "reg.example/eb/", "reg.example/EB", "reg.example", "reg.example/eb:tag", ""])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_manifest_repository_that_is_no_image_repository_is_refused_naming_file_and_field(invoke, tmp_path, repository,
                                                                                          as_json):
    """A manifest may come with a pull request: what pick prints for scripts is an image reference or nothing."""
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"cuda-cu130": {"digest": digest, "repository": repository}}}))
    result = pick(invoke, nvidia_host(tmp_path, "580.65.06"), "--backend", "cuda", "--manifest", manifest,
                  *(["--json"] if as_json else []))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert f"manifest {manifest}: images.cuda-cu130.repository" in result.stderr
    assert "is not an image repository" in result.stderr and "\n" not in result.stderr.strip()


def test_a_manifest_repository_is_checked_for_enroots_single_platform_reference_too(invoke, tmp_path):
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"cpu": {
        "digest": digest, "repository": "reg.example/$(id)", "platforms": {"linux/amd64": {"digest": digest}}}}}))
    result = invoke("pick", "--backend", "cpu", "--manifest", manifest, "--for", "enroot", "--matrix", MATRIX)
    assert result.exit_code == 2 and "images.cpu.repository" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("repository", ["ghcr.io/org/sk-learn-torch-images", "ghcr.io/org/hf_abcdefghijklmnopqrstuv",
                                        "ghcr.io/npm_abcdefghijklmnopqrstuvwxyz0123/torch"])
def test_a_repository_shaped_like_a_token_is_printed_as_it_is(invoke, tmp_path, repository):
    """What pick prints is built from the matrix and the manifest (no secret there), so the output layer's guess at
    token shapes never scrubs it: ghcr.io/org/*** would be a wrong image, in a pod spec too."""
    over = ("--set", f"image.repository={repository}")
    result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, *over)
    assert result.exit_code == 0 and result.stdout == f"{repository}:cpu\n"
    result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, "--json", *over)
    assert json.loads(result.stdout)["image"] == f"{repository}:cpu"
    result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, "--for", "kubernetes", *over)
    assert f"image: {repository}:cpu" in result.stdout and "***" not in result.stdout
    for tool in ("docker", "podman", "apptainer", "enroot"):
        result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, "--for", tool, *over)
        assert result.exit_code == 0 and "***" not in result.stdout, result.stdout
    digest = "sha256:" + "ab" * 32
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema": 1, "images": {"cpu": {"digest": digest, "repository": repository}}}))
    result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, "--manifest", manifest)
    assert result.exit_code == 0 and result.stdout == f"{repository}@{digest}\n"


def test_pick_still_masks_a_secret_this_process_knows(invoke, monkeypatch):
    """Only the guess by shape is off for stdout's data: a value the environment holds under a secret's name is
    still masked wherever it would appear."""
    monkeypatch.setenv("MY_REGISTRY_TOKEN", "sk-learn-torch-images")
    result = invoke("pick", "--backend", "cpu", "--matrix", MATRIX, "--set", "image.repository=ghcr.io/org/sk-learn-torch-images")
    assert result.stdout == "ghcr.io/org/***:cpu\n"


@pytest.mark.parametrize("gpu", ["", ",", " , ,"])
def test_a_gpu_option_that_names_no_gpu_is_refused(invoke, gpu):
    result = invoke("pick", "--gpu", gpu, "--matrix", MATRIX)
    assert result.exit_code == 2 and "names no GPU" in result.stderr and "None" not in result.stderr


def test_pick_says_its_choice_in_a_short_first_line_naming_the_variant_once(invoke):
    """The reasons follow, one a line: the host, then each variant passed over; the JSON keeps the one sentence."""
    result = invoke("pick", "--backend", "cuda", "--driver", "535.104.05", "--gpu", "A100", "--matrix", MATRIX)
    assert result.exit_code == 0, result.output
    first, host, *passed = [ln for ln in result.stderr.splitlines() if not ln.startswith("note: ")]
    assert first == "cuda-cu126: the newest variant this host runs, under minor version compatibility"
    assert host.startswith("  host NVIDIA driver 535.104.05 (--driver, --gpu); CUDA 12.6 runs")
    assert passed == ["  passed over cuda: this image needs driver >= 580.65.06 for CUDA 13.2 (595.45.04 runs it natively)",
                      "  passed over cuda-cu130: this image needs driver >= 580.65.06 for CUDA 13.0"]
    assert all(line.count("cuda-cu126") <= 1 for line in (first, host, *passed))
    doc = json.loads(invoke("pick", "--backend", "cuda", "--driver", "535.104.05", "--gpu", "A100", "--json",
                            "--matrix", MATRIX).stdout)
    assert doc["why"].startswith("cuda-cu126 is the newest variant this host runs under minor version compatibility (")


def test_choose_for_this_host_says_nothing_of_a_backend_without_variants():
    from envbuild.host import pick as picking

    said = []
    assert [b.name for b in picking.choose(M, ["cpu"], for_host=True, echo=said.append)] == ["cpu"] and said == []


def test_variant_fits_lists_only_families_with_variants(tmp_path):
    from envbuild.host import pick as picking

    fits = picking.variant_fits(M, nvidia_host(tmp_path, "580.95.05"))
    families = {b.name for b in M.backends if not b.variant_of and len(M.family(b)) > 1 and b.containerizable}
    assert {f["family"] for f in fits} == families and "cpu" not in families


def test_choose_for_this_host_names_the_variants_when_none_fits(monkeypatch):
    from envbuild.core.errors import NoVariantFitsError
    from envbuild.host import pick as picking

    def refuse(m, b, **kw):
        raise NoVariantFitsError("no variant runs here", {})

    monkeypatch.setattr(picking, "resolve", refuse)
    with pytest.raises(NoVariantFitsError) as caught:
        picking.choose(M, ["cuda"], for_host=True)
    assert str(caught.value) == "no variant runs here (--variant chooses one of cuda, cuda-cu130, cuda-cu126 by hand)"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_manifest_named_that_is_not_there_is_said_so(tmp_path):
    from envbuild.core.errors import InvalidInput
    from envbuild.host.pick import image_ref

    with pytest.raises(InvalidInput, match=r"manifest .*missing.json: no such file \(publish writes it"):
        image_ref(M, M.backend("cpu"), tmp_path / "missing.json")


def test_with_no_root_this_host_is_read_from_its_own_root(monkeypatch):
    """auto and variant_fits read the host at / where no --root is given, never a folder of another name."""
    from pathlib import Path

    from envbuild.host import detect, pick as picking
    from envbuild.matrix import compat

    seen: list[object] = []
    monkeypatch.setattr(detect, "detect_host", lambda m, root=None: "found")
    monkeypatch.setattr(detect, "choose", lambda det, m, native=False, root=None: seen.append(root) or ("cpu", "why"))
    assert picking.auto(M) == ("cpu", "why") and seen == ["/"]
    real = compat.choose_variant
    monkeypatch.setattr(compat, "choose_variant", lambda members, root, **k: seen.append(root) or real(members, root, **k))
    picking.variant_fits(M)
    assert seen[1:] and all(r == Path("/") for r in seen[1:])
