"""Image references and registry names, by Docker's rules: one copy for build, publish, pull and doctor."""

from __future__ import annotations

import re
from typing import Iterable

from ..engine import split_ref
from ..errors import InvalidInput
from ..matrix.schema import check_str
from ..text import shown

# Same shape as matrix.yaml's image.repository: a repository, no tag, no digest.
REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

__all__ = ["DIGEST", "REPOSITORY", "TAG", "api_host", "check_repository", "mirror_image", "normalize_ref", "registry_host",
           "same_repository", "split_ref", "with_tags"]


def _is_host(part: str) -> bool:
    """Docker's rule for the first part of a reference: a registry host has a dot, a port, or is localhost."""
    return "." in part or ":" in part or part == "localhost"


def registry_host(ref: str) -> str:
    """'ghcr.io/org/x' or a bare 'ghcr.io' -> 'ghcr.io'; 'localhost:5000/x' or a bare 'localhost:5000' ->
    'localhost:5000'; 'org/x', 'ubuntu' and 'debian:12' (an image and its tag) -> 'docker.io'."""
    first, sep, _ = ref.partition("/")
    if not sep:  # a bare name is a host only where its name part says so: 'debian:12' is an image
        name = first.partition(":")[0]
        return first if "." in name or name == "localhost" else "docker.io"
    return first if _is_host(first) else "docker.io"


def api_host(host: str) -> str:
    """Where a registry host answers the distribution API: Docker Hub's docker.io is registry-1.docker.io."""
    return "registry-1.docker.io" if host == "docker.io" else host


def normalize_ref(ref: str) -> str:
    """Expand Docker's short names: 'debian:12' -> 'docker.io/library/debian:12'."""
    first, sep, _ = ref.partition("/")
    if not sep:
        return "docker.io/library/" + ref
    return ref if _is_host(first) else "docker.io/" + ref


def same_repository(a: str, b: str) -> bool:
    """Whether two repository names are the same one ('library/debian' is 'docker.io/library/debian')."""
    return normalize_ref(a) == normalize_ref(b)


def mirror_image(ref: str, mirrors: Iterable[str]) -> str:
    """Apply the first `--mirror FROM=TO` whose FROM prefixes the (normalized) reference."""
    full = normalize_ref(ref)
    for rule in mirrors:
        src, sep, dst = rule.partition("=")
        if not sep or not src or not dst:
            raise InvalidInput(f"--mirror {rule!r}: expected FROM=TO, e.g. docker.io=mirror.example.com:5000")
        src = src.rstrip("/")
        if full == src or full.startswith(src + "/"):
            mirrored = dst.rstrip("/") + full[len(src):]
            # the result is written into the Dockerfile's FROM: held to the matrix's own image pattern
            _, why = check_str("image")(mirrored)
            if why:
                raise InvalidInput(f"--mirror {shown(rule)}: the base image would become {why}")
            return mirrored
    return ref


def check_repository(value: str, what: str = "--registry") -> str:
    """A repository prefix such as 'ghcr.io/org/envbuild' or 'localhost:5000/envbuild' (no tag, no digest)."""
    repo = value.strip().rstrip("/")
    if "/" not in repo and ":" in repo:
        raise InvalidInput(f"{what} {value!r} names a registry but no repository in it: add a path, e.g. '{repo}/envbuild'")
    if "@" in repo or not REPOSITORY.match(repo):
        hint = " (give the repository without a tag: the tags come from the matrix)" if re.search(r":[^/]*[^0-9/][^/]*$", repo) else ""
        raise InvalidInput(f"{what} {value!r} is not an image repository such as 'ghcr.io/org/envbuild' or 'localhost:5000/envbuild'{hint}")
    return repo


def with_tags(repository: str, refs: Iterable[str]) -> list[str]:
    """The tags of `refs` moved under another repository."""
    return [f"{repository}:{split_ref(r)[1]}" for r in refs]
