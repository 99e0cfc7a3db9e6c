#!/usr/bin/env python3
"""envbuild probe: smoke-test torch + transformers on one accelerator, inside an image.

Copied alone into every image as /opt/envbuild/probe.py, so it needs nothing beyond the standard
library, torch, transformers and accelerate, and never imports the envbuild package. torch and
transformers are imported inside the checks: `--help` stays fast and a broken torch becomes a
failed check in the JSON report instead of a traceback.

stdout carries exactly one JSON document; progress lines go to stderr.
Exit status: 0 every check passed, 1 a check failed, 2 bad usage.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata as metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

PROBE_FORMAT = 1
PROMPT = "Hello from the envbuild probe"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                   "vocab.txt", "vocab.json", "spiece.model")
# The docker run flags whose absence usually explains an invisible device (see backends.md).
DEVICE_FLAGS = {
    "cuda": "--gpus all",
    "rocm": "--device /dev/kfd --device /dev/dri --group-add video",
    "neuron": "--device /dev/neuron0",
    "tpu": "--privileged --net=host",
    "xpu": "--device /dev/dri",
    "hpu": "--runtime=habana -e HABANA_VISIBLE_DEVICES=all",
    "npu": "--device /dev/davinci0 --device /dev/davinci_manager --device /dev/devmm_svm "
           "--device /dev/hisi_hdc plus the driver mounts",
    "mlu": "--device /dev/cambricon_ctl --device /dev/cambricon_dev0",
    "musa": "the mt-container-toolkit runtime and -e MTHREADS_VISIBLE_DEVICES=all",
}


class CheckFailed(Exception):
    """A check failed for a reason its message already explains (no exception type prefix)."""


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pin(text: str) -> tuple[str, str]:
    dist, sep, version = text.partition("=")
    if not sep or not dist.strip() or not version.strip():
        raise argparse.ArgumentTypeError(f"expected DIST=VERSION, got {text!r}")
    return dist.strip(), version.strip().lstrip("=")  # tolerate "dist==version"


def _version_matches(installed: str, expected: str) -> bool:
    # "2.13.0" accepts "2.13.0+cpu"; an expected local label must match exactly.
    return installed == expected or ("+" not in expected and installed.split("+")[0] == expected)


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _module_dist_version(module: str) -> str | None:
    dists = metadata.packages_distributions().get(module.split(".")[0], [])
    return _dist_version(dists[0]) if dists else None


def _resolve(dotted: str) -> Any:
    """Resolve "torch.npu.is_available", importing submodules that are not attributes yet."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                raise CheckFailed(f"{dotted} does not exist: {'.'.join(parts[:i])} has no "
                                  f"attribute {part!r} (is the device plugin imported?)") from None
    return obj


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = {k: os.environ.get(f"ENVBUILD_{k}", "").strip()
           for k in ("BACKEND", "DEVICE", "PLUGIN_IMPORT", "AVAILABILITY", "EXPECT")}
    p = argparse.ArgumentParser(prog="envbuild-probe",
                                description="Smoke-test torch + transformers on this image's device.")
    p.add_argument("--backend", default=env["BACKEND"] or "cpu")
    p.add_argument("--device", help="device string for device_map (default: ENVBUILD_DEVICE)")
    p.add_argument("--plugin-import", help="module that registers the device")
    p.add_argument("--availability", help="dotted availability API, e.g. torch.cuda.is_available")
    p.add_argument("--model", default="synthetic", help="synthetic, a hub id or a local directory")
    p.add_argument("--expect", nargs="+", action="extend", type=_pin, metavar="DIST=VERSION")
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--max-new-tokens", type=int, default=4)
    p.add_argument("--output", help="also write the JSON report to this file")
    p.add_argument("--versions-only", action="store_true",
                   help="only import torch and check the pins (image builds: no device, no model)")
    p.add_argument("--pins-only", action="store_true",
                   help="only check the pins, from package metadata, importing nothing (the last image "
                        "build step: a transformers bump need not pay for importing torch)")
    args = p.parse_args(argv)
    # The image's ENVBUILD_* defaults describe its own backend; a --backend naming another one
    # must not inherit them (e.g. ENVBUILD_DEVICE=cpu from a cpu image).
    own = not env["BACKEND"] or args.backend == env["BACKEND"]
    if args.device is None:
        args.device = (own and env["DEVICE"]) or ("cuda" if args.backend == "rocm" else args.backend)
    if args.plugin_import is None:
        args.plugin_import = env["PLUGIN_IMPORT"] if own else ""
    if args.availability is None:
        args.availability = (own and env["AVAILABILITY"]) or ""
    if not args.availability and args.backend != "cpu":
        args.availability = f"torch.{args.device.split(':')[0]}.is_available"
    if args.expect is None:
        try:
            args.expect = [_pin(token) for token in env["EXPECT"].split()]
        except argparse.ArgumentTypeError as exc:
            p.error(f"ENVBUILD_EXPECT: {exc}")
    if args.max_new_tokens < 1:
        p.error("--max-new-tokens must be at least 1")
    return args


