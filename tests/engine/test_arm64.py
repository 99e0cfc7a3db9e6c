"""One image, two platforms, on the real engine: the cpu backend for linux/arm64 built under QEMU from a base that is
an index of amd64 and arm64 in the loopback registry, its lock naming that base by the registry's digest for arm64,
smoke-tested under emulation, published with the session's amd64 image as one image index, read back by skopeo, and
pulled per platform.

Cheap on purpose (CI's whole run has a budget): one module; the arm64 base is debootstrapped once and cached
(it carries python3-venv, so no apt step runs under emulation); torch is PyPI's aarch64 2.9.1 wheel (a CPU build;
2.13.0's aarch64 wheel is a CUDA build pulling GBs), cached; torch.compile's apt packages are left out (its check
is skipped under emulation anyway). The amd64 half is the session's cpu image, built from its own base.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from support import testbed
from support.constants import MATRIX as MATRIX_PATH

from envbuild.image import lockfile
from envbuild.net.regclient import Registry

pytestmark = pytest.mark.docker
MATRIX = str(MATRIX_PATH)
ARM64_TORCH = "2.9.1"
BOTH = ["--set", "backends.cpu.platforms=[linux/amd64,linux/arm64]"]  # the session's overrides list amd64 alone
TIMES: dict[str, float] = {}  # what the arm64 part costs, printed at the end (README: Testing)
STEPS: list[str] = []  # the arm64 build's steps with their seconds


def run(args: list[str], cwd: Path, timeout: int = 1200, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def multi_base(registry, standin_base, docker_client) -> str:
    start = time.monotonic()
    try:
        ref = testbed.multiplatform_base(registry, docker_client, testbed.STANDIN_NAME)
    except testbed.Unavailable as exc:
        pytest.fail(str(exc))
    TIMES["two-platform base (push; debootstrap cached)"] = time.monotonic() - start
    return ref


@pytest.fixture(scope="module")
def arm64(multi_base, ca_bundle, tmp_path_factory):
    """The cpu image for linux/arm64, built under QEMU through the CLI (its lock resolved there first)."""
    work = tmp_path_factory.mktemp("arm64")
    overrides = ["--set", f"backends.cpu.base_image={multi_base}", "--set", f"backends.cpu.torch.version={ARM64_TORCH}",
                 "--set", "backends.cpu.torch.index_url=https://pypi.org/simple", "--set", "backends.cpu.python.apt=[]",
                 "--set", "backends.cpu.compile.apt=[]", "--set", f"image.repository={testbed.CPU_REPOSITORY}"]
    start = time.monotonic()
    proc = run(["build", "--backend", "cpu", "--platform", "linux/arm64", "--matrix", MATRIX, *overrides,
                "--wheelhouse", str(testbed.aarch64_torch_wheelhouse()), "--ca-bundle", str(ca_bundle)], work)
    TIMES["lock + build for arm64 under QEMU"] = time.monotonic() - start
    STEPS.extend(line for line in proc.stderr.splitlines() if " DONE " in line)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"work": work, "overrides": overrides, "build": proc, "tag": f"{testbed.CPU_REPOSITORY}:cpu-arm64"}


def test_the_arm64_lock_names_the_base_by_its_registry_digest(arm64, multi_base, docker_client, registry):
    lock = lockfile.parse((arm64["work"] / "locks/cpu/linux-arm64.txt").read_text(), "linux-arm64.txt")
    index = Registry(multi_base).manifest(multi_base)
    assert lock.inputs["platform"] == "linux/arm64" and lock.resolved["platform"] == "linux/arm64"
    assert lock.inputs["base_digest"] == index.platforms()["linux/arm64"]
    text = (arm64["work"] / "locks/cpu/linux-arm64.txt").read_text()
    local = docker_client.images.get(testbed.STANDIN_NAME).id
    assert local.split(":")[1] not in text  # never this engine's image id
    assert lock.pins()["torch"] == ARM64_TORCH
    image = docker_client.images.get(arm64["tag"])
    assert image.attrs["Architecture"] == "arm64"


def test_a_lock_for_one_platform_is_not_one_for_the_other(arm64, tmp_path):
    """Only the arm64 lock is here: an amd64 build --locked refuses, and lock --check names the missing platform,
    reading files only (no docker on PATH, DOCKER_HOST nowhere)."""
    import os

    shutil.copytree(arm64["work"] / "locks", tmp_path / "locks")
    proc = run(["build", "--backend", "cpu", "--platform", "linux/amd64", "--locked", "--matrix", MATRIX,
                *arm64["overrides"], "--no-ca-bundle"], tmp_path, timeout=300)
    assert proc.returncode == 1 and "locks/cpu/linux-amd64.txt is missing" in proc.stderr, proc.stderr
    env = {**os.environ, "PATH": str(Path(shutil.which("envbuild")).parent), "DOCKER_HOST": "unix:///nonexistent.sock"}
    check = subprocess.run(["envbuild", "lock", "--check", "--matrix", MATRIX, *arm64["overrides"], "--no-ca-bundle",
                            "--wheelhouse", str(testbed.aarch64_torch_wheelhouse())],  # the wheelhouse is an input
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "cpu (linux/arm64): locks/cpu/linux-arm64.txt up to date" in check.stdout
    assert "cpu (linux/amd64): locks/cpu/linux-amd64.txt missing" in check.stdout


@pytest.fixture(scope="module")
def arm64_smoke(arm64):
    start = time.monotonic()
    out = arm64["work"] / "smoke-arm64.json"
    proc = run(["smoke", "--backend", "cpu", "--platform", "linux/arm64", "--matrix", MATRIX, *arm64["overrides"],
                "--json-file", str(out)], arm64["work"])
    TIMES["smoke under QEMU"] = time.monotonic() - start
    return proc, out


def test_smoke_runs_the_arm64_image_under_emulation_and_says_so(arm64_smoke, no_leftover_containers):
    proc, out = arm64_smoke
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["platform"] == "linux/arm64" and doc["emulated"] is True and doc["ok"] is True
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["device"]["ok"] and checks["forward"]["ok"]
    assert checks["timings"]["skipped"] and "under QEMU emulation" in checks["timings"]["message"]
    # one pass (issue 24): the uid check is part of the one run, so it runs under emulation too; compile is skipped
    assert checks["compile"]["skipped"] and checks["arbitrary_uid"]["ok"] and not checks["arbitrary_uid"].get("skipped")
    assert "on linux/arm64 (emulated)" in proc.stdout


@pytest.fixture(scope="module")
def index(arm64, arm64_smoke, cpu_image, cpu_smoke, registry, tmp_path_factory, docker_client):
    """Published as native runners would: each platform on its own (--no-index), then one index from both records."""
    work = tmp_path_factory.mktemp("index")
    repo = f"{registry.host}/envbuild-multi-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    amd = run(["publish", "--backend", "cpu", "--platform", "linux/amd64", "--no-index", "--matrix", MATRIX,
               *cpu_image.overrides, *BOTH, "--registry", repo, "--smoke-json", str(cpu_smoke),
               "--manifest", str(work / "amd64.json")], work)
    assert amd.returncode == 0, amd.stdout + amd.stderr
    arm = run(["publish", "--backend", "cpu", "--platform", "linux/arm64", "--no-index", "--matrix", MATRIX,
               *arm64["overrides"], "--registry", repo, "--smoke-json", str(arm64_smoke[1]),
               "--manifest", str(work / "arm64.json")], work)
    assert arm.returncode == 0, arm.stdout + arm.stderr
    # The index job signs what it pushes: each platform's manifest and the index (issue 22 on issue 21's publish).
    secret = {"ENVBUILD_KEY_PASSWORD": "pass-" + uuid.uuid4().hex}
    assert run(["keygen", "--output-key-prefix", str(work / "cosign")], work, env=secret).returncode == 0
    joined = run(["publish", "--backend", "cpu", "--platform", "linux/amd64,linux/arm64", "--matrix", MATRIX,
                  *cpu_image.overrides, *BOTH, "--registry", repo, "--index-from", str(work / "amd64.json"),
                  "--index-from", str(work / "arm64.json"), "--manifest", str(work / "envbuild-manifest.json"), "--json",
                  "--sign-key", str(work / "cosign.key")], work, env=secret)
    TIMES["publish (two platforms + index)"] = time.monotonic() - start
    return {"repo": repo, "work": work, "proc": joined, "manifest": work / "envbuild-manifest.json",
            "public": (work / "cosign.pub").read_bytes()}


def test_every_digest_of_the_index_is_signed_and_each_platform_attested(index, registry):
    from test_signing import Registry as HeldOut
    from test_signing import held_out_attestations, held_out_verify

    assert index["proc"].returncode == 0, index["proc"].stdout + index["proc"].stderr
    entry = json.loads(index["manifest"].read_text())["images"]["cpu"]
    reg, repo = HeldOut(registry.host), entry["repository"].split("/", 1)[1]
    tag = entry["tags"][0].rpartition(":")[2]  # REG/REPO:TAG
    assert held_out_verify(reg, repo, tag, index["public"]) == entry["digest"]  # the index
    for platform, rec in entry["platforms"].items():
        assert held_out_verify(reg, repo, rec["digest"], index["public"]) == rec["digest"], platform
        kinds = {a["predicateType"] for a in held_out_attestations(reg, repo, rec["digest"], index["public"])}
        assert any("slsa.dev/provenance" in k for k in kinds), (platform, kinds)


def test_the_index_names_both_platforms_and_skopeo_agrees(index, cpu_image):
    proc = index["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = json.loads(index["manifest"].read_text())["images"]["cpu"]
    assert entry["index"] is True and set(entry["platforms"]) == {"linux/amd64", "linux/arm64"}
    assert entry["platforms"]["linux/arm64"]["smoke"]["ok"] and entry["platforms"]["linux/arm64"]["smoke"]["emulated"]
    assert entry["platforms"]["linux/amd64"]["image_id"] == cpu_image.image_id
    (result,) = json.loads(proc.stdout[proc.stdout.index("["):])
    pushed = {d.split("@")[1] for d in result["pushed"]}
    assert pushed == {entry["digest"], *(p["digest"] for p in entry["platforms"].values())}  # for signing
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{entry['tags'][1]}"],
                         capture_output=True, text=True, check=True).stdout
    by_arch = {m["platform"]["architecture"]: m["digest"] for m in json.loads(raw)["manifests"]}
    assert by_arch == {"amd64": entry["platforms"]["linux/amd64"]["digest"],
                       "arm64": entry["platforms"]["linux/arm64"]["digest"]}
    picked = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--override-arch", "arm64",
                                        f"docker://{entry['tags'][0]}"], capture_output=True, text=True, check=True).stdout)
    assert picked["Architecture"] == "arm64" and picked["Digest"] == entry["digest"]
    # Each platform also under a moving tag of its own (REG:cpu-arm64), for tools that cannot read an index (pyxis)
    for platform, rec in entry["platforms"].items():
        assert rec["single_platform_tag"].endswith(f":cpu-{platform.split('/')[1]}")
        raw = json.loads(subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                                         f"docker://{rec['single_platform_tag']}"], capture_output=True, text=True,
                                        check=True).stdout)
        assert "manifests" not in raw  # one image, not an index
        one = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{rec['single_platform_tag']}"],
                                        capture_output=True, text=True, check=True).stdout)
        assert one["Digest"] == rec["digest"], platform


def test_pull_takes_each_platform_by_its_digest(index, cpu_image, docker_client):
    entry = json.loads(index["manifest"].read_text())["images"]["cpu"]
    local = f"envbuild-test/pulled-multi-{uuid.uuid4().hex[:8]}"
    args = ["--matrix", MATRIX, *cpu_image.overrides, *BOTH, "--set", f"image.repository={local}", "--registry", index["repo"],
            "--manifest", str(index["manifest"])]
    start = time.monotonic()
    here = run(["pull", "--backend", "cpu", *args, "--json"], index["work"])
    assert here.returncode == 0, here.stdout + here.stderr
    (got,) = json.loads(here.stdout)
    assert got["platform"] == "linux/amd64" and not got["emulated"] and got["verified_against_manifest"]
    assert got["digest"] == entry["platforms"]["linux/amd64"]["digest"]
    assert docker_client.images.get(f"{local}:cpu").attrs["Architecture"] == "amd64"
    arm = run(["pull", "--backend", "cpu", *args, "--platform", "linux/arm64", "--json"], index["work"])
    TIMES["pull both platforms"] = time.monotonic() - start
    assert arm.returncode == 0, arm.stdout + arm.stderr
    (got,) = json.loads(arm.stdout)
    assert got["platform"] == "linux/arm64" and got["emulated"] is True
    assert got["digest"] == entry["platforms"]["linux/arm64"]["digest"]
    assert docker_client.images.get(f"{local}:cpu-arm64").attrs["Architecture"] == "arm64"
    # s390x listed by the matrix (a platform it does not list is refused before the registry, exit 2), not by the index
    other = run(["pull", "--backend", "cpu", *args, "--set", "backends.cpu.platforms=[linux/amd64,linux/arm64,linux/s390x]",
                 "--platform", "linux/s390x"], index["work"])
    assert other.returncode == 1 and "its index lists linux/amd64, linux/arm64" in other.stderr
    for ref in (f"{local}:cpu", f"{local}:cpu-arm64"):
        docker_client.images.remove(ref)


def test_a_platform_that_fails_is_left_out_and_the_publish_fails(arm64, arm64_smoke, cpu_image, cpu_smoke, registry,
                                                                 tmp_path):
    """One run with both local images and the amd64 matrix: the arm64 image carries torch 2.9.1, not the matrix's
    pin, so it is left out, said, and the publish exits 1; the index holds amd64 alone."""
    repo = f"{registry.host}/envbuild-partial-{uuid.uuid4().hex[:8]}"
    proc = run(["publish", "--backend", "cpu", "--platform", "linux/amd64,linux/arm64", "--matrix", MATRIX,
                *cpu_image.overrides, *BOTH, "--registry", repo, "--smoke-json", str(cpu_smoke),
                "--smoke-json", str(arm64_smoke[1]), "--manifest", str(tmp_path / "m.json")], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "platforms left out of the index: linux/arm64" in proc.stderr and f"'{ARM64_TORCH}' in the image" in proc.stderr
    entry = json.loads((tmp_path / "m.json").read_text())["images"]["cpu"]
    assert list(entry["platforms"]) == ["linux/amd64"] and "linux/arm64" in entry["failed_platforms"]
    top = Registry(repo).manifest(entry["tags"][0])
    assert top.is_index and list(top.platforms()) == ["linux/amd64"]


def test_a_platform_without_a_smoke_result_is_not_pushed(cpu_image, registry, tmp_path):
    repo = f"{registry.host}/envbuild-unsmoked-{uuid.uuid4().hex[:8]}"
    proc = run(["publish", "--backend", "cpu", "--platform", "linux/amd64", "--no-index", "--matrix", MATRIX,
                *cpu_image.overrides, *BOTH, "--registry", repo, "--manifest", str(tmp_path / "m.json")], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no smoke result for linux/amd64" in proc.stderr and "--smoke-json FILE" in proc.stderr
    assert "pushing" not in proc.stdout + proc.stderr and not (tmp_path / "m.json").exists()


def test_what_the_arm64_part_costs():
    """Printed with -s and in the durations: the README's Testing section quotes it."""
    print("\narm64 part: " + ", ".join(f"{k} {v:.0f}s" for k, v in TIMES.items()))
    print("\n".join(f"  {line[:60]} ... {line.rsplit(' ', 2)[-2:]}" for line in STEPS))
    assert TIMES
