"""The few distribution-API calls signatures need (resolve a tag, read a manifest or blob, upload a blob, put a
manifest), said in signing's terms: NotFound where the registry has none, TrustError where it fails. The HTTP,
TLS, authentication, size caps and digest checks are the registry stage's one client (registry.api.Registry)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from envbuild.core.errors import RegistryError
from envbuild.net.regclient import ACCEPT, DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Registry, json_object, sha256  # noqa: F401 (the media types and the digest, one of each)
from envbuild.net.credentials import Scrubber
from envbuild.core.imageref import Reference
from envbuild.ship.trust import TrustError


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str  # sha256 of data, computed by the registry client (a registry's header is not trusted)

    def json(self) -> dict[str, Any]:
        """The manifest as a JSON object; anything else (not JSON, a list, nested past reason) is a TrustError."""
        doc = json_object(self.data)
        if doc is None:
            raise TrustError(f"the registry's manifest {self.digest} is not a JSON object")
        return doc


class NotFound(TrustError):
    pass


class Client:
    """One registry host; `repository` arguments are the path under it (org/envbuild)."""

    def __init__(self, host: str, environ: Mapping[str, str] | None = None):
        self.host = host
        self.registry = Registry(host, environ)
        self.scrub = Scrubber(self.registry.creds)  # what it may send, masked in what it says

    @classmethod
    def for_repository(cls, repository: str, environ: Mapping[str, str] | None = None) -> tuple["Client", str]:
        ref = Reference.parse(repository, "repository")
        return cls(ref.registry, environ), ref.path

    @contextlib.contextmanager
    def _said_as_trust(self) -> Iterator[None]:
        try:
            yield
        except RegistryError as exc:  # unreachable, refused, too large, not what it should be
            raise TrustError(self.scrub(str(exc))) from None

    def manifest(self, repository: str, reference: str) -> Manifest:
        """The manifest a tag or digest names now; NotFound when there is none."""
        with self._said_as_trust():
            found = self.registry.read_manifest(repository, reference)
        if found is None:
            raise NotFound(f"{self.host}/{repository}: no manifest {reference}")
        return Manifest(found.raw, found.media_type, found.digest)

    def blob(self, repository: str, digest: str) -> bytes:
        with self._said_as_trust():
            found = self.registry.read_blob(repository, digest)
        if found is None:
            raise NotFound(f"{self.host}/{repository}: no blob {digest}")
        return found

    def put_blob(self, repository: str, data: bytes) -> str:
        with self._said_as_trust():
            return self.registry.put_blob(repository, data)

    def put_manifest(self, repository: str, tag: str, data: bytes, media_type: str = OCI_MANIFEST) -> str:
        with self._said_as_trust():
            return self.registry.put_manifest(repository, tag, data, media_type)
