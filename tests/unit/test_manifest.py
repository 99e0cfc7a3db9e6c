"""Unit tests of envbuild/ship/manifest.py: the manifest's shape, as loaded and as `publish --index-from` joins it."""

from __future__ import annotations

import json
import pytest
from support.constants import MATRIX
from envbuild.core.errors import InvalidInput
from hypothesis import given, strategies as st
from support.constants import FIXED
from support.properties import FILES, HEAVY, HOSTILE, JSON, KINDS, SECRET, clean, file_bytes, own_error, plant


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


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

PLATFORM_TEXT = st.one_of(HOSTILE, st.builds("/".join, st.lists(st.sampled_from(
    ["linux", "LINUX", "windows", "amd64", "x86_64", "aarch64", "arm64", "v8", "v7", "arm", "", "s390x", "\x1b"]),
    min_size=1, max_size=4)))


MATRIX_TEXT = FIXED.read_text(encoding="utf-8")


def _write(tmp_path_factory, doc) -> object:
    path = tmp_path_factory.mktemp("json") / "doc.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@HEAVY
@given(st.one_of(JSON, st.builds(lambda e: {"schema": 1, "images": {"cpu": e}}, JSON),
                 st.builds(lambda p: {"schema": 1, "images": {"cpu": {"digest": DIGEST, "repository": "reg.example/x",
                                                                      "platforms": p}}}, JSON)))
def test_a_manifest_loads_or_is_refused_and_an_index_joins_or_is_refused(tmp_path_factory, doc):
    from envbuild.matrix import loads
    from envbuild.ship import manifest
    from envbuild.ship.index import _joined

    path = _write(tmp_path_factory, doc)
    loaded = own_error(lambda: manifest.load(path, must_exist=True))
    if loaded is None:
        return
    backend = loads(MATRIX_TEXT).backend("cpu")
    own_error(lambda: _joined(backend, "reg.example/x", [loaded], (path,)))


CHECK = st.fixed_dictionaries({"name": HOSTILE, "ok": st.booleans()}, optional={"message": HOSTILE, "skipped": JSON})


SMOKE = st.one_of(JSON, st.fixed_dictionaries(
    {"backend": st.sampled_from(["cpu", "cuda"]), "ok": st.booleans(), "checks": st.lists(CHECK, max_size=3)},
    optional={"image_id": JSON, "platform": st.one_of(JSON, PLATFORM_TEXT), "emulated": JSON,
              "seconds": st.one_of(st.none(), st.floats(0, 1e6)), "date": st.one_of(st.none(), HOSTILE),
              "error": st.one_of(st.none(), HOSTILE), "image": st.one_of(st.none(), HOSTILE)}))


@HEAVY
@given(st.one_of(SMOKE, st.lists(SMOKE, max_size=3)))
def test_smoke_json_is_read_or_refused_and_what_the_manifest_keeps_reads_back(tmp_path_factory, doc):
    from envbuild.core.shape import problem
    from envbuild.ship import manifest

    path = _write(tmp_path_factory, doc)
    results = own_error(lambda: manifest.load_smoke_results(path))
    for result in (results or {}).values():
        summary = manifest.smoke_summary(result, path)
        assert problem(summary, manifest.SMOKE_SUMMARY) is None  # what publish records, a manifest load accepts


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

def test_index_from_manifests_of_the_wrong_shape_exit_2(tmp_path):
    from envbuild.matrix import load
    from envbuild.ship.index import _joined

    b = load(MATRIX).backend("cpu")
    for platforms in (["linux/amd64"], {"linux/amd64": "sha256:x"}, {"linux/amd64": {"digest": 5}},
                      {"linux/\x1b[2J": {"digest": "sha256:" + "a" * 64}}):
        doc = {"images": {"cpu": {"repository": "reg/x", "platforms": platforms}}}
        with pytest.raises(InvalidInput):
            _joined(b, "reg/x", [doc], (tmp_path / "m.json",))


# --- Files a pull request brings: the manifest read as untrusted (issue 51) ------------------------------------

GOOD = {"schema": 1, "images": {"cpu": {"digest": DIGEST, "repository": "ghcr.io/org/envbuild", "backend": "cpu",
                                        "tags": ["ghcr.io/org/envbuild:cpu", "ghcr.io/org/envbuild:cpu-2.15.0"]}}}


@pytest.mark.parametrize("field, value", [
    ("repository", "ghcr.io/org/x\nrm -rf /"), ("repository", "ghcr.io/org/$(id)"), ("repository", "ghcr.io/org/x y"),
    ("repository", "ghcr.io/org/'x'"), ("repository", "ghcr.io/org/x:cpu"), ("repository", "ghcr.io/org/\uff58"),
    ("tags", ["ghcr.io/org/x:cpu\n$(id)"]), ("tags", ["ghcr.io/org/x:\u0663"]),
])
def test_a_manifest_whose_repository_or_tags_are_no_image_reference_is_refused(tmp_path, field, value):
    """What pick prints for scripts comes from the manifest: a repository with a newline, $(), quotes or spaces
    is refused when the file is read, exit 2, escaped."""
    from envbuild.ship import manifest

    doc = json.loads(json.dumps(GOOD))
    doc["images"]["cpu"][field] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput, match=rf"images\.cpu\.{field}: .* is not an image re"):
        manifest.load(path, must_exist=True)
    path.write_text(json.dumps(GOOD))
    assert manifest.load(path, must_exist=True) == GOOD


@pytest.mark.parametrize("kind", ["link out", "loop", "fifo", "link to nothing"])
def test_a_manifest_that_is_no_regular_file_in_its_folder_is_refused_unquoted(tmp_path, kind):
    from envbuild.ship import manifest

    (tmp_path / "project").mkdir()
    path = tmp_path / "project" / "envbuild-manifest.json"
    plant(path, kind, b"", tmp_path / "private.json")
    with pytest.raises(InvalidInput) as caught:
        manifest.load(path, must_exist=True)
    assert "give a regular file" in str(caught.value) and SECRET not in str(caught.value)


@FILES
@given(file_bytes(json.dumps(GOOD, indent=2).encode()), st.sampled_from(KINDS))
def test_any_manifest_file_loads_or_is_refused_and_prints_no_secret(tmp_path_factory, data, kind):
    from envbuild.ship import manifest

    tmp = tmp_path_factory.mktemp("manifest")
    (tmp / "project").mkdir()
    plant(tmp / "project" / "m.json", kind, data, tmp / "private.json")
    try:
        doc = manifest.load(tmp / "project" / "m.json", must_exist=True)
    except InvalidInput as exc:
        assert SECRET not in str(exc) and clean(str(exc)), str(exc)
        return
    for entry in doc["images"].values():  # what pick may print is an image reference
        assert entry.get("repository") is None or entry["repository"].isascii() and entry["repository"].isprintable()
