"""Image references, one type for all of envbuild: the distribution reference grammar with Docker's
normalisation (github.com/distribution/reference: ParseNormalizedNamed, FamiliarString).

Build, publish, pull, doctor, sources and the engine all read a reference here, so that the registry a push
goes to and the registry whose credentials are offered are the same one: the one Docker itself reads.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, replace

from envbuild.core.errors import InvalidInput

DOCKER_HUB = "docker.io"
_LEGACY_HUB = "index.docker.io"
# The grammar, as distribution/reference writes it (regexp.go).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
# No bracketed IPv6 hosts: engines before 24 refuse them, so a reference written with one is not portable.
_HOST = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # Go's \w is ASCII; Python's would take '１２' and 'é'
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_PATH = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"

DOMAIN = re.compile(rf"^{_DOMAIN}\Z")
PATH = re.compile(rf"^{_PATH}\Z")
TAG = re.compile(rf"^{_TAG}\Z")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")  # what envbuild itself pins and compares
_ANY_DIGEST = re.compile(rf"^{_DIGEST}\Z")
_ANCHORED = re.compile(rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?\Z")
_IMAGE_ID = re.compile(r"^[a-f0-9]{64}\Z")
# What go-digest accepts after the grammar: a registered algorithm, its length, lower-case hex.
_DIGEST_SIZES = {"sha256": 64, "sha384": 96, "sha512": 128}


def _digest_ok(digest: str) -> bool:
    algorithm, _, encoded = digest.partition(":")
    size = _DIGEST_SIZES.get(algorithm)
    return size is not None and re.fullmatch(rf"[a-f0-9]{{{size}}}", encoded) is not None
NAME_TOTAL_LENGTH_MAX = 255

__all__ = ["DIGEST", "DOCKER_HUB", "TAG", "Reference", "api_host", "check_repository", "is_host", "mirror", "parse_mirror",
           "with_tags"]


def is_host(component: str) -> bool:
    """Docker's rule for the first component of a name: a registry host has a '.' or a ':', or is 'localhost'.
    (Engines from 24 also read an upper-case first component as a host; 20.10 calls it an upper-case
    repository: both refuse 'Foo/bar' as a Docker Hub name, and so does envbuild.)"""
    return "." in component or ":" in component or component == "localhost"


def is_loopback(host: str) -> bool:
    """A registry on this machine (localhost, 127.0.0.0/8, ::1): spoken to in plain HTTP, as Docker does."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def api_host(host: str) -> str:
    """Where a registry host answers the distribution API: Docker Hub's docker.io is registry-1.docker.io."""
    return "registry-1.docker.io" if host == DOCKER_HUB else host


class InvalidReference(InvalidInput):
    pass


def _q(text: str) -> str:
    """A value an error quotes: as repr writes it, every secret shape in it masked (a mirror's bob:S3cret@), capped."""
    from envbuild.core.output import scrub
    from envbuild.core.text import capped

    return repr(capped(scrub(text, environ={}), 200))


