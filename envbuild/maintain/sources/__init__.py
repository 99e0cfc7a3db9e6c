"""What is newer than the matrix's pins, what of that fits the backends' rules, and why the rest does not.

Each pin is asked of its own source (the package index it installs from, the registry of its base image);
a source that cannot answer is reported for its pins only. Nothing here writes: `bump` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from packaging.requirements import Requirement
from packaging.version import Version

from envbuild.core import heartbeat
from envbuild.core.errors import InvalidInput
from envbuild.matrix import stacks
from envbuild.matrix import rules
from envbuild.matrix.facts import Facts
from envbuild.matrix.model import Backend, Matrix
from envbuild.core.imageref import Reference, mirror, parse_mirror
from envbuild.maintain.sources.index import IndexClient, SourceError
from envbuild.maintain.sources.metadata import record
from envbuild.maintain.sources.tags import RegistryClient, follow, newer_tags

__all__ = ["Finding", "Sources", "SourceError", "outdated"]


@dataclass
class Finding:
    """One pin: where it is in the matrix, what it is, what its source has, and what fits."""

    field: str  # dotted path in matrix.yaml, e.g. backends.cuda.torch.version
    backend: str | None  # None: shared by every image
    source: str  # the index URL or registry it was asked of
    current: str
    newest: str | None = None
    fits: str | None = None  # the newest that fits every rule (may be the current pin)
    why: list[str] = field(default_factory=list)  # why newer releases do not fit
    error: str | None = None  # the source could not answer
    also: dict[str, str] = field(default_factory=dict)  # fields that move with it (a base's torch, a release's torch need)
    bumpable: bool = True  # False: reported only (an extra's specifier is the user's, the lock moves it)

    @property
    def newer(self) -> bool:
        return bool(self.bumpable and self.fits and self.fits != self.current)

    @property
    def changes(self) -> dict[str, str]:
        """What `bump` writes for this pin: the field and those that move with it."""
        out = dict(self.also)
        if self.newer:
            out[self.field] = self.fits
        return out

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "newer": self.newer}


@dataclass
class Sources:
    """The clients and options of one run (the same CA bundle, netrc and mirrors as build)."""

    ca_bundle: Path | None = None
    netrc: Path | None = None
    mirrors: tuple[str, ...] = ()
    environ: Mapping[str, str] | None = None
    index_mirrors: tuple[tuple[str, str], ...] = ()
    index: IndexClient | None = None
    registry: RegistryClient | None = None
    facts: Facts | None = None  # what the candidates' metadata says, read once per run

    def __post_init__(self) -> None:
        self.index = self.index or IndexClient(self.ca_bundle, self.netrc, index_mirrors=self.index_mirrors)
        self.facts = self.facts or Facts("(asked)")

    @classmethod
    def checked(cls, mirrors: Iterable[str] = (), ca_bundle: Path | None = None, netrc: Path | None = None,
                index_mirrors: tuple[tuple[str, str], ...] = ()) -> Sources:
        """The sources of `outdated`, `bump` and `metadata --refresh` from what the user gave, refused before
        anything is asked: --ca-bundle and --netrc regular files, each --mirror FROM=TO (exit 2). The CA bundle
        defaults to the host's, as for build."""
        from envbuild.image.plan import default_ca_bundle

        for given, option in ((ca_bundle, "--ca-bundle"), (netrc, "--netrc")):
            if given is not None and not given.is_file():
                raise InvalidInput(f"{option} {given}: not a regular file")
        for rule in mirrors:
            parse_mirror(rule)
        return cls(ca_bundle=ca_bundle or default_ca_bundle(), netrc=netrc, mirrors=tuple(mirrors),
                   index_mirrors=tuple(index_mirrors))

    def cannot(self, index_url: str, dist: str, version: Version | str, backend: Backend, torch: str) -> list[str]:
        """Why this backend (its Python, this torch) cannot carry `dist version`, from the release's own metadata."""
        python = backend.python.version
        if self.facts.why_not(dist, str(version), python, torch) is None:
            record(self.facts, self.index, index_url, dist, Version(str(version)), self.index.files(index_url, dist),
                   [python] if python else [])
        return self.facts.why_not(dist, str(version), python, torch) or []

    def registry_for(self, matrix: Matrix) -> RegistryClient:
        if self.registry is None:
            self.registry = RegistryClient(self.ca_bundle, self.environ,
                                           Reference.parse(matrix.image.repository).registry)
        return self.registry


