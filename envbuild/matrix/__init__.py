"""Stage 1: matrix.yaml -> validated, frozen backend objects (schema, loader, model)."""

from __future__ import annotations

from envbuild.core.paths import DEFAULT_MATRIX, PACKAGED_MATRIX, default_matrix as default_path
from envbuild.matrix.load import load, loads
from envbuild.matrix.model import (
    Backend,
    Compile,
    Detect,
    HostNeeds,
    Image,
    Index,
    Matrix,
    Pin,
    Plugin,
    Python,
    RunSpec,
    Torch,
    not_containerizable_message,
)

__all__ = [
    "DEFAULT_MATRIX", "PACKAGED_MATRIX", "default_path", "load", "loads", "Backend", "Compile", "Detect", "HostNeeds", "Image", "Index", "Matrix",
    "Pin", "Plugin", "Python", "RunSpec", "Torch", "not_containerizable_message",
]
