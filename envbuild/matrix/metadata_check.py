"""`envbuild metadata` (without --refresh): whether the metadata cache beside the matrix (matrix.yaml ->
matrix.metadata.json) knows every pin, offline. The cache's reading and rules are facts.py's; writing it is
maintain/sources/metadata.py's; this is the check, which the command only prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envbuild.matrix import facts


@dataclass(frozen=True)
class MetadataCheck:
    matrix_path: str
    cache_path: str | None  # None: no cache beside the matrix
    lacking: list[str] = field(default_factory=list)  # the pins the cache does not know, one line each

    @property
    def ok(self) -> bool:
        return self.cache_path is not None and not self.lacking


def check(m: Any, matrix_path: str | Path) -> MetadataCheck:
    """The cache beside `matrix_path` against the matrix `m` (read from it): each pin it lacks. A cache that is not
    one raises a located MatrixError (facts.read)."""
    cache = facts.read(facts.path_for(matrix_path))
    if cache is None:
        return MetadataCheck(str(matrix_path), None)
    return MetadataCheck(str(matrix_path), cache.path, facts.missing(m, cache))
