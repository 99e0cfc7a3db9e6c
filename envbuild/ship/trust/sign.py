"""Sign what publish pushed, in cosign's registry format, and attach signed attestations beside it.

Signature: tag `sha256-<hex>.sig` in the image's repository, an OCI manifest whose layers are simple-signing
payloads (application/vnd.dev.cosign.simplesigning.v1+json) naming the repository and the digest, each with its
base64 ECDSA-SHA256 signature in the annotation dev.cosignproject.cosign/signature.
Attestations: tag `sha256-<hex>.att`, one layer per DSSE envelope (application/vnd.dsse.envelope.v1+json), the
annotation dev.cosignproject.cosign/signature empty and predicateType set, as `cosign attest` writes them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from envbuild.ship.trust import TrustError
from envbuild.ship.trust import dsse
from envbuild.ship.trust.keys import SigningKey
from envbuild.ship.trust.oci import OCI_MANIFEST, Client, NotFound, sha256

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_LAYER = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CONFIG = "application/vnd.oci.image.config.v1+json"
SBOM = "https://cyclonedx.org/bom"
PROVENANCE = "https://slsa.dev/provenance/v1"
SMOKE = "https://github.com/envbuild/envbuild/smoke/v1"
BUILD_TYPE = "https://github.com/envbuild/envbuild/build/v1"


def tag_for(digest: str, suffix: str) -> str:
    """sha256:abc -> sha256-abc.sig (cosign's tag schema, for registries without the referrers API)."""
    return digest.replace(":", "-") + "." + suffix


def identity(host: str, path: str) -> str:
    """The docker-reference cosign writes: the repository as go-containerregistry names it."""
    return f"index.docker.io/{path}" if host == "docker.io" else f"{host}/{path}"


def payload(reference: str, digest: str) -> bytes:
    """The simple-signing payload, byte for byte as cosign marshals it (Go's field order, no spaces)."""
    doc = {"critical": {"identity": {"docker-reference": reference}, "image": {"docker-manifest-digest": digest},
                        "type": "cosign container image signature"}, "optional": None}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _config(layers: list[dict[str, Any]]) -> bytes:
    """The image config of a signature image, as go-containerregistry's empty image gets it."""
    doc = {"architecture": "", "created": "0001-01-01T00:00:00Z", "history": [{"created": "0001-01-01T00:00:00Z"}] * len(layers),
           "os": "", "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}, "config": {}}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _existing_layers(client: Client, path: str, tag: str) -> list[dict[str, Any]]:
    try:
        doc = client.manifest(path, tag).json()
    except NotFound:
        return []
    layers = doc.get("layers") if isinstance(doc, dict) else None
    return [layer for layer in layers or [] if isinstance(layer, dict)]


def _attach(client: Client, path: str, tag: str, new: list[tuple[bytes, dict[str, Any]]],
            keep: Callable[[dict[str, Any]], bool]) -> str:
    """Put the manifest at `tag`: the layers already there that `keep` accepts, then the new ones."""
    layers = [layer for layer in _existing_layers(client, path, tag) if keep(layer)]
    for data, layer in new:
        layer = {"mediaType": layer["mediaType"], "size": len(data), "digest": client.put_blob(path, data),
                 "annotations": layer["annotations"]}
        layers = [old for old in layers if old != layer] + [layer]
    config = _config(layers)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": CONFIG, "size": len(config), "digest": client.put_blob(path, config)},
                "layers": layers}
    return client.put_manifest(path, tag, json.dumps(manifest, separators=(",", ":")).encode("utf-8"))


def sign_digest(client: Client, path: str, digest: str, key: SigningKey) -> dict[str, str]:
    """Sign one manifest digest; a signature this key made before over the same payload is replaced, others stay."""
    body = payload(identity(client.host, path), digest)
    sig = base64.b64encode(key.sign(body)).decode("ascii")
    public = key.public()
    ours = sha256(body)

    def keep(layer: dict[str, Any]) -> bool:
        if layer.get("digest") != ours:
            return True
        try:
            return not public.verify(base64.b64decode(layer["annotations"][SIGNATURE_ANNOTATION]), body)
        except (KeyError, TypeError, ValueError):
            return True

    tag = tag_for(digest, "sig")
    manifest = _attach(client, path, tag, [(body, {"mediaType": SIMPLE_SIGNING, "annotations": {SIGNATURE_ANNOTATION: sig}})], keep)
    return {"digest": digest, "tag": tag, "manifest": manifest}


def attest_digest(client: Client, path: str, digest: str, key: SigningKey,
                  predicates: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """One DSSE envelope per (predicateType, predicate), under sha256-<hex>.att; an attestation of the same
    predicate type already there is replaced (cosign attest --replace)."""
    name = identity(client.host, path)
    new, types = [], set()
    for predicate_type, predicate in predicates:
        envelope = dsse.envelope(dsse.statement(name, digest, predicate_type, predicate), key)
        new.append((envelope, {"mediaType": DSSE_LAYER, "annotations": {SIGNATURE_ANNOTATION: "", "predicateType": predicate_type}}))
        types.add(predicate_type)
    tag = tag_for(digest, "att")
    manifest = _attach(client, path, tag, new, lambda layer: (layer.get("annotations") or {}).get("predicateType") not in types)
    return {"digest": digest, "tag": tag, "manifest": manifest, "predicates": sorted(types)}


@dataclass
class Signed:
    """What signing did for one published image: for the manifest entry and the summary."""

    key: str  # the public key's fingerprint
    signatures: list[dict[str, str]] = field(default_factory=list)
    attestations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "signatures": self.signatures, "attestations": self.attestations}


def sign_published(repository: str, digests: list[str], key: SigningKey, *,
                   attest: Mapping[str, list[tuple[str, Any]]] | None = None,
                   environ: Mapping[str, str] | None = None, echo: Callable[[str], None] = lambda s: None) -> Signed:
    """Sign every digest publish pushed to `repository` (each platform's manifest and the index), and attach the
    attestations given for each digest ({digest: [(predicateType, predicate)]})."""
    client, path = Client.for_repository(repository, environ)
    done = Signed(key.public().fingerprint())
    for digest in digests:
        done.signatures.append(sign_digest(client, path, digest, key))
        echo(f"signed {repository}@{digest} ({done.signatures[-1]['tag']})")
    for digest, predicates in (attest or {}).items():
        if predicates:
            done.attestations.append(attest_digest(client, path, digest, key, predicates))
            echo(f"attested {repository}@{digest}: {', '.join(p for p, _ in predicates)}")
    return done


# --- predicates -----------------------------------------------------------------------------------------


def smoke_predicate(result: Mapping[str, Any], *, platform: str | None = None) -> dict[str, Any]:
    """What the smoke test proved: device seen, versions read in the image, each check's outcome, the model."""
    probe = result.get("probe") if isinstance(result.get("probe"), dict) else {}
    device_info = probe.get("device_info") if isinstance(probe.get("device_info"), dict) else {}
    model = probe.get("model") if isinstance(probe.get("model"), dict) else {}
    return {
        "backend": result.get("backend"),
        "ok": bool(result.get("ok")),
        "error": result.get("error"),
        "device": probe.get("device"),
        "device_name": device_info.get("name"),
        "device_count": device_info.get("count"),
        "platform": result.get("platform") or platform,
        "emulated": result.get("emulated"),  # None: the smoke result did not say
        "versions": probe.get("versions"),
        "checks": [{"name": c.get("name"), "ok": c.get("ok"), "message": c.get("message", "")}
                   for c in result.get("checks") or [] if isinstance(c, dict)],
        "model": {k: model.get(k) for k in ("architecture", "class", "parameters", "sha256", "device")},
        "image_id": result.get("image_id"),
        "date": result.get("date"),
    }


def provenance_predicate(*, backend: str, base_image: str | None, lock_text: bytes | None, dockerfile: bytes | None,
                         git_commit: str | None, git_dirty: bool | None, builder: str, version: str,
                         started: str | None, finished: str | None, matrix_sha256: str | None) -> dict[str, Any]:
    """SLSA v1 provenance. It meets Build L1 only: the provenance exists and says how the image was built, but
    the builder that signs it is the same process that ran the build (no isolated, hosted signing: not L2/L3)."""
    deps: list[dict[str, Any]] = []
    if base_image:
        ref, _, digest = base_image.partition("@")
        dep: dict[str, Any] = {"uri": f"docker://{ref}", "name": "base image"}
        if digest.startswith("sha256:"):
            dep["digest"] = {"sha256": digest.split(":", 1)[1]}
        deps.append(dep)
    if lock_text is not None:
        deps.append({"name": "lock", "uri": "envbuild:/opt/envbuild/lock.txt", "digest": {"sha256": hashlib.sha256(lock_text).hexdigest()}})
    if dockerfile is not None:
        deps.append({"name": "Dockerfile", "uri": f"envbuild:dockerfiles/{backend}.Dockerfile",
                     "digest": {"sha256": hashlib.sha256(dockerfile).hexdigest()}})
    if git_commit:
        deps.append({"name": "source", "uri": "git+https://github.com/envbuild/envbuild", "digest": {"gitCommit": git_commit}})
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"backend": backend, "matrix_sha256": matrix_sha256},
            "internalParameters": {"envbuild_version": version, "git_dirty": git_dirty, "slsa_build_level": 1},
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": builder, "version": {"envbuild": version}},
            "metadata": {"startedOn": started, "finishedOn": finished},
        },
    }


def sbom_predicate(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise TrustError("the SBOM is not JSON; not attested") from None