@dataclass(frozen=True)
class Reference:
    """A normalised image reference: docker.io/library/debian:12 for 'debian:12'."""

    domain: str  # the registry, as Docker names it (docker.io for Docker Hub)
    path: str  # the repository within it: library/debian
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str, what: str = "image reference") -> "Reference":
        """Read `text` as `docker pull` would, or raise InvalidReference saying why."""
        if not isinstance(text, str) or not text:
            raise InvalidReference(f"{what}: an empty reference")
        m = _ANCHORED.match(text)
        if not m:
            if text.lower() != text and _ANCHORED.match(text.lower()):
                raise InvalidReference(f"{what} {_q(text)}: the repository name must be lowercase")
            raise InvalidReference(f"{what} {_q(text)} is not an image reference such as 'debian:12', "
                                   "'ghcr.io/org/name:tag' or 'localhost:5000/name@sha256:...'")
        name = m.group("name")
        if len(name) > NAME_TOTAL_LENGTH_MAX:
            raise InvalidReference(f"{what} {text[:60]!r}...: the repository name is longer than "
                                   f"{NAME_TOTAL_LENGTH_MAX} characters")
        if _IMAGE_ID.match(name):
            raise InvalidReference(f"{what} {_q(text)}: a 64-hex repository name would read as an image id")
        first, sep, rest = name.partition("/")
        if sep and is_host(first):
            domain, path = first, rest
        else:
            domain, path = DOCKER_HUB, name
        if domain == _LEGACY_HUB:
            domain = DOCKER_HUB
        if domain == DOCKER_HUB and "/" not in path:
            path = "library/" + path
        if path.lower() != path:
            raise InvalidReference(f"{what} {_q(text)}: the repository name must be lowercase")
        if m.group("digest") and not _digest_ok(m.group("digest")):
            raise InvalidReference(f"{what} {_q(text)}: the digest is not sha256:, sha384: or sha512: with its length "
                                   "of lower-case hex")
        return cls(domain, path, m.group("tag"), m.group("digest"))

    @classmethod
    def repository(cls, text: str, what: str = "--registry") -> "Reference":
        """A repository (no tag, no digest) that is not a bare registry host: 'ghcr.io' alone would be read by
        Docker as docker.io/library/ghcr.io, and a push there would go to Docker Hub."""
        value = text.strip().rstrip("/")
        if "/" not in value and (is_host(value) or re.fullmatch(r"[^:/]+:[0-9]+", value)):
            raise InvalidInput(f"{what} {_q(text)} names a registry but no repository in it: add a path, e.g. "
                               f"'{value}/envbuild' (Docker would read '{value}' alone as an image on Docker Hub)")
        try:
            ref = cls.parse(value, what)
        except InvalidReference as exc:
            raise InvalidInput(f"{exc} (expected a repository such as 'ghcr.io/org/envbuild' or "
                               "'localhost:5000/envbuild')") from None
        if ref.tag or ref.digest:
            raise InvalidInput(f"{what} {_q(text)} is not an image repository such as 'ghcr.io/org/envbuild' or "
                               "'localhost:5000/envbuild' (give the repository without a tag or digest: the tags "
                               "come from the matrix)")
        return ref

    # -- the forms it is written in ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The full repository name: docker.io/library/debian."""
        return f"{self.domain}/{self.path}"

    @property
    def familiar_name(self) -> str:
        """The repository as Docker prints it: debian, org/x, ghcr.io/org/x."""
        if self.domain == DOCKER_HUB:
            return self.path.removeprefix("library/") if self.path.count("/") == 1 else self.path
        return self.name

    def _suffix(self) -> str:
        return (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def __str__(self) -> str:
        """The familiar string, as `docker images` and RepoTags print it."""
        return self.familiar_name + self._suffix()

    @property
    def full(self) -> str:
        """The normalised string: docker.io/library/debian:12."""
        return self.name + self._suffix()

    @property
    def registry(self) -> str:
        """The host that receives a push or pull of this reference, and the only one its credentials go to."""
        return self.domain

    @property
    def api_host(self) -> str:
        return api_host(self.domain)

    def with_tag(self, tag: str) -> "Reference":
        if not TAG.match(tag):
            raise InvalidReference(f"tag {_q(tag)} is not a tag (letters, digits, '_', '.', '-'; at most 128)")
        return replace(self, tag=tag, digest=None)

    def with_digest(self, digest: str) -> "Reference":
        if not _ANY_DIGEST.match(digest) or not _digest_ok(digest):
            raise InvalidReference(f"digest {_q(digest)} is not a digest such as 'sha256:<64 hex>'")
        return replace(self, digest=digest)

    def tagged(self) -> "Reference":
        """With Docker's default tag: 'latest' when there is neither tag nor digest."""
        return self if self.tag or self.digest else replace(self, tag="latest")

    def same_repository(self, other: "Reference | str") -> bool:
        other = other if isinstance(other, Reference) else Reference.parse(other)
        return self.name == other.name


def parse_mirror(rule: str) -> tuple[str, str]:
    """--mirror FROM=TO: both a registry host with an optional path, e.g. docker.io=mirror.example.com:5000/hub.
    Returns (FROM, TO), normalised (index.docker.io is docker.io), without a trailing '/'."""
    src, sep, dst = rule.partition("=")
    parts = []
    for side in (src, dst):
        side = side.rstrip("/")
        host, _, path = side.partition("/")
        if not sep or not DOMAIN.match(host) or not is_host(host) or (path and not PATH.match(path)):
            raise InvalidInput(f"--mirror {_q(rule)}: expected FROM=TO, each a registry host (with a '.' or a port, or "
                               "localhost) and an optional path, e.g. docker.io=mirror.example.com:5000")
        parts.append(side.replace(_LEGACY_HUB, DOCKER_HUB, 1) if host == _LEGACY_HUB else side)
    return parts[0], parts[1]


def mirror(ref: str, rules: "tuple[str, ...] | list[str]") -> str:
    """Apply the first --mirror FROM=TO whose FROM prefixes the normalised reference; the reference unchanged
    (as written) when none does."""
    parsed = [parse_mirror(rule) for rule in rules]
    if not parsed:
        return ref
    full = Reference.parse(ref, "the base image")
    for (src, dst), rule in zip(parsed, rules):
        if full.name == src or full.name.startswith(src + "/"):
            mirrored = dst + full.full[len(src):]
            try:
                Reference.parse(mirrored)
            except InvalidReference as exc:
                raise InvalidInput(f"--mirror {_q(rule)}: the base image would become {exc}") from None
            return mirrored
    return ref


def check_repository(value: str, what: str = "--registry") -> str:
    """A repository to push to or pull from, such as 'ghcr.io/org/envbuild', in Docker's familiar form; refuses
    a tag, a digest, and a bare registry host."""
    return str(Reference.repository(value, what))


def with_tags(repository: str, refs: "list[str] | tuple[str, ...]") -> list[str]:
    """The tags of `refs` moved under another repository."""
    repo = Reference.repository(repository, "repository")
    return [str(repo.with_tag(Reference.parse(r).tagged().tag)) for r in refs]

