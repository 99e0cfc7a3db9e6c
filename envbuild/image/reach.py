"""Before a lock is resolved or a build fetches: does every package index and registry it needs answer? One probe
of each, all at once, within a few seconds (core/netprobe.py); a dead one fails the step at once, naming the host
and the ways out (a mirror, a wheel folder, another index, another base), instead of minutes of retries.
`envbuild doctor` runs the same probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from envbuild.net import netprobe
from envbuild.core.errors import UnreachableError
from envbuild.core.distbase import base_ways_out
from envbuild.core.imageref import InvalidReference, Reference
from envbuild.core.settings import KEYS, PROJECT_FILE, mirror_setting, mirror_url, normal_url
from envbuild.render import index_urls

if TYPE_CHECKING:
    from pathlib import Path

    from envbuild.matrix import Backend, Matrix

PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class Need:
    """One thing a step asks of the network: `target` is what is probed (through its mirror, if any); `index` the
    index's own URL (or the registry's host), as the matrix names it."""

    target: netprobe.Target
    index: str
    field: str | None  # the matrix field that names it, for the `--set` way out


def needs(matrix: Matrix, backend: Backend, *, index_mirrors=(), base_image: str | None = None,
          indexes: bool = True) -> list[Need]:
    """What resolving (or building) `backend` asks: each index (the torch index by its torch page, the others by
    pip's), and the base image's registry when `base_image` is given (the engine lacks it)."""
    out = []
    for url in index_urls(matrix, backend) if indexes else ():
        if url == backend.torch.index_url:
            project, purpose, field = "torch", f"torch for {backend.name}", f"backends.{backend.name}.torch.index_url"
        elif backend.plugin and url == backend.plugin.index_url:
            project, purpose = backend.plugin.package, f"{backend.plugin.package} for {backend.name}"
            field = f"backends.{backend.name}.plugin.index_url"
        else:
            project, purpose = "pip", "the packages besides torch"
            field = "index.url" if url == matrix.index.url else None
        out.append(Need(netprobe.index_target(mirror_url(url, index_mirrors), project, purpose), url, field))
    if base_image:
        try:
            host = Reference.parse(base_image).registry
        except InvalidReference:
            host = None
        if host:
            out.append(Need(netprobe.registry_target(host, f"the base image {base_image}"), base_image, None))
    return out


def probe(found: list[Need], *, ca_bundle: Path | None = None, netrc: Path | None = None,
          environ: Mapping[str, str] | None = None, budget: float = netprobe.BUDGET) -> list[netprobe.Result]:
    return netprobe.probe([n.target for n in found], ca_bundle=ca_bundle, netrc=netrc, environ=environ, budget=budget)


def ways_out(need: Need, backend: Backend) -> list[str]:
    """Every way past one dead index or registry, each with the exact setting or option that takes it."""
    if need.target.kind == "registry":
        src = need.target.name
        return [base_ways_out(need.index, backend.name).removeprefix("Ways out: "),
                f'or for every build: registry_mirrors."{src}" = "MIRROR" in {PROJECT_FILE}, or '
                f'${KEYS["registry_mirrors"].env}="{src}=MIRROR"']
    index = normal_url(need.index)
    mirrored = need.target.name != index
    ways = [("a working mirror for it" if mirrored else "a mirror of it") + f": {mirror_setting(index)}",
            f"a wheel folder with the files the lock names from it: --wheelhouse DIR (or wheelhouse = \"DIR\" in "
            f"{PROJECT_FILE}, or ${KEYS['wheelhouse'].env}); resolving asks every index, so make the lock where "
            f"this one answers and commit locks/: a build from a current lock resolves nothing"]
    if need.field and need.field.endswith("torch.index_url"):
        ways.append(f"torch from another index: --set {need.field}={PYPI} (careful: PyPI's default torch for linux "
                    "x86_64 is the CUDA build, gigabytes of CUDA libraries in the image)")
    elif need.field:
        ways.append(f"another index: --set {need.field}=URL")
    return ways


def message(dead: list[tuple[Need, netprobe.Result]], backend: Backend, what: str) -> str:
    """What failed and every way out, for `what` ("locking cpu", "building cpu")."""
    lines = []
    for need, result in dead:
        t = need.target
        thing = "the package index" if t.kind == "index" else "the registry"
        name = t.name if t.name == normal_url(need.index) or t.kind == "registry" else f"{t.name} (mirror of {need.index})"
        lines.append(f"{what}: {thing} {name} ({t.purpose}) does not answer from this machine: {result.detail} "
                     f"(asked {t.url} {result.via}, {result.seconds:.1f} s). Ways out:")
        lines += [f"  - {w}" for w in ways_out(need, backend)]
    lines.append("(Probed from this machine, with its proxy variables and CA bundle; the build's RUN steps use the "
                 "Docker engine's network, which may differ.)")
    return "\n".join(lines)


def require(matrix: Matrix, backend: Backend, *, what: str, index_mirrors=(), base_image: str | None = None,
            indexes: bool = True,
            ca_bundle: Path | None = None, netrc: Path | None = None, environ: Mapping[str, str] | None = None, budget: float = netprobe.BUDGET) -> None:
    """Raise UnreachableError (exit 1) naming each index or registry of the step that does not answer."""
    found = needs(matrix, backend, index_mirrors=index_mirrors, base_image=base_image, indexes=indexes)
    results = probe(found, ca_bundle=ca_bundle, netrc=netrc, environ=environ, budget=budget)
    dead = [(n, r) for n, r in zip(found, results) if not r.ok]
    if dead:
        raise UnreachableError(message(dead, backend, what))
