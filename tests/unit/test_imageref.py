"""The one image reference type against the table of forms the engine test checks against the engine."""

import re

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
# --- the edges of the grammar and the methods (mutation testing found these untested) ---------------------------

HEX64 = "a" * 64


def test_the_name_limit_is_255_characters_at_the_boundary():
    from envbuild.core.imageref import NAME_TOTAL_LENGTH_MAX

    assert NAME_TOTAL_LENGTH_MAX == 255  # distribution/reference: NameTotalLengthMax
    at = "ghcr.io/" + "a" * (255 - len("ghcr.io/"))
    assert len(at) == 255 and Reference.parse(at + ":cpu").name == at
    with pytest.raises(InvalidInput, match="longer than 255 characters") as exc:
        Reference.parse(at + "b:cpu")
    assert f"{(at + 'b:cpu')[:60]!r}...: the repository" in str(exc.value)  # quoted, capped at 60


def test_a_64_hex_name_would_read_as_an_image_id():
    with pytest.raises(InvalidInput, match="image id"):
        Reference.parse(HEX64)
    assert Reference.parse("a" * 63).path == "library/" + "a" * 63
    assert Reference.parse(HEX64 + "b").path == "library/" + HEX64 + "b"


def test_parse_refuses_nothing_and_upper_case_names():
    for empty in ("", None, 5):
        with pytest.raises(InvalidInput, match="an empty reference"):
            Reference.parse(empty)
    with pytest.raises(InvalidInput, match="base image: an empty reference"):
        Reference.parse("", "base image")
    with pytest.raises(InvalidInput, match="must be lowercase"):
        Reference.parse("Debian:12")
    with pytest.raises(InvalidInput, match="must be lowercase"):
        Reference.parse("Org/x:1")
    assert Reference.parse("Ghcr.io/org/x").domain == "Ghcr.io"  # a host is not a repository name


@pytest.mark.parametrize("digest", ["sha256:" + HEX64, "sha384:" + "b" * 96, "sha512:" + "c" * 128])
def test_each_registered_digest_algorithm_at_its_length(digest):
    ref = Reference.parse("debian@" + digest)
    assert ref.digest == digest and ref.tag is None
    assert Reference.parse("ghcr.io/org/x").with_digest(digest).digest == digest


@pytest.mark.parametrize("digest", ["sha256:" + "a" * 63, "sha256:" + "a" * 65, "sha256:" + "A" * 64,
                                    "sha384:" + HEX64, "sha512:" + "c" * 96, "md5:" + "a" * 32, "sha256:" + HEX64 + "\n",
                                    "sha256:", HEX64, "sha256:" + "g" * 64])
def test_with_digest_and_parse_refuse_a_digest_go_digest_would(digest):
    ref = Reference.parse("ghcr.io/org/x:cpu")
    with pytest.raises(InvalidInput, match="is not a digest"):
        ref.with_digest(digest)
    if re.fullmatch(r"[a-z0-9]+:[0-9a-fA-F]{32,}", digest):  # the grammar's shape: go-digest's rules refuse it
        with pytest.raises(InvalidInput, match="the digest is not sha256:, sha384: or sha512:"):
            Reference.parse("ghcr.io/org/x@" + digest)


def test_with_digest_keeps_the_tag_and_with_tag_drops_the_digest():
    ref = Reference.parse("ghcr.io/org/x:cpu").with_digest("sha256:" + HEX64)
    assert ref.full == f"ghcr.io/org/x:cpu@sha256:{HEX64}" and str(ref) == ref.full
    assert ref.with_tag("gpu").full == "ghcr.io/org/x:gpu" and ref.with_tag("gpu").digest is None


@pytest.mark.parametrize("tag, ok", [("cpu", True), ("_x", True), ("A" * 128, True), ("A" * 129, False), ("", False),
                                     ("-x", False), (".x", False), ("cpu\n", False), ("a/b", False)])
def test_with_tag_accepts_docker_tags_only(tag, ok):
    ref = Reference.parse("debian")
    if ok:
        assert ref.with_tag(tag).tag == tag
    else:
        with pytest.raises(InvalidInput, match="is not a tag"):
            ref.with_tag(tag)


