"""Keys and envelopes in cosign's format, checked by code that shares nothing with envbuild's signer: the key
file is opened with cryptography's own scrypt and libsodium's raw secretbox call; signatures and DSSE envelopes
are checked with a PAE and an ECDSA verification written here."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.ship.trust import KeyError_, VerifyError, dsse, keys, sign
from hypothesis import given
from support.properties import JSON, PROPS, own_error
from envbuild.ship.trust import TrustError
from envbuild.core.errors import InvalidInput
from envbuild.ship.trust.verify import split_image

PASSPHRASE = "correct horse 7 battery"

# A key made by cosign's own Go code (sigstore/cosign pkg/cosign/keys_test.go, Apache-2.0), passphrase "hello":
# envbuild must read what cosign writes, not only what it writes itself.
COSIGN_MADE = """-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----
eyJrZGYiOnsibmFtZSI6InNjcnlwdCIsInBhcmFtcyI6eyJOIjozMjc2OCwiciI6
OCwicCI6MX0sInNhbHQiOiI3T3VGd2VsbWZZNXVId2NoaURSc210anNwZ2ZlZjFG
Mk5lOGFDTjVLYVpZPSJ9LCJjaXBoZXIiOnsibmFtZSI6Im5hY2wvc2VjcmV0Ym94
Iiwibm9uY2UiOiJQNHk4OGhCb3ZTa09MbXN0bFVBaGJwdDJ0K2xTNUxQSCJ9LCJj
aXBoZXJ0ZXh0IjoiMnB1QzdyZldJOWh3bnJlQ2s4aUZDRlVwQlRrSzRJNlIvbFBF
cnBDekpXUGpJWXl4eGVIL1A2VW52cFJHdVhla1NNb3JMdGhLamdoQ1JlNy82NDVH
QWtoVm1LRC92eEF0S2EvbE1abENSQ3FlekJGUFd1dzNpeFRtZ2xhb2J1ZFVSbUVs
bmNGOGlZbzBTMVl6Y1ZOMVFwY2J2c0dNcUlYRzVlbmdteGp5dCtBcXlyZTF0Q0Y0
V01tU1BlaEljNlBqd2h1Q2xHaVpJUWRvTGc9PSJ9
-----END ENCRYPTED SIGSTORE PRIVATE KEY-----
"""


def independent_unseal(pem: bytes, passphrase: bytes):
    """Open a cosign key without envbuild: PEM -> JSON -> scrypt (cryptography) -> secretbox (libsodium) -> PKCS#8."""
    import nacl.bindings
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    lines = pem.decode().strip().splitlines()
    assert lines[0] == "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"
    assert lines[-1] == "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----"
    doc = json.loads(base64.b64decode("".join(lines[1:-1])))
    assert list(doc) == ["kdf", "cipher", "ciphertext"]  # Go's field order
    assert doc["kdf"]["name"] == "scrypt" and doc["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert doc["cipher"]["name"] == "nacl/secretbox"
    salt, nonce = base64.b64decode(doc["kdf"]["salt"]), base64.b64decode(doc["cipher"]["nonce"])
    assert len(salt) == 32 and len(nonce) == 24
    box_key = Scrypt(salt=salt, length=32, n=32768, r=8, p=1).derive(passphrase)
    der = nacl.bindings.crypto_secretbox_open(base64.b64decode(doc["ciphertext"]), nonce, box_key)
    return serialization.load_der_private_key(der, password=None)


def independent_pae(payload_type: str, body: bytes) -> bytes:
    return b"DSSEv1 " + str(len(payload_type.encode())).encode() + b" " + payload_type.encode() + b" " + \
        str(len(body)).encode() + b" " + body


def ecdsa_ok(public_pem: bytes, signature: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        serialization.load_pem_public_key(public_pem).verify(signature, data, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def keygen(tmp_path: Path, *extra: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in keys.PASSWORD_ENV}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "envbuild", "keygen", *extra], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, input=stdin, timeout=120)


def test_keygen_writes_cosigns_format_the_passphrase_never_shown(tmp_path):
    proc = keygen(tmp_path, env={"ENVBUILD_KEY_PASSWORD": PASSPHRASE})
    assert proc.returncode == 0, proc.stderr
    assert PASSPHRASE not in proc.stdout + proc.stderr
    private, public = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----\n")
    key = independent_unseal(private.read_bytes(), PASSPHRASE.encode())
    from cryptography.hazmat.primitives import serialization

    assert key.curve.name == "secp256r1"
    assert key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo) == public.read_bytes()
    assert PASSPHRASE.encode() not in private.read_bytes() and b"PRIVATE KEY-----\nMI" not in private.read_bytes()


