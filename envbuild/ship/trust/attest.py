"""What publish attests about an image it pushed (SBOM, smoke result, provenance), and `envbuild attest`: a
smoke attestation added later to an image already in the registry (the nightly hardware run)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.core.errors import InvalidInput
from envbuild.net.regclient import config_digest
from envbuild.core.imageref import DIGEST
from envbuild.ship.trust import TrustError
from envbuild.ship.trust.keys import SigningKey
from envbuild.ship.trust.oci import Client, NotFound
from envbuild.ship.trust.sign import PROVENANCE, SBOM, SMOKE, Signed, provenance_predicate, sbom_predicate, sign_published, smoke_predicate

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI, Image
    from envbuild.matrix import Backend, Matrix


def _version() -> str:
    try:
        return version("envbuild")
    except PackageNotFoundError:
        return "unknown"


def _utc(when: Any) -> str | None:
    """The image's creation time as RFC 3339 UTC (the engine gives a datetime)."""
    if isinstance(when, datetime):
        return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(when) if when else None


def builder_id(environ: Mapping[str, str]) -> str:
    """Who ran the build: the CI workflow run when there is one, else this machine's envbuild."""
    if environ.get("GITHUB_ACTIONS") == "true" and environ.get("GITHUB_REPOSITORY"):
        return (f"{environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{environ['GITHUB_REPOSITORY']}/actions/runs/"
                f"{environ.get('GITHUB_RUN_ID', '')}")
    return "envbuild (local)"


def predicates(m: Matrix, backend: Backend, engine: EngineAPI, image: Image, entry: Mapping[str, Any],
               smoke_result: Mapping[str, Any] | None, manifest_dir: Path, environ: Mapping[str, str]) -> list[tuple[str, Any]]:
    """(predicateType, predicate) for one pushed image: its SBOM (the file publish wrote), its smoke result (when
    publish was given one) and SLSA provenance."""
    from envbuild.render import render_backend
    from envbuild.ship.sbom import LOCK

    out: list[tuple[str, Any]] = []
    sbom = entry.get("sbom")
    if sbom:
        out.append((SBOM, sbom_predicate((manifest_dir / sbom["file"]).read_text(encoding="utf-8"))))
    if smoke_result is not None:
        out.append((SMOKE, smoke_predicate(smoke_result, platform=entry.get("platform"))))
    matrix_path = Path(m.path)
    out.append((PROVENANCE, provenance_predicate(
        backend=backend.name,
        base_image=image.labels.get("org.opencontainers.image.base.name") or backend.base_image,
        lock_text=engine.read_file(image.id, LOCK),
        dockerfile=render_backend(m, backend).encode("utf-8"),
        git_commit=entry.get("git_revision"), git_dirty=entry.get("git_dirty"),
        builder=builder_id(environ), version=_version(), started=_utc(getattr(image, "created", None)), finished=entry.get("date"),
        matrix_sha256=hashlib.sha256(matrix_path.read_bytes()).hexdigest() if matrix_path.is_file() else None,
    )))
    return out


def sign_publish(m: Matrix, backend: Backend, engine: EngineAPI, image: Image, repository: str, digests: list[str],
                 entry: Mapping[str, Any], smoke_result: Mapping[str, Any] | None, manifest_dir: Path, key: SigningKey,
                 environ: Mapping[str, str], echo: Callable[[str], None]) -> dict[str, Any]:
    """publish's hook: sign every pushed digest; attest the image's own digest. Returns the manifest's record."""
    claims = predicates(m, backend, engine, image, entry, smoke_result, manifest_dir, environ)
    done = sign_published(repository, digests, key, attest={entry["digest"]: claims}, environ=environ,
                          echo=lambda s: echo(f"[{backend.name}] {s}"))
    return done.to_json()


MAX_CHILDREN = 64  # platforms an index may name that are looked at


def _the_image_tested(client: Client, path: str, manifest: Any, tested: str, named: str) -> tuple[Any, str]:
    """The manifest whose config is the tested image: the one `named` names, or one child of its index. Anything
    else is refused, --force or not: an attestation says the result is of that very digest."""
    doc = manifest.json()  # a JSON object, or a TrustError saying it is not
    config = (doc.get("config") or {}).get("digest") if isinstance(doc.get("config"), dict) else None
    if isinstance(config, str) and config == tested:
        return manifest, config
    children = doc.get("manifests") if isinstance(doc.get("manifests"), list) else []
    for child in children[:MAX_CHILDREN]:
        digest = child.get("digest") if isinstance(child, dict) else None
        if not isinstance(digest, str) or not DIGEST.match(digest):
            continue
        found = client.manifest(path, digest)
        cdoc = found.json()
        if config_digest(cdoc) == tested:
            return found, tested
    what = f"image {str(config)[:19]}" if config else f"an index of {len(children)} platform(s), none of them"
    raise TrustError(f"the smoke result is for image {tested[:19]}, but {named} is {what}: smoke the image that tag "
                     "names (pull it first) and attest that result")


def attest_smoke(repository: str, tag: str, result: Mapping[str, Any], key: SigningKey, *,
                 environ: Mapping[str, str] | None = None, force: bool = False,
                 echo: Callable[[str], None] = lambda s: None) -> Signed:
    """Add a signed smoke attestation to REPOSITORY:TAG as the registry has it now. The result must be of this
    very image: its image id is the manifest's config digest, or that of one platform of its index (refused
    otherwise, --force or not). `force` attests a failed result."""
    tested = result.get("image_id")
    if not isinstance(tested, str) or not DIGEST.match(tested):
        raise InvalidInput("the smoke result names no image (its image_id is missing or not sha256:<64 hex>): a result "
                           "is attested only for the image it tested; smoke the pulled image and attest that result")
    if not result.get("ok") and not force:
        raise TrustError("the smoke result failed: a failed result is attested only with --force (then verify refuses the image)")
    client, path = Client.for_repository(repository, environ)
    try:
        manifest = client.manifest(path, tag)
    except NotFound:
        raise TrustError(f"{repository}:{tag} is not in the registry") from None
    manifest, config = _the_image_tested(client, path, manifest, tested, f"{repository}:{tag}")
    platform = None
    try:
        image_config = json.loads(client.blob(path, config))
        platform = f"{image_config.get('os')}/{image_config.get('architecture')}"
    except (TrustError, ValueError, AttributeError, RecursionError):
        platform = None
    return sign_published(repository, [], key, attest={manifest.digest: [(SMOKE, smoke_predicate(result, platform=platform))]},
                          environ=environ, echo=echo)
