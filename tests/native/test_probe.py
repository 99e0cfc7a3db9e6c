"""Tests for envbuild/smoke/probe.py, run natively (no Docker) on a CPU-only machine, offline.

The probe is loaded from its file rather than imported from the envbuild package: in images it
lives alone at /opt/envbuild/probe.py and must work without the package.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from support.constants import REPO

PROBE_PATH = REPO / "envbuild" / "smoke" / "probe.py"
CHECK_NAMES = ["import_torch", "import_plugin", "device", "versions", "load", "forward",
               "generate", "cpu_match"]



def _load_probe() -> Any:
    spec = importlib.util.spec_from_file_location("envbuild_probe_under_test", PROBE_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


probe = _load_probe()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in probe.ENV_DEFAULTS:
        monkeypatch.delenv(f"ENVBUILD_{name}", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    """Run the probe as the images do; return (exit code, the parsed JSON, stderr)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ENVBUILD_")}
    full_env.update(HF_HUB_OFFLINE="1", **(env or {}))
    proc = subprocess.run([sys.executable, str(PROBE_PATH), *args], capture_output=True,
                          text=True, env=full_env, timeout=120)
    # stdout must be exactly one JSON document: json.loads refuses anything before or after it.
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert [c["name"] for c in doc["checks"]] == CHECK_NAMES
    for c in doc["checks"]:
        assert set(c) == {"name", "ok", "message", "seconds"}
        assert "\n" not in c["message"]
    return {c["name"]: c for c in doc["checks"]}


