"""What publishing does to an image whether it goes alone (publish) or as one platform of an index (index): the
options, the result, the check of its labels against the matrix, the smoke result it carries, its SBOM."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.core.errors import EnvbuildError, PublishError, RegistryError
from envbuild.core.platform import Platform
from envbuild.core.files import write_atomic
from envbuild.ship import manifest

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI, Image
    from envbuild.matrix import Backend, Matrix


@dataclass
class Published:
    backend: str
    ok: bool
    image: str | None = None
    refs: list[str] = field(default_factory=list)
    digest: str | None = None
    error: str | None = None
    entry: dict[str, Any] | None = None
    pushed: list[str] = field(default_factory=list)  # REPO@DIGEST of every manifest pushed (platforms, then the index)
    failed_platforms: dict[str, str] = field(default_factory=dict)  # platform -> why it is not in the index

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "image": self.image, "tags": self.refs, "digest": self.digest,
                "error": self.error, "pushed": self.pushed, "failed_platforms": self.failed_platforms}


@dataclass(frozen=True)
class PublishOptions:
    registry: str | None = None
    image: str | None = None
    manifest: Path = Path(manifest.DEFAULT)
    smoke_json: Path | None = None
    force: bool = False
    sign_key: Any = None  # a trust.keys.SigningKey: sign every pushed digest, attest the image (cosign's format)
    platforms: tuple[Platform, ...] = ()  # publish these as one image index (each its own image: REPO:BACKEND[-ARCH])
    no_index: bool = False  # push the platforms' images and record them; the index comes later (--index-from)
    index_from: tuple[Path, ...] = ()  # manifests of per-platform publishes (native runners): join them in an index
    smoke_jsons: tuple[Path, ...] = ()  # more smoke results (one per platform)
    rebuild: bool = False  # push even when the registry holds this content already (its content tag)

    def __post_init__(self) -> None:  # a library caller's strings, read as Docker reads them (publish refuses the rest)
        object.__setattr__(self, "platforms", tuple(Platform.normal(p) or p for p in self.platforms))


def label_mismatches(m: Matrix, backend: Backend, labels: Mapping[str, str]) -> list[str]:
    """Why the image is not what the matrix's tags say it is (empty when it is)."""
    label = manifest.LABEL
    if not labels.get(label + "backend"):
        return ["it has no dev.envbuild.* labels (it was not built by `envbuild build`)"]
    expected = {
        "backend": backend.name,
        "torch": backend.torch.version,
        "plugin": f"{backend.plugin.package}=={backend.plugin.version}" if backend.plugin else "",
        "transformers": m.pin("transformers", backend),
        "accelerate": m.pin("accelerate", backend),
    }
    return [
        f"{key} is {labels.get(label + key)!r} in the image but {value!r} in the matrix"
        for key, value in expected.items()
        if (labels.get(label + key) or "") != value
    ]


