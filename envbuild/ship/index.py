"""One tag, every platform: each platform's image pushed by itself, then an image index naming them.

Two ways in: `publish --platform P1,P2` with every platform's image on this engine (REPO:BACKEND for this host's
architecture, REPO:BACKEND-ARCH for the others), or per-platform publishes on native runners (`--no-index`, each
recording its platform in its own manifest) joined later by `publish --index-from M1 --index-from M2`, which pushes
only the index. Either way every platform in the index was checked and passed its own smoke test (given with
--smoke-json, keyed by platform) before the index is pushed; one without a result is left out, unless --force.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.core.errors import EnvbuildError, InvalidInput, PublishError, RegistryAuthError, RegistryUnreachableError
from envbuild.matrix.compat import image_arch
from envbuild.core.platform import InvalidPlatform, Platform, foreign_arch, platform_arch
from envbuild.ship import manifest
from envbuild.net.regclient import Registry
from envbuild.core.imageref import DIGEST, with_tags
from envbuild.core.text import shown
from envbuild.ship.shared import Published, label_mismatches, push_or_move, smoke_summary, write_sbom
from envbuild.ship.trust.attest import predicates
from envbuild.ship.trust.sign import sign_published

if TYPE_CHECKING:
    from envbuild.matrix import Backend, Matrix
    from envbuild.ship.shared import PublishOptions
    from envbuild.ship.session import Session


def platform_ref(m: Matrix, backend: Backend, registry: str, platform: Platform) -> str:
    """Where one platform's image is pushed on its own: REG:<pinned tag>-<arch>."""
    return with_tags(registry, [m.tags(backend, Platform(platform).arch)[1]])[0]


def single_platform_ref(m: Matrix, backend: Backend, registry: str, platform: Platform) -> str:
    """The moving tag of one platform's image, REG:<backend>-<arch> (cuda-amd64): for tools that cannot read an image
    index (an older pyxis/enroot answers 404 for one), what `pick` users name there."""
    return with_tags(registry, [m.tags(backend, Platform(platform).arch)[0]])[0]


def local_image(m: Matrix, backend: Backend, platform: Platform) -> str:
    """The engine's tag of one platform's image: REPO:BACKEND here, REPO:BACKEND-ARCH for another architecture."""
    return m.tags(backend, foreign_arch(platform))[0]


def _push_platform(m: Matrix, backend: Backend, registry: str, session: Session, platform: Platform,
                   smoke_results: dict[str, dict[str, Any]], opts: PublishOptions,
                   echo: Callable[[str], None]) -> dict[str, Any]:
    """Check and push one platform's image; what the manifest records of it."""
    engine = session.engine
    source = opts.image if opts.image and len(opts.platforms) == 1 else local_image(m, backend, platform)
    image = engine.image(source)
    if image is None:
        raise PublishError(f"image {source} is not on this Docker engine: build it with `envbuild build --backend "
                           f"{backend.name} --platform {platform}`")
    has = Platform(image.os, platform_arch(image.architecture))
    if has != platform:
        raise PublishError(f"image {source} is {has}, not {platform}")
    problems = label_mismatches(m, backend, image.labels)
    if problems and not opts.force:
        raise PublishError(f"{source}: {'; '.join(problems)} (build it from this matrix, or pass --force)")
    smoke = smoke_summary(backend, image, source, smoke_results, opts, echo)
    if smoke is None and not opts.force:
        raise PublishError(_unsmoked(backend, platform))
    if smoke and smoke.get("platform") and smoke["platform"] != platform and not opts.force:
        raise PublishError(f"the smoke result given for {platform} ran on {smoke['platform']}")
    ref = platform_ref(m, backend, registry, platform)
    single = single_platform_ref(m, backend, registry, platform)
    echo(f"[{backend.name}] {platform}: {ref} (and {single}, for tools that cannot read an image index)")
    # the moving single-platform tag first in the list: push_or_move pushes it last, after the pinned one
    digest, since, content_ref, image_id = push_or_move(registry, session, image, backend, [single, ref], opts, echo,
                                                        keep=False)
    # the registry's image when it held this content (as publish records it), else this one
    return {"platform": platform, "digest": digest, "ref": ref, "single_platform_tag": single, "image_id": image_id,
            "size": image.size or None,
            "content_tag": content_ref, "unchanged_since": since,
            "requires": manifest.image_requires(image.labels, image_arch(engine, image.id)),
            "versions": manifest.image_versions(image.labels), "smoke": smoke,
            "forced": bool(problems or (smoke and not smoke["ok"])) or None}