def test_keygen_takes_cosigns_variable_and_refuses_to_overwrite(tmp_path):
    assert keygen(tmp_path, "--output-key-prefix", "team", env={"COSIGN_PASSWORD": PASSPHRASE}).returncode == 0
    before = (tmp_path / "team.key").read_bytes()
    again = keygen(tmp_path, "--output-key-prefix", "team", env={"COSIGN_PASSWORD": PASSPHRASE})
    assert again.returncode == 2 and "team.key exists" in again.stderr and "Traceback" not in again.stderr
    assert (tmp_path / "team.key").read_bytes() == before
    independent_unseal(before, PASSPHRASE.encode())


def test_keygen_without_a_passphrase_or_terminal_says_how(tmp_path):
    proc = keygen(tmp_path, stdin="")
    assert proc.returncode == 2
    assert "ENVBUILD_KEY_PASSWORD" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "cosign.key").exists()


def test_reads_a_key_cosign_made():
    key = keys.load_private(COSIGN_MADE.encode(), b"hello", "cosign-made")
    independent = independent_unseal(COSIGN_MADE.encode(), b"hello")
    body = b"anything"
    from cryptography.hazmat.primitives import serialization

    pem = independent.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert ecdsa_ok(pem, key.sign(body), body)


def test_wrong_passphrase_and_wrong_files_are_clear_errors(tmp_path):
    with pytest.raises(KeyError_, match="wrong passphrase"):
        keys.load_private(COSIGN_MADE.encode(), b"hellO", "cosign-made")
    pair = keys.generate(b"pw")
    with pytest.raises(KeyError_, match="not a cosign private key|a 'PUBLIC KEY' PEM block"):
        keys.load_private(pair.public_pem, b"pw", "cosign.pub")
    with pytest.raises(KeyError_, match="not a public key"):
        keys.load_public(pair.private_pem, "cosign.key")
    with pytest.raises(KeyError_, match="not a PEM key"):
        keys.load_public(b"hello", "x")


def test_signing_key_from_a_ci_secret_and_its_passphrase():
    pair = keys.generate(b"s3cret-pass")
    env = {keys.SIGNING_KEY_ENV: pair.private_pem.decode(), "ENVBUILD_KEY_PASSWORD": "s3cret-pass"}
    key = keys.signing_key(None, env)
    assert key is not None and ecdsa_ok(pair.public_pem, key.sign(b"x"), b"x")
    assert "s3cret" not in repr(key)
    assert keys.signing_key(None, {}) is None
    with pytest.raises(KeyError_, match="ENVBUILD_KEY_PASSWORD"):
        keys.signing_key(None, {keys.SIGNING_KEY_ENV: pair.private_pem.decode()})


def test_simple_signing_payload_is_cosigns():
    body = sign.payload("127.0.0.1:5000/envbuild", "sha256:" + "a" * 64)
    assert json.loads(body) == {"critical": {"identity": {"docker-reference": "127.0.0.1:5000/envbuild"},
                                             "image": {"docker-manifest-digest": "sha256:" + "a" * 64},
                                             "type": "cosign container image signature"}, "optional": None}
    assert sign.tag_for("sha256:" + "b" * 64, "sig") == "sha256-" + "b" * 64 + ".sig"