def _asked(finding: Finding, ask: Callable[[], None]) -> Finding:
    try:
        ask()
    except SourceError as exc:
        finding.error = str(exc)
    return finding


def _without_avoided(f: Finding, versions: list[Version], avoid: tuple[str, ...], dist: str) -> list[Version]:
    """The releases the matrix does not avoid; each avoided one that is newer is said."""
    bad = {Version(v) for v in avoid}
    for v in versions:
        if v in bad and v > Version(f.current):
            f.why.append(f"{v}: avoided ({dist}.avoid in the matrix)")
    return [v for v in versions if v not in bad]


def _newer(versions: Iterable[Version], current: str) -> list[Version]:
    cur = Version(current)
    return [v for v in versions if v > cur]


# --------------------------------------------------------------------------------------------------
# Shared pins: transformers and accelerate (held to every backend's torch), uv.


def needs_torch(sources: Sources, matrix: Matrix, dist: str, version: Version | str) -> str | None:
    extra = "torch" if dist == "transformers" else None  # transformers declares torch through its `torch` extra
    return sources.index.requirement(matrix.index.url, dist, version, "torch", extra)


def _shared(sources: Sources, matrix: Matrix, dist: str, backends: list[Backend]) -> Finding:
    current = getattr(matrix, dist)
    recorded = getattr(matrix, f"{dist}_torch")
    f = Finding(f"{dist}.version", None, matrix.index.url, current)

    def ask() -> None:
        versions = sources.index.versions(matrix.index.url, dist, prereleases=Version(current).is_prerelease)
        f.newest = str(versions[0]) if versions else None
        f.fits = current
        versions = _without_avoided(f, versions, matrix.avoided(dist), dist)
        scanned: list[tuple[Version, str | None]] = []
        held: set[str] = set()
        for v in _newer(versions, current):  # newest first: the first that every backend carries wins
            spec = needs_torch(sources, matrix, dist, v)
            scanned.append((v, spec))
            too_old = [b for b in backends if rules.torch_required(dist, str(v), spec, b.torch.version)]
            # Requires-Python, from the release's metadata, against each base's declared Python
            no_python = [b for b in backends if b not in too_old and b.python.version
                         and any("Python" in w for w in sources.cannot(matrix.index.url, dist, v, b, b.torch.version))]
            if not too_old and not no_python:
                f.fits = str(v)
                if spec and spec != recorded:
                    f.also[f"{dist}.torch"] = spec
                break
            if no_python:
                rp = sources.facts.wheel(dist, str(v), no_python[0].python.version)
                f.why.append(f"{v} needs Python {getattr(rp, 'requires_python', '?')}: "
                             + ", ".join(f"{b.name} has {b.python.version}" for b in no_python))
                held.update(b.name for b in no_python)
                if not too_old:
                    continue
            said = f" needs torch{spec}: " + ", ".join(f"{b.name} has {b.torch.version}" for b in too_old)
            run = f.why[-1].split(" ", 1) if f.why else None
            if run and " " + run[1] == said:  # a run of releases held back alike: one line, "OLDEST..NEWEST"
                f.why[-1] = f"{v}..{run[0].split('..')[-1]}{said}"
            else:
                f.why.append(f"{v}{said}")
        for b in backends:  # the backends that hold the matrix back, and the newest each alone could take
            if b.name in held:
                f.why.append(f"{b.name}'s Python {b.python.version} holds it back: pin its own {dist} "
                             f"(backends.{b.name}.{dist}.version)")
            elif any(rules.torch_required(dist, str(v), spec, b.torch.version) for v, spec in scanned):
                own = next((str(v) for v, spec in scanned if not rules.torch_required(dist, str(v), spec, b.torch.version)), f.fits)
                f.why.append(f"{b.name}'s torch {b.torch.version} carries {dist} {own} at the newest")
        if f.fits == current and recorded is None:  # the data validate needs, refreshed from the pinned release
            spec = needs_torch(sources, matrix, dist, current)
            if spec:
                f.also[f"{dist}.torch"] = spec

    return _asked(f, ask)


