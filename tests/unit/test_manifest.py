"""Unit tests of envbuild/ship/manifest.py: the manifest's shape, as loaded and as `publish --index-from` joins it."""

from __future__ import annotations

import json
import pytest
from support.constants import MATRIX
from envbuild.core.errors import InvalidInput


# --- Signed is not well-formed: the shape of what is read back is checked before use (from test_shapes.py)

DIGEST = "sha256:" + "a" * 64


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