def test_dsse_envelope_verifies_independently_and_fails_after_one_byte():
    pair = keys.generate(b"pw")
    key = keys.load_private(pair.private_pem, b"pw", "k")
    digest = "sha256:" + "c" * 64
    env = json.loads(dsse.envelope(dsse.statement("reg/x", digest, sign.SMOKE, {"ok": True}), key))
    assert env["payloadType"] == "application/vnd.in-toto+json"
    body = base64.b64decode(env["payload"])
    sig = base64.b64decode(env["signatures"][0]["sig"])
    assert ecdsa_ok(pair.public_pem, sig, independent_pae(env["payloadType"], body))
    statement = json.loads(body)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": "reg/x", "digest": {"sha256": "c" * 64}}]
    flipped = bytearray(body)
    flipped[len(flipped) // 2] ^= 0x01
    assert not ecdsa_ok(pair.public_pem, sig, independent_pae(env["payloadType"], bytes(flipped)))
    # envbuild's own check agrees, and names why
    public = key.public()
    assert dsse.open_envelope(json.dumps(env).encode(), public, digest, "a")["predicate"] == {"ok": True}
    env["payload"] = base64.b64encode(bytes(flipped)).decode()
    with pytest.raises(VerifyError) as err:
        dsse.open_envelope(json.dumps(env).encode(), public, digest, "a")
    assert err.value.reason == "tampered" and "payload was changed" in str(err.value)
    good = json.loads(dsse.envelope(dsse.statement("reg/x", digest, sign.SMOKE, {"ok": True}), key))
    with pytest.raises(VerifyError) as err:
        dsse.open_envelope(json.dumps(good).encode(), public, "sha256:" + "d" * 64, "a")
    assert err.value.reason == "tampered"


def test_smoke_predicate_keeps_what_the_probe_saw():
    result = {"backend": "cpu", "ok": True, "image_id": "sha256:" + "e" * 64, "date": "2026-12-02T00:00:00Z",
              "checks": [{"name": "device", "ok": True, "message": "cpu: x86_64"}],
              "probe": {"device": "cpu", "device_info": {"name": "x86_64", "count": 1},
                        "versions": {"torch": "2.13.0", "transformers": "5.23.0"},
                        "model": {"class": "LlamaForCausalLM", "sha256": "f" * 64, "parameters": 10}}}
    p = sign.smoke_predicate(result, platform="linux/amd64")
    assert p["ok"] and p["device"] == "cpu" and p["device_name"] == "x86_64" and p["platform"] == "linux/amd64"
    assert p["model"]["sha256"] == "f" * 64 and p["checks"] == [{"name": "device", "ok": True, "message": "cpu: x86_64"}]
    assert p["versions"]["torch"] == "2.13.0" and p["emulated"] is None


def test_provenance_claims_build_level_1_only():
    p = sign.provenance_predicate(backend="cpu", base_image="127.0.0.1:5000/debian@sha256:" + "1" * 64, lock_text=b"lock",
                                  dockerfile=b"FROM x", git_commit="abc", git_dirty=False, builder="envbuild (local)",
                                  version="0.1.0", started=None, finished=None, matrix_sha256=None)
    deps = {d["name"]: d for d in p["buildDefinition"]["resolvedDependencies"]}
    assert deps["base image"]["digest"] == {"sha256": "1" * 64}
    assert deps["lock"]["digest"]["sha256"] == __import__("hashlib").sha256(b"lock").hexdigest()
    assert deps["source"]["digest"] == {"gitCommit": "abc"}
    assert p["buildDefinition"]["internalParameters"]["slsa_build_level"] == 1


def test_verify_bad_input_is_exit_2_with_a_reason(invoke, tmp_path, monkeypatch):
    monkeypatch.delenv(keys.VERIFY_KEY_ENV, raising=False)
    no_key = invoke("verify", "127.0.0.1:5000/envbuild:cpu")
    assert no_key.exit_code == 2 and "--key cosign.pub" in no_key.output
    pub = tmp_path / "cosign.pub"
    pub.write_bytes(keys.generate(b"pw").public_pem)
    for bad in ("127.0.0.1:5000/envbuild", "x@sha256:zz", "reg/x:bad\x1btag"):
        result = invoke("verify", bad, "--key", str(pub))
        assert result.exit_code == 2 and "Error:" in result.output and "\x1b" not in result.output
    wrong = tmp_path / "cosign.key"
    wrong.write_bytes(keys.generate(b"pw").private_pem)
    result = invoke("verify", "127.0.0.1:5000/envbuild:cpu", "--key", str(wrong))
    assert result.exit_code == 2 and "not a public key" in result.output


def test_image_creation_time_becomes_rfc3339():
    from datetime import datetime, timezone

    from envbuild.ship.trust.attest import _utc

    assert _utc(datetime(2026, 12, 2, 3, 4, 5, tzinfo=timezone.utc)) == "2026-12-02T03:04:05Z"
    assert _utc(None) is None


MINIMAL = Path(__file__).parent.parent / "data" / "minimal.yaml"


def test_matrix_trust_public_key_is_what_pull_verifies_with(invoke, write_matrix, tmp_path, monkeypatch):
    from envbuild.matrix import load

    monkeypatch.delenv(keys.VERIFY_KEY_ENV, raising=False)
    (tmp_path / "cosign.pub").write_bytes(keys.generate(b"pw").public_pem)
    path = write_matrix(MINIMAL.read_text() + "trust:\n  public_key: cosign.pub\n")
    m = load(path)
    assert m.trust_key == str(tmp_path / "cosign.pub")
    typo = write_matrix(MINIMAL.read_text() + "trust:\n  public_kye: cosign.pub\n", "typo.yaml")
    bad = invoke("validate", "--matrix", str(typo))
    assert bad.exit_code == 2 and "public_kye" in bad.output
    # pull reads the key from the matrix and asks the registry before anything else: here nothing listens
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = invoke("pull", "--backend", "cpu", "--matrix", str(path), "--registry", f"127.0.0.1:{port}/envbuild", "--ignore-host")
    assert result.exit_code == 1 and "refusing the image (registry)" in result.output, result.output
    skipped = invoke("pull", "--backend", "cpu", "--matrix", str(path), "--registry", f"127.0.0.1:{port}/envbuild",
                     "--ignore-host", "--insecure-skip-verify")
    assert "NOT checked" in skipped.output and "refusing the image" not in skipped.output


# --- Signed is not well-formed: the shape of what is read back is checked before use (from test_shapes.py)

@pytest.fixture(scope="module")
def registry(engineless_registry):
    return engineless_registry


def _signed_image(registry, repo: str, predicate) -> tuple[str, bytes]:
    """A tiny image in the registry, signed, with one smoke attestation whose predicate is `predicate`: the image
    reference and the public key."""
    from envbuild.net.regclient import OCI_MANIFEST, Registry
    from envbuild.ship.trust import keys
    from envbuild.ship.trust.sign import SMOKE, sign_published

    pair = keys.generate(b"pw")
    key = keys.load_private(pair.private_pem, b"pw", "test.key")
    api = Registry(f"{registry.host}/{repo}")
    config = api.put_blob(repo, b'{"architecture": "amd64", "os": "linux"}')
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 40},
                           "layers": []}).encode()
    digest = api.put_manifest(repo, "cpu", manifest, OCI_MANIFEST)
    if isinstance(predicate, dict) and predicate.get("image_id") == "CONFIG":  # a result about this very image
        predicate = {**predicate, "image_id": config}
    sign_published(f"{registry.host}/{repo}", [digest], key, attest={digest: [(SMOKE, predicate)]})
    return f"{registry.host}/{repo}:cpu", pair.public_pem


