"""Build and smoke-test the cpu image on a real Docker engine, from a plain Debian base in a real registry.

The image is built once per session (support/fixtures.py, cpu_image) through the CLI, with --set, --wheelhouse
and --ca-bundle; these tests then drive `envbuild smoke` and inspect the image the way a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from support import testbed
from support.constants import MATRIX as MATRIX_PATH
from support.constants import TORCH
from support.fixtures import MARKER

pytestmark = pytest.mark.docker
MATRIX = str(MATRIX_PATH)


def envbuild(*args: str, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def test_build_used_buildkit_and_showed_progress(cpu_image):
    out = cpu_image.build_output
    assert "[cpu] building" in out
    # one line per step, e.g. "[cpu] 4/7 RUN ... ... DONE 15.2s"
    assert any(line.startswith("[cpu] ") and ("DONE" in line or "CACHED" in line) for line in out.splitlines())
    assert f"tagged envbuild-test/envbuild:cpu, envbuild-test/envbuild:cpu-torch{TORCH}-transformers" in out


def test_image_carries_labels_and_pins(cpu_image, docker_client):
    labels = docker_client.images.get(cpu_image.tag).labels
    assert labels["dev.envbuild.backend"] == "cpu"
    assert labels["dev.envbuild.torch"] == TORCH
    assert labels["org.opencontainers.image.title"] == "envbuild-cpu"
    assert labels["org.opencontainers.image.base.name"].endswith("envbuild-test/debian-python3:bookworm")


def test_image_states_what_it_needs_of_the_host(cpu_image, docker_client):
    """The cpu image needs no driver and runs on any CPU; its build recorded torch's (empty) device
    architecture list, read back without starting a container."""
    from envbuild.engine.docker import Engine
    from envbuild.matrix.compat import ARCH_FILE

    labels = docker_client.images.get(cpu_image.tag).labels
    assert (labels["dev.envbuild.requires.driver"], labels["dev.envbuild.requires.stack"],
            labels["dev.envbuild.requires.arch"]) == ("none", "none", "any")
    assert Engine().read_file(cpu_image.tag, ARCH_FILE) == b"\n"  # a CPU torch has no device architectures


@pytest.fixture
def cache_volume(docker_client):
    """A named volume for --cache, as a user keeps one (envbuild-cache), removed afterwards."""
    name = f"envbuild-test-cache-{os.getpid()}"
    yield name
    docker_client.volumes.get(name).remove(force=True)


def test_smoke_synthetic_passes_with_json_and_junit(cpu_image, tmp_path, no_leftover_containers, cache_volume):
    proc = envbuild(
        "smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--model", "synthetic",
        "--json-file", str(tmp_path / "smoke.json"), "--junit-file", str(tmp_path / "smoke.xml"), "--cache", cache_volume,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu: smoke passed" in proc.stdout
    doc = json.loads((tmp_path / "smoke.json").read_text())
    assert doc["ok"] is True and doc["image"] == cpu_image.tag
    names = [c["name"] for c in doc["checks"]]
    assert names == ["import_torch", "import_plugin", "device", "versions", "load", "forward", "generate", "cpu_match",
                     "compile", "arbitrary_uid", "read_only_any_uid"]
    assert all(c["ok"] and c["seconds"] >= 0 for c in doc["checks"])
    # One run: torch.compile built a kernel in the image, and every check ran as an arbitrary uid with group 0
    assert doc["checks"][8]["message"].startswith("a kernel generated and compiled (/cache/torchinductor)")
    assert "max abs diff to eager" in doc["checks"][8]["message"]
    said = doc["checks"][9]["message"]
    assert said.startswith("every check ran as uid ") and ", group 0; writable: HOME /home/envbuild, work folder /workspace" in said
    # then as clusters run images: read-only, as 4242:4242, HOME elsewhere; the entrypoint moved the caches
    said = doc["checks"][10]["message"]
    assert said.startswith("read-only, as 4242:4242 with HOME=/tmp") and "the model loaded and ran" in said, said
    assert doc["probe"]["timings"]["compile"] == doc["checks"][8]["seconds"]
    assert doc["probe"]["model"]["class"].endswith("ForCausalLM")
    assert doc["probe"]["versions"]["torch"].startswith(TORCH)
    for key in ("import", "load", "first_forward"):
        assert doc["probe"]["timings"][key] >= 0
    suites = ET.parse(tmp_path / "smoke.xml").getroot()
    suite = suites.find("testsuite")
    assert suite.get("name") == "envbuild.smoke.cpu" and suite.get("failures") == "0"
    assert len(suite.findall("testcase")) == 11  # one per check, the read-only run's included
    # The user's cache kept the model and the kernel: the next smoke (another arbitrary uid) finds both.
    again = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--cache", cache_volume,
                     "--json-file", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    checks = {c["name"]: c for c in json.loads((tmp_path / "again.json").read_text())["checks"]}
    assert checks["compile"]["message"].startswith("a kernel loaded from the compile cache (/cache/torchinductor)")
    assert checks["arbitrary_uid"]["message"] != said  # another uid


def test_smoke_real_model_directory(cpu_image, real_model_dir, tmp_path, no_leftover_containers):
    """A model folder the image has never seen (real BERT weights and tokenizer), mounted read-only."""
    proc = envbuild(
        "smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides,
        "--model", str(real_model_dir), "--json-file", str(tmp_path / "r.json"), "--junit-file", str(tmp_path / "r.xml"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["probe"]["model"]["class"] == "BertModel"
    assert doc["probe"]["model"]["source"].startswith("/models/")
    assert doc["probe"]["model"].get("tokenizer"), "the directory's own tokenizer should be used"
    ET.parse(tmp_path / "r.xml")


def test_smoke_tiny_causal_model_made_on_host(cpu_image, tmp_path, no_leftover_containers):
    """Another architecture, saved on the host by transformers, loaded in the container by from_pretrained."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    model_dir = tmp_path / "tiny-gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=300, n_positions=64)).save_pretrained(model_dir)
    proc = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--model", str(model_dir), "--json-file", str(tmp_path / "g.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["probe"]["model"]["class"] == "GPT2LMHeadModel"
    assert next(c for c in doc["checks"] if c["name"] == "generate")["ok"]