class Probe:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device_type = args.device.split(":")[0]
        self.checks: list[dict[str, Any]] = []
        self.timings: dict[str, float | None] = {
            "import": None, "load": None, "first_forward": None, "generate": None, "total": None}
        self.device_info: dict[str, Any] = {"name": None, "count": None, "flavor": None}
        self.model_info: dict[str, Any] = {"source": args.model, "class": None, "architecture": None,
                                           "parameters": None, "device": None, "tokenizer": None,
                                           "generated_ids": None}
        self.torch: Any = None
        self.transformers: Any = None
        self.tmpdir: str | None = None
        self.source = ""
        self.config: Any = None
        self.cls: Any = None
        self.model: Any = None
        self.inputs: dict[str, Any] = {}
        self.output: Any = None  # device output, already copied to CPU as float32

    # -- bookkeeping -------------------------------------------------------------------------------
    def step(self, name: str, fn: Callable[[], str], needs: tuple[str, ...] = ()) -> None:
        done = {c["name"]: c for c in self.checks}
        blocker = next((done[n] for n in needs if not done[n]["ok"]), None)
        start = time.perf_counter()
        if blocker is not None:
            ok, msg = False, (blocker["message"] if blocker["message"].startswith("skipped:")
                              else f"skipped: {blocker['name']} failed")
        else:
            try:
                ok, msg = True, fn()
            except CheckFailed as exc:
                ok, msg = False, str(exc)
            except Exception as exc:  # every failure is a report entry, never a traceback
                ok, msg = False, f"{type(exc).__name__}: {exc}"
        seconds = round(time.perf_counter() - start, 3)
        self.checks.append({"name": name, "ok": ok, "message": _one_line(msg), "seconds": seconds})
        print(f"[probe] {name}: {'ok' if ok else 'FAILED'} ({seconds:.2f}s) {_one_line(msg, 200)}",
              file=sys.stderr, flush=True)

    def seconds(self, name: str) -> float:
        return next((c["seconds"] for c in self.checks if c["name"] == name), 0.0)

    # -- checks ------------------------------------------------------------------------------------
    def import_torch(self) -> str:
        import torch
        self.torch = torch
        return f"torch {torch.__version__}"

    def import_plugin(self) -> str:
        module = self.args.plugin_import
        if not module:
            return "none needed"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise CheckFailed(f"cannot import plugin module {module!r} for backend "
                              f"{self.args.backend}: {exc} (is the plugin installed in this image?)")
        return f"{module} {_module_dist_version(module) or '(version unknown)'}"

    def device(self) -> str:
        torch, backend = self.torch, self.args.backend
        hip, cuda = torch.version.hip, getattr(torch.version, "cuda", None)
        if backend == "cpu":
            if self.device_type != "cpu":
                raise CheckFailed(f"backend cpu must use device 'cpu', not {self.args.device!r}")
            self.device_info.update(name=platform.processor() or platform.machine(), count=1,
                                    flavor="cpu")
            return f"cpu: {self.device_info['name']}"
        self.device_info["flavor"] = ("rocm" if hip else "cuda") if self.device_type == "cuda" else backend
        if self.device_type == "cpu":
            raise CheckFailed(f"backend {backend} was given device 'cpu': refusing to run on CPU")
        if backend == "rocm" and hip is None:
            raise CheckFailed(f"this torch is not a ROCm build (torch {torch.__version__}, "
                              "torch.version.hip is None)")
        if backend == "cuda" and hip is not None:
            raise CheckFailed(f"this torch is a ROCm build (HIP {hip}), not a CUDA build: "
                              "use the rocm backend")
        if backend == "cuda" and cuda is None:
            raise CheckFailed(f"this torch is not a CUDA build (torch {torch.__version__}, "
                              "torch.version.cuda is None)")
        api = self.args.availability
        available = bool(_resolve(api)())
        namespace = _resolve(api.rpartition(".")[0])
        count = int(namespace.device_count()) if hasattr(namespace, "device_count") else int(available)
        self.device_info["count"] = count
        if not available or count == 0:
            hint = DEVICE_FLAGS.get(backend, "the vendor's device flags")
            raise CheckFailed(f"no {backend} device is visible in the container ({api}() = "
                              f"{available}, device_count() = {count}); the docker run device "
                              f"flags ({hint}) may be missing")
        if hasattr(namespace, "get_device_name"):
            self.device_info["name"] = str(namespace.get_device_name(0))
        return f"{count} x {self.device_info['name'] or self.args.device}"

    def versions(self) -> str:
        if not self.args.expect:
            return "no pins to check"
        found, bad = [], []
        for dist, want in self.args.expect:
            have = _dist_version(dist)
            if have is None:
                bad.append(f"{dist} is not installed (expected {want})")
            elif not _version_matches(have, want):
                bad.append(f"{dist} is {have}, expected {want}")
            else:
                found.append(f"{dist}={have}")
        if bad:
            raise CheckFailed("; ".join(bad))
        return " ".join(found)

    def load(self) -> str:
        start = time.perf_counter()
        import transformers
        self.transformers = transformers
        self.timings["import"] = (self.seconds("import_torch") + self.seconds("import_plugin")
                                  + time.perf_counter() - start)
        source = self.args.model
        if source == "synthetic":
            source = self._make_synthetic()
        elif source.startswith(("/", ".", "~")) or os.path.exists(source):
            source = os.path.expanduser(source)
            if not os.path.isdir(source):
                raise CheckFailed(f"model directory not found: {self.args.model}")
        self.source = source
        self.config = transformers.AutoConfig.from_pretrained(source)
        archs = list(getattr(self.config, "architectures", None) or [])
        self.cls = getattr(transformers, archs[0], None) if archs else None
        if self.cls is None:
            # No usable architecture recorded: a causal LM head only where the family has a real
            # *ForCausalLM class (BERT maps to BertLMHeadModel, which is not what it was saved as).
            from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
            causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(self.config.model_type, "")
            self.cls = (transformers.AutoModelForCausalLM if causal.endswith("ForCausalLM")
                        else transformers.AutoModel)
        start = time.perf_counter()
        self.model = self._from_pretrained(self.args.device)
        self.timings["load"] = round(time.perf_counter() - start, 3)
        param = next(self.model.parameters())
        self.model_info.update(
            {"class": type(self.model).__name__, "device": str(param.device),
             "architecture": archs[0] if archs else self.config.model_type,
             "parameters": sum(p.numel() for p in self.model.parameters())})
        if param.device.type != self.device_type:
            raise CheckFailed(f"the model was loaded on {param.device}, not on the requested "
                              f"device {self.args.device}")
        self.inputs = self._make_inputs()
        return f"{self.model_info['class']} ({self.model_info['parameters']} parameters) on {param.device}"

    def forward(self) -> str:
        torch = self.torch
        start = time.perf_counter()
        with torch.no_grad():
            out = self.model(**{k: v.to(self.args.device) for k, v in self.inputs.items()})
        self.output = self._pick_tensor(out).float().cpu()  # the copy also waits for the device
        self.timings["first_forward"] = round(time.perf_counter() - start, 3)
        if not torch.isfinite(self.output).all():
            raise CheckFailed(f"the output {tuple(self.output.shape)} contains NaN or Inf")
        return f"output {tuple(self.output.shape)}"

    def generate(self) -> str:
        model = self.model
        name = type(model).__name__
        if not (hasattr(model, "generate") and (name.endswith("ForCausalLM") or model.can_generate())):
            return f"not applicable: {name} is not a causal LM"
        inputs = {k: v.to(self.args.device) for k, v in self.inputs.items()
                  if k in ("input_ids", "attention_mask")}
        n = self.args.max_new_tokens
        start = time.perf_counter()
        # min_new_tokens keeps an early EOS from making the token count depend on the weights.
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        self.timings["generate"] = round(time.perf_counter() - start, 3)
        prompt_len = 1 if getattr(self.config, "is_encoder_decoder", False) else inputs["input_ids"].shape[1]
        new_ids = [int(t) for t in out[0, prompt_len:].tolist()]
        self.model_info["generated_ids"] = new_ids
        if len(new_ids) != n:
            raise CheckFailed(f"generate returned {len(new_ids)} new tokens, expected {n}")
        return f"{n} new tokens {new_ids}"

    def cpu_match(self) -> str:
        torch = self.torch
        cpu_model = self._from_pretrained("cpu")
        with torch.no_grad():
            reference = self._pick_tensor(cpu_model(**self.inputs)).float()
        del cpu_model
        if reference.shape != self.output.shape:
            raise CheckFailed(f"output shapes differ: {tuple(self.output.shape)} on "
                              f"{self.args.device}, {tuple(reference.shape)} on cpu")
        diff = (self.output - reference).abs().max().item()
        tol = self.args.tolerance
        if not diff <= tol:  # also catches NaN
            raise CheckFailed(f"max abs diff to CPU is {diff:.3g}, above the tolerance {tol:g}")
        return f"max abs diff to CPU {diff:.3g} <= {tol:g}"

    # -- helpers -----------------------------------------------------------------------------------
    def _make_synthetic(self) -> str:
        transformers = self.transformers
        self.torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        self.tmpdir = tempfile.mkdtemp(prefix="envbuild-probe-")
        # Save and reload so the real from_pretrained path (safetensors, device_map) runs offline.
        transformers.LlamaForCausalLM(config).save_pretrained(self.tmpdir)
        return self.tmpdir

    def _from_pretrained(self, device: str) -> Any:
        try:
            return self.cls.from_pretrained(self.source, device_map=device, dtype=self.torch.float32)
        except TypeError:  # transformers 4.x before `dtype=`
            return self.cls.from_pretrained(self.source, device_map=device,
                                            torch_dtype=self.torch.float32)

    def _make_inputs(self) -> dict[str, Any]:
        torch, source = self.torch, self.source
        tokenizer = None
        if os.path.isdir(source):
            if any(os.path.exists(os.path.join(source, f)) for f in TOKENIZER_FILES):
                tokenizer = self.transformers.AutoTokenizer.from_pretrained(source)
        else:
            with contextlib.suppress(OSError, ValueError):  # a hub repo without a tokenizer
                tokenizer = self.transformers.AutoTokenizer.from_pretrained(source)
        if tokenizer is not None:
            self.model_info["tokenizer"] = type(tokenizer).__name__
            inputs = dict(tokenizer(PROMPT, return_tensors="pt"))
        else:
            text_config = self.config.get_text_config()
            vocab = int(getattr(text_config, "vocab_size", None) or 100)
            ids = torch.tensor([[(7 * i + 3) % vocab for i in range(8)]])
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if getattr(self.config, "is_encoder_decoder", False):
            start = getattr(self.config, "decoder_start_token_id", None) or 0
            inputs["decoder_input_ids"] = torch.full((1, 1), start, dtype=torch.long)
        return inputs

    @staticmethod
    def _pick_tensor(out: Any) -> Any:
        for key in ("logits", "last_hidden_state"):
            value = getattr(out, key, None)
            if value is not None:
                return value
        return out[0] if isinstance(out, (tuple, list)) else out.to_tuple()[0]

    # -- the whole run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            if self.args.pins_only:
                self.step("versions", self.versions)
                return self.report(start)
            self.step("import_torch", self.import_torch)
            if self.args.versions_only:
                # At image build time no device (nor, for some plugins, driver library) exists:
                # importing the plugin or touching the device there would fail for no fault.
                self.step("versions", self.versions)
                return self.report(start)
            self.step("import_plugin", self.import_plugin, ("import_torch",))
            self.step("device", self.device, ("import_torch", "import_plugin"))
            self.step("versions", self.versions)
            self.step("load", self.load, ("device",))
            self.step("forward", self.forward, ("load",))
            self.step("generate", self.generate, ("load",))
            self.step("cpu_match", self.cpu_match, ("forward",))
        finally:
            self.model = None
            if self.tmpdir:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
        return self.report(start)

    def report(self, start: float) -> dict[str, Any]:
        if self.timings["import"] is None:
            self.timings["import"] = self.seconds("import_torch") + self.seconds("import_plugin")
        self.timings["import"] = round(self.timings["import"], 3)
        self.timings["total"] = round(time.perf_counter() - start, 3)
        torch = self.torch
        return {
            "probe": PROBE_FORMAT, "backend": self.args.backend, "device": self.args.device,
            "ok": all(c["ok"] for c in self.checks), "checks": self.checks,
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__ if torch else _dist_version("torch"),
                "torch_cuda": getattr(torch.version, "cuda", None) if torch else None,
                "torch_hip": getattr(torch.version, "hip", None) if torch else None,
                "plugin": (_module_dist_version(self.args.plugin_import)
                           if self.args.plugin_import else None),
                "transformers": _dist_version("transformers"),
                "accelerate": _dist_version("accelerate")},
            "device_info": self.device_info, "model": self.model_info, "timings": self.timings,
        }


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every check and return the report; writes it to --output too when given."""
    args = parse_args(argv)
    # Libraries sometimes print to stdout; stdout belongs to the JSON report alone.
    with contextlib.redirect_stdout(sys.stderr):
        doc = Probe(args).run()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
        except OSError as exc:
            print(f"[probe] cannot write --output {args.output}: {exc}", file=sys.stderr)
            doc["ok"] = False
            doc["output_error"] = _one_line(f"{type(exc).__name__}: {exc}")
    return doc


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)  # --help and usage errors (exit 2) before stdout is diverted
    # Native libraries can write to file descriptor 1 directly, past redirect_stdout: point it at
    # stderr for the run and restore it for the report.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        doc = run(argv)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(doc, indent=2), flush=True)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
