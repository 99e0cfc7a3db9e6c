"""Refresh the metadata cache (envbuild/matrix/facts.py) from the indexes: for every distribution the images carry
(transformers, accelerate, plugins pip installs), its releases newest first down to the oldest pin and to the newest
that fits each backend's Python and torch, each read from the wheel that backend's Python would install."""

from __future__ import annotations

from typing import Callable

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from envbuild.core import files
from envbuild.matrix import facts as facts_mod
from envbuild.matrix.facts import EXTRA, Facts, Wheel, carried, wheel_tag
from envbuild.matrix.load import load
from envbuild.matrix.model import Matrix
from envbuild.maintain.sources.index import File, IndexClient, SourceError, requirement_of

MAX_RELEASES = 40  # per distribution and refresh: enough to reach back past a Python or torch a vendor base lags


def _tags(f: File) -> set[str]:
    try:
        tags = parse_wheel_filename(f.filename)[3]
    except Exception:  # noqa: BLE001 - a name the index lists but packaging cannot read: no tag
        return set()
    out = set()
    for t in tags:
        out.add(f"{t.interpreter}-abi3" if t.abi == "abi3" else t.interpreter)
    return {"py3" if t in ("py2", "py3", "py30") else t for t in out}


def _pick(files: list[File], python: str) -> tuple[str, File] | None:
    """The wheel Python `python` would install on Linux x86_64 (else any platform), and its tag."""
    def rank(f: File) -> tuple:
        return ("x86_64" not in f.filename, "manylinux" not in f.filename, f.filename)

    exact = [f for f in files if wheel_tag(python) in _tags(f)]
    if exact:
        return wheel_tag(python), sorted(exact, key=rank)[0]
    universal = [f for f in files if "py3" in _tags(f)]
    if universal:
        return "py3", sorted(universal, key=rank)[0]
    return None


def record(facts: Facts, index: IndexClient, index_url: str, dist: str, version: Version, files: list[File],
           pythons: list[str]) -> None:
    """The facts of one release for each of these Pythons (one metadata read per wheel)."""
    wheels = [f for f in files if f.wheel and f.version == version and not f.yanked]
    tags = sorted(set().union(*(_tags(f) for f in wheels))) if wheels else []
    found: dict[str, Wheel] = {}
    for python in pythons or ["3.12"]:
        picked = _pick(wheels, python)
        if picked is None or picked[0] in found:
            continue
        tag, f = picked
        meta = index.file_metadata(f)
        torch = requirement_of(meta.get_all("Requires-Dist") or [], "torch", EXTRA.get(dist))
        found[tag] = Wheel(meta.get("Requires-Python") or f.requires_python, torch)
    facts.record(dist, index_url, str(version), tags, found)


def refresh(matrix: Matrix, facts: Facts, index: IndexClient, *, only: set[str] | None = None,
            say: Callable[[str], None] = lambda _: None) -> list[str]:
    """Bring `facts` up to date for the matrix's pins (in place); returns what could not be asked, per source."""
    wanted: dict[str, dict] = {}
    for b, dist, version, _ in carried(matrix):
        if only is not None and dist not in only:
            continue
        url = matrix.index.url if dist in ("transformers", "accelerate") else (b.plugin.index_url or matrix.index.url)
        w = wanted.setdefault(dist, {"index": url, "pins": set(), "carriers": set()})
        w["pins"].add(Version(version))
        w["carriers"].add((b.python.version, b.torch.version))
    errors = []
    for dist, w in sorted(wanted.items()):
        say(f"reading the metadata of {dist} from {w['index']}")
        try:
            files = index.files(w["index"], dist)
            pythons = sorted({p for p, _ in w["carriers"] if p})
            prereleases = any(v.is_prerelease for v in w["pins"])
            versions = sorted({f.version for f in files if f.wheel and not f.yanked
                               and (prereleases or not f.version.is_prerelease)}, reverse=True)
            unmet = set(w["carriers"])
            oldest = min(w["pins"])
            for i, v in enumerate(versions):
                if (v < oldest and not unmet) or i >= MAX_RELEASES:
                    break
                record(facts, index, w["index"], dist, v, files, pythons)
                unmet = {c for c in unmet if facts.why_not(dist, str(v), c[0], c[1]) != []}
            for pin in w["pins"]:
                if pin in versions and str(pin) not in (facts.dists.get(dist) or {}).get("releases", {}):
                    record(facts, index, w["index"], dist, pin, files, pythons)
                elif pin not in versions:
                    errors.append(f"{dist} {pin}: no wheel of it on {w['index']}")
        except SourceError as exc:
            errors.append(f"{dist}: {exc}")
    return errors


def update(matrix_path: str, index: IndexClient, *, dry_run: bool = False,
           say: Callable[[str], None] = lambda _: None) -> tuple[Facts, list[str], bool]:
    """`envbuild metadata --refresh`: the cache beside `matrix_path` refreshed from the indexes and written (unless
    `dry_run`); returns it, what could not be asked, and whether the file changed. The matrix is then validated
    against it by the caller."""
    matrix = load(matrix_path, with_facts=False)
    path = facts_mod.path_for(matrix_path)
    current = facts_mod.read(path)
    before = path.read_text(encoding="utf-8") if current else None
    fresh = current or Facts(str(path))
    errors = refresh(matrix, fresh, index, say=say)
    changed = fresh.text() != before
    if changed and not dry_run:
        files.commit(files.stage({path: fresh.text()}))
    return fresh, errors, changed
