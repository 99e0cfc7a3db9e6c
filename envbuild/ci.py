"""matrix.yaml -> CI job matrices. The workflows list no backend themselves: they ask `envbuild matrix`."""

from __future__ import annotations

import shlex
from typing import Any

from .matrix import Backend, Matrix

# What a CI smoke runs: the synthetic model needs no hub access; the timeout covers a cold image on a slow runner.
SMOKE_MODEL = "synthetic"
SMOKE_TIMEOUT = 900


def has_device(backend: Backend) -> bool:
    """Whether the job's runner has the backend's device: the CPU everywhere; an accelerator only on the
    self-hosted runners its labels pick (GitHub-hosted runners have none of these accelerators)."""
    return backend.device == "cpu" or "self-hosted" in backend.runs_on


SMOKE_ARGS = shlex.join(["--model", SMOKE_MODEL, "--timeout", str(SMOKE_TIMEOUT)])


# GitHub's hosted arm64 runner; a self-hosted runner carries its architecture as a default label (X64, ARM64).
HOSTED_ARM64 = "ubuntu-24.04-arm"
SELF_HOSTED_ARCH = {"amd64": "X64", "arm64": "ARM64"}


def runs_on(backend: Backend, platform: str) -> list[str]:
    """The runner labels of a native runner for `platform`: the backend's ci.runs_on for its first platform; for
    another, GitHub's hosted arm64 runner in place of a hosted one, or the self-hosted labels plus the
    architecture's label (ARM64), so each platform builds and smokes where it runs natively."""
    labels = list(backend.runs_on)
    if platform == backend.platforms[0]:
        return labels
    arch = platform.split("/")[1]
    if "self-hosted" in labels:
        return [*labels, SELF_HOSTED_ARCH.get(arch, arch.upper())]
    return [HOSTED_ARM64] if arch == "arm64" else labels


def job(m: Matrix, backend: Backend, platform: str | None = None) -> dict[str, Any]:
    tags = m.tags(backend)
    platform = platform or backend.platforms[0]
    return {
        "backend": backend.name,
        "device": backend.device,
        "image": tags[0],
        "pinned": tags[1],
        "runs-on": runs_on(backend, platform),
        "self-hosted": "self-hosted" in backend.runs_on,
        "smoke": has_device(backend),
        "smoke_args": SMOKE_ARGS,
        "platforms": ",".join(backend.platforms),
        "platform": platform,
        "arch": platform.split("/")[1],
    }


def github_matrix(m: Matrix, backends: list[Backend] | None = None, *, per_platform: bool = False) -> dict[str, Any]:
    """`strategy.matrix` for GitHub Actions (through fromJSON): one include entry per containerizable backend (on
    the runners of its first platform), or with `per_platform` one per backend and Linux platform it lists."""
    chosen = m.containerizable() if backends is None else [b for b in backends if b.containerizable]
    if per_platform:
        return {"include": [job(m, b, p) for b in chosen for p in b.platforms if p.startswith("linux/")]}
    return {"include": [job(m, b) for b in chosen]}
