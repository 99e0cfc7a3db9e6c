"""Pairing rules between pins, as pure functions: validate applies them to the matrix, outdated and bump to
candidate releases. One copy of each rule."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

RULES = ("same-release", "same-minor", "local-torch", "none")


def _release(v: Version) -> tuple[int, int, int]:
    return (v.release + (0, 0, 0))[:3]  # "2.14" is 2.14.0


def plugin_fits(rule: str, plugin_version: str, torch_version: str) -> str | None:
    """Why this plugin release cannot go with this torch under the backend's rule (None: it can)."""
    pv, tv = Version(plugin_version), Version(torch_version)
    if rule == "same-release" and _release(pv) != _release(tv):
        return "rule same-release: the plugin's X.Y.Z must equal torch's"
    if rule == "same-minor" and pv.release[:2] != tv.release[:2]:
        return "rule same-minor: the plugin's X.Y must equal torch's"
    if rule == "local-torch" and pv.local != f"torch{tv.public}":
        return f"rule local-torch: the version must end in '+torch{tv.public}'"
    return None


def in_range(spec: str | None, version: str) -> bool:
    return not spec or SpecifierSet(spec).contains(Version(version), prereleases=True)


def torch_required(dist: str, dist_version: str, spec: str | None, torch_version: str) -> str | None:
    """Why a backend's torch cannot carry this transformers/accelerate release (None: it can).

    Transformers checks torch at import and, below its minimum, runs without PyTorch: no model loads."""
    if in_range(spec, torch_version):
        return None
    return f"torch {torch_version} is below what {dist} {dist_version} requires (torch{spec})"
