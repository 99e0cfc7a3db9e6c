"""The registry's own HTTP API (OCI distribution spec), for what the engine cannot do: read a manifest list
without pulling, resolve a platform's digest in it, PUT an image index, and (for signatures) upload a blob and
PUT a manifest. envbuild's one HTTP client of a registry, and its one reachability check: publish, pull, the
lock's base digest, doctor, the probe before a lock or build (core/netprobe.py), `outdated`'s tags and trust.oci
(these calls in signing's terms) all ask through it, and its failures are RegistryErrors (core/errors.py). Every
request goes through the proxy its environment names ($HTTPS_PROXY/$HTTP_PROXY, $NO_PROXY), trusting the CA
bundle given, with a --netrc login for the host if one is given. Only the engine's own push and pull reach a registry
another way.

Docker's engine knows one platform per tag and pushes single manifests; an index is assembled here from the
digests it pushed. Tokens follow the registry's WWW-Authenticate challenge (Bearer or Basic) with the same
credentials publish and pull use (the environment, else a plain `auths` entry of the Docker config).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlencode, urljoin, urlsplit

from envbuild.net import netread
from envbuild.core.errors import (EnvbuildError, NetDeadline, RegistryAnswerError, RegistryAuthError, RegistryDeadlineError,
                                  RegistryUnreachableError)
from envbuild.core.output import hold_secret
from envbuild.core.text import shown
from envbuild.core.platform import Platform, canonical
from envbuild.net.credentials import Credentials, config_login, from_env, github_token, login_fix
from envbuild.core.imageref import Reference, api_host, is_loopback as _loopback

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
TIMEOUT = 30.0
MAX_DOC = 16 << 20  # a manifest, a config or a signature; a larger answer is refused, not read whole


def json_object(data: bytes) -> dict[str, Any] | None:
    """A registry's answer read as a JSON object; None when it is not one (not JSON, not UTF-8, a list, nested past
    reason): each caller says what it expected, in its own error."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return doc if isinstance(doc, dict) else None


def config_digest(doc: dict[str, Any]) -> str | None:
    """The digest of the image config a manifest names (the image id); None when it names none as a string."""
    named = doc.get("config")
    digest = named.get("digest") if isinstance(named, dict) else None
    return digest if isinstance(digest, str) else None


@dataclass(frozen=True)
class Manifest:
    media_type: str
    digest: str  # sha256 of the bytes the registry served
    raw: bytes

    @property
    def doc(self) -> dict[str, Any]:
        """The manifest as a JSON object; anything else from a registry is a RegistryAnswerError."""
        doc = json_object(self.raw)
        if doc is None:
            raise RegistryAnswerError(f"the registry's manifest {self.digest} is not a JSON object")
        return doc

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEXES

    def platforms(self) -> dict[str, str]:
        """An index's platforms in Docker's canonical spelling ('linux/arm64' for arm64/v8) -> manifest digest
        (attestation entries, 'unknown/unknown', and entries of the wrong shape left out)."""
        out: dict[str, str] = {}
        listed = self.doc.get("manifests")
        for m in listed if isinstance(listed, list) else []:
            p = m.get("platform") if isinstance(m, dict) else None
            if not isinstance(p, dict) or not isinstance(m.get("digest"), str):
                continue
            os_name, arch, variant = p.get("os"), p.get("architecture"), p.get("variant") or ""
            if not all(isinstance(v, str) for v in (os_name, arch, variant)) or os_name in ("", "unknown"):
                continue
            try:
                out.setdefault(canonical(f"{os_name}/{arch}" + (f"/{variant}" if variant else "")), m["digest"])
            except EnvbuildError:  # no platform envbuild knows how to spell
                continue
        return out


TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def tag_list(body: bytes, host: str) -> list[str]:
    """The tags of a /tags/list answer; one of the wrong shape is the registry's fault, said so."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise RegistryAnswerError(f"registry {host} answered the list of tags with invalid JSON") from None
    tags = doc.get("tags") if isinstance(doc, dict) else None
    if tags is None and isinstance(doc, dict):
        return []
    if not isinstance(tags, list):
        raise RegistryAnswerError(f"registry {host} answered the list of tags with something else than a list")
    return [t for t in tags if isinstance(t, str) and TAG.fullmatch(t)]


def split(ref: str) -> tuple[str, str]:
    """'host:5000/org/img:tag' or '...@sha256:..' -> ('org/img' on its host's API, 'tag' or the digest)."""
    full = Reference.parse(ref).full
    name, at, digest = full.partition("@")
    if at:
        repo = name.rpartition(":")[0] if ":" in name.rpartition("/")[2] else name
        return repo.split("/", 1)[1], digest
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        repo, tag = name, "latest"
    return repo.split("/", 1)[1], tag


def _host(ref: str) -> str:
    """The registry of a reference, or a bare registry host itself ('127.0.0.1:5000', 'ghcr.io'; 'debian:12' is an
    image): a client is made for either."""
    name = ref.partition(":")[0]
    if "/" not in ref and ("." in name or name == "localhost"):
        return ref
    return Reference.parse(ref).registry


def api_root(host: str) -> str:
    """Where a registry host answers the distribution API: loopback hosts in plain HTTP (as Docker treats them),
    others TLS; Docker Hub at registry-1.docker.io. Every request to a registry, and the reachability probe
    (netprobe.py), start here."""
    return f"{'http' if _loopback(host) else 'https'}://{api_host(host)}"


@dataclass(frozen=True)
class _Response:
    status_code: int
    headers: Any  # case-insensitive (email.message.Message)
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


def sha256(data: bytes) -> str:
    """The OCI digest of `data`: sha256:HEX."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _http(method: str, url: str, headers: Mapping[str, str], data: bytes | None, context: Any,
          authorization: str | None, timeout: float | None = None,
          environ: Mapping[str, str] | None = None) -> _Response:
    """One request, its answer read whole up to MAX_DOC + 1 bytes, within core/netread's deadline (no `requests`
    to import: a no-op build asks the registry for its base's digest, and that import alone took 0.1 s), through
    the proxy `environ` names for it (netread.proxy_for: $HTTPS_PROXY/$HTTP_PROXY unless $NO_PROXY names the
    host). An error status is an answer, not an exception; the authorization is never forwarded to another origin
    by a redirect (a blob served from storage elsewhere)."""
    try:
        with netread.open_url(method, url, headers=headers, data=data, context=context, authorization=authorization,
                              timeout=timeout or TIMEOUT, environ=os.environ if environ is None else environ) as answer:
            return _Response(answer.status_code, answer.headers, answer.read(MAX_DOC))
    except http.client.HTTPException as exc:  # a cut or garbled body: unreachable, as a refused connection is
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    except NetDeadline as exc:
        raise RegistryDeadlineError(str(exc)) from None


def _reason(exc: OSError) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"{type(reason).__name__}: {str(reason)[:200]}"


def _unreachable(message: str, exc: OSError) -> RegistryUnreachableError:
    """The error, carrying what the connection met (`reason`: a refusal, a timeout, a TLS or DNS failure), for a
    caller that says it in its own words (core/netprobe.py)."""
    error = RegistryUnreachableError(message)
    error.reason = getattr(exc, "reason", None) or exc  # type: ignore[attr-defined]
    return error


def _basic(creds: Credentials) -> str:
    encoded = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
    hold_secret(creds.password)
    hold_secret(encoded)
    return "Basic " + encoded


class Registry:
    """One registry host, spoken to over HTTP(S): loopback hosts in plain HTTP (as Docker treats them), others TLS."""

    def __init__(self, ref: str, environ: Mapping[str, str] | None = None, ca_bundle: Path | None = None, *,
                 publish: bool = True, netrc: Path | None = None):
        """`publish`: this is the registry envbuild publishes to, whose credentials ENVBUILD_REGISTRY_USER and
        _PASSWORD are. False for one it only reads a base image from: then only what is that host's own (its
        Docker config login, GHCR's GitHub token) is offered, as the engine pulling the base would. `environ`
        names the proxy too, as the build's. `netrc` (--netrc): its login for this host goes with every request
        to the registry's own API, as curl and pip send it, and answers its challenges when nothing else does."""
        self.host = _host(ref)
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.base = api_root(self.host)
        found = netread.netrc_login(self.base, netrc)
        login = Credentials(*found, source=f"the netrc file {netrc}") if found else None
        self._netrc_auth = _basic(login) if login else None
        self.creds = ((from_env if publish else github_token)(self.host, environ)
                      or config_login(self.host, environ) or login)
        self.publish = publish
        self.verify: Any = str(ca_bundle) if ca_bundle else True
        self._tokens: dict[str, str] = {}

    def via(self, url: str | None = None) -> str:
        """How a request to `url` (the API root's by default) goes: "directly" or "through the proxy URL", the
        proxy's password never shown."""
        proxy = netread.proxy_for(url or f"{self.base}/v2/", self.environ)
        if not proxy:
            return "directly"
        hold_secret(urlsplit(proxy).password)
        return f"through the proxy {netread.without_password(proxy)}"

    def _request(self, method: str, repo: str, path: str, *, push: bool = False, data: bytes | None = None,
                 headers: Mapping[str, str] | None = None, url: str | None = None) -> _Response:
        """`path` under /v2/REPO/, or `url` (an upload's Location); the token goes only to this registry."""
        url = urljoin(self.base + "/", url) if url else f"{self.base}/v2/{repo}/{path}"
        ours = urlsplit(url)[:2] == urlsplit(self.base)[:2]
        scope = f"repository:{repo}:{'pull,push' if push else 'pull'}"
        for attempt in range(2):
            auth = (self._tokens.get(scope) or self._netrc_auth) if ours else None
            try:
                resp = _http(method, url, headers or {}, data, self._context(url), auth, environ=self.environ)
            except OSError as exc:
                raise _unreachable(f"registry {self.host} unreachable ({_reason(exc)}): is it running, and "
                                   "is the address right?", exc) from None
            if resp.status_code == 401 and attempt == 0 and ours:
                self._tokens[scope] = self._authorize(resp.headers.get("WWW-Authenticate", ""), scope)
                continue
            if resp.status_code in (401, 403):
                used = f"the credentials from {self.creds.source}" if self.creds else "no credentials"
                raise RegistryAuthError(f"registry {self.host} refused {method} {repo} ({resp.status_code}); used {used}: "
                                        f"{self._way_in(repo, push)}")
            if len(resp.content) > MAX_DOC:
                raise RegistryAnswerError(f"registry {self.host}: the answer to {method} {repo} is larger than "
                                   f"{MAX_DOC >> 20} MiB; not read")
            return resp
        raise AssertionError("unreachable")

    def _way_in(self, repo: str, push: bool) -> str:
        """What to do about a refusal: the credentials' rights, else where credentials come from."""
        if self.creds:
            return f"check that they may {'push to' if push else 'read'} {repo} on {self.host}"
        if self.publish:
            return f"log in: {login_fix(self.host)}"
        return f"check the image's name, or, if it is private, `docker login {self.host}`"

    def _context(self, url: str) -> Any:
        """TLS for an https URL (the registry's, its token service's): the system's CAs, or --ca-bundle's; None for
        plain HTTP (loopback)."""
        if not url.startswith("https:"):
            return None
        return netread.tls_context(None if self.verify is True else self.verify)

    def _authorize(self, challenge: str, scope: str) -> str:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not self.creds:
                raise RegistryAuthError(f"registry {self.host} asks for credentials: set ENVBUILD_REGISTRY_USER and "
                                        f"ENVBUILD_REGISTRY_PASSWORD, or `docker login {self.host}`")
            return _basic(self.creds)
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            raise RegistryAnswerError(f"registry {self.host} asks for an authentication envbuild does not speak: {challenge[:100]}")
        realm = fields["realm"]
        where = urlsplit(realm)
        if where.scheme not in ("http", "https") or not where.netloc:
            raise RegistryAnswerError(f"registry {self.host} names a token service that is not an http(s) URL: {shown(realm[:100])}")
        query = urlencode({"service": fields.get("service", ""), "scope": scope})
        url = f"{realm}{'&' if '?' in realm else '?'}{query}"
        # The password goes over verified TLS, or in plain HTTP only back to the very registry (on loopback) the
        # user named: a token service elsewhere over http:// gets no credentials, and is said so.
        same = (where.scheme, where.netloc) == tuple(urlsplit(self.base)[:2])
        if self.creds and where.scheme != "https" and not same:
            raise RegistryAuthError(f"registry {self.host} sends its login to a token service over plain HTTP on another "
                                    f"host ({where.scheme}://{shown(where.netloc)}): refused, the password was not sent")
        try:
            resp = _http("GET", url, {}, None, self._context(url), _basic(self.creds) if self.creds else None,
                         environ=self.environ)
        except OSError as exc:
            raise _unreachable(f"the token service of {self.host} is unreachable ({_reason(exc)})", exc) from None
        if resp.status_code != 200:
            raise RegistryAuthError(f"the token service of {self.host} refused ({resp.status_code})")
        body = json_object(resp.content)
        token = (body.get("token") or body.get("access_token")) if body is not None else None
        if not isinstance(token, str) or not re.fullmatch(r"[A-Za-z0-9._~+/=-]{1,16384}", token):
            raise RegistryAuthError(f"the token service of {self.host} answered no usable token (a JSON object with a "
                                    "\"token\" of printable characters)")
        hold_secret(token)
        return "Bearer " + token

    def ping(self, timeout: float) -> int:
        """The status the registry's API root (/v2/) answers with: 200, or 401 asking for a login (it answers
        either way); RegistryUnreachableError (its `reason` what the connection met) when nothing answers, the
        connection and each read given `timeout` seconds. Through the proxy, with the CA bundle and the netrc's
        login, as every request."""
        url = f"{self.base}/v2/"
        try:
            return _http("GET", url, {}, None, self._context(url), self._netrc_auth, timeout=timeout,
                         environ=self.environ).status_code
        except OSError as exc:
            raise _unreachable(f"registry {self.host} unreachable ({_reason(exc)})", exc) from None

    # -- reading ------------------------------------------------------------------------------------------------
    def manifest(self, ref: str) -> Manifest | None:
        """What the registry serves for a tag or digest; None when it has no such manifest."""
        return self.read_manifest(*split(ref))

    def read_manifest(self, repo: str, reference: str) -> Manifest | None:
        """The manifest `reference` (a tag or digest) names in `repo` (its path on this registry); None: none."""
        resp = self._request("GET", repo, f"manifests/{reference}", headers={"Accept": ACCEPT})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RegistryAnswerError(f"registry {self.host}: GET manifest {repo}:{reference} answered {resp.status_code}: "
                               f"{resp.text[:200]}")
        raw = resp.content
        digest = sha256(raw)  # of the bytes served: a registry's header is not trusted
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryAnswerError(f"registry {self.host} served content of digest {digest} for {repo}@{reference}")
        try:
            media = (resp.headers.get("Content-Type") or "").split(";")[0].strip() or json.loads(raw).get("mediaType", "")
        except (ValueError, AttributeError, RecursionError):
            raise RegistryAnswerError(f"registry {self.host}: {repo}:{reference} is not a manifest (not a JSON object)") from None
        return Manifest(media, digest, raw)

    def blob(self, repo_ref: str, digest: str) -> bytes:
        repo, _ = split(repo_ref)
        found = self.read_blob(repo, digest)
        if found is None:
            raise RegistryAnswerError(f"registry {self.host}: blob {digest} of {repo} answered 404")
        return found

    def read_blob(self, repo: str, digest: str) -> bytes | None:
        """The blob's bytes, checked against its digest (content addressing is the point); None: not there."""
        resp = self._request("GET", repo, f"blobs/{digest}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RegistryAnswerError(f"registry {self.host}: blob {digest} of {repo} answered {resp.status_code}")
        if sha256(resp.content) != digest:
            raise RegistryAnswerError(f"registry {self.host} served a blob that is not {digest}")
        return resp.content

    def platform_digest(self, ref: str, platform: Platform) -> tuple[str, Manifest]:
        """The digest of `platform`'s manifest under `ref` (a tag or digest naming an index or one manifest), and
        what `ref` itself names. A single manifest of another platform is refused."""
        top = self.manifest(ref)
        if top is None:
            raise RegistryAnswerError(f"{ref} is not in the registry {self.host}")
        if top.is_index:
            found = top.platforms()
            digest = found.get(platform)
            if digest is None:
                raise RegistryAnswerError(f"{ref} has no image for {platform}: its index lists {', '.join(sorted(found)) or 'none'}")
            return digest, top
        digest = config_digest(top.doc)
        if digest is None or not digest.startswith("sha256:"):
            raise RegistryAnswerError(f"{ref}: its manifest names no config digest (not an image manifest)")
        config = json_object(self.blob(ref, digest))
        if config is None:
            raise RegistryAnswerError(f"{ref}: its image config is not a JSON object")
        has = canonical(f"{config.get('os')}/{config.get('architecture')}" + (f"/{config['variant']}" if config.get("variant") else ""))
        if has != platform:
            raise RegistryAnswerError(f"{ref} is a single image for {has}, not {platform}: publish an index (manifest list) "
                               f"with both, or pin each platform's base by digest")
        return top.digest, top

    def tags(self, repo: str, pages: int = 100) -> list[str]:
        """Every tag of `repo` (pages followed, as Link: <...>; rel="next" names them), as the registry lists them;
        an answer of the wrong shape is a RegistryAnswerError, a tag that is no tag is left out."""
        found: list[str] = []
        url: str | None = None
        for _ in range(pages):
            resp = self._request("GET", repo, "tags/list", url=url)
            if resp.status_code == 404:
                raise RegistryAnswerError(f"{self.host}/{repo}: not found on {self.host}")
            if resp.status_code != 200:
                raise RegistryAnswerError(f"registry {self.host} answered {resp.status_code} for the tags of {repo}")
            found += tag_list(resp.content, self.host)
            link = re.search(r"<([^>]+)>;\s*rel=\"?next", resp.headers.get("Link", "") or "")
            if not link:
                break
            url = link.group(1)
            if urlsplit(urljoin(self.base + "/", url))[:2] != urlsplit(self.base)[:2]:
                raise RegistryAnswerError(f"registry {self.host} names its next page of tags on another host; not followed")
        return found

    def head_digest(self, repo: str, reference: str) -> str | None:
        """The digest the registry says a tag names (HEAD, nothing downloaded); None when it has no such tag."""
        resp = self._request("HEAD", repo, f"manifests/{reference}", headers={"Accept": ACCEPT})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RegistryAnswerError(f"registry {self.host} answered {resp.status_code} for {repo}:{reference}")
        digest = resp.headers.get("Docker-Content-Digest") or ""
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise RegistryAnswerError(f"registry {self.host} gave no valid digest for {repo}:{reference}")
        return digest

    # -- writing ------------------------------------------------------------------------------------------------
    @staticmethod
    def index_media_type(children: list[tuple[str, Manifest]]) -> str:
        return DOCKER_LIST if all(m.media_type == DOCKER_MANIFEST for _, m in children) else OCI_INDEX

    def put_index(self, ref: str, children: list[tuple[str, Manifest]]) -> str:
        """PUT an image index naming each (platform, manifest) at `ref` (a tag); the digest the registry confirmed.
        The index is a Docker manifest list when every child is a Docker manifest, else an OCI index: clients
        read both, and a mix of the two families is what some of them refuse."""
        media = self.index_media_type(children)
        entries = []
        for platform, m in children:
            entries.append({"mediaType": m.media_type, "digest": m.digest, "size": len(m.raw),
                            "platform": Platform(platform).oci_dict()})
        body = json.dumps({"schemaVersion": 2, "mediaType": media, "manifests": entries}, indent=3).encode()
        return self.put_manifest(*split(ref), body, media, what=f"the index for {ref}")

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str, *, what: str = "") -> str:
        """PUT a manifest (or index) at a tag; its digest, which the registry must confirm if it says one."""
        what = what or f"manifest {repo}:{reference}"
        resp = self._request("PUT", repo, f"manifests/{reference}", push=True, data=data,
                             headers={"Content-Type": media_type})
        if resp.status_code not in (200, 201):
            raise RegistryAnswerError(f"registry {self.host} refused {what} ({resp.status_code}): {resp.text[:300]}")
        digest = sha256(data)
        said = resp.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise RegistryAnswerError(f"registry {self.host} stored {what} as {said}, not {digest}")
        return digest

    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload a blob (monolithically: signatures and attestations are small) unless the registry has it."""
        digest = sha256(data)
        if self._request("HEAD", repo, f"blobs/{digest}", push=True).status_code == 200:
            return digest
        start = self._request("POST", repo, "blobs/uploads/", push=True, data=b"")
        location = start.headers.get("Location")
        if start.status_code != 202 or not location:
            raise RegistryAnswerError(f"registry {self.host} refused an upload to {repo} ({start.status_code})")
        done = self._request("PUT", repo, "", push=True, data=data, url=f"{location}{'&' if '?' in location else '?'}digest={digest}",
                             headers={"Content-Type": "application/octet-stream"})
        if done.status_code != 201:
            raise RegistryAnswerError(f"registry {self.host} refused blob {digest} in {repo} ({done.status_code})")
        return digest
