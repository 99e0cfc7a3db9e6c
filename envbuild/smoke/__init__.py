"""Stage 4: image -> smoke result. preflight.py checks the host, runner.py starts the container, probe.py
runs inside it (standard library, torch and transformers only: it never imports envbuild)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from envbuild.core.errors import SmokeError
from envbuild.smoke.runner import MODEL_MOUNT, OWNED_LABEL, SMOKE_LABEL, SmokeResult, leftover_containers, model_args, smoke

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.core.platform import Platform
    from envbuild.matrix import Backend, Matrix

__all__ = ["MODEL_MOUNT", "OWNED_LABEL", "SMOKE_LABEL", "SmokeError", "SmokeResult", "leftover_containers", "model_args",
           "smoke", "smoke_each"]


def smoke_each(matrix: Matrix, backends: list[Backend], engine: EngineAPI, *, keep_going: bool,
               failed: Callable[[SmokeError], None] = lambda exc: None,
               done: Callable[[SmokeResult], None] = lambda result: None, image: str | None = None,
               platform: str | Platform | None = None, **options: Any) -> list[SmokeResult]:
    """Smoke each backend in turn (options: as smoke()), `done` told of each result as it comes. A backend whose
    smoke cannot run (a SmokeError: the host, the image) is raised, or with `keep_going` (several backends, a report
    to write) told to `failed` and recorded as a failed result, and the rest still run."""
    results = []
    for backend in backends:
        try:
            result = smoke(matrix, backend, engine, image=image, platform=platform, **options)
        except SmokeError as exc:
            if not keep_going:
                raise
            failed(exc)
            result = SmokeResult(backend.name, image or matrix.tags(backend)[0], False, 0.0, None, error=str(exc),
                                 platform=platform)
        results.append(result)
        done(result)
    return results
