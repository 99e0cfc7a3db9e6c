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


def job(m: Matrix, backend: Backend) -> dict[str, Any]:
    tags = m.tags(backend)
    return {
        "backend": backend.name,
        "device": backend.device,
        "image": tags[0],
        "pinned": tags[1],
        "runs-on": list(backend.runs_on),
        "self-hosted": "self-hosted" in backend.runs_on,
        "smoke": has_device(backend),
        "smoke_args": SMOKE_ARGS,
        "platforms": ",".join(backend.platforms),
    }


def github_matrix(m: Matrix, backends: list[Backend] | None = None) -> dict[str, Any]:
    """`strategy.matrix` for GitHub Actions (through fromJSON): one include entry per containerizable backend."""
    chosen = m.containerizable() if backends is None else [b for b in backends if b.containerizable]
    return {"include": [job(m, b) for b in chosen]}
