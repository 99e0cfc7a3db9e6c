"""Before a lock is resolved or a build fetches: does every package index and registry it needs answer, and does
the pinned torch build exist where the backend takes it from? One probe of each, all at once, within a few seconds
(net/netprobe.py), then one bounded read of the torch index's page (net/netread.py) and the wheel folder's names;
every blocker is named at once, each with the ways out (a mirror, a wheel folder, another index, another pin, a
base), instead of minutes of retries or gigabytes of the wrong torch. `envbuild doctor` runs the same preflight.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from envbuild.net import netprobe
from envbuild.core.platform import Platform
from envbuild.core.errors import NetDeadline, UnreachableError
from envbuild.core.distbase import base_ways_out
from envbuild.core.imageref import InvalidReference, Reference
from envbuild.core.settings import KEYS, PROJECT_FILE, config_set, mirror_setting, mirror_url, normal_url
from envbuild.render import index_urls

if TYPE_CHECKING:
    from pathlib import Path

    from envbuild.matrix import Backend, Matrix

PYPI = "https://pypi.org/simple"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PAGE_LIMIT = 32 << 20  # bytes of an index's torch page read at most (PyPI's lists every torch file ever built)


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
    """Every way past one dead index or registry, each with the command that makes it stick (`envbuild config
    set`: after it, the same command works unchanged) and the setting or option that takes it for one run."""
    if need.target.kind == "registry":
        src = need.target.name
        return [base_ways_out(need.index, backend.name).removeprefix("Ways out: "),
                f"or for every build: `{config_set(f'registry_mirrors.{src}', 'MIRROR')}` (registry_mirrors.\"{src}\" = "
                f'"MIRROR" in {PROJECT_FILE}, or ${KEYS["registry_mirrors"].env}="{src}=MIRROR")',
                f"or another base for every build: `{config_set('base_image', 'IMAGE', backend.name)}`"]
    index = normal_url(need.index)
    mirrored = need.target.name != index
    ways = [("a working mirror for it" if mirrored else "a mirror of it") +
            f": `{config_set(f'index_mirrors.{index}', 'MIRROR-URL')}`, or {mirror_setting(index)}",
            f"a wheel folder with the files the lock names from it: `{config_set('wheelhouse', 'DIR')}` (or --wheelhouse "
            f"DIR, wheelhouse = \"DIR\" in {PROJECT_FILE}, or ${KEYS['wheelhouse'].env}); resolving asks every index, so "
            f"make the lock where this one answers and commit locks/: a build from a current lock resolves nothing"]
    if need.field and need.field.endswith("torch.index_url"):
        ways.append(f"torch from another index: `{config_set('torch.index_url', PYPI, backend.name)}` (for one run: "
                    f"--set {need.field}={PYPI}; careful: PyPI's default torch for linux x86_64 is the CUDA build, "
                    "gigabytes of CUDA libraries in the image, which a cpu backend refuses unless a wheel folder holds "
                    "its +cpu wheel)")
    elif need.field:
        field = need.field.removeprefix(f"backends.{backend.name}.")
        ways.append(f"another index: `{config_set(field, 'URL', backend.name if field != need.field else None)}` "
                    f"(for one run: --set {need.field}=URL)")
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


@dataclass(frozen=True)
class Blocker:
    """One thing that stands in the way of a step, said in one line, and every way past it (each a command)."""

    what: str
    ways: tuple[str, ...]


_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}


def wanted_torch(backend: Backend, platform: str) -> tuple[str, str | None]:
    """The torch build a lock of `backend` must hold on `platform`: (the pin, the local label it must carry, e.g.
    "cpu", or None: any). PyTorch's x86_64 CPU builds carry `+cpu` (PyPI's unlabelled x86_64 torch is the CUDA
    build); aarch64's CPU builds may carry none. A GPU build is told by its companions, not its name: any label."""
    if "+" in backend.torch.version or backend.torch.any_build:
        return backend.torch.version, None
    if backend.device == "cpu" and platform.endswith("/amd64"):
        return backend.torch.version, "cpu"
    return backend.torch.version, None


