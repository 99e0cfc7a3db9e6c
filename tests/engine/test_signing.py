"""Signatures and attestations in cosign's registry format, on a real registry (Debian's docker-registry).

The verifier here shares no code with envbuild's signer: it reads the registry with plain HTTP requests, checks
content digests itself, and verifies ECDSA P-256 signatures and DSSE envelopes with `cryptography` and a PAE
written below: what `cosign verify --key` and `cosign verify-attestation --key` check. The first tests need only
the registry (images are pushed through its HTTP API); the last publishes the real cpu image on the engine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from support.constants import MATRIX as MATRIX_PATH
from support.fixtures import start_registry

MATRIX = str(MATRIX_PATH)
PASSPHRASE = "pass-" + uuid.uuid4().hex  # only ever in the environment
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ACCEPT = ", ".join([OCI_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"])
SMOKE = "https://github.com/envbuild/envbuild/smoke/v1"


# --- the held-apart verifier ------------------------------------------------------------------------------


class Refused(Exception):
    pass


class Registry:
    def __init__(self, host: str, auth: tuple[str, str] | None = None):
        self.base, self.auth = f"http://{host}", auth

    def get(self, path: str) -> requests.Response:
        return requests.get(self.base + path, headers={"Accept": ACCEPT}, auth=self.auth, timeout=30)

    def manifest(self, repo: str, ref: str) -> tuple[bytes, str] | None:
        r = self.get(f"/v2/{repo}/manifests/{ref}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.content, "sha256:" + hashlib.sha256(r.content).hexdigest()

    def blob(self, repo: str, digest: str) -> bytes:
        r = self.get(f"/v2/{repo}/blobs/{digest}")
        r.raise_for_status()
        assert "sha256:" + hashlib.sha256(r.content).hexdigest() == digest
        return r.content

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = requests.post(f"{self.base}/v2/{repo}/blobs/uploads/", auth=self.auth, timeout=30)
        assert start.status_code == 202, start.text
        loc = start.headers["Location"]
        loc = loc if loc.startswith("http") else self.base + loc
        done = requests.put(loc + ("&" if "?" in loc else "?") + "digest=" + digest, data=data, auth=self.auth, timeout=30,
                            headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.text
        return digest

    def put_manifest(self, repo: str, tag: str, data: bytes, media_type: str = OCI_MANIFEST) -> str:
        r = requests.put(f"{self.base}/v2/{repo}/manifests/{tag}", data=data, auth=self.auth, timeout=30,
                         headers={"Content-Type": media_type})
        assert r.status_code == 201, r.text
        return "sha256:" + hashlib.sha256(data).hexdigest()


def ecdsa_ok(public_pem: bytes, sig: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        serialization.load_pem_public_key(public_pem).verify(sig, data, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def pae(kind: str, body: bytes) -> bytes:
    return b" ".join([b"DSSEv1", str(len(kind.encode())).encode(), kind.encode(), str(len(body)).encode(), body])


def held_out_verify(reg: Registry, repo: str, tag: str, public_pem: bytes) -> str:
    """cosign verify --key: a simple-signing layer under sha256-<hex>.sig whose signature verifies and whose payload
    names the digest the tag serves. Returns that digest, or raises Refused."""
    found = reg.manifest(repo, tag)
    if found is None:
        raise Refused("no such tag")
    digest = found[1]
    sig = reg.manifest(repo, digest.replace(":", "-") + ".sig")
    if sig is None:
        raise Refused("unsigned")
    for layer in json.loads(sig[0])["layers"]:
        if layer["mediaType"] != "application/vnd.dev.cosign.simplesigning.v1+json":
            continue
        body = reg.blob(repo, layer["digest"])
        signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
        doc = json.loads(body)
        if (ecdsa_ok(public_pem, signature, body) and doc["critical"]["image"]["docker-manifest-digest"] == digest
                and doc["critical"]["type"] == "cosign container image signature"):
            return digest
    raise Refused("no valid signature for this digest")


def held_out_attestations(reg: Registry, repo: str, digest: str, public_pem: bytes) -> list[dict]:
    """cosign verify-attestation --key: every DSSE layer under sha256-<hex>.att verifies and is about `digest`."""
    att = reg.manifest(repo, digest.replace(":", "-") + ".att")
    if att is None:
        raise Refused("no attestations")
    statements = []
    for layer in json.loads(att[0])["layers"]:
        assert layer["mediaType"] == "application/vnd.dsse.envelope.v1+json"
        assert layer["annotations"]["dev.cosignproject.cosign/signature"] == ""
        env = json.loads(reg.blob(repo, layer["digest"]))
        assert env["payloadType"] == "application/vnd.in-toto+json"
        body = base64.b64decode(env["payload"])
        if not any(ecdsa_ok(public_pem, base64.b64decode(s["sig"]), pae(env["payloadType"], body)) for s in env["signatures"]):
            raise Refused("an attestation's signature does not verify")
        statement = json.loads(body)
        if statement["subject"][0]["digest"] != {"sha256": digest.split(":", 1)[1]}:
            raise Refused("an attestation is about another digest")
        assert statement["predicateType"] == layer["annotations"]["predicateType"]
        statements.append(statement)
    return statements


# --- fixtures ------------------------------------------------------------------------------------------------


def envbuild(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 600):
    base = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD", "ENVBUILD_SIGNING_KEY",
                                                             "ENVBUILD_VERIFY_KEY")}
    proc = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    for prefix in ("cosign", "other"):
        proc = envbuild(["keygen", "--output-key-prefix", prefix], {"ENVBUILD_KEY_PASSWORD": PASSPHRASE}, cwd=d)
        assert proc.returncode == 0, proc.stderr
        assert PASSPHRASE not in proc.stdout + proc.stderr
    return d


@pytest.fixture(scope="module")
def plain_registry(tmp_path_factory):
    reg = start_registry(tmp_path_factory.mktemp("sign-registry"))
    yield reg
    reg.stop()


def fake_image(reg: Registry, repo: str, tag: str, marker: str) -> str:
    """A small image manifest of its own (a config that names `marker`), pushed by tag; its digest."""
    layer = reg.put_blob(repo, marker.encode())
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"marker": marker}},
                         "rootfs": {"type": "layers", "diff_ids": [layer]}}).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config), "digest": reg.put_blob(repo, config)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(marker), "digest": layer}]}
    return reg.put_manifest(repo, tag, json.dumps(manifest).encode())


def sign_with(keys_dir: Path, name: str, repository: str, digest: str, *, smoke_ok: bool | None = True) -> None:
    """envbuild's library signs (and attests a smoke result unless smoke_ok is None)."""
    from envbuild.ship.trust import keys, sign

    from envbuild.ship.trust.oci import Client

    key = keys.load_private((keys_dir / f"{name}.key").read_bytes(), PASSPHRASE.encode(), name)
    client, path = Client.for_repository(repository, None)
    doc = client.manifest(path, digest).json()
    image_id = (doc.get("config") or {}).get("digest")  # the result is of this very image (an index: none)
    claims = [] if smoke_ok is None else [
        (sign.SMOKE, sign.smoke_predicate({"backend": "cpu", "ok": smoke_ok, "date": "2026-12-02T00:00:00Z", "image_id": image_id,
                                           "checks": [{"name": "device", "ok": True, "message": ""},
                                                      {"name": "forward", "ok": smoke_ok, "message": ""}]})),
        (sign.SBOM, {"bomFormat": "CycloneDX", "specVersion": "1.6"}),
    ]
    sign.sign_published(repository, [digest], key, attest={digest: claims} if claims else None)