def _unsmoked(backend: Backend, platform: Platform) -> str:
    return (f"no smoke result for {platform}: an index names only smoke-tested platforms; run `envbuild smoke --backend "
            f"{backend.name} --platform {platform} --json-file FILE` and pass --smoke-json FILE (or --force)")


def _joined(backend: Backend, registry: str, docs: list[dict[str, Any]], files: tuple[Path, ...]) -> dict[str, dict]:
    """The platforms recorded for `backend` by per-platform publishes (their manifests), refused when two disagree."""
    found: dict[str, dict[str, Any]] = {}
    for doc, file in zip(docs, files):
        entry = doc["images"].get(backend.name)
        if entry is None:
            continue
        if entry.get("repository") != registry:
            raise PublishError(f"--index-from {file}: {backend.name} was pushed to {shown(str(entry.get('repository')))}, "
                               f"not {registry}")
        platforms = entry.get("platforms") or {}
        if not isinstance(platforms, dict) or not all(
                isinstance(rec, dict) and isinstance(rec.get("digest"), str) and DIGEST.match(rec["digest"])
                for rec in platforms.values()):
            raise InvalidInput(f"--index-from {file}: images.{backend.name}.platforms must map each platform to an "
                               "entry with its \"digest\" (sha256:<64 hex>), as `publish --no-index` writes it")
        for written, rec in platforms.items():
            try:
                platform = Platform.parse(written)
            except InvalidPlatform:
                raise InvalidInput(f"--index-from {file}: images.{backend.name}.platforms: {shown(written)} is not a "
                                   "platform") from None
            if platform in found and found[platform]["digest"] != rec.get("digest"):
                raise PublishError(f"--index-from: two different digests for {backend.name} on {platform}")
            found[platform] = rec
    return found


def _held_content(m: Matrix, backend: Backend, registry: str, platform: Platform, session: Session, opts: PublishOptions,
                  echo: Callable[[str], None]) -> dict[str, Any] | None:
    """A platform no job of this run built (`matrix --changed` left it out) whose content the registry holds: its
    record, from the content tag of what this checkout would build (its committed lock, no wheelhouse or build
    arguments, as the publish workflow builds). None when the key cannot be known, the tag is not there, or (with a
    signing key) what is there does not verify with it: the index is signed, and must not vouch for an image that
    anyone able to push a tag could have put there."""
    from envbuild.image.plan import BuildOptions
    from envbuild.image.locking import planned_content_key
    from envbuild.ship.shared import content_tag, content_there

    try:
        key = planned_content_key(m, backend, BuildOptions(), platform, session.environ)
    except EnvbuildError as exc:
        echo(f"[{backend.name}] {platform}: cannot tell whether the registry holds it ({exc})")
        return None
    if key is None:
        return None
    ref = f"{registry}:{content_tag(backend, key)}"
    there = content_there(ref, session, opts, lambda s: echo(f"[{backend.name}] {platform}: {s}"), "leaving it out")
    if there is None:
        return None
    found, _, since = there
    echo(f"[{backend.name}] {platform}: unchanged, held as {ref} ({found.digest})")
    return {"platform": platform, "digest": found.digest, "ref": ref, "content_tag": ref,
            "unchanged_since": since or "an earlier publish"}


