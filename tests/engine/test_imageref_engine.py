"""The reference table against the engine itself: every form Docker accepts names, once tagged, the image under
the normalised name envbuild reads, and every form envbuild refuses the engine refuses too."""

from __future__ import annotations

import io
import tarfile

import docker
import pytest
from support.refforms import FORMS

from envbuild.core.imageref import Reference

pytestmark = pytest.mark.docker
SOURCE = "envbuild-test/refforms:src"


@pytest.fixture(scope="module")
def tiny_image(docker_client):
    """An empty image, imported from an empty tar: no registry, no base, a few hundred bytes."""
    buf = io.BytesIO()
    tarfile.open(fileobj=buf, mode="w").close()
    docker_client.api.import_image_from_data(buf.getvalue(), repository=SOURCE.split(":")[0], tag="src")
    image = docker_client.api.inspect_image(SOURCE)["Id"]
    yield image
    for tag in docker_client.api.inspect_image(image).get("RepoTags") or []:
        docker_client.api.remove_image(tag)


def _engine_reads(client, image: str, form: str) -> str | None:
    """What the engine makes of `form`: the familiar name it tags (RepoTags), '@' for a valid digest reference
    (which it will not tag), None when it refuses the form."""
    if "@" in form:
        try:
            client.api.inspect_image(form)
        except docker.errors.NotFound:
            return "@"  # parsed, and no such image
        except docker.errors.APIError:
            return None
        raise AssertionError(f"{form} names an image")
    try:
        client.api.tag(image, form)
    except docker.errors.APIError:
        return None
    new = [t for t in client.api.inspect_image(image)["RepoTags"] if t != SOURCE]
    for tag in new:
        client.api.remove_image(tag)
    assert len(new) == 1, new
    return new[0]


@pytest.mark.parametrize("form,full", FORMS, ids=[f[0][:40] or "empty" for f in FORMS])
def test_engine_agrees(docker_client, tiny_image, form, full):
    if not form:
        return  # the API reads an empty repo as "no tag": nothing to compare
    engine = _engine_reads(docker_client, tiny_image, form)
    if full is None:
        assert engine is None, f"the engine accepts {form!r} as {engine}"
        return
    ref = Reference.parse(form)
    assert ref.full == full
    if "@" in form:
        assert engine == "@", f"the engine refuses {form!r}"
        return
    assert engine == str(ref.tagged()), f"the engine reads {form!r} as {engine}, envbuild as {ref.full}"
    # and the normalised name finds the same image
    docker_client.api.tag(tiny_image, form)
    try:
        assert docker_client.api.inspect_image(ref.tagged().full)["Id"] == tiny_image
    finally:
        docker_client.api.remove_image(str(ref.tagged()))