def verify_cli(image: str, key: Path, *extra: str):
    return envbuild(["verify", image, "--key", str(key), *extra])


# --- registry-level: signing, refusing, tampering --------------------------------------------------------------


def test_signed_image_verifies_held_out_and_with_envbuild(plain_registry, keypair):
    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    digest = fake_image(reg, repo, "cpu", "signed")
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", digest)
    public = (keypair / "cosign.pub").read_bytes()
    assert held_out_verify(reg, repo, "cpu", public) == digest
    statements = held_out_attestations(reg, repo, digest, public)
    assert sorted(s["predicateType"] for s in statements) == ["https://cyclonedx.org/bom", SMOKE]
    proc = verify_cli(f"{plain_registry.host}/{repo}:cpu", keypair / "cosign.pub", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] and doc["digest"] == digest and doc["smoke"]["ok"] is True
    assert {a["subject"] for a in doc["attestations"]} == {digest}
    # the same by digest, and as text that says what it proved
    text = verify_cli(f"{plain_registry.host}/{repo}@{digest}", keypair / "cosign.pub")
    assert text.returncode == 0 and "signature: valid" in text.stdout and "smoke: passed 2/2 checks" in text.stdout
    # signing again replaces this key's signature instead of piling them up
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", digest)
    sig = json.loads(reg.manifest(repo, digest.replace(":", "-") + ".sig")[0])
    assert len(sig["layers"]) == 1


