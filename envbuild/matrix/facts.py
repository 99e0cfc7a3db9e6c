"""Facts from the packages themselves: each pinned distribution's Requires-Python and what it requires of torch, read
from its index (PEP 691/658 metadata, else the wheel) and kept in the repository beside the matrix, so that
`validate` holds every backend to them with no network.

The cache is `<matrix stem>.metadata.json` beside the matrix (matrix.yaml -> matrix.metadata.json). It is written by
`envbuild metadata --refresh` and by `envbuild bump` (envbuild/maintain/sources/metadata.py), never by hand. Per distribution
it lists releases newest first, down to the oldest pinned one and to the newest that fits each backend, so that an
error can name the newest release that would fit. A fact the cache lacks is unknown, never an error here
(`envbuild metadata --check` names what is missing).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuild.core.errors import InvalidInput, MatrixError, Problem
from envbuild.core.files import read_project
from envbuild.core.paths import metadata_path, packaged_within

path_for = metadata_path  # where callers of this module look for it

FORMAT = 1
MAX_FACTS = 8 << 20  # bytes
# transformers declares torch through its `torch` extra; the others (accelerate, plugins) unconditionally
EXTRA = {"transformers": "torch"}


def wheel_tag(python: str) -> str:
    return "cp" + python.replace(".", "")


def fits_python(requires_python: str | None, python: str) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(Version(python + ".0"), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True  # unreadable metadata: unknown, never a refusal


def fits_torch(spec: str | None, torch: str) -> bool:
    if not spec:
        return True
    try:
        return SpecifierSet(spec).contains(Version(torch), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True


@dataclass(frozen=True)
class Wheel:
    """What one release's wheel for one Python says."""

    requires_python: str | None
    torch: str | None


@dataclass
class Facts:
    """dist -> version -> {"tags": [python tags of its wheels], "wheels": {tag: {requires_python, torch}}}"""

    path: str
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)

    def releases(self, dist: str) -> list[str]:
        """The cached releases of `dist`, newest first."""
        found = (self.dists.get(dist) or {}).get("releases") or {}
        return sorted(found, key=Version, reverse=True)

    def index(self, dist: str) -> str | None:
        return (self.dists.get(dist) or {}).get("index")

    def wheel(self, dist: str, version: str, python: str) -> Wheel | None | bool:
        """The facts of the wheel Python `python` would install; False: the release has no wheel for it (known);
        None: unknown (not in the cache)."""
        release = ((self.dists.get(dist) or {}).get("releases") or {}).get(version)
        if release is None:
            return None
        wheels = release.get("wheels") or {}
        for tag in (wheel_tag(python), *sorted(t for t in wheels if t.startswith(("py3", "py2.py3")))):
            if tag in wheels:
                w = wheels[tag]
                return Wheel(w.get("requires_python"), w.get("torch"))
        tags = release.get("tags") or []
        if tags and not any(t == wheel_tag(python) or t.startswith(("py3", "py2.py3")) or _abi3(t, python) for t in tags):
            return False
        return None

    def why_not(self, dist: str, version: str, python: str | None, torch: str) -> list[str] | None:
        """Why Python `python` with this torch cannot carry `dist version` (empty: it can; None: unknown)."""
        if python is None:
            w = self._any(dist, version)
            if w is None:
                return None
            return [] if fits_torch(w.torch, torch) else [f"it requires torch{w.torch}, the backend has torch {torch}"]
        w = self.wheel(dist, version, python)
        if w is None:
            return None
        if w is False:
            return [f"it has no wheel for Python {python}"]
        why = []
        if not fits_python(w.requires_python, python):
            why.append(f"it requires Python {w.requires_python}, the base runs Python {python}")
        if not fits_torch(w.torch, torch):
            why.append(f"it requires torch{w.torch}, the backend has torch {torch}")
        return why

    def _any(self, dist: str, version: str) -> Wheel | None:
        release = ((self.dists.get(dist) or {}).get("releases") or {}).get(version) or {}
        for w in (release.get("wheels") or {}).values():
            return Wheel(w.get("requires_python"), w.get("torch"))
        return None

    def newest_fit(self, dist: str, python: str | None, torch: str, avoid: tuple[str, ...] = ()) -> str | None:
        """The newest cached release this Python and torch can carry (None: none known)."""
        for version in self.releases(dist):
            if version in avoid or Version(version).is_prerelease:
                continue
            if self.why_not(dist, version, python, torch) == []:
                return version
        return None

    def record(self, dist: str, index: str, version: str, tags: list[str], wheels: dict[str, Wheel]) -> None:
        entry = self.dists.setdefault(dist, {"index": index, "releases": {}})
        entry["index"] = index
        old = entry["releases"].get(version) or {}
        merged = {**(old.get("wheels") or {}), **{t: {"requires_python": w.requires_python, "torch": w.torch}
                                                  for t, w in wheels.items()}}
        entry["releases"][version] = {"tags": sorted(tags), "wheels": dict(sorted(merged.items()))}

    def text(self) -> str:
        """The file's bytes: sorted, newest release first, so that a refresh shows as a small diff."""
        dists = {}
        for dist in sorted(self.dists):
            entry = self.dists[dist]
            releases = entry.get("releases") or {}
            dists[dist] = {"index": entry.get("index"), "extra": EXTRA.get(dist),
                           "releases": {v: releases[v] for v in sorted(releases, key=Version, reverse=True)}}
        doc = {"about": "Package metadata (Requires-Python, Requires-Dist on torch) of the matrix's pins, read from their "
                        "indexes; `envbuild validate` reads it offline. Written by `envbuild metadata --refresh` and "
                        "`envbuild bump`: do not edit.",
               "format": FORMAT, "distributions": dists}
        text = json.dumps(doc, indent=1, sort_keys=False)
        # innermost lists and mappings on one line each: a release reads as one block
        return re.sub(r"([\[{])\n\s+([^\[\]{}]*?)\n\s*([\]}])",
                      lambda m: m.group(1) + " ".join(x.strip() for x in m.group(2).split("\n")) + m.group(3), text) + "\n"


