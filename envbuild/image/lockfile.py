"""locks/<backend>/<os>-<arch>.txt: every Python distribution an image adds on top of its base, pinned and hashed,
each with the URL of the one file it was resolved to: a hashed requirements file that pip reads as it is, with the
URL on a comment line below each hash.

The build installs exactly those files and asks no index about any name: each layer is handed to uv as a PEP 751
`pylock.toml` (`pylock()`) whose URLs are the lock's, or, where a wheel folder holds a file of the same name and
sha256, or an index mirror serves the URL's prefix, theirs (`source()`, the one place that substitutes). The hash is
what is trusted, so where a file comes from is no part of the image's content key.

A header records what the lock was resolved from (its inputs, one line of JSON), so staleness is decided by
comparing inputs, never by resolving again. The body is split into layers, in install order:
torch (torch, the plugin and what they need), deps (the rest), extras (the matrix's packages), top
(transformers and accelerate): a transformers bump that keeps its dependencies changes only `top`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.core.errors import LockError
from envbuild.core.settings import mirror_url
from envbuild.core.text import shown, unsafe_char

FORMAT = 3  # 2: one lock per platform, the base named by its registry digest; 3: each file's URL beside its hash
LAYERS = ("torch", "deps", "extras", "top")
TOP = ("transformers", "accelerate")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)\Z")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})\Z")
_URL = re.compile(r"^url: (\S+)\Z")
# A locked file's URL: https (or http from an index the lock's inputs name), no userinfo, no odd characters; or a
# wheel folder's file by its plain name (no folder part: the build joins it to the folder's mount).
_FILE_URL = re.compile(r"(https?)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*"
                       r"(?:\?[A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?\Z")
_WHEEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+!-]*\Z")
MAX_JSON_LINE = 1 << 16  # an inputs or resolved line envbuild writes is a few hundred characters
WHEELHOUSE = "wheelhouse:"  # the URL of a file the resolver took from the wheel folder: any wheel folder serves it
WHEELHOUSE_MOUNT = "/run/wheelhouse"  # where the install steps see the build's wheel folder


class BrokenLock(LockError):
    """A lock file that is not one envbuild wrote (a pull request may bring any): bad input, exit 2."""

    exit_code = 2


@dataclass(frozen=True)
class Locked:
    name: str  # canonical (PEP 503)
    version: str
    sha256: tuple[str, ...]
    layer: str
    url: str = ""  # where the file was found when locked (`wheelhouse:NAME`: in the wheel folder)

    def lines(self) -> list[str]:
        hashes = [f"    --hash=sha256:{h}" for h in self.sha256]
        url = [f"    # url: {self.url}"] if self.url else []
        return [f"{self.name}=={self.version} \\", *(h + " \\" for h in hashes[:-1]), *hashes[-1:], *url]

    @property
    def filename(self) -> str:
        """The file's name (a wheel's name says its version and platform), from its URL."""
        if self.url.startswith(WHEELHOUSE):
            return self.url[len(WHEELHOUSE):]
        return unquote(urlsplit(self.url).path.rpartition("/")[2])


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

    def pylock(self, layer: str, wheelhouse: Mapping[str, str], mirrors: Iterable[tuple[str, str]] = ()) -> str:
        """One layer as a PEP 751 lock that `uv pip install -r pylock.toml` installs as it is: each file from the
        source() of its URL, checked by its hash, no index asked. `wheelhouse`: the wheel folder's files by name ->
        sha256; `mirrors`: the site's index mirrors (core/settings.mirror_url)."""
        if not self.layer(layer):
            return ""  # an empty layer's step installs nothing
        lines = ['lock-version = "1.0"', 'created-by = "envbuild"']
        for p in self.layer(layer):
            url = source(p, wheelhouse, mirrors)
            kind = "wheels" if p.filename.endswith(".whl") else "sdist"
            entry = (f'{{ name = {_toml(p.filename)}, url = {_toml(url)}, hashes = {{ sha256 = "{p.sha256[0]}" }} }}')
            lines += ["", "[[packages]]", f"name = {_toml(p.name)}", f"version = {_toml(p.version)}",
                      f"{kind} = [{entry}]" if kind == "wheels" else f"{kind} = {entry}"]
        return "\n".join(lines) + "\n"


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string for the characters URLs and names hold


