"""Which base images a distribution's archive can make (`envbuild base`): data, no I/O.

An air-gapped site that reaches no registry often still has a mirror of Debian's or Ubuntu's archive. A Debian or
Ubuntu base image is, for the Dockerfiles' purposes, that distribution's minimal root filesystem, which mmdebstrap
makes from the archive. Every other base carries something no archive holds (a vendor's toolkit, a CPython build
of its own): those are refused, saying why and what to do instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envbuild.core.imageref import DOCKER_HUB, InvalidReference, Reference

MADE_LABEL = "dev.envbuild.base.made"  # on a base `envbuild base` made: what made it (suite, archive, epoch)
DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
UBUNTU_ARCHIVE = "http://archive.ubuntu.com/ubuntu"
UBUNTU_PORTS = "http://ports.ubuntu.com/ubuntu-ports"  # Ubuntu's archive for every architecture but amd64 and i386


@dataclass(frozen=True)
class Suite:
    distribution: str  # Debian, Ubuntu: in messages
    suite: str  # the archive's codename: bookworm, noble
    components: tuple[str, ...]
    keyring: str  # the archive's signing keys (Debian's are apt's own on a Debian host)

    def mirror(self, arch: str) -> str:
        if self.distribution == "Ubuntu":
            return UBUNTU_ARCHIVE if arch in ("amd64", "i386") else UBUNTU_PORTS
        return DEBIAN_ARCHIVE


DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
UBUNTU_KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"

# Docker Hub's official image, its tag's pattern -> the suite. Tags as the official images spell them: the
# codename (bookworm, bookworm-slim, bookworm-20260101-slim), the release number (12, 12.15-slim), Ubuntu's
# version (24.04) or its codename (noble, noble-20260101).
SUITES: tuple[tuple[str, str, Suite], ...] = (
    ("library/debian", r"(bookworm|12)([.-].*)?", Suite("Debian", "bookworm", ("main",), DEBIAN_KEYRING)),
    ("library/debian", r"(trixie|13)([.-].*)?", Suite("Debian", "trixie", ("main",), DEBIAN_KEYRING)),
    ("library/ubuntu", r"(24\.04|noble)(-.*)?", Suite("Ubuntu", "noble", ("main",), UBUNTU_KEYRING)),
    ("library/ubuntu", r"(22\.04|jammy)(-.*)?", Suite("Ubuntu", "jammy", ("main",), UBUNTU_KEYRING)),
)

# What a refused base carries that no distribution's archive holds: (a part of its registry/repository, what).
VENDOR = (
    ("nvidia/", "NVIDIA's CUDA libraries"),
    ("rocm/", "AMD's ROCm stack and its PyTorch build"),
    ("ascend/", "Huawei's CANN toolkit for Ascend"),
    ("neuron/", "AWS Neuron's SDK and its PyTorch build"),
    ("habana", "Intel Gaudi's software stack and its PyTorch build"),
    ("cambricon", "Cambricon's PyTorch build for MLU"),
    ("mthreads", "Moore Threads' MUSA stack and its PyTorch build"),
    ("intel/", "Intel's oneAPI stack"),
)


class CannotMake(InvalidReference):
    """This base cannot be made from a distribution's archive; the message says why and what to do instead."""


def suite_for(image: str, backend: str = "BACKEND") -> Suite:
    """The suite that makes `image`, or CannotMake saying why not and the way out."""
    ref = Reference.parse(image, "base image")
    field = f"backends.{backend}.base_image"
    if ref.digest:
        raise CannotMake(f"{image} is pinned by digest: a base made here is the same files, but another image, so it "
                         f"cannot carry that digest. Name it by tag (`--set {field}={ref.familiar_name}:{ref.tag or 'TAG'}`), "
                         "make it, and lock again")
    if ref.domain == DOCKER_HUB:
        for path, tag, suite in SUITES:
            if ref.path == path and re.fullmatch(tag, ref.tag or "latest"):
                return suite
    if ref.domain == DOCKER_HUB and ref.path == "library/python":
        suite = next((s for s in ("bookworm", "trixie") if s in (ref.tag or "")), "bookworm")
        raise CannotMake(f"{image} is not Debian's: it carries its own CPython build (compiled into /usr/local), which "
                         f"no Debian archive holds, so a base made from the archive would be another image under its "
                         f"name. Ways out: build on Debian's own Python (`--set {field}=debian:{suite}-slim`, then "
                         f"`envbuild base --backend {backend}`); or `docker save {image}` on a machine that reaches "
                         "Docker Hub and `docker load` it here")
    where = f"{ref.domain}/{ref.path}"
    what = next((carries for part, carries in VENDOR if part in where), None)
    carries = what or "what its maker put in it"
    raise CannotMake(f"{image} cannot be made from a distribution's archive: it carries {carries}, which no Debian or "
                     "Ubuntu archive holds. Ways out: a registry mirror that serves it (`--mirror`); or "
                     f"`docker save {image}` on a machine that reaches its registry and `docker load` it here. envbuild "
                     "makes only Debian (bookworm, trixie) and Ubuntu (24.04, 22.04) bases")


def makeable(image: str) -> bool:
    try:
        suite_for(image)
    except InvalidReference:
        return False
    return True


def base_ways_out(base: str, backend: str) -> str:
    """Every way past a base image that cannot be had, the same wherever it fails (lock, build, doctor): a
    mirror, an image of your own, a local registry, a digest pin; for a Debian or Ubuntu base, making it here."""
    try:
        host = Reference.parse(base).registry
    except InvalidReference:
        host = "REGISTRY"
    field = f"backends.{backend}.base_image"
    make = (f"make it from the distribution's archive or your mirror of it (`envbuild base --backend {backend}`, with "
            f"mmdebstrap); " if makeable(base) else "")
    return (f"Ways out: a mirror you can reach (`--mirror {host}=MIRROR`); {make}an image you have (`--set {field}=IMAGE`); "
            f"a local registry (`docker run -d -p 5000:5000 registry:2`, or Debian's docker-registry package: push the "
            f"base there, then `--set {field}=localhost:5000/NAME:TAG`); or a digest pin (`--set {field}=REF@sha256:...`: "
            f"a lock then asks no registry).")