def test_unsigned_and_other_key_are_refused(plain_registry, keypair):
    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    public = (keypair / "cosign.pub").read_bytes()
    unsigned = fake_image(reg, repo, "unsigned", "unsigned")
    with pytest.raises(Refused):
        held_out_verify(reg, repo, "unsigned", public)
    proc = verify_cli(f"{plain_registry.host}/{repo}:unsigned", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(unsigned)" in proc.stderr and unsigned in proc.stderr
    other = fake_image(reg, repo, "other", "other")
    sign_with(keypair, "other", f"{plain_registry.host}/{repo}", other)
    with pytest.raises(Refused):
        held_out_verify(reg, repo, "other", public)
    proc = verify_cli(f"{plain_registry.host}/{repo}:other", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(other-key)" in proc.stderr


def test_tag_moved_after_signing_is_refused(plain_registry, keypair):
    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    public = (keypair / "cosign.pub").read_bytes()
    signed = fake_image(reg, repo, "cpu", "original")
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", signed)
    assert held_out_verify(reg, repo, "cpu", public) == signed
    moved = fake_image(reg, repo, "cpu", "swapped in later")  # the tag now names another manifest
    with pytest.raises(Refused):
        held_out_verify(reg, repo, "cpu", public)
    proc = verify_cli(f"{plain_registry.host}/{repo}:cpu", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(unsigned)" in proc.stderr and moved in proc.stderr
    # and with the old signature copied beside the new manifest: it names the old digest
    old_sig = reg.manifest(repo, signed.replace(":", "-") + ".sig")[0]
    reg.put_manifest(repo, moved.replace(":", "-") + ".sig", old_sig)
    with pytest.raises(Refused):
        held_out_verify(reg, repo, "cpu", public)
    proc = verify_cli(f"{plain_registry.host}/{repo}:cpu", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(tampered)" in proc.stderr and signed in proc.stderr


def test_attestation_with_one_byte_changed_is_refused(plain_registry, keypair):
    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    public = (keypair / "cosign.pub").read_bytes()
    digest = fake_image(reg, repo, "cpu", "attested")
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", digest)
    att_tag = digest.replace(":", "-") + ".att"
    att = json.loads(reg.manifest(repo, att_tag)[0])
    layer = att["layers"][0]
    env = json.loads(reg.blob(repo, layer["digest"]))
    body = bytearray(base64.b64decode(env["payload"]))
    at = body.index(b'"ok":true') + 5  # true -> trie: one byte
    body[at] ^= ord("u") ^ ord("i")
    env["payload"] = base64.b64encode(bytes(body)).decode()
    changed = json.dumps(env).encode()
    layer.update(digest=reg.put_blob(repo, changed), size=len(changed))
    reg.put_manifest(repo, att_tag, json.dumps(att).encode())
    with pytest.raises(Refused, match="does not verify"):
        held_out_attestations(reg, repo, digest, public)
    proc = verify_cli(f"{plain_registry.host}/{repo}:cpu", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(tampered)" in proc.stderr and "payload was changed" in proc.stderr


def test_smoke_missing_or_failed_is_refused(plain_registry, keypair):
    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    bare = fake_image(reg, repo, "bare", "signed, never attested")
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", bare, smoke_ok=None)
    proc = verify_cli(f"{plain_registry.host}/{repo}:bare", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(smoke-missing)" in proc.stderr
    assert verify_cli(f"{plain_registry.host}/{repo}:bare", keypair / "cosign.pub", "--no-smoke").returncode == 0
    failed = fake_image(reg, repo, "failed", "smoke failed")
    sign_with(keypair, "cosign", f"{plain_registry.host}/{repo}", failed, smoke_ok=False)
    proc = verify_cli(f"{plain_registry.host}/{repo}:failed", keypair / "cosign.pub")
    assert proc.returncode == 1 and "(smoke-failed)" in proc.stderr and "forward" in proc.stderr


def test_a_signed_smoke_result_of_another_image_says_nothing_of_this_one(plain_registry, keypair):
    """Bound at verify too: a valid signature over a result naming another image (or none) is not a passed smoke."""
    from envbuild.ship.trust import keys, sign

    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    repository = f"{plain_registry.host}/{repo}"
    digest = fake_image(reg, repo, "other", "another image's result")
    key = keys.load_private((keypair / "cosign.key").read_bytes(), PASSPHRASE.encode(), "cosign")
    for image_id in ("sha256:" + "7" * 64, None):
        result = {"backend": "cpu", "ok": True, "date": "2026-12-02T00:00:00Z", "image_id": image_id,
                  "checks": [{"name": "forward", "ok": True, "message": ""}]}
        sign.sign_published(repository, [digest], key, attest={digest: [(sign.SMOKE, sign.smoke_predicate(result))]})
        proc = verify_cli(f"{repository}:other", keypair / "cosign.pub")
        assert proc.returncode == 1 and "(smoke-missing)" in proc.stderr, proc.stderr


def test_a_later_smoke_result_is_attested_only_for_its_own_image(plain_registry, keypair):
    """`envbuild attest` (nightly): the result's image id must be the registry manifest's config digest."""
    from envbuild.core.errors import InvalidInput
    from envbuild.ship.trust import TrustError
    from envbuild.ship.trust import keys as trust_keys
    from envbuild.ship.trust.attest import attest_smoke

    reg, repo = Registry(plain_registry.host), f"sig-{uuid.uuid4().hex[:8]}"
    repository = f"{plain_registry.host}/{repo}"
    digest = fake_image(reg, repo, "cpu", "tested at night")
    sign_with(keypair, "cosign", repository, digest, smoke_ok=None)  # published without a smoke result
    config = json.loads(reg.manifest(repo, "cpu")[0])["config"]["digest"]
    key = trust_keys.load_private((keypair / "cosign.key").read_bytes(), PASSPHRASE.encode(), "k")
    result = {"backend": "cpu", "ok": True, "image_id": "sha256:" + "9" * 64, "date": "2026-12-02T03:00:00Z",
              "checks": [{"name": "device", "ok": True, "message": ""}]}
    with pytest.raises(TrustError, match="smoke result is for image"):
        attest_smoke(repository, "cpu", result, key)
    with pytest.raises(TrustError, match="smoke result is for image"):  # --force attests a failed result, never another image's
        attest_smoke(repository, "cpu", result, key, force=True)
    for unbound in ({k: v for k, v in result.items() if k != "image_id"}, {**result, "image_id": None},
                    {**result, "image_id": config + "\n"}):
        with pytest.raises(InvalidInput, match="names no image"):
            attest_smoke(repository, "cpu", unbound, key)
    assert verify_cli(f"{repository}:cpu", keypair / "cosign.pub").returncode == 1
    attest_smoke(repository, "cpu", {**result, "image_id": config}, key)
    statements = held_out_attestations(reg, repo, digest, (keypair / "cosign.pub").read_bytes())
    assert [s["predicate"]["platform"] for s in statements] == ["linux/amd64"]
    proc = verify_cli(f"{repository}:cpu", keypair / "cosign.pub")
    assert proc.returncode == 0, proc.stderr


def test_no_secret_reaches_the_registry(plain_registry, keypair):
    """After every test above signed into it: neither the passphrase nor the private key is stored anywhere."""
    from cryptography.hazmat.primitives import serialization

    from envbuild.ship.trust import keys

    key = keys.load_private((keypair / "cosign.key").read_bytes(), PASSPHRASE.encode(), "k")
    der = key._key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    scalar = key._key.private_numbers().private_value.to_bytes(32, "big")
    pem_body = b"".join((keypair / "cosign.key").read_bytes().splitlines()[1:-1])
    needles = [PASSPHRASE.encode(), der, scalar, pem_body[:48], base64.b64encode(der)[:48], scalar.hex().encode()]
    files = [f for f in Path(plain_registry.workdir, "data").rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        assert not any(n in data for n in needles), f


# --- the real image, published on the engine -----------------------------------------------------------------


@pytest.mark.docker
def test_publish_signs_the_cpu_image_pull_and_run_verify(keypair, cpu_image, cpu_smoke, docker_client, tmp_path_factory,
                                                          auth_registry, no_leftover_containers):
    reg_proc = auth_registry  # the session's (test_publish pushed the same layers there: the engine mounts them)
    work = tmp_path_factory.mktemp("sign-publish")
    (work / "docker-config").mkdir()
    uid = uuid.uuid4().hex[:10]
    source, repo = f"envbuild-test/sign-src-{uid}:cpu", f"{reg_proc.host}/envbuild-{uid}"
    local_repo = f"envbuild-test/sign-pulled-{uid}"
    docker_client.images.get(cpu_image.image_id).tag(*source.split(":"))
    created = [source]
    env = {"DOCKER_CONFIG": str(work / "docker-config"), "ENVBUILD_REGISTRY_USER": reg_proc.user,
           "ENVBUILD_REGISTRY_PASSWORD": reg_proc.password}
    matrix = ["--matrix", MATRIX, *cpu_image.overrides]
    try:
        signing = {**env, "ENVBUILD_KEY_PASSWORD": PASSPHRASE}
        proc = envbuild(["publish", "--backend", "cpu", *matrix, "--image", source, "--registry", repo,
                         "--smoke-json", str(cpu_smoke), "--sign-key", str(keypair / "cosign.key")], signing, cwd=work)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        entry = json.loads((work / "envbuild-manifest.json").read_text())["images"]["cpu"]
        created += entry["tags"]
        digest = entry["digest"]
        assert "signed and attested" in proc.stdout and entry["signed"]["signatures"][0]["digest"] == digest

        reg, path = Registry(reg_proc.host, (reg_proc.user, reg_proc.password)), f"envbuild-{uid}"
        public = (keypair / "cosign.pub").read_bytes()
        for ref in entry["tags"]:
            assert held_out_verify(reg, path, ref.rsplit(":", 1)[1], public) == digest
        statements = {s["predicateType"]: s for s in held_out_attestations(reg, path, digest, public)}
        assert set(statements) == {"https://cyclonedx.org/bom", SMOKE, "https://slsa.dev/provenance/v1"}
        smoke_claim = statements[SMOKE]["predicate"]
        assert smoke_claim["ok"] and smoke_claim["device"] == "cpu" and smoke_claim["image_id"] == cpu_image.image_id
        assert len(smoke_claim["model"]["sha256"]) == 64 and smoke_claim["checks"] and all(c["ok"] for c in smoke_claim["checks"])
        assert smoke_claim["versions"]["transformers"] and smoke_claim["platform"] == entry["platform"]
        provenance = statements["https://slsa.dev/provenance/v1"]["predicate"]
        deps = {d["name"]: d for d in provenance["buildDefinition"]["resolvedDependencies"]}
        assert {"base image", "lock", "Dockerfile"} <= set(deps)
        components = {c["name"] for c in statements["https://cyclonedx.org/bom"]["predicate"]["components"]}
        assert "torch" in components

        # the same content again: what the content tag names verifies with the key (its digest, as read), so the
        # tags move to it and nothing is pushed or signed again
        again = envbuild(["publish", "--backend", "cpu", *matrix, "--image", source, "--registry", repo,
                          "--smoke-json", str(cpu_smoke), "--sign-key", str(keypair / "cosign.key")], signing, cwd=work)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "unchanged since" in again.stderr and "does not verify" not in again.stdout + again.stderr, again.stderr
        assert json.loads((work / "envbuild-manifest.json").read_text())["images"]["cpu"]["digest"] == digest

        # pull with the key: verified before a layer moves, then the digest that arrived is the signed one
        pull_args = ["pull", "--backend", "cpu", *matrix, "--set", f"image.repository={local_repo}", "--registry", repo,
                     "--key", str(keypair / "cosign.pub")]
        created.append(f"{local_repo}:cpu")
        pulled = envbuild(pull_args, env)
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert "signed by" in pulled.stderr and digest in pulled.stdout

        # run with the key: the pulled image verifies; a locally built one has nothing to verify and is refused
        ran = envbuild(["run", "--backend", "cpu", *matrix, "--set", f"image.repository={local_repo}", "--no-workdir",
                        "--key", str(keypair / "cosign.pub"), "--", "python", "-c", "print('ran-verified')"], env)
        assert ran.returncode == 0 and "ran-verified" in ran.stdout, ran.stderr
        # an image of its own (a new id, so no registry digest the session's image may carry from other tests)
        container = docker_client.containers.create(source, command=["true"])
        try:
            local = f"envbuild-test/sign-local-{uid}:cpu"
            container.commit(*local.split(":"), changes=[f"LABEL dev.envbuild.test-local={uid}"])
            created.append(local)
        finally:
            container.remove(force=True)
        refused = envbuild(["run", "--backend", "cpu", *matrix, "--image", local, "--no-workdir",
                            "--key", str(keypair / "cosign.pub"), "--", "python", "-c", "print('must-not-run')"], env)
        assert refused.returncode == 1 and "(unsigned)" in refused.stderr and "must-not-run" not in refused.stdout
        skipped = envbuild(["run", "--backend", "cpu", *matrix, "--image", local, "--no-workdir",
                            "--key", str(keypair / "cosign.pub"), "--insecure-skip-verify", "--", "true"], env)
        assert skipped.returncode == 0 and "NOT checked" in skipped.stderr, skipped.stderr

        # the pinned tag moved to an unsigned manifest: pull refuses before tagging anything
        pinned = entry["tags"][1].rsplit(":", 1)[1]
        fake_image(reg, path, pinned, "not the published image")
        docker_client.images.remove(f"{local_repo}:cpu")
        moved = envbuild(pull_args, env)
        assert moved.returncode == 1 and "(unsigned)" in moved.stderr, moved.stderr
        assert f"{local_repo}:cpu" not in {t for i in docker_client.images.list() for t in i.tags}

        # nothing secret anywhere: output, manifest, registry storage
        everything = proc.stdout + proc.stderr + pulled.stdout + pulled.stderr + (work / "envbuild-manifest.json").read_text()
        assert PASSPHRASE not in everything and "PRIVATE KEY" not in everything
        pem_body = b"".join((keypair / "cosign.key").read_bytes().splitlines()[1:-1])
        for f in Path(reg_proc.workdir, "data").rglob("*"):
            if f.is_file():
                assert PASSPHRASE.encode() not in f.read_bytes() and pem_body[:48] not in f.read_bytes()
    finally:
        import docker

        for ref in created:
            try:
                docker_client.images.remove(ref, noprune=False)
            except docker.errors.ImageNotFound:
                pass