def test_failing_smoke_exits_1_and_removes_container(cpu_image, tmp_path, no_leftover_containers):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    proc = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--model", str(broken), "--junit-file", str(tmp_path / "f.xml"))
    assert proc.returncode == 1
    assert "FAIL load" in proc.stdout and "cpu: smoke FAILED" in proc.stdout
    suite = ET.parse(tmp_path / "f.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) >= 1


def test_timed_out_smoke_removes_container(cpu_image, tmp_path, no_leftover_containers):
    proc = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--timeout", "1", "--json-file", str(tmp_path / "t.json"))
    assert proc.returncode == 1
    assert "timed out after 1s" in proc.stdout
    assert json.loads((tmp_path / "t.json").read_text())["ok"] is False


def test_ca_bundle_is_in_no_layer_and_not_in_history(cpu_image, docker_client, tmp_path):
    history = subprocess.run(["docker", "history", "--no-trunc", cpu_image.tag], capture_output=True, text=True, check=True).stdout
    assert MARKER not in history
    assert "BEGIN CERTIFICATE" not in history
    # Every file of every layer: the marker line of the bundle we passed must be nowhere.
    archive = tmp_path / "image.tar"
    with open(archive, "wb") as fh:
        for chunk in docker_client.images.get(cpu_image.tag).save(named=True):
            fh.write(chunk)
    needle = MARKER.encode()
    scanned = 0
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if not member.name.endswith("layer.tar"):
                continue
            with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                for entry in layer:
                    # BuildKit leaves the empty mount-point directory run/secrets/; never a file in it
                    assert not (entry.name.lstrip("./").startswith("run/secrets/") and not entry.isdir()), entry.name
                    if entry.isfile():
                        data = layer.extractfile(entry).read()
                        assert needle not in data, f"CA bundle found in layer file {entry.name}"
                        scanned += 1
    assert scanned > 1000  # the layers really were read


def test_failed_build_keeps_the_old_tag(cpu_image, docker_client, wheelhouse, ca_bundle, tmp_path):
    cpu_image.copy_locks(tmp_path)
    keep = "envbuild-test/keep:cpu"
    docker_client.images.get(cpu_image.tag).tag("envbuild-test/keep", "cpu")
    proc = envbuild(
        "build", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides,
        "--set", "transformers.version=0.0.1",  # valid version, no such release: pip fails
        "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle), "--image", keep, cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "build FAILED" in proc.stderr
    log = next(line.split("full log: ", 1)[1] for line in proc.stderr.splitlines() if "full log: " in line)
    assert (tmp_path / log).read_text().strip(), "the full build log is kept"
    assert docker_client.images.get(keep).id == cpu_image.image_id
    assert docker_client.images.get(cpu_image.tag).id == cpu_image.image_id


def test_unchanged_rebuild_is_cached_then_up_to_date(cpu_image, wheelhouse, ca_bundle, tmp_path, docker_client):
    cpu_image.copy_locks(tmp_path)
    def again(name: str) -> subprocess.CompletedProcess:
        proc = envbuild(
            "build", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides,
            "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle), "--json-file", str(tmp_path / name), cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads((tmp_path / name).read_text())[0]["image_id"] == cpu_image.image_id
        return proc

    # First build in this folder: every step comes from BuildKit's cache.
    assert "CACHED" in again("1.json").stderr
    # Nothing changed since: answered from the record of that build, without running the builder.
    proc = again("2.json")
    assert "cpu: up to date" in proc.stdout and "CACHED" not in proc.stderr
    assert json.loads((tmp_path / "2.json").read_text())[0]["up_to_date"] is True
    # A tag that no longer points at the image means a real (cached) build, which puts it back.
    pinned = docker_client.images.get(cpu_image.tag).tags
    # Other tests may tag this image elsewhere too (publish, keep): take the build's own pinned tag.
    pinned = next(t for t in pinned if t.startswith(f"{cpu_image.tag}-torch"))
    docker_client.images.remove(pinned)
    assert "CACHED" in again("3.json").stderr
    assert docker_client.images.get(pinned).id == cpu_image.image_id
    assert "cpu: up to date" in again("4.json").stdout


def test_a_pass_through_build_arg_that_changes_runs_the_builder_again(cpu_image, wheelhouse, ca_bundle, tmp_path):
    """`--build-arg NAME` takes its value from the environment: another value is another build, never "up to date"."""
    cpu_image.copy_locks(tmp_path)
    def again(value: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["envbuild", "build", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--wheelhouse", str(wheelhouse),
             "--ca-bundle", str(ca_bundle), "--build-arg", "ENVBUILD_CACHE_ID"],
            capture_output=True, text=True, cwd=tmp_path, timeout=900, env={**os.environ, "ENVBUILD_CACHE_ID": value})
        assert proc.returncode == 0, proc.stderr
        return proc

    again("envbuild")
    assert "cpu: up to date" in again("envbuild").stdout
    changed = again("envbuild-other")
    assert "cpu: up to date" not in changed.stdout and "[cpu] building" in changed.stderr


def test_mirror_rewrites_the_base_registry(cpu_image, registry, wheelhouse, ca_bundle, tmp_path, docker_client):
    """The product's own base (debian:bookworm-slim, from Docker Hub) through --mirror to the local registry."""
    proc = envbuild(
        "build", "--backend", "cpu", "--matrix", MATRIX,
        "--set", f"backends.cpu.torch.version={TORCH}", "--set", "backends.cpu.torch.index_url=https://pypi.org/simple",
        "--mirror", f"docker.io={registry.host}", "--image", "envbuild-test/mirrored:cpu",
        "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle), cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"building {registry.host}/library/debian:bookworm-slim" in proc.stderr
    assert docker_client.images.get("envbuild-test/mirrored:cpu").labels["dev.envbuild.backend"] == "cpu"


def test_several_backends_go_on_past_a_failure(cpu_image, wheelhouse, ca_bundle, tmp_path):
    """cuda's base cannot be pulled here; the cpu build still runs and the summary says which failed."""
    cpu_image.copy_locks(tmp_path)
    proc = envbuild(
        "build", "--backend", "cuda", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides,
        "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle), cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "cuda: build FAILED" in proc.stderr
    assert "cpu: built" in proc.stdout
    table = proc.stdout[proc.stdout.index("BACKEND"):]
    assert "cuda" in table and "FAILED" in table and "cpu" in table and "ok" in table


def test_cuda_on_this_machine_fails_cleanly(cpu_image, no_leftover_containers):
    proc = envbuild("smoke", "--backend", "cuda", "--matrix", MATRIX, "--image", cpu_image.tag)
    assert proc.returncode != 0
    assert "NVIDIA Container Toolkit" in proc.stderr
    assert proc.stderr.count("\n") <= 2  # one clear line, no traceback


def test_missing_image_says_how_to_get_it(docker_client):
    proc = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, "--image", "envbuild-test/absent:nothing")
    assert proc.returncode == 1
    assert "envbuild build --backend cpu" in proc.stderr and "envbuild pull --backend cpu" in proc.stderr


def test_the_image_tests_itself_without_envbuild(cpu_image, docker_client):
    """A pulled image needs no envbuild: `docker run IMAGE envbuild-probe` prints the JSON report."""
    status, out, _ = testbed.docker_run(docker_client, cpu_image.tag, ["envbuild-probe"], environment={"HF_HUB_OFFLINE": "1"})
    assert status == 0 and json.loads(out)["ok"] is True


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_smoke_removes_container(cpu_image, engine, sig, no_leftover_containers):
    """Ctrl-C (SIGINT) and a CI cancel (SIGTERM) while the probe runs: the container goes too."""
    import signal
    import time

    from envbuild.smoke import leftover_containers

    before = set(leftover_containers(engine))  # another's container must not be taken for this smoke's
    proc = subprocess.Popen(
        ["envbuild", "smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal: a suite started in the background inherits SIGINT ignored (POSIX), and so would this
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not set(leftover_containers(engine)) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(leftover_containers(engine)) - before, "the smoke container never started"
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Interrupted." in err and "Traceback" not in err
