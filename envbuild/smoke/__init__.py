"""Stage 4: image -> smoke result. preflight.py checks the host, runner.py starts the container, probe.py
runs inside it (standard library, torch and transformers only: it never imports envbuild)."""

from __future__ import annotations

from ..errors import SmokeError
from .runner import MODEL_MOUNT, OWNED_LABEL, SMOKE_LABEL, SmokeResult, leftover_containers, model_args, smoke

__all__ = ["MODEL_MOUNT", "OWNED_LABEL", "SMOKE_LABEL", "SmokeError", "SmokeResult", "leftover_containers", "model_args", "smoke"]
