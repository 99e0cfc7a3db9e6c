"""Where envbuild finds its inputs and keeps its caches; light to import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

PACKAGE = Path(__file__).parent.parent  # the envbuild package
DEFAULT_MATRIX = "matrix.yaml"
PACKAGED_MATRIX = PACKAGE / "matrix" / "matrix.yaml"  # the checkout's, shipped in the wheel
PROBE = PACKAGE / "smoke" / "probe.py"  # copied into every image and every native environment


def packaged_within(path: str | os.PathLike[str]) -> Path | None:
    """Where the matrix installed with envbuild (and its metadata cache) may lead: in a checkout they are links to
    the checkout's own files, one folder above the package; None for any other file (its own folder bounds it)."""
    if Path(path).absolute() in (PACKAGED_MATRIX, metadata_path(PACKAGED_MATRIX)):
        return PACKAGE.parent
    return None


def default_matrix() -> str:
    """$ENVBUILD_MATRIX, else ./matrix.yaml (a checkout), else the matrix installed with envbuild."""
    env = os.environ.get("ENVBUILD_MATRIX")
    if env:
        return env
    if Path(DEFAULT_MATRIX).exists() or not PACKAGED_MATRIX.exists():
        return DEFAULT_MATRIX
    return str(PACKAGED_MATRIX)


def metadata_path(matrix_path: str | os.PathLike[str]) -> Path:
    """The metadata cache beside a matrix: matrix.yaml -> matrix.metadata.json (envbuild/matrix/facts.py)."""
    p = Path(matrix_path)
    return p.with_name(p.stem + ".metadata.json")


def cache_dir(*parts: str) -> Path:
    """envbuild's per-user cache: $XDG_CACHE_HOME/envbuild, else ~/.cache/envbuild (never needed for correctness)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root, "envbuild", *parts)


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The docker client's configuration folder: $DOCKER_CONFIG, else ~/.docker (config.json, contexts, buildx)."""
    env = os.environ if environ is None else environ
    return Path(env.get("DOCKER_CONFIG") or Path.home() / ".docker")


def config_file(environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / "config.json"