def assert_skipped_after(doc: dict[str, Any], failed: str) -> None:
    by_name = checks(doc)
    for name in CHECK_NAMES[max(CHECK_NAMES.index(failed) + 1, CHECK_NAMES.index("load")):]:
        assert by_name[name]["ok"] is False
        assert by_name[name]["message"] == f"skipped: {failed} failed"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny non-causal model with its own tokenizer, built offline."""
    import torch
    import transformers

    path = tmp_path_factory.mktemp("bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "from", "the", "envbuild",
             "probe"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5: BertTokenizer(vocab_file=...) silently ignores the file; from_pretrained reads it.
    tokenizer = transformers.BertTokenizer.from_pretrained(str(path))
    assert tokenizer("hello probe")["input_ids"] == [2, 5, 9, 3]
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(config).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


# -- success ----------------------------------------------------------------------------------------

def test_synthetic_cpu_cli(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    rc, doc, stderr = run_cli("--max-new-tokens", "3", "--output", str(out))
    assert rc == 0, stderr
    assert doc["ok"] is True and doc["probe"] == 1
    assert doc["backend"] == "cpu" and doc["device"] == "cpu"
    assert all(c["ok"] for c in checks(doc).values())
    assert doc["model"]["source"] == "synthetic"
    assert doc["model"]["class"] == "LlamaForCausalLM" and doc["model"]["device"] == "cpu"
    assert doc["model"]["parameters"] > 0
    assert len(doc["model"]["generated_ids"]) == 3
    assert all(isinstance(doc["timings"][k], float) for k in
               ("import", "load", "first_forward", "generate", "total"))
    assert doc["device_info"]["flavor"] == "cpu" and doc["device_info"]["count"] == 1
    assert set(doc["versions"]) == {"python", "torch", "torch_cuda", "torch_hip", "plugin",
                                    "transformers", "accelerate"}
    assert doc["versions"]["transformers"] == importlib.metadata.version("transformers")
    assert json.loads(out.read_text()) == doc
    assert "[probe] load: ok" in stderr


def test_synthetic_cpu_run_with_env_defaults(monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    torch_version = importlib.metadata.version("torch")
    monkeypatch.setenv("ENVBUILD_BACKEND", "cpu")
    monkeypatch.setenv("ENVBUILD_DEVICE", "cpu")
    # A pin without the local label matches an installed local build ("2.13.0" ~ "2.13.0+cpu").
    monkeypatch.setenv("ENVBUILD_EXPECT", f"torch={torch_version.split('+')[0]} "
                       f"transformers={importlib.metadata.version('transformers')}")
    doc = probe.run([])
    assert doc["ok"] is True, doc["checks"]
    assert checks(doc)["versions"]["message"].startswith(f"torch={torch_version}")
    assert len(doc["model"]["generated_ids"]) == 4  # the default --max-new-tokens
    assert checks(doc)["cpu_match"]["message"] == "not needed: the device is the CPU"
    assert capfd.readouterr().out == ""  # run() never writes to stdout


def test_local_non_causal_model_with_tokenizer(bert_dir: Path) -> None:
    doc = probe.run(["--model", str(bert_dir)])
    by_name = checks(doc)
    assert doc["ok"] is True, doc["checks"]
    assert doc["model"]["class"] == "BertModel"
    assert doc["model"]["architecture"] == "BertModel"
    assert doc["model"]["tokenizer"] == "BertTokenizer"
    # The prompt "Hello from the envbuild probe" tokenised with the test's vocabulary.
    assert "output (1, 7, 32)" in by_name["forward"]["message"]
    assert by_name["generate"]["message"].startswith("not applicable")
    assert doc["model"]["generated_ids"] is None


# -- refusals on a CPU-only machine -----------------------------------------------------------------

def test_cuda_backend_fails_on_cpu_machine() -> None:
    rc, doc, _ = run_cli("--backend", "cuda")
    assert rc == 1 and doc["ok"] is False
    assert doc["device"] == "cuda"
    device = checks(doc)["device"]
    assert device["ok"] is False and "not a CUDA build" in device["message"]
    assert_skipped_after(doc, "device")
    assert doc["model"]["device"] is None and doc["model"]["class"] is None


def _accelerator(monkeypatch: pytest.MonkeyPatch, device: str | None, count: int) -> None:
    """Make torch.accelerator answer as a host with `count` devices of this type would."""
    import torch
    # A stand-in for torch.device: torch accepts a plugin's type only once the plugin has registered it.
    current = types.SimpleNamespace(type=device) if device else None
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: current)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: count)


def test_invisible_device_names_docker_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    monkeypatch.setenv("ENVBUILD_RUN_FLAGS", "--gpus all")  # as the image has it from the matrix
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # pretend to be a CUDA build on a host without a GPU
    _accelerator(monkeypatch, "cuda", 0)
    doc = probe.run(["--backend", "cuda"])
    message = checks(doc)["device"]["message"]
    assert message.startswith("no cuda device visible (torch.accelerator: ")
    assert message.endswith("start the container with the flags that expose it: --gpus all")
    assert_skipped_after(doc, "device")


@pytest.mark.parametrize("driver, mode", [(12020, "minor-version"), (12060, "native"), (13000, "native"), (0, None)])
def test_the_probe_says_when_it_runs_under_minor_version_compatibility(monkeypatch: pytest.MonkeyPatch, driver: int,
                                                                        mode: str | None) -> None:
    """A CUDA 12.6 build on a driver that supports CUDA 12.2 (R535): it runs, under minor version compatibility."""
    import torch
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    monkeypatch.setattr(torch._C, "_cuda_getDriverVersion", lambda: driver, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA A100")
    _accelerator(monkeypatch, "cuda", 1)
    doc = probe.run(["--backend", "cuda-cu126", "--device", "cuda"])
    device = checks(doc)["device"]
    assert device["ok"] is True, device
    assert doc["device_info"]["cuda_compat"] == mode
    assert ("running under CUDA minor version compatibility" in device["message"]) is (mode == "minor-version")
    if mode == "minor-version":
        assert "driver supports CUDA 12.2, older than the build's 12.6" in device["message"]


def test_the_device_is_asked_through_torch_accelerator_not_the_plugin_s_own_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def internal() -> bool:  # TorchTPU 0.2.0's torch.tpu.is_available, as called by anyone but torch
        raise RuntimeError("is_available is internal to TorchTPU and can only be called by the PyTorch framework")

    monkeypatch.setattr(torch, "tpu", type("tpu", (), {"is_available": staticmethod(internal),
                                                       "get_device_name": staticmethod(lambda i: "TPU v6e")}),
                        raising=False)
    _accelerator(monkeypatch, "tpu", 4)
    doc = probe.run(["--backend", "tpu", "--availability", "torch.tpu.is_available"])
    device = checks(doc)["device"]
    assert device["ok"] is True, device
    assert device["message"] == "4 x TPU v6e (asked torch.accelerator)"
    assert doc["device_info"] | {"flavor": None} == {"name": "TPU v6e", "count": 4, "api": "torch.accelerator", "flavor": None}


def test_no_tpu_visible_is_said_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    _accelerator(monkeypatch, None, 0)  # what torch-tpu 0.2.0 answers on a host without a TPU
    doc = probe.run(["--backend", "tpu", "--run-flags", "--net=host --privileged"])
    message = checks(doc)["device"]["message"]
    assert message.startswith("no tpu device visible (torch.accelerator: current_accelerator() = None")
    assert "--net=host --privileged" in message


def test_another_accelerator_is_not_the_backend_s(monkeypatch: pytest.MonkeyPatch) -> None:
    _accelerator(monkeypatch, "cuda", 1)
    doc = probe.run(["--backend", "npu"])
    assert checks(doc)["device"]["message"].startswith("the current accelerator is cuda, not npu")


def test_a_torch_older_than_2_6_is_asked_the_matrix_s_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    monkeypatch.delattr(torch, "accelerator")
    monkeypatch.setattr(torch, "mlu", type("mlu", (), {"is_available": staticmethod(lambda: True),
                                                       "device_count": staticmethod(lambda: 2)}), raising=False)
    doc = probe.run(["--backend", "mlu", "--availability", "torch.mlu.is_available"])
    assert checks(doc)["device"]["message"] == "2 x mlu (asked torch.mlu.is_available)"
    assert doc["device_info"]["api"] == "torch.mlu.is_available"
    monkeypatch.setattr(torch.mlu, "is_available", lambda: False)
    message = checks(probe.run(["--backend", "mlu", "--availability", "torch.mlu.is_available"]))["device"]["message"]
    assert message.startswith("no mlu device visible (torch.mlu.is_available() = False")


def test_npu_without_its_plugin_sees_no_device() -> None:
    doc = probe.run(["--backend", "npu"])
    assert checks(doc)["device"]["message"].startswith("no npu device visible (torch.accelerator: current_accelerator() = None")
    assert_skipped_after(doc, "device")


def test_model_silently_on_cpu_is_not_success(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    _accelerator(monkeypatch, "cuda", 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Fake GPU")
    original = probe.from_pretrained
    # Simulate a stack that ignores device_map and leaves the weights on the CPU.
    monkeypatch.setattr(probe, "from_pretrained", lambda transformers, cls, source, device, torch: original(
        transformers, cls, source, "cpu", torch))
    doc = probe.run(["--backend", "cuda"])
    by_name = checks(doc)
    assert by_name["device"]["ok"] is True and doc["device_info"]["name"] == "Fake GPU"
    assert by_name["load"]["ok"] is False
    assert "loaded on cpu, not on the requested device cuda" in by_name["load"]["message"]
    assert doc["ok"] is False


def test_rocm_backend_needs_rocm_torch() -> None:
    doc = probe.run(["--backend", "rocm"])
    assert doc["device"] == "cuda"  # ROCm uses the cuda device string
    assert "this torch is not a ROCm build" in checks(doc)["device"]["message"]
    assert doc["ok"] is False


def test_cuda_backend_refuses_rocm_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    monkeypatch.setattr(torch.version, "hip", "7.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    doc = probe.run(["--backend", "cuda"])
    assert "is a ROCm build" in checks(doc)["device"]["message"]
    assert doc["device_info"]["flavor"] == "rocm"


# -- versions, plugin, model path, usage ------------------------------------------------------------

def test_wrong_and_missing_pins_fail_versions() -> None:
    doc = probe.run(["--expect", "torch=1.0.0", "no-such-dist-envbuild=1.0"])
    message = checks(doc)["versions"]["message"]
    assert "torch is " in message and "expected 1.0.0" in message
    assert "no-such-dist-envbuild is not installed" in message
    assert doc["ok"] is False
    assert checks(doc)["load"]["ok"] is True  # a version mismatch does not hide the smoke test


def test_local_label_must_match_when_given() -> None:
    installed = importlib.metadata.version("torch")
    base = installed.split("+")[0]
    assert probe._version_matches(installed, base)
    assert probe._version_matches(base + "+cpu", base)
    assert not probe._version_matches(base + "+cpu", base + "+cu128")
    assert not probe._version_matches("2.13.1", "2.13.0")


def test_missing_plugin_fails_cleanly() -> None:
    rc, doc, stderr = run_cli("--backend", "npu", "--plugin-import", "torch_npu")
    assert rc == 1 and "Traceback" not in stderr
    plugin = checks(doc)["import_plugin"]
    assert plugin["ok"] is False
    assert plugin["message"] == "the plugin module 'torch_npu' is not installed in this image"
    assert checks(doc)["device"]["message"].startswith("no npu device visible (its plugin torch_npu did not load")
    assert_skipped_after(doc, "device")


def _plugin(tmp_path: Path, body: str, autoload: bool) -> dict[str, str]:
    """A plugin package whose import fails as a vendor plugin's does without its toolkit; with autoload, it is
    registered for torch's device-backend autoload (entry point group torch.backends), as torch_npu is."""
    (tmp_path / "fakeplugin_envbuild").mkdir()
    (tmp_path / "fakeplugin_envbuild" / "__init__.py").write_text(body)
    if autoload:
        info = tmp_path / "fakeplugin_envbuild-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin-envbuild\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[torch.backends]\nfakeplugin_envbuild = fakeplugin_envbuild:load\n")
    return {"PYTHONPATH": str(tmp_path), "ENVBUILD_PLUGIN_NEEDS": "the CANN toolkit (in the vendor base image)"}