def _torch_files(names, backend: Backend, platform: str) -> list[tuple[object, str]]:
    """(version, file name) of each torch wheel among `names` for `platform`'s machine and the base's Python."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    machine = Platform.of(platform).arch
    arch = _ARCH.get(machine, machine)
    py = backend.python.version
    out = []
    for name in names:
        if not name.endswith(".whl"):
            continue
        try:
            project, version, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if project != "torch" or not any(t.platform.endswith(arch) or t.platform == "any" for t in tags):
            continue
        if py and not any(t.interpreter in (f"cp{py.replace('.', '')}", "py3") for t in tags):
            continue
        out.append((version, name))
    return out


def _fits(version, pin: str, label: str | None) -> bool:
    from packaging.version import Version

    if "+" in pin:
        return version == Version(pin)
    return version.public == Version(pin).public and (label is None or version.local == label)


def _page_names(body: bytes, content_type: str) -> list[str]:
    """The file names an index's project page lists: PEP 691's JSON, else PEP 503's HTML anchors."""
    if "json" in content_type:
        try:
            return [str(f.get("filename", "")) for f in json.loads(body).get("files", []) if isinstance(f, dict)]
        except (ValueError, AttributeError):
            return []
    text = body.decode("utf-8", "replace")
    return [re.sub(r"[#?].*", "", href).rsplit("/", 1)[-1].replace("%2B", "+").replace("%2b", "+")
            for href in re.findall(r'href\s*=\s*["\']([^"\']+)', text)]