def _abi3(tag: str, python: str) -> bool:
    m = re.fullmatch(r"cp3(\d+)-abi3", tag)
    return bool(m) and int(m.group(1)) <= int(python.split(".")[1])


def read(path: str | Path) -> Facts | None:
    """The cache at `path`; None when there is none; a located MatrixError when it is not one."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return None
    try:
        raw = read_project(p, str(p), InvalidInput, limit=MAX_FACTS, within=packaged_within(p))
    except InvalidInput as exc:
        raise MatrixError([Problem(str(p), None, str(exc).split(": ", 1)[-1])]) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise MatrixError([Problem(str(p), getattr(exc, "lineno", None), f"not the metadata cache (JSON): {exc}; "
                                   "write it again with `envbuild metadata --refresh`")]) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("distributions"), dict):
        raise MatrixError([Problem(str(p), None, f"not a metadata cache of format {FORMAT}: write it again with "
                                   "`envbuild metadata --refresh`")])
    where = _not_written_here(doc["distributions"])
    if where:
        raise MatrixError([Problem(str(p), None, f"not a metadata cache envbuild wrote: {where} is not what "
                                   "`envbuild metadata --refresh` writes; write it again with that command")])
    return Facts(str(p), doc["distributions"])


def _not_written_here(dists: dict[str, Any]) -> str | None:
    """The first field of a (hand-edited) cache whose type is not what envbuild writes; None: every field is."""
    text = (str, type(None))
    for dist, d in dists.items():
        if not isinstance(d, dict) or not all(isinstance(d.get(k), text) for k in ("index", "extra")):
            return f"distributions.{dist}"
        releases = d.get("releases")
        if not isinstance(releases, (dict, type(None))):
            return f"distributions.{dist}.releases"
        for version, release in (releases or {}).items():
            at = f"distributions.{dist}.releases.{version}"
            try:
                Version(version)
            except InvalidVersion:
                return at
            tags, wheels = (release.get("tags"), release.get("wheels")) if isinstance(release, dict) else (0, 0)
            if not isinstance(tags, (list, type(None))) or not all(isinstance(t, str) for t in tags or ()):
                return f"{at}.tags" if isinstance(release, dict) else at
            if not isinstance(wheels, (dict, type(None))):
                return f"{at}.wheels"
            for tag, wheel in (wheels or {}).items():
                if not isinstance(wheel, dict) or not all(isinstance(wheel.get(k), text) for k in ("requires_python", "torch")):
                    return f"{at}.wheels.{tag}"
    return None


def carried(matrix: Any) -> Iterator[tuple[Any, str, str, str]]:
    """(backend, distribution, version, matrix field) for every package the cache speaks of, per image: the
    transformers and accelerate it carries, and its plugin when pip installs it."""
    for b in matrix.containerizable():
        for dist in ("transformers", "accelerate"):
            own = dict(b.own).get(dist)
            yield b, dist, matrix.pin(dist, b), (f"backends.{b.name}.{dist}.version" if own else f"{dist}.version")
        if b.plugin and b.plugin.source == "pip":
            yield b, b.plugin.package, b.plugin.version, f"backends.{b.name}.plugin.version"


def problems(matrix: Any, facts: Facts) -> list[tuple[str, str]]:
    """(field, message) for every backend whose Python or torch cannot carry a pinned package, with the newest
    release that would fit."""
    out = []
    for b, dist, version, where in carried(matrix):
        python = b.python.version  # None (not declared): only torch is checked; `envbuild metadata` says so
        why = facts.why_not(dist, version, python, b.torch.version)
        if not why:
            continue
        avoid = matrix.avoided(dist) if dist in ("transformers", "accelerate") else ()
        newest = facts.newest_fit(dist, python, b.torch.version, avoid)
        runs = f"Python {python} and torch {b.torch.version}" if python else f"torch {b.torch.version}"
        fix = (f"the newest {dist} that fits {runs} is {newest}" if newest else f"no cached {dist} release fits {runs}")
        if dist in ("transformers", "accelerate"):
            fix += f": pin it for this backend (backends.{b.name}.{dist}.version) or use a base that fits"
        else:
            fix += ": pin it, or a torch and base that fit"
        has = f"Python {python}, torch {b.torch.version}" if python else f"torch {b.torch.version}"
        out.append((where, f"{where}: backend {b.name} ({has}) cannot carry {dist} "
                           f"{version}: {'; '.join(why)} (its metadata, {Path(facts.path).name}); {fix}"))
    return out


def missing(matrix: Any, facts: Facts) -> list[str]:
    """The pins whose facts the cache lacks (unknown to validate)."""
    out = []
    for b, dist, version, where in carried(matrix):
        if not b.python.version:
            out.append(f"backends.{b.name}.python.version: not declared (the base's Python, e.g. \"3.12\"): the pins' "
                       "Requires-Python cannot be checked")
        elif facts.why_not(dist, version, b.python.version, b.torch.version) is None:
            out.append(f"{dist} {version} for Python {b.python.version} ({where}, backend {b.name})")
    return list(dict.fromkeys(out))
