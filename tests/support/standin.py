"""Helpers for the stand-in builds (tests/engine/test_standin_*.py, a module per backend so that each
backend's image is removed, and the build cache cut, before the next one builds).

Backends proven as far as a machine without their device allows: their real Dockerfile and their real vendor
plugin from PyPI, built on a stand-in base (the local Debian base with Python's venv, for python:3.12-slim or the
vendor's base), with the torch version overridden to one whose wheel these machines have.

What is asserted is what can be without the device: the image builds; the plugin is installed under the
constraints and torch is not replaced; the pins check passes; the plugin imports where its runtime needs no
vendor stack, and where it does, the probe names what is missing; the probe and smoke say "no <device> device"
rather than a raw error; smoke leaves no container. Only hardware can prove the rest (README and docs: the status of each backend).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import testbed
from .constants import MATRIX, TORCH

REPOSITORY = "envbuild-test/standin"
NPU_PLUGIN = TORCH  # torch-npu X.Y.Z pairs with torch X.Y.Z (pairing: same-release)
STANDIN_PYTHON = "3.11"  # the stand-in base's (Debian bookworm's): the build checks the base's Python


@dataclass
class Standin:
    backend: str
    tag: str
    overrides: list[str]
    output: str


def overrides(backend: str, base: str, *extra: str) -> list[str]:
    """The backend's real matrix entry with only its base (and so its Python) and torch version changed (and PyPI
    standing in for PyTorch's index, which these machines cannot reach)."""
    sets = [f"backends.{backend}.base_image={base}", f"backends.{backend}.python.version={STANDIN_PYTHON}",
            f"backends.{backend}.torch.version={TORCH}",
            f"backends.{backend}.torch.index_url=https://pypi.org/simple", f"image.repository={REPOSITORY}", *extra]
    return [arg for s in sets for arg in ("--set", s)]


def build(backend: str, sets: list[str], cwd: Path, *extra: str) -> Standin:
    proc = subprocess.run(["envbuild", "build", "--backend", backend, "--matrix", str(MATRIX), *sets, *extra],
                          capture_output=True, text=True, cwd=cwd, timeout=1800)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return Standin(backend, f"{REPOSITORY}:{backend}", sets, output)


def in_image(docker_client, image: Standin, script: str) -> tuple[str, str]:
    """Run python in the image (no device flags, as on a machine without the device): (stdout, stderr)."""
    _, out, err = testbed.docker_run(docker_client, image.tag, ["python", "-c", script], timeout=300)
    return out.decode(), err.decode()


def probe(docker_client, image: Standin) -> dict:
    status, out, _ = testbed.docker_run(docker_client, image.tag, ["envbuild-probe"], timeout=300,
                                        environment={"HF_HUB_OFFLINE": "1"})
    doc = json.loads(out)
    assert status == 1 and doc["ok"] is False
    return {c["name"]: c for c in doc["checks"]}


def smoke(image: Standin, cwd: Path) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(["envbuild", "smoke", "--backend", image.backend, "--matrix", str(MATRIX), *image.overrides,
                           "--json-file", "smoke.json"], capture_output=True, text=True, cwd=cwd, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads((cwd / "smoke.json").read_text())


VERSIONS = ("import importlib.metadata as m, json; "
            "print(json.dumps({d: m.version(d) for d in ('torch', '{plugin}', 'transformers')}))")
