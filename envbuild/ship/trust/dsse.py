"""in-toto statements (v1) in DSSE envelopes: what an attestation is, signed over DSSE's pre-authentication
encoding (PAE), so that neither the payload nor its type can be swapped under the signature."""

from __future__ import annotations

import base64
import json
from typing import Any

from envbuild.ship.trust import VerifyError
from envbuild.ship.trust.keys import PublicKey, SigningKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_V1 = "https://in-toto.io/Statement/v1"
STATEMENTS = (STATEMENT_V1, "https://in-toto.io/Statement/v0.1")  # cosign's own attest writes v0.1


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 SP len(type) SP type SP len(body) SP body (lengths in ASCII decimal, of the UTF-8 bytes)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(name: str, digest: str, predicate_type: str, predicate: Any) -> dict[str, Any]:
    algorithm, _, value = digest.partition(":")
    return {"_type": STATEMENT_V1, "subject": [{"name": name, "digest": {algorithm: value}}],
            "predicateType": predicate_type, "predicate": predicate}


def envelope(doc: dict[str, Any], key: SigningKey) -> bytes:
    """The envelope's JSON bytes (what the .att layer holds)."""
    payload = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    env = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode("ascii"),
           "signatures": [{"keyid": "", "sig": base64.b64encode(sig).decode("ascii")}]}
    return json.dumps(env, separators=(",", ":")).encode("utf-8")


def open_envelope(data: bytes, key: PublicKey, digest: str, where: str) -> dict[str, Any]:
    """The statement in an envelope, once a signature verifies with `key` and the statement names `digest`;
    else VerifyError (other-key: no signature verifies; tampered: it names another digest)."""
    try:
        env = json.loads(data)
        if env.get("payloadType") != PAYLOAD_TYPE:
            raise VerifyError("attestation", f"{where}: payloadType {env.get('payloadType')!r}, not {PAYLOAD_TYPE}")
        payload = base64.b64decode(env["payload"], validate=True)
        sigs = [base64.b64decode(s["sig"]) for s in env["signatures"]]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise VerifyError("attestation", f"{where}: not a DSSE envelope") from None
    if not any(key.verify(sig, pae(PAYLOAD_TYPE, payload)) for sig in sigs):
        raise VerifyError("tampered", f"{where}: no signature on the envelope verifies with {key.source} "
                                      "(its payload was changed after signing, or another key signed it)")
    try:
        doc = json.loads(payload)
        subjects = doc["subject"]
        algorithm, _, value = digest.partition(":")
        named = any(s.get("digest", {}).get(algorithm) == value for s in subjects)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise VerifyError("attestation", f"{where}: the signed payload is not an in-toto statement") from None
    if doc.get("_type") not in STATEMENTS:
        raise VerifyError("attestation", f"{where}: statement type {doc.get('_type')!r} is not in-toto's")
    if not named:
        raise VerifyError("tampered", f"{where}: the statement is about {subjects!r}, not {digest} (copied from another image)")
    return doc
