"""Property tests of every parser of outside input: image references, platforms, the driver and version strings the
kernel and nvidia-smi print, `--set` paths and values, manifest and index JSON, smoke JSON and the matrix file.

For any input: no exception but envbuild's own (core/errors.py); what is accepted reads back the same where a
printer exists; no message carries a raw control character. Example counts stay modest (the unit suite runs on two
cores); with CI set, the examples are derandomized, so a CI failure reproduces."""

from __future__ import annotations

import json
import os
import re

import yaml
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st
from support.constants import FIXED

from envbuild.core.errors import EnvbuildError
from envbuild.core.text import unsafe_char

EXAMPLES = int(os.environ.get("ENVBUILD_PROPERTY_EXAMPLES", "50"))  # raise it for a longer search, locally
PROPS = settings(max_examples=EXAMPLES, deadline=None,
                 derandomize=bool(os.environ.get("CI")),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.filter_too_much])
HEAVY = settings(PROPS, max_examples=max(10, EXAMPLES // 2))  # a whole matrix, or a file, per example

# Text with what hostile input carries: controls, escapes, bidi overrides, surrogates' neighbours, separators.
HOSTILE = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(list("\x1b\x9b\r\n\t\x00\x07\u202e\u2028/:@.-_"))),
                  max_size=80)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | HOSTILE,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE, inner, max_size=4), max_leaves=12)


def clean(text: str) -> bool:
    """No raw control character, line separator, bidi control or lone surrogate (core/text.py's policy); the line
    breaks between a matrix's problems allowed."""
    return unsafe_char(text, allow="\n") is None


def own_error(call):
    """`call()`'s value, or None when it raised one of envbuild's errors (whose message must be clean)."""
    try:
        return call()
    except EnvbuildError as exc:
        assert clean(str(exc)), repr(str(exc))
        return None


# --- image references ---------------------------------------------------------------------------------------------

REF_TEXT = st.one_of(
    HOSTILE,
    st.from_regex(r"\A(?:[a-z0-9]{1,8}(?:\.[a-z0-9]{1,8})?(?::[0-9]{1,5})?/)?[a-z0-9]{1,8}(?:[._-][a-z0-9]{1,8})?"
                  r"(?:/[a-z0-9]{1,8})?(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,10})?(?:@sha256:[0-9a-f]{64})?\Z"),
)


@PROPS
@given(REF_TEXT)
@example("debian:12")
@example("localhost:5000/x@sha256:" + "a" * 64)
def test_an_image_reference_parses_or_is_refused_and_round_trips(text):
    from envbuild.core.imageref import Reference

    ref = own_error(lambda: Reference.parse(text))
    if ref is None:
        return
    assert Reference.parse(ref.full) == ref
    assert Reference.parse(str(ref)) == ref
    assert clean(ref.full)


# --- platforms ----------------------------------------------------------------------------------------------------

PLATFORM_TEXT = st.one_of(HOSTILE, st.builds("/".join, st.lists(st.sampled_from(
    ["linux", "LINUX", "windows", "amd64", "x86_64", "aarch64", "arm64", "v8", "v7", "arm", "", "s390x", "\x1b"]),
    min_size=1, max_size=4)))


@PROPS
@given(PLATFORM_TEXT)
def test_a_platform_parses_or_is_refused_and_round_trips(text):
    from envbuild.core.platform import Platform, canonical, parse_list

    found = own_error(lambda: Platform.parse(text))
    if found is not None:
        assert Platform.parse(str(found)) == found and canonical(str(found)) == str(found)
    normal = Platform.normal(text)
    if normal is not None:
        assert Platform.normal(str(normal)) == normal
    assert canonical(canonical(text)) == canonical(text)
    own_error(lambda: parse_list(text))


# --- driver and version strings, as the kernel and nvidia-smi print them ---------------------------------------------

VERSIONS = st.from_regex(r"\A[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{2})?\Z")


@PROPS
@given(VERSIONS, st.sampled_from(["x86_64", "aarch64", "ppc64le"]), st.booleans(), HOSTILE)
def test_the_kernels_nvidia_line_gives_its_version(version, machine, open_module, tail):
    from envbuild.matrix.stacks.cuda import nvidia_version

    module = f"Kernel Module for {machine}" if open_module else "Kernel Module"
    line = f"NVRM version: NVIDIA UNIX {machine} {module}  {version}  Sat Aug 19 01:15:15 UTC 2023\n"
    assert nvidia_version(line + "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" + tail.replace("Kernel", "")) == version
    assert nvidia_version(version + "\n") == version  # /sys/module/nvidia/version