def publish_platforms(m: Matrix, backend: Backend, registry: str, session: Session,
                      smoke_results: dict[str, dict[str, Any]], opts: PublishOptions, echo: Callable[[str], None],
                      joined: list[dict[str, Any]], environ: Mapping[str, str] | None) -> Published:
    failed: dict[str, str] = {}
    done: dict[str, dict[str, Any]] = {}
    if opts.index_from:
        done = _joined(backend, registry, joined, opts.index_from)
        wanted = list(opts.platforms) or list(done)
        for p in wanted:
            if p not in done and (held := _held_content(m, backend, registry, p, session, opts, echo)) is not None:
                done[p] = held  # not built in this run: the registry holds this platform's content already
            elif p not in done:
                failed[p] = "no per-platform publish recorded it (--index-from), and the registry holds no image of " \
                            "its content (REPO:BACKEND-in-KEY)"
        done = {p: done[p] for p in wanted if p in done}
    else:
        for p in opts.platforms:  # each one the backend lists: publish refused any other before the registry
            try:
                done[p] = _push_platform(m, backend, registry, session, p, smoke_results, opts, echo)
            except (RegistryAuthError, RegistryUnreachableError):
                raise
            except EnvbuildError as exc:
                failed[p] = str(exc)
                echo(f"[{backend.name}] {p} is left out: {exc}")
    for p, rec in list(done.items()):
        smoke = rec.get("smoke")
        if opts.force or rec.get("unchanged_since"):  # held content: its signed smoke attestation stays on its digest
            continue
        if not smoke:  # a per-platform publish recorded none (--index-from)
            failed[p] = _unsmoked(backend, p)
            del done[p]
        elif not smoke.get("ok"):
            failed[p] = f"its smoke test failed ({smoke.get('error') or ', '.join(smoke.get('failed_checks') or [])})"
            del done[p]
    refs = with_tags(registry, m.tags(backend))
    pushed = [f"{registry}@{rec['digest']}" for rec in done.values()]
    entry: dict[str, Any] = {
        "backend": backend.name, "device": backend.device, "repository": registry,
        "versions": next((rec["versions"] for rec in done.values() if rec.get("versions")), None),
        "platforms": dict(sorted(done.items())),
        "date": manifest.utc_now(),
    }
    head, dirty = manifest.git_revision(Path(m.path).resolve().parent)
    entry.update(git_revision=head, git_dirty=dirty)
    if not done:
        raise PublishError(f"{backend.name}: no platform could be published: "
                           + "; ".join(f"{p}: {why}" for p, why in failed.items()))
    if opts.no_index:
        # A per-platform publish (a native runner): the digest recorded is its platform's; the index comes later.
        only = next(iter(done.values()))
        entry.update(tags=[rec["ref"] for rec in done.values()], digest=only["digest"], index=False)
        for p, rec in done.items():
            rec["sbom"] = write_sbom(session.engine, rec["image_id"], backend, opts, echo, f"-{Platform(p).arch}")
    else:
        api = Registry(registry, environ)
        children = []
        for p, rec in sorted(done.items()):
            child = api.manifest(f"{registry}@{rec['digest']}")
            if child is None:
                raise PublishError(f"{registry}@{rec['digest']} ({p}) is not in the registry: publish that platform first")
            children.append((p, child))
        digest = None
        for ref in sorted(refs, key=lambda r: r == refs[0]):  # the moving tag last, as for single images
            echo(f"[{backend.name}] pushing the index of {', '.join(p for p, _ in children)}: {ref}")
            got = api.put_index(ref, children)
            if digest and got != digest:
                raise PublishError(f"the registry stored different indexes for the tags of {backend.name}")
            digest = got
        pushed.append(f"{registry}@{digest}")
        entry.update(tags=refs, digest=digest, index=True, media_type=api.index_media_type(children))
        image = session.engine.image(local_image(m, backend, next(iter(done)))) if not opts.index_from else None
        if image is not None:
            entry["sbom"] = write_sbom(session.engine, image.id, backend, opts, echo)
    if failed:
        entry["failed_platforms"] = failed
    entry = {k: v for k, v in entry.items() if v is not None or k == "git_revision"}
    if opts.sign_key is not None:
        entry["signed"] = _sign(m, backend, registry, session, done, pushed, smoke_results, entry, opts, echo)
    manifest.record(opts.manifest, entry, echo)
    error = ("platforms left out of the index: " + "; ".join(f"{p}: {why}" for p, why in failed.items())) if failed else None
    return Published(backend.name, not failed, image=None, refs=entry["tags"], digest=entry["digest"], error=error,
                     entry=entry, pushed=pushed, failed_platforms=failed)


def _sign(m: Matrix, backend: Backend, registry: str, session: Session, done: dict[str, dict[str, Any]],
          pushed: list[str], smoke_results: dict[str, dict[str, Any]], entry: dict[str, Any], opts: PublishOptions,
          echo: Callable[[str], None]) -> dict[str, Any]:
    """Sign every digest pushed (each platform's manifest, then the index) and attest each platform's image that
    is on this engine (SBOM, its own smoke result, provenance); a platform joined from another runner's publish
    was signed and attested there. A failure records nothing."""
    environ = session.environ
    attest = {}
    for p, rec in done.items():
        image = session.engine.image(rec["image_id"]) if rec.get("image_id") else None
        if image is None:
            continue
        result = smoke_results.get(f"{backend.name}@{p}") or (smoke_results.get(backend.name) if len(done) == 1 else None)
        attest[rec["digest"]] = predicates(m, backend, session.engine, image, {**entry, **rec, "platform": p}, result,
                                           opts.manifest.parent, environ)
    digests = [ref.rpartition("@")[2] for ref in pushed]
    try:
        return sign_published(registry, digests, opts.sign_key, attest=attest, environ=environ,
                              echo=lambda s: echo(f"[{backend.name}] {s}")).to_json()
    except EnvbuildError as exc:
        raise PublishError(f"{backend.name}: pushed {', '.join(digests)} but could not sign them: {exc}; nothing was "
                           "recorded (publish again to sign them)") from None
