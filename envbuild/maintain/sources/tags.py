"""Base image tags and digests from their registry, through the one registry client (core/regclient.py: the
anonymous token flow of public registries, credentials as publish finds them, the deadline on every answer), and
which tags have the same shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from envbuild.core.errors import RegistryError
from envbuild.core.imageref import Reference
from envbuild.net.netprobe import BUDGET, SILENT, unreachable
from envbuild.net.netread import DEADLINE_ENV, deadline_seconds
from envbuild.net.regclient import Registry
from envbuild.maintain.sources.index import SourceError


class RegistryClient:
    """Read-only registry queries for outdated and bump, one client per host; a registry's failure is a
    SourceError, reported for the pins it serves."""

    def __init__(self, ca_bundle: Path | None = None, environ: Mapping[str, str] | None = None,
                 publish_host: str | None = None):
        self.ca_bundle = ca_bundle
        self.environ = environ
        self.publish_host = publish_host
        self._clients: dict[str, Registry] = {}
        self._checked: dict[str, str | None] = {}

    def _client(self, host: str) -> Registry:
        if host in self._clients:
            return self._clients[host]
        deadline = deadline_seconds(self.environ)
        if host not in self._checked:  # no longer than one answer may take
            self._checked[host] = unreachable(host, ca_bundle=self.ca_bundle, environ=self.environ,
                                              budget=min(BUDGET, deadline))
        why = self._checked[host]
        if why and why.startswith(SILENT):  # silent past the deadline: the deadline's words
            raise SourceError(f"registry {host} gave no answer within {deadline:g} s: a stalled server or proxy. Try "
                              f"again, or raise {DEADLINE_ENV} (seconds) for a slow link")
        if why:
            raise SourceError(f"registry {host} cannot be reached ({why})")
        client = Registry(host, self.environ, self.ca_bundle, publish=host == self.publish_host)
        self._clients[host] = client
        return client

    def tags(self, ref: Reference) -> list[str]:
        try:
            return self._client(ref.registry).tags(ref.path)
        except RegistryError as exc:
            raise SourceError(str(exc)) from None

    def digest(self, ref: Reference, tag: str) -> str:
        try:
            digest = self._client(ref.registry).head_digest(ref.path, tag)
        except RegistryError as exc:
            raise SourceError(str(exc)) from None
        if digest is None:
            raise SourceError(f"{ref.familiar_name}:{tag}: not found on {ref.registry}")
        return digest


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