def source(package: Locked, wheelhouse: Mapping[str, str], mirrors: Iterable[tuple[str, str]] = ()) -> str:
    """Where the build takes a locked file from: the wheel folder when it holds a file of that name and sha256,
    else the locked URL through the site's index mirrors (mirror_url: the one place a mirror is applied). The hash
    is what is trusted, so any of them serves; a file locked from a wheel folder that this build's lacks is
    refused here, naming it."""
    if wheelhouse.get(package.filename) in package.sha256:
        return f"file://{WHEELHOUSE_MOUNT}/{package.filename}"
    if not package.url:
        raise LockError(f"{package.name}=={package.version}: the lock names no URL for its file (a lock older than "
                        "format 3): run `envbuild lock` to resolve it again")
    if package.url.startswith(WHEELHOUSE):
        have = wheelhouse.get(package.filename)
        why = (f"the wheel folder's {package.filename} has another sha256 ({have})" if have else
               "no wheel folder holds it" if not wheelhouse else f"the wheel folder lacks {package.filename}")
        raise LockError(f"{package.name}=={package.version} is locked from a wheel folder (sha256 {package.sha256[0]}), "
                        f"and {why}: pass --wheelhouse with that very file, or lock again where an index serves it")
    return mirror_url(package.url, mirrors)


def parse(text: str, source: str) -> LockFile:
    """A lock file, or a LockError naming the file and line of what is wrong with it."""
    backend, inputs, resolved, layer = None, None, {}, None
    packages: list[Locked] = []
    current: tuple[str, str, list[str], int] | None = None
    first: dict[str, int] = {}  # each distribution's line: a lock names one once
    http: list[tuple[int, str]] = []  # plain http URLs: allowed only from an index the inputs name

    def close() -> None:
        nonlocal current
        if current:
            name, version, hashes, at = current
            if not hashes:
                raise BrokenLock(f"{source}:{at}: {name}=={version} has no --hash (a lock pins every file by its sha256)")
            if layer is None:
                raise BrokenLock(f"{source}:{at}: {name}=={version} comes before any `# layer:` line (a lock puts each "
                                "distribution in a layer)")
            if name in first:
                raise BrokenLock(f"{source}:{at}: {name} is locked twice (first on line {first[name]}): a lock names "
                                "each distribution once, in one layer")
            first[name] = at
            packages.append(Locked(name, version, tuple(hashes), layer))
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
            url = _URL.match(body)
            if url:
                if not packages or packages[-1].url:
                    raise BrokenLock(f"{source}:{n}: a url line without the requirement it belongs to")
                _check_url(url.group(1), f"{source}:{n}", packages[-1].name, http, n)
                packages[-1] = dataclasses.replace(packages[-1], url=url.group(1))
            elif body.startswith("envbuild lock of backend "):
                backend = body[len("envbuild lock of backend "):].split(":", 1)[0]
            elif body.startswith(("inputs:", "resolved:")):
                key, _, value = body.partition(":")
                if len(value) > MAX_JSON_LINE:
                    raise BrokenLock(f"{source}:{n}: the {key} line is longer than {MAX_JSON_LINE} characters (not "
                                    "what `envbuild lock` writes)")
                try:
                    doc = json.loads(value)
                except ValueError:
                    raise BrokenLock(f"{source}:{n}: the {key} line is not JSON") from None
                except RecursionError:
                    raise BrokenLock(f"{source}:{n}: the {key} line is nested too deeply to be what `envbuild lock` "
                                    "writes") from None
                if not isinstance(doc, dict):
                    raise BrokenLock(f"{source}:{n}: the {key} line is not a JSON object")
                if (why := _json_problem(doc)) is not None:
                    raise BrokenLock(f"{source}:{n}: the {key} line {why} (not what `envbuild lock` writes)")
                inputs, resolved = (doc, resolved) if key == "inputs" else (inputs, doc)
            elif body.startswith("layer:"):
                named = body.split(":", 1)[1].strip()
                if named not in LAYERS:
                    raise BrokenLock(f"{source}:{n}: unknown layer {named!r} (expected one of: {', '.join(LAYERS)})")
                if layer is not None and LAYERS.index(named) <= LAYERS.index(layer):
                    raise BrokenLock(f"{source}:{n}: layer {named} after layer {layer} (a lock lists each layer once, "
                                    f"in install order: {', '.join(LAYERS)})")
                layer = named
            continue
        hashed = _HASH.match(line)
        if hashed:
            if current is None:
                raise BrokenLock(f"{source}:{n}: a --hash without the requirement it belongs to")
            current[2].append(hashed.group(1))
        elif line.startswith("--hash"):
            raise BrokenLock(f"{source}:{n}: a hash must read --hash=sha256:<64 lowercase hex digits>")
        else:
            close()
            pin = _PIN.match(line)
            if not pin:
                raise BrokenLock(f"{source}:{n}: {line[:80]!r} is not NAME==VERSION (a lock pins exact versions)")
            current = (str(canonicalize_name(pin.group(1))), pin.group(2), [], n)
        if not continued:
            close()
    close()
    if backend is None or inputs is None:
        raise BrokenLock(f"{source}: not an envbuild lock (no header naming its backend and inputs): "
                        f"write it with `envbuild lock`")
    indexes = inputs.get("indexes") if isinstance(inputs.get("indexes"), list) else []
    served = {_origin(u) for u in indexes if isinstance(u, str) and u.startswith("http://")}
    for n, url in http:
        if _origin(url) not in served:
            raise BrokenLock(f"{source}:{n}: {shown(url[:120])}: a plain http:// URL from an index the lock's inputs do "
                            "not name (a locked file comes over https, or from the matrix's own index)")
    return LockFile(backend, inputs, resolved, tuple(packages))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _check_url(url: str, where: str, name: str, http: list[tuple[int, str]], line: int) -> None:
    """A locked file's URL as envbuild writes it, else a LockError naming the line (and the URL, escaped, capped)."""
    if url.startswith(WHEELHOUSE):
        if not _WHEEL_NAME.match(url[len(WHEELHOUSE):]) or ".." in url:
            raise BrokenLock(f"{where}: {name}: {shown(url[:120])}: a wheel folder's file is named by its plain file "
                            "name (wheelhouse:NAME, no folder, no '..')")
        return
    m = _FILE_URL.match(url)
    if not m:
        raise BrokenLock(f"{where}: {name}: {shown(url[:120])} is not an https URL of a file (nor wheelhouse:NAME); "
                        "a lock fetches nothing from file:// or other schemes, and holds no credentials")
    if m.group(1) == "http":
        http.append((line, url))


