"""Package indexes, read-only: the releases of a distribution (PEP 691 JSON, else PEP 503 HTML) and what a
release requires (its core metadata: PEP 658 where the index serves it, else read from the wheel)."""

from __future__ import annotations

import email.parser
import http.client
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urljoin, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from envbuild.net import netread
from envbuild.core.errors import EnvbuildError, NetDeadline
from envbuild.core.settings import mirror_url
from envbuild.core.files import read_netrc, read_user
from envbuild.core.paths import cache_dir
from envbuild.core.text import shown

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
TIMEOUT = 30.0
MAX_PAGE = 64 << 20  # a project page (torch's on PyTorch's index is a few MB)
MAX_METADATA = 8 << 20  # a release's core metadata (a few KB)
MAX_WHEEL = 512 << 20  # read for its metadata only where the index serves no .metadata file


class SourceError(EnvbuildError):
    """A source could not answer (unreachable, refused, not found): reported for the pins it serves."""


@dataclass(frozen=True)
class File:
    filename: str
    url: str
    version: Version
    requires_python: str | None = None
    yanked: bool = False
    sha256: str | None = None
    metadata: bool = False  # the index serves URL.metadata (PEP 658/714)

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")


def _version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


class IndexClient:
    """Every index read of a run, with the build's CA bundle and netrc, through core/netread (the deadline on
    every answer)."""

    def __init__(self, ca_bundle: Path | None = None, netrc: Path | None = None, timeout: float = TIMEOUT,
                 index_mirrors: tuple[tuple[str, str], ...] = ()):
        self._ca_bundle = ca_bundle
        self._context: Any = None  # made at the first https request: a run that asks no index reads no CA file
        self._netrc = read_netrc(netrc) if netrc else None
        self.timeout = timeout
        self._pages: dict[str, list[File]] = {}
        self.index_mirrors = index_mirrors  # the site's (core/settings.py): asked instead of the index

    def _open(self, url: str, headers: dict[str, str], authorization: str | None) -> Any:
        """One GET, its status and headers read (the body not yet): the seam the tests replace."""
        if url.startswith("https:") and self._context is None:
            self._context = netread.tls_context(self._ca_bundle)  # an SSLError (an OSError): the source cannot be asked
        return netread.open_url("GET", url, headers=headers, context=self._context, authorization=authorization,
                                timeout=self.timeout, same_origin_redirects_auth=True)

    def _get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        url = mirror_url(url, self.index_mirrors)
        auth = None
        if self._netrc:
            found = self._netrc.authenticators(urlsplit(url).hostname or "")
            auth = netread.basic_auth(found[0], found[2] or "") if found else None
        try:
            response = self._open(url, {"User-Agent": "envbuild-outdated", **(headers or {})}, auth)
        except NetDeadline as exc:
            raise SourceError(str(exc)) from None
        except (OSError, ValueError) as exc:
            raise SourceError(f"{_host(url)} cannot be reached ({_reason(exc)})") from None
        if response.status_code == 404:
            response.close()
            raise SourceError(f"{url}: not found (404)")
        if response.status_code >= 400:
            response.close()  # the reason phrase is the server's text: one line, capped (the output layer escapes it)
            reason = shown(str(response.reason or "")[:80])
            raise SourceError(f"{url}: the index answered {response.status_code} {reason}".rstrip())
        return response

    def _body(self, url: str, limit: int, headers: dict[str, str] | None = None) -> tuple[Any, bytes]:
        """The response and its body, read up to `limit` bytes: an endless answer is cut off at the cap, never
        read whole."""
        response = self._get(url, headers)
        chunks: list[bytes] = []
        read_capped(response, limit, chunks.append, f"{url}: the index sent more than {limit >> 20} MiB; not read further",
                    lambda exc: f"{_host(url)}: the answer broke off ({_reason(exc)})", _BROKE_OFF)
        return response, b"".join(chunks)

    def files(self, index_url: str, name: str) -> list[File]:
        """Every file of `name` on the index (yanked ones marked)."""
        url = index_url.rstrip("/") + f"/{canonicalize_name(name)}/"
        if url in self._pages:
            return self._pages[url]
        if url.startswith("file://"):
            page = Path(urlsplit(url).path) / "index.html"
            if not page.is_file():
                raise SourceError(f"{url}: not found")
            try:  # bounded, never a FIFO
                files = _from_html(read_user(page, str(page), SourceError, limit=MAX_PAGE).decode("utf-8", "replace"), url)
            except SourceError as exc:
                raise SourceError(f"{url}: {str(exc).rsplit(': ', 1)[-1]}") from None
        else:
            response, body = self._body(url, MAX_PAGE, headers={"Accept": _ACCEPT})
            kind = response.headers.get("Content-Type", "")
            if "json" in kind:
                try:
                    doc = json.loads(body)
                except (ValueError, RecursionError):
                    raise SourceError(f"{url}: the index answered with invalid JSON") from None
                files = _from_json(doc, response.url)
            else:
                files = _from_html(body.decode("utf-8", "replace"), response.url)
        self._pages[url] = files
        return files

    def versions(self, index_url: str, name: str, *, prereleases: bool = False, public: bool = False) -> list[Version]:
        """Released versions, newest first (yanked ones left out; local labels dropped with `public`)."""
        found = {Version(f.version.public) if public else f.version for f in self.files(index_url, name) if not f.yanked}
        return sorted((v for v in found if prereleases or not v.is_prerelease), reverse=True)

    def metadata(self, index_url: str, name: str, version: str | Version) -> email.message.Message:
        """The core metadata of one release: from URL.metadata where served, else from its wheel."""
        want = Version(str(version))
        wheels = [f for f in self.files(index_url, name) if f.wheel and f.version == want]
        if not wheels:
            raise SourceError(f"{name} {version}: no wheel on {index_url} to read its metadata from")
        return self.file_metadata(sorted(wheels, key=lambda w: ("none-any" not in w.filename, w.filename))[0])

    def file_metadata(self, f: File) -> email.message.Message:
        """The core metadata of one wheel (wheels of one release may differ: a Requires-Python per Python)."""
        cached = cache_dir("sources") / "metadata" / f"{f.sha256}.METADATA" if f.sha256 else None
        text = _cached(cached) if cached else None
        if text is None:
            if f.metadata:
                _, body = self._body(f.url.split("#")[0] + ".metadata", MAX_METADATA)
                text = body.decode("utf-8", "replace")
            else:
                text = self._wheel_metadata(f)
            if cached:
                _store(cached, text)
        return email.parser.Parser().parsestr(text)

    def _wheel_metadata(self, f: File) -> str:
        response = self._get(f.url)
        with tempfile.TemporaryFile() as tmp:
            read_capped(response, MAX_WHEEL, tmp.write,
                        f"{f.filename}: larger than {MAX_WHEEL >> 20} MiB; the index serves no .metadata for it",
                        lambda exc: f"{_host(f.url)}: the answer broke off ({_reason(exc)})", _BROKE_OFF, chunk=1 << 20)
            tmp.seek(0)
            try:
                with zipfile.ZipFile(tmp) as z:
                    name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
                    if z.getinfo(name).file_size > MAX_METADATA:
                        raise SourceError(f"{f.filename}: its METADATA is larger than {MAX_METADATA >> 20} MiB")
                    return z.read(name).decode("utf-8", "replace")
            except (zipfile.BadZipFile, StopIteration, EOFError, OSError, ValueError, NotImplementedError, RuntimeError):
                raise SourceError(f"{f.filename}: not a wheel with a METADATA file") from None

    def requirement(self, index_url: str, name: str, version: str | Version, dist: str, extra: str | None = None) -> str | None:
        """The specifier release `name version` puts on `dist` (through `extra` where given), or None."""
        meta = self.metadata(index_url, name, version)
        return requirement_of(meta.get_all("Requires-Dist") or [], dist, extra)