@pytest.mark.parametrize("predicate", [
    {"ok": True, "checks": ["import torch", "matmul"]},
    {"ok": True, "checks": ["import torch", "matmul"], "image_id": "CONFIG"},
    {"ok": True, "checks": "all"},
    {"ok": "yes", "checks": []},
    "passed",
    [1, 2],
    {"ok": True, "checks": [{"name": ["x"], "ok": True}]},
], ids=["checks-strings", "checks-strings-this-image", "checks-string", "ok-string", "predicate-string", "predicate-list", "name-list"])
def test_verify_refuses_a_signed_smoke_result_of_the_wrong_shape(predicate, registry, invoke, tmp_path):
    image, public = _signed_image(registry, f"shapes/p{abs(hash(json.dumps(predicate))) % 10**8}", predicate)
    key = tmp_path / "k.pub"
    key.write_bytes(public)
    result = invoke("verify", image, "--key", key)
    assert result.exit_code == 1, result.output
    assert "not of the shape envbuild writes" in result.output and "Traceback" not in result.output, result.output


def test_verify_still_passes_a_well_formed_smoke_result(registry, invoke, tmp_path):
    image, public = _signed_image(registry, "shapes/good", {"ok": True, "checks": [{"name": "import", "ok": True, "message": ""}],
                                                             "device": "cpu", "date": "2026-01-01T00:00:00Z",
                                                             "image_id": "CONFIG"})
    key = tmp_path / "k.pub"
    key.write_bytes(public)
    result = invoke("verify", image, "--key", key)
    assert result.exit_code == 0, result.output
    assert "smoke: passed 1/1 checks" in result.output


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