def _json_problem(doc: Any) -> str | None:
    """Why a header's JSON is not made of what envbuild writes there (strings without control characters, numbers,
    lists and objects, a platform that is a string); None when it is."""
    for key in ("platform", "backend", "python"):
        if key in doc and not isinstance(doc[key], (str, type(None))):
            return f"has a {key} that is not a string"
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, str) and unsafe_char(value) is not None:
            return "holds a control character"
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


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
    found: dict[str, tuple[str, str, str]] = {}
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
        found[name] = (meta["version"], digest, _recorded((item.get("download_info") or {}).get("url") or ""))
    environment = report.get("environment") or {}
    in_torch = _closure([Requirement(r) for r in torch_roots], requires, environment)
    extra_names = {str(canonicalize_name(Requirement(r).name)) for r in extras}

    def layer(name: str) -> str:
        if name in in_torch:
            return "torch"
        if name in TOP:
            return "top"
        return "extras" if name in extra_names else "deps"

    packages = sorted((Locked(name, version, (digest,), layer(name), url) for name, (version, digest, url) in found.items()),
                      key=lambda p: (LAYERS.index(p.layer), p.name))
    return LockFile(backend, inputs, resolved, tuple(packages))


def _recorded(url: str) -> str:
    """A resolved file's URL as the lock records it: without a fragment, and a file of the build's wheel folder by
    its name alone (`wheelhouse:NAME`), for that path exists only inside a build."""
    url = url.partition("#")[0]
    local = f"file://{WHEELHOUSE_MOUNT}/"
    return WHEELHOUSE + unquote(url[len(local):]) if url.startswith(local) else url