def _own(sources: Sources, matrix: Matrix, b: Backend, dist: str) -> Finding:
    """A backend's own transformers/accelerate: the newest release its Python and torch can carry."""
    pin = dict(b.own)[dist]
    f = Finding(f"backends.{b.name}.{dist}.version", b.name, matrix.index.url, pin.version)

    def ask() -> None:
        versions = sources.index.versions(matrix.index.url, dist, prereleases=Version(pin.version).is_prerelease)
        f.newest = str(versions[0]) if versions else None
        f.fits = pin.version
        versions = _without_avoided(f, versions, (*matrix.avoided(dist), *pin.avoid), dist)
        for v in _newer(versions, pin.version):
            why = sources.cannot(matrix.index.url, dist, v, b, b.torch.version)
            if not why:
                f.fits = str(v)
                spec = sources.facts.wheel(dist, str(v), b.python.version) if b.python.version else None
                if spec and spec.torch and spec.torch != pin.torch:
                    f.also[f"backends.{b.name}.{dist}.torch"] = spec.torch
                break
            said = "; ".join(why)
            last = f.why[-1].split(": ", 1) if f.why else None
            if last and last[1] == said:  # a run of releases held back alike: one line, "OLDEST..NEWEST"
                f.why[-1] = f"{v}..{last[0].split('..')[-1]}: {said}"
            else:
                f.why.append(f"{v}: {said}")

    return _asked(f, ask)


def _uv(sources: Sources, matrix: Matrix) -> Finding:
    f = Finding("uv.version", None, matrix.index.url, matrix.uv)

    def ask() -> None:
        versions = sources.index.versions(matrix.index.url, "uv")
        f.newest = str(versions[0]) if versions else None
        versions = _without_avoided(f, versions, matrix.avoided("uv"), "uv")
        f.fits = str(versions[0]) if versions and versions[0] > Version(matrix.uv) else matrix.uv

    return _asked(f, ask)


def _extras(sources: Sources, matrix: Matrix, backend: Backend | None) -> list[Finding]:
    out = []
    reqs = backend.packages if backend else matrix.packages
    prefix = f"backends.{backend.name}.packages" if backend else "packages"
    for i, text in enumerate(reqs):
        req = Requirement(text)
        f = Finding(f"{prefix}[{i}]", backend.name if backend else None, matrix.index.url, text, bumpable=False)

        def ask(f: Finding = f, req: Requirement = req) -> None:
            versions = sources.index.versions(matrix.index.url, req.name)
            f.newest = str(versions[0]) if versions else None
            allowed = [v for v in versions if req.specifier.contains(v)]
            f.fits = str(allowed[0]) if allowed else None
            if versions and allowed and allowed[0] != versions[0]:
                f.why.append(f"{versions[0]} is outside '{req.specifier}' (the matrix's specifier: widen it to take it)")
            if f.fits:
                f.why.append("`envbuild lock --upgrade-package " + req.name + "` moves the lock within the specifier")

        out.append(_asked(f, ask))
    return out


# --------------------------------------------------------------------------------------------------
# Per backend: torch and its plugin from their indexes, the base image from its registry.

_ARCH = {"linux/amd64": ("x86_64", "amd64"), "linux/arm64": ("aarch64", "arm64")}


def _missing_platforms(sources: Sources, index_url: str, name: str, version: Version, platforms: tuple[str, ...]) -> list[str]:
    files = [f for f in sources.index.files(index_url, name) if f.wheel and Version(f.version.public) == version]
    if not files:
        return list(platforms)
    missing = []
    for p in platforms:
        marks = _ARCH.get(p, ())
        if not any("-any.whl" in f.filename or any(m in f.filename for m in marks) for f in files):
            missing.append(p)
    return missing


def _plugin_versions(sources: Sources, matrix: Matrix, b: Backend) -> list[Version]:
    index = b.plugin.index_url or matrix.index.url
    return sources.index.versions(index, b.plugin.package, prereleases=Version(b.plugin.version).is_prerelease)