def index_page(url: str, *, ca_bundle: Path | None = None, netrc: Path | None = None,
               environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The file names on `url` (a project's page of an index), or None where it cannot be read whole (the probe
    says why an index does not answer; a page it cannot read here blocks nothing)."""
    from envbuild.net import netread

    headers = {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1", "User-Agent": "envbuild-preflight"}
    login = netread.netrc_login(url, netrc)
    try:
        with netread.open_url("GET", url, headers=headers, context=netread.tls_context(ca_bundle),
                              authorization=netread.basic_auth(*login) if login else None,
                              same_origin_redirects_auth=True, timeout=netprobe.CONNECT,
                              environ=environ) as answer:
            if answer.status_code == 404:
                return []
            if answer.status_code != 200:
                return None
            body = answer.read(PAGE_LIMIT)
            kind = answer.headers.get("Content-Type") or ""
    except (OSError, NetDeadline):
        return None
    if len(body) > PAGE_LIMIT:
        return None
    return _page_names(body, kind)


def _newest(found: list[tuple[object, str]], label: str | None) -> str | None:
    fitting = sorted({v for v, _ in found if label is None or v.local == label}, reverse=True)
    return fitting[0].public if fitting else None


def torch_blocker(matrix: Matrix, backend: Backend, platform: str, *, index_mirrors=(), wheelhouse: Path | None = None,
                  index_names: list[str] | None = None) -> Blocker | None:
    """Whether torch at the backend's pin, its build (`+cpu`), exists where the lock would take it from: its index
    (`index_names`, what its page lists; None: the index does not answer) or the wheel folder. None where it does,
    or where there is neither (the probe names the dead index)."""
    if backend.torch.source != "pip":
        return None
    pin, label = wanted_torch(backend, platform)
    build = f"{pin}+{label}" if label else pin
    in_folder = _torch_files(sorted(p.name for p in wheelhouse.iterdir()) if wheelhouse and wheelhouse.is_dir() else (),
                             backend, platform)
    in_index = _torch_files(index_names or (), backend, platform)
    if any(_fits(v, pin, label) for v, _ in in_folder + in_index) or (index_names is None and not wheelhouse):
        return None
    index = backend.torch.index_url or matrix.index.url
    asked = mirror_url(index, index_mirrors)
    where = [f"the index {asked}" + ("" if asked == index else f" (mirror of {index})")] if index_names is not None else []
    if wheelhouse:
        where.append(f"the wheel folder {wheelhouse}")
    python = f", Python {backend.python.version}" if backend.python.version else ""
    held = []
    for what, found in (("the wheel folder", in_folder), ("the index", in_index)):
        versions = [str(v) for v in sorted({v for v, _ in found}, reverse=True)]  # newest first, as versions
        if versions:
            held.append(f"{what} holds torch {', '.join(versions[:4])}{', ...' if len(versions) > 4 else ''}")
    same = [str(v) for v, _ in in_index + in_folder if v.public == pin.split("+")[0]]
    why = ""
    if label == "cpu" and same:
        why = (f" (torch {same[0]} there is not a CPU build: PyPI's linux x86_64 torch is the CUDA build, "
               "gigabytes of CUDA libraries)")
    what = (f"torch {build} ({backend.name}'s pin) for {platform}{python} is not in {' nor '.join(where)}"
            f"{'; ' + '; '.join(held) if held else ''}{why}: the lock would fail, after downloading")
    ways = []
    for found in (in_folder, in_index):  # the wheel folder's first: it is what this site has
        other = _newest(found, label)
        if other and other != pin.split("+")[0]:
            ways.append(f"pin the build that is there: `{config_set('torch.version', other, backend.name)}`")
            break
    if label == "cpu" and not normal_url(index).endswith("/whl/cpu"):
        ways.append(f"take torch from PyTorch's CPU index (or a mirror of it): "
                    f"`{config_set('torch.index_url', CPU_INDEX, backend.name)}`")
    ways.append(f"a wheel folder holding torch-{build}-...whl: `{config_set('wheelhouse', 'DIR')}` (or --wheelhouse DIR)")
    if label == "cpu":
        ways.append(f"accept any build the indexes serve (PyPI's x86_64 torch is CUDA: gigabytes in the cpu image): "
                    f"`{config_set('torch.any_build', 'true', backend.name)}`")
    return Blocker(what, tuple(ways))


def blockers(matrix: Matrix, backend: Backend, *, what: str, platform: str | None = None, index_mirrors=(),
             base_image: str | None = None, indexes: bool = True, wheelhouse: Path | None = None,
             ca_bundle: Path | None = None, netrc: Path | None = None, environ: Mapping[str, str] | None = None,
             budget: float = netprobe.BUDGET) -> list[Blocker]:
    """Every blocker of the step at once: each index or registry that does not answer, and (when the indexes are
    asked) a torch pin that is not where the backend takes it from."""
    from envbuild.core.platform import host_platform

    found = needs(matrix, backend, index_mirrors=index_mirrors, base_image=base_image, indexes=indexes)
    results = probe(found, ca_bundle=ca_bundle, netrc=netrc, environ=environ, budget=budget)
    out = [Blocker(message([(n, r)], backend, what).split("\n")[0], tuple(ways_out(n, backend)))
           for n, r in zip(found, results) if not r.ok]
    if indexes:
        blocker, _ = torch_preflight(matrix, backend, str(platform or host_platform()), list(zip(found, results)),
                                     index_mirrors=index_mirrors, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                                     netrc=netrc, environ=environ)
        if blocker:
            out.append(Blocker(f"{what}: {blocker.what}", blocker.ways))
    return out


def torch_preflight(matrix: Matrix, backend: Backend, platform: str, probed: list[tuple[Need, netprobe.Result]], *,
                    index_mirrors=(), wheelhouse: Path | None = None, ca_bundle: Path | None = None,
                    netrc: Path | None = None, environ: Mapping[str, str] | None = None) -> tuple[Blocker | None, str | None]:
    """(the blocker, where the pinned torch build was found) after the probe: the wheel folder is looked in first
    (no page read where it holds the build), then the torch index's page; (None, None) where it cannot be told
    (a vendor's torch, a page that cannot be read whole)."""
    if backend.torch.source != "pip":
        return None, None
    if wheelhouse is not None and torch_blocker(matrix, backend, platform, wheelhouse=wheelhouse) is None:
        return None, f"the wheel folder {wheelhouse}"
    index = backend.torch.index_url or matrix.index.url
    asked = next(((n, r) for n, r in probed if n.index == index), None)
    names = None
    if asked is not None and asked[1].ok:
        names = index_page(asked[0].target.url, ca_bundle=ca_bundle, netrc=netrc, environ=environ)
        if names is None:
            return None, None
    blocker = torch_blocker(matrix, backend, platform, index_mirrors=index_mirrors, wheelhouse=wheelhouse,
                            index_names=names)
    return blocker, None if blocker or names is None else f"the index {asked[0].target.name}"


def said(found: list[Blocker], first: str | None = None) -> str:
    """Every blocker with its ways out, in one message (`first`: a failure already met, said before them)."""
    lines = [first] if first else []
    for b in found:
        lines.append(b.what + ("" if b.what.endswith("Ways out:") else ". Ways out:"))
        lines += [f"  - {w}" for w in b.ways]
    lines.append("(Probed from this machine, with its proxy variables and CA bundle; the build's RUN steps use the "
                 "Docker engine's network, which may differ.)")
    return "\n".join(lines)


def require(matrix: Matrix, backend: Backend, *, what: str, index_mirrors=(), base_image: str | None = None,
            indexes: bool = True, platform: str | None = None, wheelhouse: Path | None = None, first: str | None = None,
            ca_bundle: Path | None = None, netrc: Path | None = None, environ: Mapping[str, str] | None = None,
            budget: float = netprobe.BUDGET) -> None:
    """Raise UnreachableError (exit 1) naming every blocker of the step at once (`first`: one already met, which
    raises even where the preflight finds nothing more)."""
    found = blockers(matrix, backend, what=what, platform=platform, index_mirrors=index_mirrors, base_image=base_image,
                     indexes=indexes, wheelhouse=wheelhouse, ca_bundle=ca_bundle, netrc=netrc, environ=environ,
                     budget=budget)
    if found or first:
        raise UnreachableError(said(found, first))