def write_sbom(engine: EngineAPI, image_id: str, backend: Backend, opts: PublishOptions,
               echo: Callable[[str], None], suffix: str = "") -> dict[str, str] | None:
    """The image's SBOM beside the manifest; what the manifest records of it (its file and sha256)."""
    from envbuild.ship.sbom import sbom

    try:
        text = sbom(engine, image_id)
    except EnvbuildError as exc:
        echo(f"[{backend.name}] note: no SBOM: {exc}")
        return None
    name = f"envbuild-sbom-{backend.name}{suffix}.cdx.json"
    write_atomic(opts.manifest.parent / name, text)
    return {"file": name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def smoke_summary(backend: Backend, image: Image, source: str, smoke_results: dict[str, dict[str, Any]],
                  opts: PublishOptions, echo: Callable[[str], None]) -> dict[str, Any] | None:
    """The manifest's summary of this image's smoke result; refuses a failed one, or one of another image."""
    if not opts.smoke_json and not opts.smoke_jsons:
        return None
    platform = f"{image.os}/{image.architecture}"
    result = smoke_results.get(f"{backend.name}@{platform}") or smoke_results.get(backend.name)
    if result is None:
        echo(f"[{backend.name}] note: {opts.smoke_json} has no result for {backend.name}; the manifest records no smoke test")
        return None
    smoke = manifest.smoke_summary(result, opts.smoke_json)
    if not smoke["ok"] and not opts.force:
        raise PublishError(
            f"refusing to publish {backend.name}: its smoke test failed ({smoke['error'] or ', '.join(smoke['failed_checks'])}); "
            "fix it and smoke again, or pass --force"
        )
    if smoke["image_id"] and smoke["image_id"] != image.id and not opts.force:
        raise PublishError(
            f"refusing to publish {backend.name}: the smoke result is for image {smoke['image_id'][:19]}, not {image.id[:19]} "
            f"({source}); smoke this image, or pass --force"
        )
    return smoke


def content_tag(backend: Backend, key: str) -> str:
    """The tag that names a cell's content in its repository: BACKEND-in-<first 16 hex of the key>."""
    return f"{backend.name}-in-{key[:16]}"


def content_there(ref: str, session: Any, opts: PublishOptions, echo: Callable[[str], None],
                  otherwise: str = "publishing again") -> tuple[Any, str | None, str | None] | None:
    """(its manifest, its image id, when it was made) of the image the registry holds under the content tag `ref`;
    None when it holds none, cannot be read, or (with a signing key) one whose signature does not verify with that
    key's public half. `otherwise` says what the caller does then."""
    from envbuild.net.regclient import Registry, config_digest, json_object

    try:
        reg = Registry(ref, session.environ)
        found = reg.manifest(ref)
    except RegistryError as exc:
        echo(f"note: cannot read {ref} ({exc}): {otherwise}")
        return None
    if found is None or found.is_index:
        return None
    if opts.sign_key is not None:
        from envbuild.ship.trust import TrustError
        from envbuild.ship.trust.verify import verify

        repo = ref.rpartition(":")[0]
        try:  # the digest read above, not the tag: the tag may move in between
            verify(repo, found.digest, opts.sign_key.public(), require_smoke=False, environ=session.environ)
        except TrustError as exc:
            echo(f"note: {ref} is there but does not verify with the signing key ({exc}): {otherwise}")
            return None
    image_id = config_digest(found.doc)
    since = None
    try:
        config = json_object(reg.blob(ref, image_id)) if image_id else None
        if config is not None:
            since = str(config.get("created") or "")[:19].replace("T", " ") or None
    except RegistryError:
        pass
    return found, image_id, since


def push_or_move(registry: str, session: Any, image: Image, backend: Backend, refs: list[str], opts: PublishOptions,
                 echo: Callable[[str], None], *, keep: bool = True) -> tuple[str, str | None, str | None, str]:
    """Push the image under `refs` (and its content tag), or, when the registry holds its content already, move
    `refs` there (a manifest PUT each: no layer uploaded). The pinned tag first, the moving REG:BACKEND last: a
    publish cut short never moves the tag users pull to an image whose pinned tag does not exist. Returns the
    digest, when the registry's image was made (None: pushed now), the content tag (None: the image has no key) and
    the id of the image the tags now name (the registry's own when it held the content)."""
    from envbuild.net.regclient import Registry, split
    from envbuild.image.plan import CONTENT_LABEL

    key = image.labels.get(CONTENT_LABEL) or ""
    content_ref = f"{registry}:{content_tag(backend, key)}" if re.fullmatch(r"[0-9a-f]{64}", key) else None
    session.check_reachable()  # an unreachable registry named in seconds, not after the content query's timeouts
    found = None if opts.rebuild or content_ref is None else content_there(content_ref, session, opts, echo)
    if found is not None:
        held, image_id, since = found
        reg = Registry(registry, session.environ)
        for ref in sorted(refs, key=lambda r: r == refs[0]):
            repo, tag = split(ref)
            reg.put_manifest(repo, tag, held.raw, held.media_type, what=ref)
        echo(f"[{backend.name}] unchanged since {since or 'an earlier publish'}, digest {held.digest}: tags moved to it, "
             "nothing uploaded (--rebuild pushes this image instead)")
        return held.digest, since or "an earlier publish", content_ref, image_id or image.id
    digests: dict[str, str] = {}
    pushed = refs + ([content_ref] if content_ref else [])
    with session.tagged(image.id, pushed, keep=keep):  # tags made only for this push go with it if it fails
        for ref in sorted(pushed, key=lambda r: (r != content_ref, r == refs[0])):
            echo(f"[{backend.name}] pushing {ref}")
            digests[ref] = session.push(ref, lambda s: echo(f"[{backend.name}] {s}"))
    if len(set(digests.values())) != 1:
        raise PublishError(f"the registry confirmed different digests for the tags of {backend.name}: {digests}; "
                           "nothing was recorded")
    return next(iter(digests.values())), None, content_ref, image.id
