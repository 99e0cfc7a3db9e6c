"""Signed is not well-formed: the attestation predicates verify reads, the smoke results a manifest keeps and the
manifests `publish --index-from` joins are checked for shape (core/shape.py) before use. A wrong shape is refused
with a message naming where (exit 1 for what a registry serves, exit 2 for a file given), never exit 70."""

from __future__ import annotations

import json

import pytest
from support.constants import MATRIX

from envbuild.core.errors import InvalidInput
from envbuild.core.shape import Each, problem

DIGEST = "sha256:" + "a" * 64


def test_the_shape_helper_names_where_a_value_is_wrong():
    shape = {"ok": bool, "checks?": [{"name": str}], "platforms?": Each({"digest": str})}
    assert problem({"ok": True}, shape) is None
    assert problem({"ok": True, "checks": [{"name": "x"}], "platforms": {"a": {"digest": "d"}}}, shape) is None
    assert problem("x", shape) == "the document must be an object"
    assert problem({}, shape) == 'the document has no "ok"'
    assert problem({"ok": 1}, shape) == "ok must be true or false"
    assert problem({"ok": True, "checks": ["a"]}, shape) == "checks[0] must be an object"
    assert problem({"ok": True, "platforms": {"a": "b"}}, shape) == "platforms.a must be an object"
    assert problem(True, int) == "the document must be an integer"  # a bool is no number here
    assert problem(None, (str, None)) is None


@pytest.fixture(scope="module")
def registry(engineless_registry):
    return engineless_registry


def _signed_image(registry, repo: str, predicate) -> tuple[str, bytes]:
    """A tiny image in the registry, signed, with one smoke attestation whose predicate is `predicate`: the image
    reference and the public key."""
    from envbuild.core.regclient import OCI_MANIFEST, Registry
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


def _manifest(tmp_path, platforms: dict, smoke=None):
    entry = {"backend": "cpu", "repository": "reg.example/x", "digest": DIGEST, "platforms": platforms}
    if smoke is not None:
        entry["smoke"] = smoke
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"schema": 1, "images": {"cpu": entry}}))
    return path


@pytest.mark.parametrize("smoke", ["passed", ["ok"], {"ok": "yes"}, {"ok": True, "failed_checks": "x"}, 5])
def test_a_manifest_whose_smoke_entry_has_the_wrong_shape_is_bad_input(smoke, tmp_path):
    from envbuild.ship import manifest

    path = _manifest(tmp_path, {"linux/amd64": {"digest": DIGEST, "smoke": smoke}})
    with pytest.raises(InvalidInput, match=r"images\.cpu\.platforms\.linux/amd64\.smoke"):
        manifest.load(path, must_exist=True)
    path = _manifest(tmp_path, {}, smoke=smoke)
    with pytest.raises(InvalidInput, match=r"images\.cpu\.smoke"):
        manifest.load(path, must_exist=True)


def test_publish_index_from_a_platform_whose_smoke_is_a_string_exits_2(invoke, tmp_path):
    path = _manifest(tmp_path, {"linux/amd64": {"digest": DIGEST, "smoke": "passed"}})
    result = invoke("publish", "--backend", "cpu", "--registry", "reg.example/x", "--index-from", path,
                    "--matrix", MATRIX, "--manifest", tmp_path / "out.json")
    assert result.exit_code == 2, result.output
    assert "smoke must be an object" in result.output and "Traceback" not in result.output, result.output


def test_a_manifest_publish_writes_still_loads(tmp_path):
    from envbuild.ship import manifest

    summary = manifest.smoke_summary({"ok": True, "checks": [{"name": "a", "ok": True}], "seconds": 3, "date": "d",
                                      "image_id": DIGEST, "platform": "linux/amd64", "emulated": False}, None)
    path = _manifest(tmp_path, {"linux/amd64": {"digest": DIGEST, "smoke": summary, "ref": "reg.example/x:cpu-amd64",
                                                "image_id": DIGEST, "size": 5, "versions": None, "requires": None}},
                     smoke=summary)
    assert manifest.load(path, must_exist=True)["images"]["cpu"]["smoke"]["ok"] is True
