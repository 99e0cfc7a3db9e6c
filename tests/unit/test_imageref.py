"""The one image reference type against the table of forms the engine test checks against the engine."""

import pytest

from envbuild.core.errors import InvalidInput
from envbuild.core.imageref import InvalidReference, Reference, mirror, parse_mirror
from support.refforms import FORMS
from hypothesis import example, given, strategies as st
from support.properties import HOSTILE, PROPS, clean, own_error


@pytest.mark.parametrize("form,full", FORMS, ids=[f[0][:40] or "empty" for f in FORMS])
def test_reference_forms(form, full):
    if full is None:
        with pytest.raises(InvalidInput):
            Reference.parse(form)
        return
    ref = Reference.parse(form)
    assert ref.full == full
    assert Reference.parse(str(ref)) == ref  # the familiar form reads back the same
    assert Reference.parse(ref.full) == ref


@pytest.mark.parametrize("form,familiar", [
    ("docker.io/library/debian:12", "debian:12"), ("index.docker.io/org/x", "org/x"),
    ("library/debian", "debian"), ("ghcr.io/org/x:1", "ghcr.io/org/x:1"), ("localhost:5000/x", "localhost:5000/x"),
])
def test_familiar_form(form, familiar):
    assert str(Reference.parse(form)) == familiar


@pytest.mark.parametrize("form,registry", [
    ("ghcr.io/org/envbuild", "ghcr.io"), ("org/envbuild", "docker.io"), ("debian:12", "docker.io"),
    ("ghcr.io:cpu", "docker.io"), ("localhost:5000/envbuild", "localhost:5000"), ("index.docker.io/x", "docker.io"),
])
def test_registry_is_where_docker_pushes(form, registry):
    assert Reference.parse(form).registry == registry


@pytest.mark.parametrize("value", ["ghcr.io", "ghcr.io/", "localhost", "localhost:5000", "registry:5000",
                                   "my.registry.example.com"])
def test_a_bare_registry_host_is_not_a_repository(value):
    with pytest.raises(InvalidInput, match="names a registry but no repository"):
        Reference.repository(value)


@pytest.mark.parametrize("value", ["ghcr.io/org/x:cpu", f"ghcr.io/org/x@sha256:{'a' * 64}", "Org/x", "ghcr.io//x"])
def test_a_repository_has_no_tag_and_is_valid(value):
    with pytest.raises(InvalidInput):
        Reference.repository(value)


def test_repository_forms():
    assert Reference.repository("ghcr.io/org/envbuild/").name == "ghcr.io/org/envbuild"
    assert Reference.repository("envbuild").name == "docker.io/library/envbuild"
    assert Reference.repository("myorg/envbuild").with_tag("cpu").full == "docker.io/myorg/envbuild:cpu"


@pytest.mark.parametrize("ref,rules,out", [
    ("debian:12", ["docker.io=mirror.example.com:5000"], "mirror.example.com:5000/library/debian:12"),
    ("docker.io/library/debian:12", ["index.docker.io=m.example/hub/"], "m.example/hub/library/debian:12"),
    ("nvcr.io/nvidia/pytorch:24.01", ["docker.io=m.example"], "nvcr.io/nvidia/pytorch:24.01"),
    ("nvcr.io/nvidia/pytorch:24.01", ["nvcr.io/nvidia=localhost:5000/nv"], "localhost:5000/nv/pytorch:24.01"),
    ("debian:12", ["docker.io/library/debian=localhost:5000/deb"], "localhost:5000/deb:12"),
    ("debiantools:1", ["docker.io/library/debian=localhost:5000/deb"], "debiantools:1"),
])
def test_mirror(ref, rules, out):
    assert mirror(ref, rules) == out


@pytest.mark.parametrize("rule", ["docker.io", "docker.io=", "=m.example", "docker.io=mirror", "library=m.example",
                                  "docker.io=m.example/UP", "docker.io=m example", "docker.io=-m.example"])
def test_mirror_rules_refused(rule):
    with pytest.raises(InvalidInput, match="--mirror"):
        parse_mirror(rule)


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

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


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

def test_a_digest_with_a_trailing_newline_is_no_digest():
    from envbuild.core.imageref import DIGEST, TAG

    assert DIGEST.match("sha256:" + "a" * 64) and not DIGEST.match("sha256:" + "a" * 64 + "\n")
    assert not TAG.match("cpu\n")


@pytest.mark.parametrize("text", ["debian:１２", "debian:é", "debian:1٢", "ghcr.io:５０００/x"])
def test_tags_and_ports_are_ascii_as_go_reads_them(text):
    """distribution/reference's \\w is Go's, ASCII; Python's would take other scripts' digits and letters."""
    with pytest.raises(InvalidReference):
        Reference.parse(text)


def test_a_refused_reference_is_quoted_capped_and_its_password_masked():
    with pytest.raises(InvalidReference) as caught:
        Reference.parse("X" * 10_000)
    assert len(str(caught.value)) < 500 and "more characters" in str(caught.value)
    with pytest.raises(InvalidInput) as caught:
        parse_mirror("docker.io=bob:S3cret@mirror.corp:5000")
    assert "S3cret" not in str(caught.value) and "docker.io=***@mirror.corp:5000" in str(caught.value)
