"""Stage 5: image -> registry + manifest. Each backend's tags are pushed under `--registry REG`
(REG:<backend>, REG:<pinned tag>); only when every tag landed and the registry confirmed one digest is the
backend's manifest entry replaced. The entry says what the image is (versions from its labels), where it
came from (git revision, date) and what tested it (the summary of a `smoke --json` result).

With platforms (`--platform`, or `--index-from` the per-platform results of native runners), each platform's
image is checked (architecture, labels, its own smoke result) and pushed by itself as REG:<pinned>-<arch>; then
one image index naming every platform that passed is PUT under the backend's tags. A platform that failed is
left out of the index, said, and the publish fails (exit 1). `Published.pushed` lists every digest pushed (each
platform's manifest, then the index), for whoever signs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.errors import EnvbuildError, InvalidInput, PublishError, RegistryAuthError, RegistryUnreachableError
from envbuild.host.compat import image_arch
from envbuild.registry import manifest
from envbuild.imageref import check_repository, with_tags
from envbuild.registry.session import Session

if TYPE_CHECKING:
    from envbuild.engine import Engine, Image
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
    platforms: tuple[str, ...] = ()  # publish these as one image index (each its own image: REPO:BACKEND[-ARCH])
    no_index: bool = False  # push the platforms' images and record them; the index comes later (--index-from)
    index_from: tuple[Path, ...] = ()  # manifests of per-platform publishes (native runners): join them in an index
    smoke_jsons: tuple[Path, ...] = ()  # more smoke results (one per platform)


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


def _write_sbom(engine: Engine, image_id: str, backend: Backend, opts: PublishOptions,
                echo: Callable[[str], None], suffix: str = "") -> dict[str, str] | None:
    """The image's SBOM beside the manifest; what the manifest records of it (its file and sha256)."""
    import hashlib

    from envbuild.files import write_atomic
    from envbuild.sbom import sbom

    try:
        text = sbom(engine, image_id)
    except EnvbuildError as exc:
        echo(f"[{backend.name}] note: no SBOM: {exc}")
        return None
    name = f"envbuild-sbom-{backend.name}{suffix}.cdx.json"
    write_atomic(opts.manifest.parent / name, text)
    return {"file": name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def publish(m: Matrix, backends: list[Backend], opts: PublishOptions, engine: Engine, *,
            echo: Callable[[str], None] = lambda s: None, environ: Mapping[str, str] | None = None) -> list[Published]:
    """Push each backend's tags and record each that fully landed. One backend: errors raise; several:
    the others go on past an image problem, but an authentication or network failure stops them all."""
    if opts.image and len(backends) > 1:
        raise InvalidInput("--image needs a single backend")
    registry = check_repository(opts.registry or m.image.repository, "--registry" if opts.registry else "image.repository")
    session = Session(engine, registry, environ)
    smoke_results = manifest.load_smoke_results(opts.smoke_json) if opts.smoke_json else {}
    for extra in opts.smoke_jsons:
        smoke_results.update(manifest.load_smoke_results(extra))
    manifest.load(opts.manifest, must_exist=False)  # refuse a broken manifest before pushing anything
    joined = [manifest.load(f, must_exist=True) for f in opts.index_from]
    session.login(echo)
    results = []
    for backend in backends:
        try:
            if opts.platforms or opts.index_from:
                from envbuild.registry.index import publish_platforms

                results.append(publish_platforms(m, backend, registry, session, smoke_results, opts, echo, joined,
                                                 environ))
                continue
            results.append(_publish_one(m, backend, registry, session, smoke_results, opts, echo))
        except (RegistryAuthError, RegistryUnreachableError):
            raise
        except EnvbuildError as exc:
            if len(backends) == 1:
                raise
            results.append(Published(backend.name, False, error=str(exc)))
    return results


def _smoke(backend: Backend, image: Image, source: str, smoke_results: dict[str, dict[str, Any]],
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


def _publish_one(m: Matrix, backend: Backend, registry: str, session: Session,
                 smoke_results: dict[str, dict[str, Any]], opts: PublishOptions, echo: Callable[[str], None]) -> Published:
    engine = session.engine
    source = opts.image or m.tags(backend)[0]
    image = engine.image(source)
    if image is None:
        raise PublishError(
            f"image {source} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` (or pass --image)"
        )
    problems = label_mismatches(m, backend, image.labels)
    if problems and not opts.force:
        raise PublishError(
            f"refusing to publish {source} as {backend.name}: {'; '.join(problems)}. Its tags would not say what it "
            "carries; build it from this matrix (same --set), or pass --force"
        )
    smoke = _smoke(backend, image, source, smoke_results, opts, echo)
    refs = with_tags(registry, m.tags(backend))
    digests: dict[str, str] = {}
    with session.tagged(image.id, refs, keep=True):  # tags made only for this push go with it if it fails
        # The pinned tag first, the moving REG:BACKEND last: a publish cut short never moves the tag users pull
        # to an image whose pinned tag (and manifest entry) does not exist.
        for ref in sorted(refs, key=lambda r: r == refs[0]):
            echo(f"[{backend.name}] pushing {ref}")
            digests[ref] = session.push(ref, lambda s: echo(f"[{backend.name}] {s}"))
    if len(set(digests.values())) != 1:
        raise PublishError(f"the registry confirmed different digests for the tags of {backend.name}: {digests}; nothing was recorded")
    digest = next(iter(digests.values()))
    revision = image.labels.get(manifest.REVISION_LABEL)
    head, dirty = manifest.git_revision(Path(m.path).resolve().parent)
    entry = {
        "backend": backend.name,
        "device": backend.device,
        "repository": registry,
        "tags": refs,
        "digest": digest,
        "image_id": image.id,
        "platform": f"{image.os}/{image.architecture}",
        "size": image.size or None,  # bytes, unpacked (the compatibility table shows it)
        "versions": manifest.image_versions(image.labels) if image.labels.get(manifest.LABEL + "backend") else {
            "torch": backend.torch.version,
            "plugin": {"package": backend.plugin.package, "version": backend.plugin.version} if backend.plugin else None,
            "transformers": m.pin("transformers", backend),
            "accelerate": m.pin("accelerate", backend),
        },
        "requires": manifest.image_requires(image.labels, image_arch(engine, image.id)),
        "git_revision": revision or head,
        "git_dirty": None if revision else dirty,
        "date": manifest.utc_now(),
        "smoke": smoke,
        "forced": bool(problems or (smoke and not smoke["ok"])) or None,
    }
    entry["sbom"] = _write_sbom(engine, image.id, backend, opts, echo)
    entry = {k: v for k, v in entry.items() if v is not None or k in ("git_revision", "smoke")}
    if opts.sign_key is not None:
        entry["signed"] = _sign(m, backend, image, registry, [digest], entry, smoke_results, session, opts, echo)
    manifest.record(opts.manifest, entry, echo)
    return Published(backend.name, True, image=source, refs=refs, digest=digest, entry=entry, pushed=[f"{registry}@{digest}"])


def _sign(m: Matrix, backend: Backend, image: Image, registry: str, digests: list[str], entry: dict[str, Any],
          smoke_results: dict[str, dict[str, Any]], session: Session, opts: PublishOptions,
          echo: Callable[[str], None]) -> dict[str, Any]:
    """Sign every digest pushed for this backend and attest the image; a failure records nothing."""
    from envbuild.trust.attest import sign_publish

    try:
        return sign_publish(m, backend, session.engine, image, registry, digests, entry,
                            smoke_results.get(backend.name) if opts.smoke_json else None, opts.manifest.parent,
                            opts.sign_key, session.environ, echo)
    except EnvbuildError as exc:
        raise PublishError(f"{backend.name}: pushed {', '.join(digests)} but could not sign it: {exc}; nothing was "
                           "recorded (publish again to sign it)") from None
