"""Where envbuild finds its inputs; light to import (the quick up-to-date check needs it before any parsing)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MATRIX = "matrix.yaml"
PACKAGED_MATRIX = Path(__file__).with_name("matrix.yaml")  # a copy of the checkout's, shipped in the wheel
PACKAGE = Path(__file__).parent


def default_matrix() -> str:
    """$ENVBUILD_MATRIX, else ./matrix.yaml (a checkout), else the matrix installed with envbuild."""
    env = os.environ.get("ENVBUILD_MATRIX")
    if env:
        return env
    if Path(DEFAULT_MATRIX).exists() or not PACKAGED_MATRIX.exists():
        return DEFAULT_MATRIX
    return str(PACKAGED_MATRIX)
