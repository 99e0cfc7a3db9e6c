"""The image's one cache root and what `--cache` mounts there: shared by `run` and `smoke` (neither imports the other)."""

from __future__ import annotations

import re
from pathlib import Path

from envbuild.core.errors import InvalidInput

CACHE = "/cache"  # the image's one cache root (HF_HOME, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under it)
# The image points these at CACHE (the Dockerfile's ENV); the others default under them (HF_HOME/hub,
# XDG_CACHE_HOME/torch). A backend's env that moved one would bypass the cache volume: every run downloads and
# compiles again. The matrix refuses them by name (matrix/schema.py).
CACHE_ENV = ("XDG_CACHE_HOME", "HF_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
CACHE_DERIVED_ENV = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE", "HF_XET_CACHE",
                     "TORCH_HOME")
DEFAULT_CACHE = "envbuild-cache"  # a named volume, shared by every backend's image
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def is_folder(source: str) -> bool:
    """A --cache or -v source that names a folder (with a '/', or starting with '.'), not a volume."""
    return "/" in source or source.startswith(".")


def cache_mount(cache: str | None) -> str:
    """--cache as SOURCE:/cache: a folder (resolved) or a volume name (checked)."""
    source = cache or DEFAULT_CACHE
    if is_folder(source):
        return f"{Path(source).expanduser().resolve()}:{CACHE}"
    if not VOLUME_NAME.match(source):
        raise InvalidInput(f"--cache {source!r}: give a folder (with a '/', e.g. ./cache) or a volume name")
    return f"{source}:{CACHE}"
