"""The typed, frozen objects the rest of envbuild sees: a Matrix of Backends."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from envbuild.core.errors import InvalidInput, NotContainerizableError, UnknownBackendError
from envbuild.core.platform import Platform
from envbuild.engine.runspec import RUN_KINDS, RunFlag, RunSpec  # noqa: F401 (part of the model: a backend's run settings)


@dataclass(frozen=True)
class Torch:
    source: str  # "pip": installed from index_url; "base": the base image carries it
    version: str
    index_url: str | None
    # The matrix accepts any build of torch the indexes serve (e.g. PyPI's default, CUDA, for cpu); else a lock
    # holding another build than the backend's is refused (envbuild.image.lockstate.torch_problem).
    any_build: bool = False


@dataclass(frozen=True)
class Plugin:
    package: str
    version: str
    source: str
    index_url: str | None
    pairing: str
    torch: str | None
    needs: str | None = None  # what it loads from the vendor, for the probe's advice


@dataclass(frozen=True)
class Detect:
    device_nodes: tuple[str, ...] = ()
    pci_vendors: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ()
    os: str | None = None
    arch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Compile:
    """What torch.compile needs in the image, and whether smoke checks it."""

    check: bool = False
    apt: tuple[str, ...] = ()


@dataclass(frozen=True)
class Python:
    executable: str = "python3"
    apt: tuple[str, ...] = ()
    version: str | None = None  # the base's Python (X.Y); None: not declared


@dataclass(frozen=True)
class Pin:
    """A backend's own transformers or accelerate (where the shared pin cannot run on its base)."""

    version: str
    torch: str | None = None  # what that release's metadata requires of torch
    avoid: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostNeeds:
    """What the image needs of the host: the accelerator stack it carries, and what torch was built for."""

    stack: str  # a key of envbuild.matrix.stacks.STACKS (the registry: cuda, rocm, cann, gaudi, neuron)
    version: str  # the stack's release in the image, e.g. "13.2"
    driver: str | None = None  # the minimum driver, where the matrix overrides the vendor table
    arch: tuple[str, ...] = ()  # declared device architectures (sm_90, gfx942); empty: not declared
    arch_arm64: tuple[str, ...] = ()  # the linux/arm64 build's, where PyTorch builds another list; empty: as arch
    forward_compat: bool = False  # carries NVIDIA's cuda-compat (newer CUDA on an older data-center driver)


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    device: str
    containerizable: bool
    reason: str | None
    alternatives: str | None
    base_image: str | None
    platforms: tuple[Platform, ...]
    python: Python
    torch: Torch
    plugin: Plugin | None
    import_module: str | None
    availability: str | None
    env: tuple[tuple[str, str], ...]
    run: RunSpec
    detect: Detect
    runs_on: tuple[str, ...]
    packages: tuple[str, ...] = ()  # this backend's extras (PEP 508)
    user: str = "envbuild"  # the image's default user: "envbuild" (non-root) or "root"
    compile: Compile = field(default_factory=Compile)
    apt: tuple[str, ...] = ()  # Debian packages its runtime asks for
    host: HostNeeds | None = None  # what it needs of the host's driver (None: no driver, e.g. cpu)
    variant_of: str | None = None  # the backend whose settings it shares (same device, e.g. an older CUDA)
    own: tuple[tuple[str, Pin], ...] = ()  # (transformers|accelerate, its own pin) replacing the shared one

    @property
    def family(self) -> str:
        """The backend its variants share settings with: itself, or the one it is a variant of."""
        return self.variant_of or self.name

    def listed(self, platform: str | Platform) -> Platform:
        """The one check that this backend lists `--platform platform` (matrix.yaml, its `platforms`), in any of
        Docker's spellings (linux/aarch64 is the linux/arm64 it lists): the platform as listed, else InvalidInput
        naming the list (exit 2, before any engine or registry is asked)."""
        found = platform if isinstance(platform, Platform) else Platform.normal(platform)
        if found is not None and found in self.platforms:
            return found
        from envbuild.core.text import shown

        raise InvalidInput(f"--platform {shown(str(platform))}: backend {self.name} lists {', '.join(self.platforms)} "
                           "(matrix.yaml, its `platforms`)")

    @property
    def pins(self) -> dict[str, str]:
        """Distribution -> version for what this backend's image must carry (plus the shared pins)."""
        pins = {"torch": self.torch.version}
        if self.plugin:
            pins[self.plugin.package] = self.plugin.version
        return pins