def requirement_of(requires: list[str], dist: str, extra: str | None = None) -> str | None:
    """The specifier on `dist` among Requires-Dist lines: unconditional first, else through `extra`."""
    found: list[tuple[int, str]] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != canonicalize_name(dist):
            continue
        if req.marker is None:
            found.append((0, str(req.specifier)))
        elif extra and "extra" in str(req.marker) and req.marker.evaluate({"extra": extra}):
            found.append((1, str(req.specifier)))
    return min(found)[1] if found else None


def _from_json(doc: Any, base: str) -> list[File]:
    """The files of a PEP 691 page; an answer of the wrong shape is the index's fault, said so."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        raise SourceError(f"{base}: the index's answer is not a PEP 691 project page (no list of files)")
    out = []
    for item in files:
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str) or not isinstance(item.get("url", ""), str):
            continue  # an entry of the wrong shape is no file
        version = _version(item["filename"])
        if version is None:
            continue
        meta = item.get("core-metadata", item.get("dist-info-metadata"))
        hashes = item.get("hashes") if isinstance(item.get("hashes"), dict) else {}
        sha = hashes.get("sha256") if isinstance(hashes.get("sha256"), str) and _SHA256.fullmatch(hashes["sha256"]) else None
        python = item.get("requires-python") if isinstance(item.get("requires-python"), str) else None
        out.append(File(item["filename"], urljoin(base, item.get("url") or ""), version, python,
                        bool(item.get("yanked")), sha, bool(meta)))
    return out


_SHA256 = re.compile(r"[0-9a-f]{64}")
_BROKE_OFF = (OSError, http.client.HTTPException)  # a body cut short, a reset


def _cached(path: Path) -> str | None:
    """A cached metadata file, or None when it is missing or not what envbuild wrote (then it is fetched again)."""
    try:
        return read_user(path, str(path), limit=MAX_METADATA).decode("utf-8")
    except (EnvbuildError, UnicodeDecodeError):
        return None


def _store(path: Path, text: str) -> None:
    """Into the cache under a name of its own, then renamed: runs that share the cache never collide. A cache that
    cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def _from_html(text: str, base: str) -> list[File]:
    parser = _Links()
    parser.feed(text)
    out = []
    for link in parser.links:
        href = link.get("href") or ""
        filename = unquote(href.split("#")[0].rsplit("/", 1)[-1])
        version = _version(filename)
        if version is None:
            continue
        digest = re.search(r"#sha256=([0-9a-f]{64})", href)
        meta = link.get("data-core-metadata", link.get("data-dist-info-metadata"))
        out.append(File(filename, urljoin(base, href), version, link.get("data-requires-python"),
                        "data-yanked" in link, digest.group(1) if digest else None, meta not in (None, "false")))
    return out


