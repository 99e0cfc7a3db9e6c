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

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.core.errors import EnvbuildError, InvalidInput, PublishError, RegistryAuthError, RegistryUnreachableError
from envbuild.matrix.compat import image_arch
from envbuild.ship import manifest
from envbuild.image.plan import CONTENT_LABEL
from envbuild.ship.index import publish_platforms
from envbuild.core.imageref import check_repository, with_tags
from envbuild.ship.session import Session
from envbuild.ship.shared import Published, PublishOptions, label_mismatches, push_or_move, smoke_summary, write_sbom  # noqa: F401 (PublishOptions and Published: publish's API)
from envbuild.ship.trust.attest import sign_publish

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI, Image
    from envbuild.matrix import Backend, Matrix


def publish(m: Matrix, backends: list[Backend], opts: PublishOptions, engine: EngineAPI, *,
            echo: Callable[[str], None] = lambda s: None, environ: Mapping[str, str] | None = None) -> list[Published]:
    """Push each backend's tags and record each that fully landed. One backend: errors raise; several:
    the others go on past an image problem, but an authentication or network failure stops them all."""
    if opts.image and len(backends) > 1:
        raise InvalidInput("--image needs a single backend")
    registry = check_repository(opts.registry or m.image.repository, "--registry" if opts.registry else "image.repository")
    for backend in backends:  # a platform a backend does not list is the input's fault: before any registry
        for p in opts.platforms:
            backend.listed(p)
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


def _publish_one(m: Matrix, backend: Backend, registry: str, session: Session,
                 smoke_results: dict[str, dict[str, Any]], opts: PublishOptions, echo: Callable[[str], None]) -> Published:
    engine = session.engine
    source = opts.image or m.tags(backend)[0]
    image = engine.image(source)
    if image is None:
        raise PublishError(
            f"image {source} is not on this Docker engine: build it with `envbuild build --backend {backend.name}`"
            + ("" if opts.image else " (or pass --image)")
        )
    problems = label_mismatches(m, backend, image.labels)
    if problems and not opts.force:
        raise PublishError(
            f"refusing to publish {source} as {backend.name}: {'; '.join(problems)}. Its tags would not say what it "
            "carries; build it from this matrix (same --set), or pass --force"
        )
    smoke = smoke_summary(backend, image, source, smoke_results, opts, echo)
    refs = with_tags(registry, m.tags(backend))
    digest, since, content_ref, image_id = push_or_move(registry, session, image, backend, refs, opts, echo)
    key = image.labels.get(CONTENT_LABEL) or ""
    revision = image.labels.get(manifest.REVISION_LABEL)
    head, dirty = manifest.git_revision(Path(m.path).resolve().parent)
    entry = {
        "backend": backend.name,
        "device": backend.device,
        "repository": registry,
        "tags": refs,
        "digest": digest,
        "image_id": image_id,  # the registry's image when it held this content (its layers need not be byte-identical)
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
        "content": key or None,  # the content key (dev.envbuild.content); the registry has it as content_tag
        "content_tag": content_ref,
        "unchanged_since": since,
    }
    entry["sbom"] = write_sbom(engine, image.id, backend, opts, echo)
    entry = {k: v for k, v in entry.items() if v is not None or k in ("git_revision", "smoke")}
    if opts.sign_key is not None:  # held content: its signature and attestations (smoke) stay on the digest
        entry["signed"] = ({"kept": True, "digest": digest} if since is not None else
                           _sign(m, backend, image, registry, [digest], entry, smoke_results, session, opts, echo))
    manifest.record(opts.manifest, entry, echo)
    return Published(backend.name, True, image=source, refs=refs, digest=digest, entry=entry, pushed=[f"{registry}@{digest}"])


def _sign(m: Matrix, backend: Backend, image: Image, registry: str, digests: list[str], entry: dict[str, Any],
          smoke_results: dict[str, dict[str, Any]], session: Session, opts: PublishOptions,
          echo: Callable[[str], None]) -> dict[str, Any]:
    """Sign every digest pushed for this backend and attest the image; a failure records nothing."""
    try:
        return sign_publish(m, backend, session.engine, image, registry, digests, entry,
                            smoke_results.get(backend.name) if opts.smoke_json else None, opts.manifest.parent,
                            opts.sign_key, session.environ, echo)
    except EnvbuildError as exc:
        raise PublishError(f"{backend.name}: pushed {', '.join(digests)} but could not sign it: {exc}; nothing was "
                           "recorded (publish again to sign it)") from None