@PROPS
@given(HOSTILE)
def test_any_text_gives_a_clean_version_or_none(text):
    from envbuild.matrix.stacks.cuda import compute_caps, nvidia_version

    version = nvidia_version(text)
    assert version is None or re.fullmatch(r"[0-9]{1,5}(?:\.[0-9]{1,5}){1,2}", version)
    assert all(re.fullmatch(r"sm_[0-9]{2,4}", c) for c in compute_caps(text))


@PROPS
@given(st.lists(st.from_regex(r"\A[0-9]{1,2}\.[0-9]\Z"), min_size=1, max_size=8))
def test_nvidia_smis_compute_caps_read_back(caps):
    from envbuild.matrix.stacks.cuda import compute_caps

    assert compute_caps("\n".join(caps) + "\n") == ["sm_" + c.replace(".", "") for c in caps]


@HEAVY
@given(HOSTILE, st.sampled_from(["ascend", "habanalabs", "neuron", "amdgpu", "nvidia"]))
def test_a_host_file_full_of_anything_gives_a_printable_version(tmp_path_factory, text, driver):
    from envbuild.matrix import stacks

    root = tmp_path_factory.mktemp("root")
    for rel in ("usr/local/Ascend/driver/version.info", f"sys/module/{driver}/version", "proc/driver/nvidia/version"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"Version={text}\n" if "Ascend" in rel else text, encoding="utf-8", errors="surrogatepass")
    found = stacks.read_driver(driver, root, path_env="", runner=lambda argv: None)
    assert found.version is None or (found.version.isascii() and found.version.isprintable() and len(found.version) <= 64)


# --- --set paths and values, and the matrix file ----------------------------------------------------------------------

MATRIX_TEXT = FIXED.read_text(encoding="utf-8")
PATHS = st.one_of(HOSTILE, st.builds(".".join, st.lists(st.sampled_from(
    ["backends", "cpu", "cuda", "run", "env", "torch", "version", "index_url", "base_image", "platforms", "transformers",
     "image", "apt", "", "X", "\x1b[2J"]), min_size=1, max_size=5)))


@HEAVY
@given(PATHS, HOSTILE)
def test_a_set_of_any_path_and_value_validates_or_is_refused(path, value):
    from envbuild.matrix import loads

    own_error(lambda: loads(MATRIX_TEXT, overrides=[f"{path}={value}"]))


@PROPS
@given(st.from_regex(r"\A[A-Z][A-Z0-9_]{0,10}\Z").filter(lambda k: not k.startswith("ENVBUILD_")),
       st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._/-]{0,30}\Z"))
def test_a_set_env_value_that_is_accepted_reads_back(key, value):
    from envbuild.matrix import loads

    m = own_error(lambda: loads(MATRIX_TEXT, overrides=[f"backends.cpu.env.{key}={value}"]))
    assume(m is not None)  # a reserved name (a cache, a secret's) is refused, said so
    assert dict(m.backend("cpu").env)[key] == value


def _mutations(tree):
    """Every (path) of a YAML tree: a leaf or a section to replace."""
    out = []

    def walk(node, path):
        out.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(tree, ())
    return out


TREE = yaml.safe_load(MATRIX_TEXT)
WHERE = _mutations(TREE)


@HEAVY
@given(st.sampled_from(WHERE), JSON)
def test_a_matrix_file_with_any_value_anywhere_validates_or_is_refused(where, value):
    import copy

    from envbuild.matrix import loads

    tree = copy.deepcopy(TREE)
    if not where:
        tree = value
    else:
        node = tree
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
    text = yaml.safe_dump(tree, allow_unicode=True)
    own_error(lambda: loads(text, source="matrix.yaml"))


@PROPS
@given(HOSTILE)
def test_any_matrix_text_validates_or_is_refused(text):
    from envbuild.matrix import loads

    own_error(lambda: loads(text, source="matrix.yaml"))


# --- manifest, index and smoke JSON -----------------------------------------------------------------------------------

DIGEST = "sha256:" + "a" * 64


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


@PROPS
@given(JSON)
def test_a_registry_index_and_a_package_index_page_of_any_shape_are_read_or_refused(doc):
    from envbuild.core.regclient import Manifest, sha256
    from envbuild.maintain.sources.index import _from_json

    raw = json.dumps({"manifests": doc} if not isinstance(doc, dict) else doc).encode()
    platforms = own_error(lambda: Manifest("application/vnd.oci.image.index.v1+json", sha256(raw), raw).platforms())
    assert platforms is None or all(isinstance(k, str) and isinstance(v, str) for k, v in platforms.items())
    own_error(lambda: _from_json({"files": doc}, "https://idx.example/simple/x/"))
    own_error(lambda: _from_json(doc, "https://idx.example/simple/x/"))


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
