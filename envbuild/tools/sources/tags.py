"""Base image tags and digests from their registry (OCI distribution API through oras: the anonymous token
flow of public registries, credentials as publish finds them), and which tags have the same shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

import oras.container

from envbuild.core.credentials import from_env
from envbuild.core.imageref import Reference, api_host, is_loopback as _loopback
from envbuild.ship.session import unreachable_reason
from envbuild.tools.sources.index import SourceError, read_capped

_MANIFESTS = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])




class RegistryClient:
    """Read-only registry queries; plain HTTP only for loopback registries, as Docker allows."""

    def __init__(self, ca_bundle: Path | None = None, environ: Mapping[str, str] | None = None,
                 publish_host: str | None = None):
        self.ca_bundle = ca_bundle
        self.environ = environ
        self.publish_host = publish_host
        self._clients: dict[str, object] = {}
        self._checked: dict[str, str | None] = {}

    def _client(self, host: str):
        if host in self._clients:
            return self._clients[host]
        if host not in self._checked:
            self._checked[host] = unreachable_reason(host)
        if self._checked[host]:
            raise SourceError(f"registry {host} cannot be reached ({self._checked[host]})")
        import oras.provider  # only outdated and bump ask registries for tags

        client = oras.provider.Registry(hostname=api_host(host), insecure=_loopback(host),
                                        tls_verify=str(self.ca_bundle) if self.ca_bundle else True)
        creds = from_env(host, self.environ) if host == self.publish_host else None
        if creds:
            client.auth.set_basic_auth(creds.username, creds.password)
        self._clients[host] = client
        return client

    def _request(self, ref: Reference, url: str, method: str = "GET", headers: dict | None = None):
        client = self._client(ref.registry)

        try:
            client.auth.load_configs(oras.container.Container(ref.name))
        except Exception:  # no Docker config: anonymous
            pass
        try:
            response = client.do_request(f"{client.prefix}://{url}", method, headers=headers or {}, stream=True)
        except Exception as exc:  # requests' and oras' errors alike: the registry did not answer usably
            raise SourceError(f"registry {ref.registry}: {str(exc).splitlines()[0][:200] or type(exc).__name__}") from None
        if response.status_code in (401, 403):
            raise SourceError(f"registry {ref.registry} refused {ref.path} ({response.status_code}): log in with "
                              f"`docker login {ref.registry}`")
        if response.status_code == 404:
            raise SourceError(f"{ref.familiar_name}: not found on {ref.registry}")
        if response.status_code >= 400:
            raise SourceError(f"registry {ref.registry} answered {response.status_code} for {ref.path}")
        return response

    def tags(self, ref: Reference) -> list[str]:
        api = api_host(ref.registry)
        url = f"{api}/v2/{ref.path}/tags/list"
        tags: list[str] = []
        for _ in range(100):  # pages (Link: <...>; rel="next")
            response = self._request(ref, url)
            tags += _tag_list(_bounded(response, ref.registry), ref.registry)
            link = re.search(r"<([^>]+)>;\s*rel=\"?next", response.headers.get("Link", ""))
            if not link:
                break
            url = f"{api}{link.group(1)}" if link.group(1).startswith("/") else link.group(1).split("://", 1)[-1]
        return tags

    def digest(self, ref: Reference, tag: str) -> str:
        api = api_host(ref.registry)
        response = self._request(ref, f"{api}/v2/{ref.path}/manifests/{tag}", "HEAD", {"Accept": _MANIFESTS})
        response.close()
        digest = response.headers.get("Docker-Content-Digest")
        if not digest:
            raise SourceError(f"registry {ref.registry} gave no digest for {ref.path}:{tag}")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise SourceError(f"registry {ref.registry} gave no valid digest for {ref.path}:{tag}")
        return digest


MAX_ANSWER = 16 << 20  # a tags page (thousands of tags are a few hundred KB)


def _bounded(response: Any, host: str) -> bytes:
    """The body of a registry's answer, read up to the cap: an endless answer is cut off there, not read whole."""
    chunks: list[bytes] = []
    read_capped(response, MAX_ANSWER, chunks.append,
                f"registry {host} sent more than {MAX_ANSWER >> 20} MiB for a list of tags; not read further",
                lambda exc: f"registry {host}: the answer broke off ({type(exc).__name__})",
                Exception)  # requests' and oras' errors alike
    return b"".join(chunks)


def _tag_list(body: bytes, host: str) -> list[str]:
    """The tags of a /tags/list answer; one of the wrong shape is the registry's fault, said so."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise SourceError(f"registry {host} answered the list of tags with invalid JSON") from None
    tags = doc.get("tags") if isinstance(doc, dict) else None
    if tags is None and isinstance(doc, dict):
        return []
    if not isinstance(tags, list):
        raise SourceError(f"registry {host} answered the list of tags with something else than a list")
    return [t for t in tags if isinstance(t, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", t)]


# --------------------------------------------------------------------------------------------------
# Tags of the same shape: the same words, numbers compared as versions, except the numbers that name the OS
# or the Python, which stay (a newer CUDA on the same Ubuntu, a newer ROCm with the same Python).

_FIXED = re.compile(r"(?:ubuntu|debian|py|python|cp|el|ubi|rhel|rocky|alpine|amzn|al|centos|bookworm|jammy|noble)$", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)*")


def shape(tag: str, fixed_first: bool = False) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """(the tag with its comparable numbers blanked, those numbers) — tags of one shape compare by the numbers."""
    parts: list[str] = []
    numbers: list[tuple[int, ...]] = []
    last = 0
    for i, m in enumerate(_NUMBER.finditer(tag)):
        before = tag[last:m.start()]
        parts.append(before)
        word = re.search(r"[A-Za-z]+$", before)
        if (word and _FIXED.match(word.group(0))) or (fixed_first and i == 0):
            parts.append(m.group(0))  # part of the shape: must match exactly
        else:
            parts.append("#" * (m.group(0).count(".") + 1))
            numbers.append(tuple(int(x) for x in m.group(0).split(".")))
        last = m.end()
    parts.append(tag[last:])
    return tuple(parts), tuple(numbers)


def newer_tags(current: str, tags: list[str], repository: str = "") -> list[str]:
    """Tags of the same shape as `current` with larger numbers, newest first."""
    fixed_first = repository.rsplit("/", 1)[-1] == "python"  # python:3.12-slim: the leading number is the Python
    want, numbers = shape(current, fixed_first)
    if not numbers:
        return []
    found = []
    for tag in tags:
        s, n = shape(tag, fixed_first)
        if s == want and n > numbers:
            found.append((n, tag))
    return [t for _, t in sorted(found, reverse=True)]


def follow(current_tag: str, new_tag: str, value: str) -> str | None:
    """The value that sits in `new_tag` where `value` sits in `current_tag` (a vendor base's torch), or None."""
    old = list(_NUMBER.finditer(current_tag))
    new = list(_NUMBER.finditer(new_tag))
    if len(old) != len(new):
        return None
    for a, b in zip(old, new):
        if a.group(0) == value or value.startswith(a.group(0) + "+") or a.group(0) == value.split("+")[0]:
            return b.group(0)
    return None