MISSING_LIB = "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"


@pytest.mark.parametrize("autoload", [False, True], ids=["imported", "autoloaded-by-torch"])
def test_a_plugin_missing_its_vendor_library_names_it_and_where_it_comes_from(tmp_path: Path, autoload: bool) -> None:
    env = _plugin(tmp_path, MISSING_LIB if not autoload else f"def load():\n    {MISSING_LIB}", autoload)
    rc, doc, stderr = run_cli("--backend", "npu", "--plugin-import", "fakeplugin_envbuild", env=env)
    assert rc == 1 and "Traceback" not in stderr
    by_name = {c["name"]: c for c in doc["checks"]}
    if autoload:  # torch's own import fails: that is reported, and the plugin's step says why
        assert by_name["import_torch"]["message"].startswith(
            "torch's autoload of the device plugin fakeplugin_envbuild failed: ImportError: libhccl.so")
    else:
        assert by_name["import_torch"]["ok"] is True
    assert by_name["import_plugin"]["message"] == (
        "fakeplugin_envbuild cannot load libhccl.so, which is neither in this image nor on its library path: "
        "the CANN toolkit (in the vendor base image)")
    assert by_name["device"]["message"].startswith("no npu device visible (its plugin fakeplugin_envbuild did not load")
    assert by_name["versions"]["ok"] is True  # read from metadata: still answered