def _torch(sources: Sources, matrix: Matrix, b: Backend) -> tuple[Finding, str]:
    """The torch finding of a pip backend, and the torch its plugin must pair with."""
    f = Finding(f"backends.{b.name}.torch.version", b.name, b.torch.index_url or matrix.index.url, b.torch.version)
    chosen = [b.torch.version]

    def ask() -> None:
        versions = sources.index.versions(f.source, "torch", public=True)
        f.newest = str(versions[0]) if versions else None
        f.fits = b.torch.version
        plugins = _plugin_versions(sources, matrix, b) if b.plugin and b.plugin.source == "pip" else []
        for v in _newer(versions, b.torch.version):
            reasons = []
            if missing := _missing_platforms(sources, f.source, "torch", v, b.platforms):
                reasons.append(f"no wheel for {', '.join(missing)}")
            if b.plugin and b.plugin.pairing != "none" and b.plugin.source == "pip":
                if not any(rules.plugin_fits(b.plugin.pairing, str(p), str(v)) is None for p in plugins):
                    reasons.append(f"{b.plugin.package} has no release for it (rule {b.plugin.pairing})")
            if b.plugin and not rules.in_range(b.plugin.torch, str(v)):
                reasons.append(f"outside {b.plugin.package} {b.plugin.version}'s range '{b.plugin.torch}'")
            elif b.plugin and b.plugin.pairing == "none" and b.plugin.source == "pip":
                # no pairing rule: the plugin's own Requires-Dist on torch decides (this release or a newer one)
                index = b.plugin.index_url or matrix.index.url
                if all(sources.cannot(index, b.plugin.package, p, b, str(v))
                       for p in plugins if p >= Version(b.plugin.version)):
                    reasons.append(f"no {b.plugin.package} release from {b.plugin.version} on requires a torch it fits "
                                   "(their metadata)")
            for dist in ("transformers", "accelerate"):
                if why := rules.torch_required(dist, matrix.pin(dist, b), matrix.needs_torch(dist, b), str(v)):
                    reasons.append(why)
            if not reasons:
                f.fits = str(v)
                break
            f.why.append(f"{v}: {'; '.join(reasons)}")
        chosen[0] = f.fits

    _asked(f, ask)
    return f, chosen[0]


def _plugin(sources: Sources, matrix: Matrix, b: Backend, torch_version: str) -> Finding:
    p = b.plugin
    f = Finding(f"backends.{b.name}.plugin.version", b.name, p.index_url or matrix.index.url, p.version)

    def ask() -> None:
        versions = _plugin_versions(sources, matrix, b)
        f.newest = str(versions[0]) if versions else None
        f.fits = p.version
        for v in _newer(versions, p.version):
            why = rules.plugin_fits(p.pairing, str(v), torch_version)
            if why is not None:
                f.why.append(f"{v} does not pair with torch {torch_version} ({why})")
                continue
            meta = sources.cannot(f.source, p.package, v, b, torch_version)  # its Requires-Dist and Requires-Python
            if meta:
                f.why.append(f"{v}: {'; '.join(meta)} (its metadata)")
                continue
            f.fits = str(v)
            got = sources.facts.wheel(p.package, str(v), b.python.version) if b.python.version else None
            if p.torch and got and got.torch and got.torch != p.torch:
                f.also[f"backends.{b.name}.plugin.torch"] = got.torch
            break

    return _asked(f, ask)


def _base(sources: Sources, matrix: Matrix, b: Backend, torch_version: str | None = None) -> Finding:
    ref = Reference.parse(b.base_image)
    asked = Reference.parse(mirror(b.base_image, sources.mirrors)) if sources.mirrors else ref
    f = Finding(f"backends.{b.name}.base_image", b.name, asked.registry, b.base_image)

    def ask() -> None:
        client = sources.registry_for(matrix)
        if not ref.tag:
            f.newest = f.fits = b.base_image
            return
        candidates = newer_tags(ref.tag, client.tags(asked), ref.path)
        f.newest = str(ref.with_tag(candidates[0]) if candidates else ref)
        chosen = ref.tag
        for tag in candidates:
            reasons, moved = _base_moves(matrix, b, ref.tag, tag)
            more, linked = _stack_moves(sources, b, str(ref.with_tag(tag)), torch_version or b.torch.version)
            reasons, moved = reasons + more, {**moved, **linked}
            if not reasons:
                chosen = tag
                f.also.update(moved)
                break
            f.why.append(f"{tag}: {'; '.join(reasons)}")
        digest = client.digest(asked, chosen) if ref.digest else None
        if ref.digest and chosen == ref.tag and digest != ref.digest:
            f.why.append(f"the tag {ref.tag} moved: {ref.digest[:19]}... -> {digest[:19]}...")
        f.fits = str(ref.with_tag(chosen).with_digest(digest) if digest else ref.with_tag(chosen))

    return _asked(f, ask)


