"""Check an image in the registry against a public key before anything runs it: a signature by that key over
this very manifest digest, every attestation beside it signed by that key and about this digest, and a smoke
attestation that passed. Each refusal names its reason (VerifyError.reason)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from envbuild.core.errors import InvalidInput
from envbuild.core.imageref import DIGEST, TAG
from envbuild.core.shape import problem
from envbuild.core.text import shown
from envbuild.ship.trust import TrustError, VerifyError
from envbuild.ship.trust import dsse
from envbuild.ship.trust.keys import PublicKey
from envbuild.ship.trust.oci import DOCKER_LIST, OCI_INDEX, Client, NotFound
from envbuild.ship.trust.sign import DSSE_LAYER, PROVENANCE, SBOM, SIGNATURE_ANNOTATION, SIMPLE_SIGNING, SMOKE, tag_for

NAMES = {SBOM: "SBOM (CycloneDX)", PROVENANCE: "provenance (SLSA v1)", SMOKE: "smoke result"}
# The shapes read back from a signed statement before anything is taken from it: signed is not well-formed.
STATEMENT = {"predicateType": str}
SMOKE_PREDICATE = {"ok": bool, "checks?": ([{"name": (str, None), "ok": (bool, None), "message?": (str, None)}], None),
                   "error?": (str, None), "date?": (str, None), "image_id?": (str, None), "platform?": (str, None),
                   "device?": (str, None), "device_name?": (str, None), "backend?": (str, None)}


@dataclass
class Verified:
    image: str
    digest: str
    key: str
    platforms: list[dict[str, Any]] = field(default_factory=list)  # an index's images, each checked the same way
    attestations: list[dict[str, Any]] = field(default_factory=list)
    smoke: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "verified": True, "key": self.key, "signature": True,
                "platforms": self.platforms, "attestations": self.attestations, "smoke": self.smoke}

    def lines(self) -> list[str]:
        out = [f"{self.image}: {self.digest}", f"  signature: valid, by key {self.key}, over this digest"]
        for p in self.platforms:
            out.append(f"  {p['platform']}: {p['digest']} signed")
        for a in self.attestations:
            out.append(f"  attestation {NAMES.get(a['predicateType'], a['predicateType'])}: signed, subject {a['subject']}")
        if self.smoke:
            s = self.smoke
            checks = s.get("checks") or []
            out.append(f"  smoke: passed {sum(1 for c in checks if c.get('ok'))}/{len(checks)} checks on {s.get('device')} "
                       f"({s.get('device_name')}), {s.get('platform') or 'platform not recorded'}, {s.get('date')}")
        return out


def _signature(client: Client, path: str, digest: str, key: PublicKey) -> None:
    """A simple-signing layer at sha256-<hex>.sig whose signature verifies with `key` and names `digest`."""
    where = f"{client.host}/{path}@{digest}"
    try:
        doc = client.manifest(path, tag_for(digest, "sig")).json()
    except NotFound:
        raise VerifyError("unsigned", f"{where} has no signature ({tag_for(digest, 'sig')} does not exist): it was never "
                                      "signed, or its tag now names a manifest that was never signed") from None
    foreign = None
    for layer in doc.get("layers") if isinstance(doc.get("layers"), list) else []:
        if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING:
            continue
        try:
            sig = base64.b64decode((layer.get("annotations") or {})[SIGNATURE_ANNOTATION], validate=True)
        except (KeyError, ValueError, TypeError):
            continue
        body = client.blob(path, str(layer.get("digest")))
        if not key.verify(sig, body):
            continue
        try:
            named = json.loads(body)["critical"]["image"]["docker-manifest-digest"]
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        if named == digest:
            return
        foreign = named
    if foreign:
        raise VerifyError("tampered", f"{where}: the signature by {key.source} is for {foreign}, not this manifest "
                                      "(copied from another image, or the manifest changed after signing)")
    raise VerifyError("other-key", f"{where} is signed, but by another key: no signature verifies with {key.source}")


def _attestations(client: Client, path: str, digest: str, key: PublicKey) -> list[dict[str, Any]]:
    try:
        doc = client.manifest(path, tag_for(digest, "att")).json()
    except NotFound:
        return []
    found = []
    for i, layer in enumerate(doc.get("layers") if isinstance(doc.get("layers"), list) else []):
        if not isinstance(layer, dict) or layer.get("mediaType") != DSSE_LAYER:
            continue
        notes = layer.get("annotations") if isinstance(layer.get("annotations"), dict) else {}
        where = f"attestation {i + 1} ({shown(str(notes.get('predicateType', 'no predicateType'))[:100])})"
        statement = dsse.open_envelope(client.blob(path, str(layer.get("digest"))), key, digest, where)
        why = problem(statement, STATEMENT, "the statement")
        if why is None and statement["predicateType"] == SMOKE:
            why = problem(statement.get("predicate"), SMOKE_PREDICATE, "its smoke result")
        if why:
            raise VerifyError("attestation", f"{where} of {digest}: signed, but not of the shape envbuild writes ({why}); "
                                             "attest the image again with `envbuild attest`")
        found.append(statement)
    return found


def _smoke_of(statements: list[dict[str, Any]], digest: str, config: str | None = None) -> dict[str, Any] | None:
    """The latest signed smoke result of this digest; for an image (its `config` known), only one about that very
    image counts: a result that names another image, or none, says nothing of this one."""
    smokes = [s["predicate"] for s in statements if s.get("predicateType") == SMOKE and isinstance(s.get("predicate"), dict)]
    if config:
        smokes = [p for p in smokes if p.get("image_id") == config]
    if not smokes:
        return None
    smoke = max(smokes, key=lambda p: str(p.get("date") or ""))  # the latest, when nightly added more
    if not smoke.get("ok"):
        failed = [c.get("name") for c in smoke.get("checks") or [] if not c.get("ok")]
        raise VerifyError("smoke-failed", f"the signed smoke result of {digest} says it FAILED "
                                          f"({smoke.get('error') or ', '.join(map(str, failed)) or 'no check passed'})")
    return smoke


def _object(manifest: Any, image: str) -> dict[str, Any]:
    try:
        return manifest.json()
    except TrustError as exc:
        raise VerifyError("registry", f"{image}: {exc}") from None


def _config(doc: dict[str, Any]) -> str | None:
    config = doc.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    return digest if isinstance(digest, str) and DIGEST.match(digest) else None


def split_image(value: str) -> tuple[str, str]:
    """`verify IMAGE`: REPOSITORY:TAG or REPOSITORY@sha256:DIGEST -> (REPOSITORY, TAG or DIGEST); anything else is
    refused (exit 2), the value quoted safely."""
    if "@" in value:
        repo, _, reference = value.partition("@")
        if not DIGEST.match(reference):
            raise InvalidInput(f"{shown(value)}: the digest must be sha256:<64 hex>")
        return repo, reference
    repo, sep, tag = value.rpartition(":")
    if not sep or "/" in tag or not TAG.match(tag):
        raise InvalidInput(f"{shown(value)}: give REPOSITORY:TAG or REPOSITORY@sha256:DIGEST, e.g. ghcr.io/org/envbuild:cpu")
    return repo, tag


def verify(repository: str, reference: str, key: PublicKey, *, require_smoke: bool = True,
           environ: Mapping[str, str] | None = None, echo: Callable[[str], None] = lambda s: None) -> Verified:
    """Verify REPOSITORY:TAG or REPOSITORY@DIGEST as it is in the registry now."""
    client, path = Client.for_repository(repository, environ)
    sep = "@" if reference.startswith("sha256:") else ":"
    image = f"{repository}{sep}{reference}"
    try:
        manifest = client.manifest(path, reference)
    except NotFound:
        raise VerifyError("missing", f"{image} is not in the registry") from None
    except TrustError as exc:
        raise VerifyError("registry", f"{image}: {exc}") from None
    digest = manifest.digest
    _signature(client, path, digest, key)
    done = Verified(image, digest, key.fingerprint())
    statements = _attestations(client, path, digest, key)
    done.attestations = [{"predicateType": s.get("predicateType"), "subject": digest} for s in statements]
    doc = _object(manifest, image)
    smoke = _smoke_of(statements, digest, _config(doc))
    children = []
    if manifest.media_type in (OCI_INDEX, DOCKER_LIST) or doc.get("manifests"):
        listed = doc.get("manifests")
        for i, child in enumerate(listed if isinstance(listed, list) else []):
            if not isinstance(child, dict) or not isinstance(child.get("digest"), str) or not DIGEST.match(child["digest"]):
                raise VerifyError("registry", f"{image}: platform {i + 1} of the index names no sha256 digest")
            plat = child.get("platform") if isinstance(child.get("platform"), dict) else {}
            if plat.get("os") == "unknown":  # BuildKit's attestation manifests: not an image to run
                continue
            name = "/".join(str(x) for x in (plat.get("os"), plat.get("architecture"), plat.get("variant")) if x) or "?"
            _signature(client, path, child["digest"], key)
            child_statements = _attestations(client, path, child["digest"], key)
            try:
                child_config = _config(_object(client.manifest(path, child["digest"]), f"{image} ({name})"))
            except NotFound:
                raise VerifyError("missing", f"{image}: platform {name} ({child['digest']}) is not in the registry") from None
            child_smoke = _smoke_of(child_statements, child["digest"], child_config)
            children.append({"platform": name, "digest": child["digest"], "smoke": bool(child_smoke),
                             "attestations": [s.get("predicateType") for s in child_statements]})
            smoke = smoke or child_smoke
        done.platforms = children
        if require_smoke and not smoke and children:
            raise VerifyError("smoke-missing", f"{image}: no signed smoke attestation on the index or any of its platforms")
    if require_smoke and not smoke:
        raise VerifyError("smoke-missing", f"{image} is signed, but carries no signed smoke attestation "
                                           f"({tag_for(digest, 'att')}): nothing says it passed its smoke test")
    done.smoke = smoke
    echo(f"verified {image} ({digest}) with {key.source}")
    return done