@dataclass(frozen=True)
class Index:
    """Where every package but torch and the plugin comes from."""

    url: str = "https://pypi.org/simple"
    extra_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Image:
    repository: str
    source: str
    licenses: str
    vendor: str


@dataclass(frozen=True)
class Matrix:
    path: str
    image: Image
    transformers: str
    accelerate: str
    uv: str  # the build-time installer, bind-mounted into install steps
    backends: tuple[Backend, ...] = field(default=())
    packages: tuple[str, ...] = ()  # extras every image carries (PEP 508)
    index: Index = field(default_factory=Index)
    transformers_torch: str | None = None  # the torch the pinned transformers declares it needs
    accelerate_torch: str | None = None
    avoid: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (transformers|accelerate|uv, releases never to propose)
    trust_key: str | None = None  # trust.public_key, resolved against the matrix's folder

    def avoided(self, dist: str) -> tuple[str, ...]:
        return dict(self.avoid).get(dist, ())

    def pin(self, dist: str, backend: Backend | None = None) -> str:
        """transformers' or accelerate's version in this backend's image: its own pin, else the shared one."""
        own = dict(backend.own).get(dist) if backend else None
        return own.version if own else getattr(self, dist)

    def needs_torch(self, dist: str, backend: Backend | None = None) -> str | None:
        """What that pinned release requires of torch (as the matrix records it)."""
        own = dict(backend.own).get(dist) if backend else None
        return own.torch if own else getattr(self, f"{dist}_torch")

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.backends]

    def backend(self, name: str) -> Backend:
        """A backend by its name or a name people use for it (amd, nvidia, Gaudi, Ascend; case folded)."""
        from envbuild.matrix.names import resolve

        found, why = resolve(name, self.names, {b.name: b.description for b in self.backends})
        for b in self.backends:
            if b.name == found:
                return b
        raise UnknownBackendError(name, self.names, why)

    def containerizable(self) -> list[Backend]:
        return [b for b in self.backends if b.containerizable]

    def select(self, names: Iterable[str], *, containers_only: bool = True) -> list[Backend]:
        """Backends by name ('all' = every containerizable one); refuses non-containerizable ones."""
        names = list(names)
        if not names or "all" in names:
            return self.containerizable()
        chosen = list({b.name: b for b in (self.backend(n) for n in names)}.values())
        if containers_only:
            for b in chosen:
                if not b.containerizable:
                    raise NotContainerizableError(not_containerizable_message(b))
        return chosen

    def packages_for(self, backend: Backend) -> tuple[str, ...]:
        """The extras an image of this backend carries: everyone's, then its own."""
        return (*self.packages, *backend.packages)

    def tags(self, backend: Backend, arch: str | None = None) -> list[str]:
        """Default image tags: a moving one and a fully pinned one. With `arch`, the local tags of an image of
        another architecture than the engine's (REPO:cpu-arm64): an engine keeps one platform per tag."""
        pinned = f"{backend.name}-torch{backend.torch.version}"
        if backend.plugin:
            pinned += f"-{backend.plugin.package}{backend.plugin.version}"
        pinned += f"-transformers{self.pin('transformers', backend)}"
        suffix = f"-{arch}" if arch else ""
        pinned = re.sub(r"[^A-Za-z0-9_.-]", "_", pinned)[:128 - len(suffix)] + suffix
        tags = [f"{self.image.repository}:{backend.name}{suffix}", f"{self.image.repository}:{pinned}"]
        stack = self.stack_tag(backend)
        return tags + ([f"{self.image.repository}:{stack}{suffix}"] if stack else [])

    def family(self, backend: Backend) -> list[Backend]:
        """The backend and its variants (cuda, cuda-cu130, cuda-cu126), the backend itself first."""
        return sorted((b for b in self.backends if b.family == backend.family), key=lambda b: b.variant_of is not None)

    def stack_tag(self, backend: Backend) -> str | None:
        """The tag people ask for by stack release (cuda12.6, rocm10.0), where a family has variants that differ in it."""
        members = self.family(backend)
        versions = [b.host.version if b.host else None for b in members]
        if len(members) < 2 or None in versions or len(set(versions)) != len(versions):
            return None
        return f"{backend.family}{backend.host.version}"


def not_containerizable_message(backend: Backend) -> str:
    msg = f"backend '{backend.name}' cannot run in a container: {backend.reason or 'no container can reach it'}"
    if backend.alternatives:
        msg += f" Instead: {backend.alternatives}"
    return msg