def _stack_moves(sources: Sources, b: Backend, image: str, torch_version: str) -> tuple[list[str], dict[str, str]]:
    """A base with another accelerator stack release moves host.version, and with it the torch index (one that
    exists and has this torch) and the driver minimum (one envbuild knows), or is not proposed."""
    h = b.host
    stack = stacks.STACKS[h.stack] if h else None
    new = stacks.image_release(stack, image, h.version) if stack else None
    if new is None or new == h.version:
        return [], {}
    moved = {f"backends.{b.name}.host.version": new}
    reasons = []
    if h.driver:
        reasons.append(f"host.driver {h.driver} is stated for {stack.title} {h.version}: check the vendor's minimum for "
                       f"{new} and move both by hand")
    elif stack.confirmed and stacks.minimum_driver(stack, new) is None:
        reasons.append(f"no minimum {stack.driver_title} is known for {stack.title} {new} (envbuild/matrix/stacks/{stack.name}.py "
                       f"from {stack.source}: add its row first)")
    url = stacks.torch_index(stack, new, b.torch.index_url) if b.torch.source == "pip" else None
    if url and url != b.torch.index_url:
        try:
            have = sources.index.versions(url, "torch", public=True)
        except SourceError as exc:
            reasons.append(f"no torch index for {stack.title} {new}: {exc}")
        else:
            if Version(torch_version) not in have:
                reasons.append(f"the torch index for {stack.title} {new} ({url}) has no torch {torch_version}")
            else:
                moved[f"backends.{b.name}.torch.index_url"] = url
    return reasons, moved


def _base_moves(matrix: Matrix, b: Backend, old_tag: str, new_tag: str) -> tuple[list[str], dict[str, str]]:
    """A vendor base fixes its torch (and plugin): what moves with a new tag, and why it may not fit."""
    moved: dict[str, str] = {}
    reasons: list[str] = []
    if b.torch.source != "base":
        return reasons, moved
    torch = follow(old_tag, new_tag, b.torch.version)
    if torch is None:
        return [f"cannot tell its torch from the tag (the old tag does not name torch {b.torch.version})"], moved
    if torch != b.torch.version:
        moved[f"backends.{b.name}.torch.version"] = torch
    if b.plugin and b.plugin.source == "base":
        public = Version(b.plugin.version).public
        plugin = follow(old_tag, new_tag, public)
        if plugin is None:
            reasons.append(f"cannot tell its {b.plugin.package} from the tag")
        else:
            if b.plugin.pairing == "local-torch":
                plugin = f"{plugin}+torch{torch}"
            if plugin != b.plugin.version:
                moved[f"backends.{b.name}.plugin.version"] = plugin
            if why := rules.plugin_fits(b.plugin.pairing, plugin, torch):
                reasons.append(why)
    for dist in ("transformers", "accelerate"):
        if why := rules.torch_required(dist, matrix.pin(dist, b), matrix.needs_torch(dist, b), torch):
            reasons.append(why)
    return reasons, moved


def _backend(sources: Sources, matrix: Matrix, b: Backend) -> list[Finding]:
    out: list[Finding] = []
    torch_version = b.torch.version
    if b.torch.source == "pip":
        finding, torch_version = _torch(sources, matrix, b)
        out.append(finding)
    if b.plugin and b.plugin.source == "pip":
        out.append(_plugin(sources, matrix, b, torch_version))
    if b.base_image:
        out.append(_base(sources, matrix, b, torch_version))
    out += [_own(sources, matrix, b, dist) for dist, _ in b.own]
    out += _extras(sources, matrix, b)
    return out


def outdated(matrix: Matrix, backends: list[Backend], sources: Sources | None = None,
             progress: Callable[[str], None] | None = None) -> list[Finding]:
    """Every pin of the matrix (the shared ones, then each chosen backend's), asked of its source."""
    sources = sources or Sources()
    say = progress or (lambda _: None)
    # the shared pins must fit every image that carries them, chosen or not (not those with their own)
    carried = {d: [b for b in matrix.backends if b.containerizable and d not in dict(b.own)] for d in ("transformers", "accelerate")}
    say(f"asking {matrix.index.url} for transformers, accelerate and uv")
    # a source that does not answer costs its timeout (30 s a read): the wait says itself
    with heartbeat.waiting(progress, f"asking {matrix.index.url}"):
        findings = [_shared(sources, matrix, "transformers", carried["transformers"]),
                    _shared(sources, matrix, "accelerate", carried["accelerate"]),
                    _uv(sources, matrix), *_extras(sources, matrix, None)]
    for b in backends:
        say(f"asking the sources of {b.name}")
        with heartbeat.waiting(progress, f"asking the sources of {b.name}"):
            findings += _backend(sources, matrix, b)
    return findings