def read_capped(response: Any, limit: int, write: Callable[[bytes], Any], too_big: str,
                broke_off: Callable[[Exception], str], errors: type[Exception] | tuple[type[Exception], ...],
                chunk: int = 1 << 16) -> None:
    """An HTTP answer's body into `write`, up to `limit` bytes: an endless answer is cut off at the cap (SourceError
    `too_big`), never read whole; `errors` while reading end it as SourceError(broke_off(exc)). Closes the response."""
    size = 0
    try:
        for part in response.iter_content(chunk):
            size += len(part)
            if size > limit:
                raise SourceError(too_big)
            write(part)
    except SourceError:
        raise
    except NetDeadline as exc:
        raise SourceError(str(exc)) from None
    except errors as exc:
        raise SourceError(broke_off(exc)) from None
    finally:
        response.close()


def _host(url: str) -> str:
    return urlsplit(url).netloc or url


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Name or service not known", "Temporary failure in name resolution", "Connection refused",
                   "timed out", "CERTIFICATE_VERIFY_FAILED", "Network is unreachable"):
        if marker in text:
            return marker.lower() if marker != "CERTIFICATE_VERIFY_FAILED" else "TLS certificate not trusted: pass --ca-bundle"
    return text.splitlines()[0][:200] if text else type(exc).__name__