def test_missing_model_path_fails_load(tmp_path: Path) -> None:
    doc = probe.run(["--model", str(tmp_path / "nope")])
    load = checks(doc)["load"]
    assert load["ok"] is False and load["message"].startswith("model directory not found")
    assert_skipped_after(doc, "load")


def test_usage_errors_exit_2() -> None:
    proc = subprocess.run([sys.executable, str(PROBE_PATH), "--expect", "torch"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    proc = subprocess.run([sys.executable, str(PROBE_PATH), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--plugin-import" in proc.stdout


def test_versions_only_for_image_builds() -> None:
    # The Dockerfiles run `envbuild-probe --versions-only` at build time, with no device present.
    torch_pin = importlib.metadata.version("torch").split("+")[0]
    rc, doc, _ = run_cli("--versions-only", env={
        "ENVBUILD_BACKEND": "npu", "ENVBUILD_DEVICE": "npu", "ENVBUILD_PLUGIN_IMPORT": "torch_npu",
        "ENVBUILD_AVAILABILITY": "torch.npu.is_available", "ENVBUILD_EXPECT": f"torch={torch_pin}"})
    assert rc == 0 and doc["ok"] is True
    assert [c["name"] for c in doc["checks"]] == ["import_torch", "versions"]
    rc, doc, _ = run_cli("--versions-only", "--expect", "torch=0.1")
    assert rc == 1 and doc["checks"][1]["ok"] is False


def test_pins_only_reads_metadata_and_imports_nothing() -> None:
    # The last build step of every image: a transformers bump must not pay for importing torch.
    torch_pin = importlib.metadata.version("torch").split("+")[0]
    code = ("import runpy, sys; sys.argv = ['envbuild-probe', '--pins-only', '--expect', 'torch=%s'];"
            "sys.modules['torch'] = None; runpy.run_path(%r, run_name='__main__')" % (torch_pin, str(PROBE_PATH)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] is True, proc.stderr
    assert [c["name"] for c in doc["checks"]] == ["versions"]
    assert doc["versions"]["torch"].startswith(torch_pin)
    rc, doc, _ = run_cli("--pins-only", "--expect", "torch=0.1")
    assert rc == 1 and [c["name"] for c in doc["checks"]] == ["versions"] and doc["checks"][0]["ok"] is False


def test_pins_only_checks_every_locked_distribution(tmp_path: Path) -> None:
    """An image's lock (ENVBUILD_LOCK) is checked whole: every distribution at its locked version."""
    torch_version = importlib.metadata.version("torch")
    numpy_version = importlib.metadata.version("numpy")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# envbuild lock of backend cpu: ...\n# layer: torch\ntorch=={torch_version} \\\n"
                    f"    --hash=sha256:{'0' * 64}\n# layer: deps\nnumpy=={numpy_version} \\\n    --hash=sha256:{'1' * 64}\n")
    rc, doc, _ = run_cli("--pins-only", env={"ENVBUILD_LOCK": str(lock)})
    assert rc == 0 and f"numpy={numpy_version}" in doc["checks"][0]["message"]
    lock.write_text(lock.read_text().replace(f"numpy=={numpy_version}", "numpy==0.0.1"))
    rc, doc, _ = run_cli("--pins-only", env={"ENVBUILD_LOCK": str(lock)})
    assert rc == 1 and f"numpy is {numpy_version}, expected 0.0.1" in doc["checks"][0]["message"]
    rc, doc, _ = run_cli("--pins-only", env={"ENVBUILD_LOCK": str(tmp_path / "absent.txt")})
    assert rc == 1 and "cannot read the image's lock" in doc["checks"][0]["message"]



# -- torch.compile and the user the probe runs as ---------------------------------------------------------

_COMPILE = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import probe; "
            "print(probe.check_compile(torch, 'cpu', 1e-3))")


def test_compile_generates_a_kernel_once_then_finds_it_in_the_cache(tmp_path: Path) -> None:
    """Each run in a new process (Inductor's counters and in-memory caches are per process), one cache folder."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    said = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _COMPILE, str(PROBE_PATH.parent)], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        said.append(proc.stdout.strip())
    assert said[0].startswith(f"a kernel generated and compiled ({tmp_path / 'inductor'}) and ran in ")
    assert said[1].startswith(f"a kernel loaded from the compile cache ({tmp_path / 'inductor'}) and ran in ")
    assert all(s.endswith("max abs diff to eager 0") for s in said)
    assert list((tmp_path / "inductor").rglob("*.so"))  # the C++ compiler built it


def test_the_arbitrary_uid_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("home", "work", "cache"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in probe.CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache" / "torchinductor"))  # made when needed
    monkeypatch.setattr(probe.os, "getuid", lambda: 123456)
    monkeypatch.setattr(probe.os, "getgid", lambda: 0)
    said = probe.check_arbitrary_uid()
    assert said.startswith("every check ran as uid 123456, group 0; writable: HOME ")
    assert f"TORCHINDUCTOR_CACHE_DIR {tmp_path / 'cache' / 'torchinductor'}" in said
    (tmp_path / "a-file").touch()
    monkeypatch.setenv("HF_HOME", str(tmp_path / "a-file" / "huggingface"))  # under a file: nobody can make it
    with pytest.raises(probe.CheckFailed, match=r"uid 123456 \(group 0\) cannot write: HF_HOME .*a-file/huggingface; "
                                                r"the image must make them group 0"):
        probe.check_arbitrary_uid()
    monkeypatch.setattr(probe.os, "getuid", lambda: 0)
    with pytest.raises(probe.CheckFailed, match="runs as uid 0, gid 0: this check needs a uid other than 0"):
        probe.check_arbitrary_uid()
    monkeypatch.setenv("ENVBUILD_ARBITRARY_UID", "1")
    assert probe.parse_args([]).arbitrary_uid is True
    monkeypatch.delenv("ENVBUILD_ARBITRARY_UID")
    assert probe.parse_args([]).arbitrary_uid is False


def test_caches_move_off_a_cache_root_that_cannot_be_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A read-only image run as 4242:4242: /cache cannot be written, so the caches under it go under a writable HOME
    (else TMPDIR); one elsewhere stays; a writable root (a volume) keeps them all."""
    root, home = tmp_path / "cache", tmp_path / "home"
    root.mkdir()
    home.mkdir()
    for name in probe.CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    monkeypatch.setenv("HF_HOME", f"{root}/huggingface")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert probe.relocate_caches(str(root)) is None  # writable: nothing moves
    writable = {str(home), str(tmp_path / "elsewhere")}
    monkeypatch.setattr(probe, "_writable_dir", lambda folder: folder in writable)
    said = probe.relocate_caches(str(root))
    assert said and f"{root} cannot be written" in said and f"caches moved to {home}/.cache" in said
    assert os.environ["XDG_CACHE_HOME"] == f"{home}/.cache" and os.environ["HF_HOME"] == f"{home}/.cache/huggingface"
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "elsewhere")
    assert probe.relocate_caches(str(root)) is None  # once: nothing under the root is left to move
    monkeypatch.setattr(probe.os, "getuid", lambda: 4242)
    monkeypatch.setattr(probe.os, "getgid", lambda: 4242)
    monkeypatch.setenv("HF_HOME", f"{root}/huggingface")
    monkeypatch.setattr(probe, "_writable", lambda path: not path.startswith(str(root)))
    with pytest.raises(probe.CheckFailed, match=r"uid 4242:4242 cannot write: HF_HOME .*moves the caches off /cache"):
        probe.check_arbitrary_uid()
    monkeypatch.setenv("HF_HOME", f"{home}/.cache/huggingface")
    assert probe.check_arbitrary_uid().startswith("every check ran as uid 4242, gid 4242 (not group 0)")


def test_cpu_match_compares_a_device_s_output_with_the_cpu_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the cpu backend there is nothing to compare; for a device, its output against a model loaded on the
    CPU (here the CPU's own output stands for the device's, then a wrong one)."""
    import torch

    monkeypatch.delenv("HF_HOME", raising=False)
    _, loaded = probe.check_load(torch, "synthetic", "cpu", str(tmp_path))
    _, output = probe.check_forward(torch, loaded, "cpu")
    assert probe.check_cpu_match(torch, loaded, output, 1e-3, "cpu") == "not needed: the device is the CPU"
    assert probe.check_cpu_match(torch, loaded, output, 1e-3, "xpu:0").startswith("max abs diff to CPU 0 <= 0.001")
    with pytest.raises(probe.CheckFailed, match="above the tolerance"):
        probe.check_cpu_match(torch, loaded, output + 1, 1e-3, "xpu:0")


def test_compile_on_a_noexec_mount_fails_in_one_line_naming_the_mount(tmp_path: Path, monkeypatch) -> None:
    """Where the Inductor cache (or the temporary folder) is mounted noexec, the kernels it builds cannot be loaded:
    the check says so before Inductor fails deep in its loader."""
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache / "not-made-yet"))
    real = os.statvfs

    def statvfs(path):
        found = real(path)
        if str(path) == str(cache):
            return os.statvfs_result((*found[:8], found.f_flag | os.ST_NOEXEC, found.f_namemax))
        return found

    assert probe.noexec_place() is None
    cache.mkdir()
    monkeypatch.setattr(probe.os, "statvfs", statvfs)
    said = probe.noexec_place()
    assert said == (f"torch.compile cannot run here: {cache / 'not-made-yet'} is on a filesystem mounted noexec, where "
                    "compiled kernels cannot be loaded; mount a writable volume at /cache (docker run -v "
                    "envbuild-cache:/cache) or let /tmp run code (docker run --tmpfs /tmp:exec)")
    with pytest.raises(probe.CheckFailed, match="mounted noexec"):
        probe.check_compile(None, "cpu", 1e-3)
