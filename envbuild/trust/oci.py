"""The few distribution-API calls signatures need, by HTTP (the engine cannot push a manifest it did not build):
resolve a tag, read a manifest or blob, upload a blob, put a manifest. Plain HTTP only for loopback registries,
as Docker allows; Basic or Bearer-token authentication with the credentials publish and pull use."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urljoin

from ..registry.api import ACCEPT, DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST  # noqa: F401 (the media types, one list)
from ..registry.credentials import Scrubber, config_login, from_env
from ..imageref import DIGEST, Reference, api_host, is_loopback as _loopback
from . import TrustError

TIMEOUT = 60
MAX_DOC = 16 << 20  # a manifest or an attestation; a larger answer is refused, not read whole


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str  # sha256 of data, computed here (a registry's header is not trusted)

    def json(self) -> dict[str, Any]:
        return json.loads(self.data)


class NotFound(TrustError):
    pass


class Client:
    """One registry host; `repository` arguments are the path under it (org/envbuild)."""

    def __init__(self, host: str, environ: Mapping[str, str] | None = None):
        import requests

        self.host = host
        self.base = f"{'http' if _loopback(host) else 'https'}://{api_host(host)}"
        self.session = requests.Session()
        self._basic = self._credentials(environ)
        self._tokens: dict[str, str] = {}
        creds = from_env(host, environ)
        self.scrub = Scrubber(creds)

    @classmethod
    def for_repository(cls, repository: str, environ: Mapping[str, str] | None = None) -> tuple["Client", str]:
        ref = Reference.parse(repository, "repository")
        return cls(ref.registry, environ), ref.path

    def _credentials(self, environ: Mapping[str, str] | None) -> tuple[str, str] | None:
        creds = from_env(self.host, environ) or config_login(self.host, environ)
        return (creds.username, creds.password) if creds else None

    def _token(self, challenge: str, scope: str) -> str | None:
        """A Bearer token from the realm the registry named (Docker's token flow)."""
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            return None
        params["scope"] = params.get("scope") or scope
        response = self.session.get(realm, params=params, auth=self._basic, timeout=TIMEOUT)
        if response.status_code != 200:
            return None
        doc = response.json()
        return doc.get("token") or doc.get("access_token")

    def request(self, method: str, url: str, repository: str, *, push: bool = False, **kw: Any):
        import requests

        url = urljoin(self.base, url)
        scope = f"repository:{repository}:{'pull,push' if push else 'pull'}"
        headers = dict(kw.pop("headers", {}))
        for attempt in range(2):
            if scope in self._tokens:
                headers["Authorization"] = f"Bearer {self._tokens[scope]}"
            try:
                response = self.session.request(method, url, headers=headers, timeout=TIMEOUT,
                                                auth=self._basic if "Authorization" not in headers else None,
                                                allow_redirects=True, **kw)
            except requests.RequestException as exc:
                raise TrustError(self.scrub(f"registry {self.host} unreachable ({type(exc).__name__}: {str(exc)[:200]})")) from None
            challenge = response.headers.get("WWW-Authenticate", "")
            if response.status_code == 401 and attempt == 0 and challenge.lower().startswith("bearer"):
                token = self._token(challenge, scope)
                if token:
                    self._tokens[scope] = token
                    continue
            break
        if response.status_code in (401, 403):
            raise TrustError(f"registry {self.host} refused {method} {repository} ({response.status_code}): set "
                             "ENVBUILD_REGISTRY_USER and ENVBUILD_REGISTRY_PASSWORD, or `docker login`")
        return response

    def _read(self, response, what: str) -> bytes:
        size = int(response.headers.get("Content-Length") or 0)
        if size > MAX_DOC or len(response.content) > MAX_DOC:
            raise TrustError(f"{what} is larger than {MAX_DOC >> 20} MiB; not read")
        return response.content

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest a tag or digest names now; NotFound when there is none."""
        response = self.request("GET", f"/v2/{repository}/manifests/{reference}", repository, headers={"Accept": ACCEPT})
        if response.status_code == 404:
            raise NotFound(f"{self.host}/{repository}: no manifest {reference}")
        if response.status_code >= 400:
            raise TrustError(f"registry {self.host} answered {response.status_code} for {repository}:{reference}")
        data = self._read(response, f"{repository}:{reference}")
        digest = sha256(data)
        if DIGEST.match(reference) and reference != digest:
            raise TrustError(f"registry {self.host} served content of digest {digest} for {reference}")
        return Manifest(data, response.headers.get("Content-Type", "").split(";")[0], digest)

    def blob(self, repository: str, digest: str) -> bytes:
        response = self.request("GET", f"/v2/{repository}/blobs/{digest}", repository)
        if response.status_code == 404:
            raise NotFound(f"{self.host}/{repository}: no blob {digest}")
        if response.status_code >= 400:
            raise TrustError(f"registry {self.host} answered {response.status_code} for blob {digest}")
        data = self._read(response, f"blob {digest}")
        if sha256(data) != digest:  # content addressing is the whole point: check it
            raise TrustError(f"registry {self.host} served a blob that is not {digest}")
        return data

    def put_blob(self, repository: str, data: bytes) -> str:
        digest = sha256(data)
        head = self.request("HEAD", f"/v2/{repository}/blobs/{digest}", repository, push=True)
        if head.status_code == 200:
            return digest
        start = self.request("POST", f"/v2/{repository}/blobs/uploads/", repository, push=True)
        if start.status_code != 202 or not start.headers.get("Location"):
            raise TrustError(f"registry {self.host} refused an upload to {repository} ({start.status_code})")
        location = start.headers["Location"]
        sep = "&" if "?" in location else "?"
        done = self.request("PUT", f"{location}{sep}digest={digest}", repository, push=True, data=data,
                            headers={"Content-Type": "application/octet-stream"})
        if done.status_code != 201:
            raise TrustError(f"registry {self.host} refused blob {digest} in {repository} ({done.status_code})")
        return digest

    def put_manifest(self, repository: str, tag: str, data: bytes, media_type: str = OCI_MANIFEST) -> str:
        response = self.request("PUT", f"/v2/{repository}/manifests/{tag}", repository, push=True, data=data,
                                headers={"Content-Type": media_type})
        if response.status_code != 201:
            raise TrustError(f"registry {self.host} refused manifest {repository}:{tag} ({response.status_code}: "
                             f"{self.scrub(response.text[:200])})")
        return sha256(data)