DIGEST = "sha256:" + "a" * 64


@PROPS
@given(JSON)
def test_a_signed_smoke_predicate_of_any_shape_is_checked_before_use(predicate):
    from envbuild.core.shape import problem
    from envbuild.ship.trust.verify import SMOKE_PREDICATE, Verified, _smoke_of
    from envbuild.ship.trust.sign import SMOKE

    if problem(predicate, SMOKE_PREDICATE) is not None:
        return  # refused by verify's reader, before _smoke_of
    smoke = own_error(lambda: _smoke_of([{"predicateType": SMOKE, "predicate": predicate}], DIGEST))
    if smoke is not None:
        done = Verified("reg.example/x:cpu", DIGEST, "key", smoke=smoke)
        assert all(isinstance(line, str) for line in done.lines())


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("data", [b"not json", b"[]", b'"a string"', b"[" * 100000 + b"]" * 100000, b"\xff\xfe"])
def test_a_manifest_that_is_not_a_json_object_is_a_trust_error(data):
    from envbuild.ship.trust.oci import Manifest

    with pytest.raises(TrustError, match="not a JSON object"):
        Manifest(data, "application/vnd.oci.image.manifest.v1+json", "sha256:" + "0" * 64).json()


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

@pytest.mark.parametrize("value, expected", [
    ("ghcr.io/org/envbuild:cpu", ("ghcr.io/org/envbuild", "cpu")),
    ("127.0.0.1:5000/envbuild:cpu", ("127.0.0.1:5000/envbuild", "cpu")),
    ("r/x@sha256:" + "a" * 64, ("r/x", "sha256:" + "a" * 64)),
])
def test_verify_takes_a_tag_or_a_digest(value, expected):
    assert split_image(value) == expected


@pytest.mark.parametrize("value, fragment", [
    ("127.0.0.1:5000/envbuild", "give REPOSITORY:TAG or REPOSITORY@sha256:DIGEST"),
    ("x@sha256:zz", "the digest must be sha256:<64 hex>"),
    ("reg/x:bad\x1btag", "give REPOSITORY:TAG"),
])
def test_verify_refuses_anything_else(value, fragment):
    with pytest.raises(InvalidInput, match=fragment.replace("(", r"\(")) as info:
        split_image(value)
    assert "\x1b" not in str(info.value)
