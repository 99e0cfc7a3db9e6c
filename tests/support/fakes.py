"""The one fake of envbuild.engine.Engine, for unit tests of pure logic: a daemon, its images, containers and
a registry in memory. Never the proof that a command works: tests/engine/ runs the real engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from envbuild.engine import EngineError, Image, split_ref


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str] = field(default_factory=dict)
    repo_digests: list[str] = field(default_factory=list)


class FakeEngine:
    """Answers like a daemon would; records what was asked (logins, pushes, removed tags)."""

    host = "unix:///fake/docker.sock"

    def __init__(self, runtimes: tuple[str, ...] = ("runc",), root: str = "/", containers: tuple[str, ...] = (),
                 version: dict[str, Any] | None = None):
        self.refs: dict[str, FakeImage] = {}
        self.registry: dict[str, str] = {}  # ref -> the digest the registry serves
        self.removed: list[str] = []
        self.pushed: list[tuple[str, Any]] = []
        self.logins: list[tuple[str, str]] = []
        self.login_error: str | None = None
        self.leftovers = list(containers)
        self._info = {"Runtimes": {r: {} for r in runtimes}, "DockerRootDir": str(root)}
        self._version = version or {"Version": "28.2.2", "ApiVersion": "1.50", "Os": "linux", "Arch": "amd64"}
        self.closed = False
        self.push_lines: Callable[[str, str], Any] = lambda repo, tag: [
            {"status": f"The push refers to repository [{repo}]"}, {"aux": {"Tag": tag, "Digest": "sha256:" + "1" * 64, "Size": 1}}]
        self.pull_lines: Callable[[str, str], Any] = lambda repo, tag: [{"status": "Digest: sha256:" + "1" * 64}]

    # -- setting the scene ---------------------------------------------------------------------------
    def add_image(self, iid: str, refs: list[str] = (), labels: dict[str, str] | None = None) -> FakeImage:
        img = FakeImage(iid, dict(labels or {}))
        for ref in refs:
            self.refs[ref] = img
        return img

    # -- the Engine interface --------------------------------------------------------------------------
    def ping(self) -> None:
        pass

    def version(self) -> dict[str, Any]:
        return self._version

    def info(self) -> dict[str, Any]:
        return self._info

    def runtimes(self) -> set[str]:
        return set(self._info["Runtimes"])

    def _find(self, ref: str) -> FakeImage | None:
        return self.refs.get(ref) or next((img for img in self.refs.values() if img.id == ref), None)

    def image(self, ref: str) -> Image | None:
        img = self._find(ref)
        if img is None:
            return None
        return Image(img.id, img.labels, "linux", "amd64", tuple(img.repo_digests), 0)

    def image_id(self, ref: str) -> str | None:
        img = self._find(ref)
        return img.id if img else None

    def tag(self, image: str, refs: list[str]) -> None:
        img = self._find(image)
        for ref in refs:
            self.refs[ref] = img

    def untag(self, ref: str) -> None:
        self.removed.append(ref)
        self.refs.pop(ref, None)

    def containers(self, label: str) -> list[str]:
        return list(self.leftovers)

    def remove_container(self, ref: str) -> None:
        self.leftovers = [c for c in self.leftovers if c != ref]

    def login(self, host: str, username: str, password: str) -> None:
        self.logins.append((username, host))
        if self.login_error:
            raise EngineError(f"logging in to {host}", self.login_error)

    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        repo, tag = split_ref(ref)
        self.pushed.append((ref, auth))
        return iter(self.push_lines(repo, tag))

    def pull(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        repo, tag = split_ref(ref)
        return iter(self.pull_lines(repo, tag))

    def registry_digest(self, ref: str, auth: dict[str, str] | None) -> str:
        if ref not in self.registry:
            raise EngineError(f"asking the registry about {ref}", "manifest unknown", not_found=True)
        return self.registry[ref]

    def close(self) -> None:
        self.closed = True
