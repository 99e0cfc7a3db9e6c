"""matrix.yaml -> CI job matrices. The workflows list no backend themselves: they ask `envbuild matrix`."""

from __future__ import annotations

import shlex
from typing import Any

from envbuild.core.platform import Platform
from envbuild.matrix import Backend, Matrix

# What a CI smoke runs: the synthetic model needs no hub access; the timeout covers a cold image on a slow runner.
SMOKE_MODEL = "synthetic"
SMOKE_TIMEOUT = 900


def has_device(backend: Backend) -> bool:
    """Whether the job's runner has the backend's device: the CPU everywhere; an accelerator only on the
    self-hosted runners its labels pick (GitHub-hosted runners have none of these accelerators)."""
    return backend.device == "cpu" or "self-hosted" in backend.runs_on


SMOKE_ARGS = shlex.join(["--model", SMOKE_MODEL, "--timeout", str(SMOKE_TIMEOUT)])


# GitHub's hosted runners per architecture; a self-hosted runner carries its architecture as a label (x64, arm64:
# GitHub's default labels, matched without regard to case).
HOSTED = {"amd64": "ubuntu-latest", "arm64": "ubuntu-24.04-arm"}
ARCH_LABELS = {"amd64": "x64", "arm64": "arm64"}
_ANY_ARCH = {"x64", "amd64", "x86_64", "arm64", "aarch64"}


def runs_on(backend: Backend, platform: Platform) -> list[str]:
    """The labels of a native runner for `platform`: a self-hosted backend's ci.runs_on with its architecture label
    set to the platform's (added when it names none); a GitHub-hosted one's runner of that architecture."""
    arch = Platform(platform).arch
    labels = list(backend.runs_on)
    if "self-hosted" in labels:
        wanted = ARCH_LABELS.get(arch, arch)
        out = [wanted if label.lower() in _ANY_ARCH else label for label in labels]
        return out if wanted in out else [*out, wanted]
    if arch == "amd64" and not any("arm" in label for label in labels):
        return labels
    return [HOSTED.get(arch, labels[0])]


def job(m: Matrix, backend: Backend, platform: Platform | None = None) -> dict[str, Any]:
    tags = m.tags(backend)
    per_platform = platform is not None
    platform = platform or backend.platforms[0]
    return {
        "backend": backend.name,
        "device": backend.device,
        "image": tags[0],
        "pinned": tags[1],
        "runs-on": runs_on(backend, platform) if per_platform else list(backend.runs_on),
        "self-hosted": "self-hosted" in backend.runs_on,
        "smoke": has_device(backend),
        "smoke_args": SMOKE_ARGS,
        "platforms": ",".join(backend.platforms),
        "platform": platform,
        "arch": Platform(platform).arch,
    }


def github_matrix(m: Matrix, backends: list[Backend] | None = None, *, per_platform: bool = False) -> dict[str, Any]:
    """`strategy.matrix` for GitHub Actions (through fromJSON): one include entry per containerizable backend (on
    its ci.runs_on runners), or with `per_platform` one per backend and Linux platform it lists, each on a native
    runner of that architecture."""
    chosen = m.containerizable() if backends is None else [b for b in backends if b.containerizable]
    if per_platform:
        return {"include": [job(m, b, p) for b in chosen for p in b.platforms if p.os == "linux"]}
    return {"include": [job(m, b) for b in chosen]}


def changed(m: Matrix, doc: dict[str, Any], opts: Any, registry: str, echo: Any = lambda s: None) -> dict[str, Any]:
    """The jobs of `doc` whose image `registry` does not hold yet: no REG:BACKEND-in-KEY tag for the content key
    the cell's image will carry (its committed lock, Dockerfile and context). A cell without a lock, or a registry
    that cannot be asked, counts as changed: building once too often is safe, skipping wrongly is not."""
    from envbuild.core.errors import EnvbuildError
    from envbuild.net.regclient import Registry, split
    from envbuild.image.locking import planned_content_key
    from envbuild.ship.shared import content_tag

    keep = []
    for job_ in doc["include"]:
        backend = m.backend(job_["backend"])
        key = planned_content_key(m, backend, opts, Platform(job_["platform"]))
        if key is None:
            echo(f"{backend.name} {job_['platform']}: no committed lock, so no content key: changed")
            keep.append(job_)
            continue
        ref = f"{registry}:{content_tag(backend, key)}"
        try:
            repo, tag = split(ref)
            there = Registry(ref).read_manifest(repo, tag) is not None
        except EnvbuildError as exc:
            echo(f"{backend.name} {job_['platform']}: cannot ask {registry} ({exc}): changed")
            there = False
        echo(f"{backend.name} {job_['platform']}: {'unchanged' if there else 'changed'} ({ref})")
        if not there:
            keep.append({**job_, "content": key})
    return {"include": keep}
