"""Paths and pins the tests share: written here once."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"
MATRIX = REPO / "matrix.yaml"  # the product's matrix: its pins move
FIXED = DATA / "matrix.yaml"  # a frozen copy for golden files and exact outputs
MINIMAL = DATA / "minimal.yaml"
DOCKERFILES = REPO / "dockerfiles"
TORCH = "2.13.0"  # the CPU wheel that lies on these machines' disk (pip finds it)
# The backends of the fixed matrix, in its order.
ALL = ["cpu", "cuda", "rocm", "neuron", "tpu", "xpu", "mps", "hpu", "npu", "mlu", "musa"]
CONTAINERIZABLE = [b for b in ALL if b != "mps"]
VENDOR_TORCH = ["rocm", "neuron", "hpu", "mlu", "musa"]  # torch.source: base
# PyPI stands in for PyTorch's CPU index, which these machines cannot reach; pip's find-links gives 2.13.0+cpu.
CPU_SET = ["--set", f"backends.cpu.torch.version={TORCH}", "--set", "backends.cpu.torch.index_url=https://pypi.org/simple"]
