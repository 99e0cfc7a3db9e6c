"""locks/<backend>.txt: every Python distribution an image adds on top of its base, pinned and hashed, in the
requirements format that pip and uv install with hash checking.

A header records what the lock was resolved from (its inputs, one line of JSON), so staleness is decided by
comparing inputs, never by resolving again. The body is split into layers, in install order:
torch (torch, the plugin and what they need), deps (the rest), extras (the matrix's packages), top
(transformers and accelerate): a transformers bump that keeps its dependencies changes only `top`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.core.errors import LockError

FORMAT = 2  # 2: one lock per platform, the base named by its registry digest
LAYERS = ("torch", "deps", "extras", "top")
TOP = ("transformers", "accelerate")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)\Z")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})\Z")


@dataclass(frozen=True)
class Locked:
    name: str  # canonical (PEP 503)
    version: str
    sha256: tuple[str, ...]
    layer: str

    def lines(self) -> list[str]:
        hashes = [f"    --hash=sha256:{h}" for h in self.sha256]
        return [f"{self.name}=={self.version} \\", *(h + " \\" for h in hashes[:-1]), *hashes[-1:]]


@dataclass(frozen=True)
class LockFile:
    backend: str
    inputs: dict[str, Any]
    resolved: dict[str, Any]  # the platform, Python and resolver it was resolved with (informational)
    packages: tuple[Locked, ...]

    def layer(self, name: str) -> tuple[Locked, ...]:
        return tuple(p for p in self.packages if p.layer == name)

    def text(self) -> str:
        lines = [
            f"# envbuild lock of backend {self.backend}: the Python distributions its image adds to the base, pinned and hashed.",
            f"# `envbuild lock --backend {self.backend}` writes it and `envbuild build` installs exactly it; do not edit it by hand.",
            f"# inputs: {json.dumps(self.inputs, sort_keys=True)}",
            f"# resolved: {json.dumps(self.resolved, sort_keys=True)}",
        ]
        for layer in LAYERS:
            lines.append(f"# layer: {layer}")
            for p in self.layer(layer):
                lines += p.lines()
        return "\n".join(lines) + "\n"

    def requirements(self, layer: str) -> str:
        """One layer as a requirements file (what one image layer installs)."""
        return "".join("\n".join(p.lines()) + "\n" for p in self.layer(layer))

    def pins(self) -> dict[str, str]:
        return {p.name: p.version for p in self.packages}


def parse(text: str, source: str) -> LockFile:
    """A lock file, or a LockError naming the file and line of what is wrong with it."""
    backend, inputs, resolved, layer = None, None, {}, None
    packages: list[Locked] = []
    current: tuple[str, str, list[str], int] | None = None

    def close() -> None:
        nonlocal current
        if current:
            name, version, hashes, at = current
            if not hashes:
                raise LockError(f"{source}:{at}: {name}=={version} has no --hash (a lock pins every file by its sha256)")
            packages.append(Locked(name, version, tuple(hashes), layer or "deps"))
        current = None

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        continued = line.endswith("\\")
        line = line.rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("#"):
            close()
            body = line[1:].strip()
            if body.startswith("envbuild lock of backend "):
                backend = body[len("envbuild lock of backend "):].split(":", 1)[0]
            elif body.startswith(("inputs:", "resolved:")):
                key, _, value = body.partition(":")
                try:
                    doc = json.loads(value)
                except ValueError:
                    raise LockError(f"{source}:{n}: the {key} line is not JSON") from None
                if not isinstance(doc, dict):
                    raise LockError(f"{source}:{n}: the {key} line is not a JSON object")
                inputs, resolved = (doc, resolved) if key == "inputs" else (inputs, doc)
            elif body.startswith("layer:"):
                layer = body.split(":", 1)[1].strip()
                if layer not in LAYERS:
                    raise LockError(f"{source}:{n}: unknown layer {layer!r} (expected one of: {', '.join(LAYERS)})")
            continue
        hashed = _HASH.match(line)
        if hashed:
            if current is None:
                raise LockError(f"{source}:{n}: a --hash without the requirement it belongs to")
            current[2].append(hashed.group(1))
        else:
            close()
            pin = _PIN.match(line)
            if not pin:
                raise LockError(f"{source}:{n}: {line[:80]!r} is not NAME==VERSION (a lock pins exact versions)")
            current = (str(canonicalize_name(pin.group(1))), pin.group(2), [], n)
        if not continued:
            close()
    close()
    if backend is None or inputs is None:
        raise LockError(f"{source}: not an envbuild lock (no header naming its backend and inputs): "
                        f"write it with `envbuild lock`")
    return LockFile(backend, inputs, resolved, tuple(packages))


# --- from a resolution --------------------------------------------------------------------------------------


def _closure(roots: Iterable[Requirement], requires: dict[str, list[str]], environment: dict[str, str]) -> set[str]:
    """The distributions `roots` pull in, following requires_dist with its markers evaluated for the resolving
    environment (and the extras asked for)."""
    seen: dict[str, set[str]] = {}
    queue = [(str(canonicalize_name(r.name)), set(r.extras)) for r in roots]
    while queue:
        name, extras = queue.pop()
        if name not in requires:  # already in the base: not part of the lock
            continue
        if name in seen and extras <= seen[name]:
            continue
        seen.setdefault(name, set()).update(extras)
        for text in requires[name]:
            try:
                req = Requirement(text)
                wanted = req.marker is None or any(req.marker.evaluate({**environment, "extra": e}) for e in {"", *extras})
            except (InvalidRequirement, InvalidMarker):
                continue  # a dependency pip itself could not have followed
            if wanted:
                queue.append((str(canonicalize_name(req.name)), set(req.extras)))
    return set(seen)


def from_report(backend: str, report: dict[str, Any], inputs: dict[str, Any], torch_roots: list[str],
                extras: list[str], resolved: dict[str, Any]) -> LockFile:
    """A pip installation report (`pip install --dry-run --report`) -> the lock, split into layers."""
    items = report.get("install")
    if not isinstance(items, list):
        raise LockError("the resolver's report lists nothing to install (not a pip installation report)")
    requires: dict[str, list[str]] = {}
    found: dict[str, tuple[str, str]] = {}
    for item in items:
        meta = item.get("metadata") or {}
        name = str(canonicalize_name(meta.get("name", "")))
        archive = (item.get("download_info") or {}).get("archive_info") or {}
        digest = (archive.get("hashes") or {}).get("sha256") or (archive.get("hash") or "").partition("sha256=")[2]
        if not name or not meta.get("version"):
            raise LockError(f"the resolver's report has an entry without a name or version: {str(item)[:200]}")
        if not digest:
            url = (item.get("download_info") or {}).get("url", "?")
            raise LockError(f"{name} {meta['version']} comes from {url}, which has no sha256: a lock can only pin "
                            "archives from an index or a wheelhouse")
        requires[name] = list(meta.get("requires_dist") or [])
        found[name] = (meta["version"], digest)
    environment = report.get("environment") or {}
    in_torch = _closure([Requirement(r) for r in torch_roots], requires, environment)
    extra_names = {str(canonicalize_name(Requirement(r).name)) for r in extras}

    def layer(name: str) -> str:
        if name in in_torch:
            return "torch"
        if name in TOP:
            return "top"
        return "extras" if name in extra_names else "deps"

    packages = sorted((Locked(name, version, (digest,), layer(name)) for name, (version, digest) in found.items()),
                      key=lambda p: (LAYERS.index(p.layer), p.name))
    return LockFile(backend, inputs, resolved, tuple(packages))