def test_the_default_tag_is_latest_only_without_tag_or_digest():
    assert Reference.parse("debian").tagged().full == "docker.io/library/debian:latest"
    assert Reference.parse("debian:12").tagged().tag == "12"
    pinned = Reference.parse("debian@sha256:" + HEX64)
    assert pinned.tagged() == pinned and pinned.tagged().tag is None
    assert Reference.parse("debian").tag is None  # parse itself adds none


def test_the_forms_and_the_registry_host():
    from envbuild.core.imageref import api_host, check_repository, is_host, is_loopback, with_tags

    ref = Reference.parse("index.docker.io/library/debian:12")
    assert (ref.domain, ref.path, ref.name, ref.familiar_name) == ("docker.io", "library/debian",
                                                                    "docker.io/library/debian", "debian")
    assert Reference.parse("org/sub/x").familiar_name == "org/sub/x"
    assert Reference.parse("library/a/b").familiar_name == "library/a/b"  # only library/NAME is shortened
    assert Reference.parse("localhost").full == "docker.io/library/localhost"  # a host needs a path after it
    assert ref.api_host == "registry-1.docker.io" and api_host("ghcr.io") == "ghcr.io"
    assert Reference.parse("ghcr.io/org/x").api_host == "ghcr.io"
    assert [is_host(h) for h in ("ghcr.io", "host:5000", "localhost", "org", "Localhost")] == [True, True, True, False, False]
    assert [is_loopback(h) for h in ("localhost", "localhost:5000", "127.0.0.1:5000", "127.9.9.9", "[::1]", "::1",
                                     "10.0.0.1:5000", "ghcr.io", "localhost.example")] == [
        True, True, True, True, True, True, False, False, False]
    assert ref.same_repository("debian:11") and ref.same_repository(Reference.parse("docker.io/library/debian"))
    assert not ref.same_repository("ghcr.io/library/debian")
    assert check_repository("ghcr.io/org/x/") == "ghcr.io/org/x" and check_repository("docker.io/org/x") == "org/x"
    assert with_tags("ghcr.io/o/y", ["debian", "ghcr.io/org/x:cpu"]) == ["ghcr.io/o/y:latest", "ghcr.io/o/y:cpu"]


def test_a_repository_refusal_says_what_to_give():
    with pytest.raises(InvalidInput, match=r"'ghcr\.io/envbuild'"):
        Reference.repository("ghcr.io")
    with pytest.raises(InvalidInput, match="expected a repository such as"):
        Reference.repository("ghcr.io/Org/x")
    with pytest.raises(InvalidInput, match="without a tag or digest"):
        Reference.repository("ghcr.io/org/x:1", "--registry")
    with pytest.raises(InvalidInput, match="^--push-to 'h:1' names a registry"):
        Reference.repository("h:1", "--push-to")


def test_mirror_without_rules_and_the_first_rule_that_matches():
    assert mirror("Not A Ref", []) == "Not A Ref"  # no rule: not even read
    rules = ["docker.io/library=a.example/lib", "docker.io=b.example"]
    assert mirror("debian:12", rules) == "a.example/lib/debian:12" and mirror("org/x", rules) == "b.example/org/x"
    assert mirror("docker.io/library/debian", ["docker.io/library/debian=a.example/d"]) == "a.example/d"
    with pytest.raises(InvalidInput, match="the base image would become"):
        mirror("debian:12", ["docker.io=a.example/" + "x" * 250])
    assert parse_mirror("index.docker.io/x=localhost:5000/") == ("docker.io/x", "localhost:5000")


def test_the_public_names_and_the_value_type():
    from envbuild.core import imageref

    assert set(imageref.__all__) == {"DIGEST", "DOCKER_HUB", "TAG", "Reference", "api_host", "check_repository",
                                     "is_host", "mirror", "parse_mirror", "with_tags"}
    assert all(hasattr(imageref, n) for n in imageref.__all__)
    bare = Reference("docker.io", "library/x")
    assert bare.tag is None and bare.digest is None and bare.full == "docker.io/library/x"
    assert len({Reference.parse("debian"), Reference.parse("docker.io/library/debian")}) == 1  # frozen: hashable
    with pytest.raises(InvalidInput, match="is not an image reference such as"):
        Reference.parse("Foo Bar")  # not a reference even in lower case: the general refusal


def test_a_quoted_reference_is_capped_at_200_characters():
    with pytest.raises(InvalidReference) as caught:
        Reference.parse("X" * 10_000)
    assert str(caught.value).count("X") == 200 and "(9800 more characters)" in str(caught.value)
